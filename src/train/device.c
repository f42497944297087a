/* Opening the configured device: the registry's backend with the run's
 * per-backend options, or one line naming the rank and why not. */
#include "device.h"

#include "backends/profile.h"
#include "backends/registry.h"
#include "mpi/dist.h"

#include <stdio.h>

bt_backend *open_backend(const char *spec, int cpu_threads, bool tf32, bool profile) {
    char err[768];
    bool no_device = false;
    const bt_backend_options opts = {.cpu_threads = cpu_threads, .tf32 = tf32, .profile = profile,
                                     .local_rank = dist_local_rank(),
                                     .local_ranks = dist_local_size()};
    bt_backend *be = bt_backend_create(spec, &opts, err, sizeof err, &no_device);
    if (!be) {
        fprintf(stderr, "bertrain: rank %d: %s\n", dist_rank(), err);
        return NULL;
    }
    if (!profile) return be;
    bt_backend *w = bt_profile_wrap(be);
    if (!w) {
        fprintf(stderr, "bertrain: rank %d: out of host memory for the profiler\n", dist_rank());
        be->destroy(be);
    }
    return w;
}
