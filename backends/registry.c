/* Backend registry: creation by spec string, and the list of what was
 * built. The only file that names the backends: each is reached through its
 * own header. */
#include "registry.h"

#include "common/composed.h"

#include "cpu/cpu_backend.h"
#include "cuda/cuda_backend.h"
#ifdef BT_HAVE_OPENCL
#include "opencl/opencl_backend.h"
#endif

#include <stdio.h>
#include <string.h>

/* The CUDA backend on device (see bt_cuda_backend_create) through its plugin:
 * the real one, or with emu the emulated device's; a plugin that cannot load
 * counts as no device. */
static bt_backend *cuda_create(bool emu, int device, const bt_backend_options *opts, char *err,
                               size_t errlen, bool *no_device) {
    const bt_cuda_plugin *cu = bt_cuda_plugin_load(emu, err, errlen);
    if (!cu) {
        *no_device = true;
        return NULL;
    }
    return cu->create(device, opts, err, errlen, no_device);
}

void bt_backends_list_devices(FILE *out) {
    bt_backend *cpu = bt_cpu_backend_create(0, 1);
    if (cpu) {
        bt_device_info info;
        cpu->info(cpu, &info);
        fprintf(out, "cpu: %s, %.1f GB memory, %d threads\n", info.name, info.total_mem / 1e9,
                info.compute_units);
        cpu->destroy(cpu);
    }
#ifdef BT_HAVE_CUDA
    char err[512];
    const bt_cuda_plugin *cu = bt_cuda_plugin_load(false, err, sizeof err);
    if (cu)
        cu->list_devices(out);
    else
        fprintf(out, "cuda: %s\n", err);
#else
    fprintf(out, "cuda: not built (configure --with-cuda)\n");
#endif
#ifdef BT_HAVE_OPENCL
    bt_opencl_list_devices(out);
#else
    fprintf(out, "opencl: not built (configure --with-opencl)\n");
#endif
}

const char *bt_backends_built(void) {
    return "cpu"
#ifdef BT_HAVE_OPENCL
           " opencl"
#endif
#ifdef BT_HAVE_CUDA
           " cuda"
#endif
        ;
}

/* be with its empty fused slots composed from primitive ops
 * (common/composed.h), checked complete; NULL after destroying it if not. */
static bt_backend *checked(bt_backend *be, char *err, size_t errlen) {
    if (be) bt_compose_missing(be);
    if (be && !bt_backend_complete(be)) {
        snprintf(err, errlen, "backend '%s' is incomplete", be->name);
        be->destroy(be);
        return NULL;
    }
    return be;
}

/* The CUDA device of "NAME:N" into *d, or for a bare "NAME" the device
 * local_rank modulo the count (-1 - local_rank, as bt_cuda_backend_create
 * takes it); false with the expected form in err otherwise. */
static bool cuda_ordinal(const char *spec, size_t name_len, int local_rank, int *d, char *err,
                         size_t errlen) {
    *d = -1 - (local_rank > 0 ? local_rank : 0);
    char tail;
    if (spec[name_len] && (sscanf(spec + name_len, ":%d%c", d, &tail) != 1 || *d < 0)) {
        snprintf(err, errlen, "device '%s': expected %.*s or %.*s:N", spec, (int)name_len, spec,
                 (int)name_len, spec);
        return false;
    }
    return true;
}

/* auto: one line on stderr on why the backend `what` was skipped, unless the
 * only reason is that there is no such device. */
static void auto_skipped(const char *spec, const char *what, const char *why, bool no_device) {
    if (!no_device) fprintf(stderr, "bertrain: device %s: skipping %s: %s\n", spec, what, why);
}

/* "auto[:LOCAL_RANK]": the CUDA device LOCAL_RANK (else opts->local_rank)
 * modulo the count, else the first OpenCL GPU, else the CPU; a GPU that is
 * there but cannot be used is skipped with one line saying why. */
