/* Opening the configured device (device.c). */
#ifndef BT_TRAIN_DEVICE_H
#define BT_TRAIN_DEVICE_H

#include "backends/backend.h"

#include <stdbool.h>

/* Create the backend of device spec with the per-backend options (the CPU's
 * threads, 0: its default; TF32 GEMMs where the device has them; this rank's
 * local rank, dist_local_rank(), for "auto" and a bare "cuda"), wrapped in
 * the per-op profiler (backends/profile.h) when profile is set, or print why
 * not, naming the rank; NULL on failure. */
bt_backend *open_backend(const char *spec, int cpu_threads, bool tf32, bool profile);

#endif