static bt_backend *auto_create(const char *spec, const bt_backend_options *opts, char *err,
                               size_t errlen) {
    int local = opts->local_rank;
    if (spec[4] && sscanf(spec + 4, ":%d", &local) != 1) local = 0;
    if (local < 0) local = 0;
    bt_backend *be;
    bool nodev = false;
    (void)nodev;
#ifdef BT_HAVE_CUDA
    be = cuda_create(false, -1 - local, opts, err, errlen, &nodev); /* -1-k: k-th of any count */
    if (be) return checked(be, err, errlen);
    auto_skipped(spec, "CUDA", err, nodev);
#endif
#ifdef BT_HAVE_OPENCL
    be = bt_opencl_backend_create(-1, -1, opts, err, errlen, &nodev); /* -1: first GPU */
    if (be) return checked(be, err, errlen);
    auto_skipped(spec, "OpenCL", err, nodev);
#endif
    be = bt_cpu_backend_create(opts->cpu_threads, opts->local_ranks);
    if (!be) snprintf(err, errlen, "cannot create the CPU backend (out of memory)");
    return checked(be, err, errlen);
}

bt_backend *bt_backend_create(const char *spec, const bt_backend_options *opts, char *err,
                              size_t errlen, bool *no_device) {
    static const bt_backend_options defaults;
    bool nodev = false;
    bt_backend *be = NULL;
    int d;
    (void)nodev;
    (void)be;
    if (!opts) opts = &defaults;
    if (no_device) *no_device = false;
    if (!spec || !*spec) spec = "auto";
    if (strcmp(spec, "cpu") == 0) {
        be = bt_cpu_backend_create(opts->cpu_threads, opts->local_ranks);
        if (!be) snprintf(err, errlen, "cannot create the CPU backend (out of memory)");
        return checked(be, err, errlen);
    }
    if (strncmp(spec, "cuda-emu", 8) == 0) { /* before "cuda": the test suite's device */
        if (!cuda_ordinal(spec, 8, opts->local_rank, &d, err, errlen)) return NULL;
        be = cuda_create(true, d, opts, err, errlen, &nodev);
        if (no_device) *no_device = nodev;
        return checked(be, err, errlen);
    }
    if (strncmp(spec, "opencl", 6) == 0) {
#ifdef BT_HAVE_OPENCL
        int p = 0, d = 0;
        char tail;
        if (spec[6] && (spec[6] != ':' || !spec[7])) {
            snprintf(err, errlen, "device '%s': expected opencl, opencl:PLATFORM:DEVICE or "
                                  "opencl:NAME", spec);
            return NULL;
        }
        if (spec[6] && sscanf(spec + 6, ":%d:%d%c", &p, &d, &tail) != 2) {
            int matches = bt_opencl_find_device(spec + 7, &p, &d, err, errlen);
            if (matches != 1) {
                if (no_device) *no_device = matches == 0;
                return NULL;
            }
        }
        be = bt_opencl_backend_create(p, d, opts, err, errlen, &nodev);
        if (no_device) *no_device = nodev;
        return checked(be, err, errlen);
#else
        snprintf(err, errlen, "device '%s': this bertrain was built without OpenCL "
                              "(configure --with-opencl)", spec);
        return NULL;
#endif
    }
    if (strncmp(spec, "cuda", 4) == 0) {
#ifdef BT_HAVE_CUDA
        if (!cuda_ordinal(spec, 4, opts->local_rank, &d, err, errlen)) return NULL;
        be = cuda_create(false, d, opts, err, errlen, &nodev);
        if (no_device) *no_device = nodev;
        return checked(be, err, errlen);
#else
        snprintf(err, errlen, "device '%s': this bertrain was built without CUDA "
                              "(configure --with-cuda)", spec);
        return NULL;
#endif
    }
    if (strncmp(spec, "auto", 4) == 0) return auto_create(spec, opts, err, errlen);
    snprintf(err, errlen, "device '%s': unknown backend (built: %s, or auto)", spec,
             bt_backends_built());
    return NULL;
}
