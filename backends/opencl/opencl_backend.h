/* The OpenCL backend's public entry points (built with configure --with-opencl). */
#ifndef BT_OPENCL_BACKEND_H
#define BT_OPENCL_BACKEND_H

#include "../backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Create the OpenCL backend on device `device` of platform `platform`;
 * (-1, -1) picks the first GPU of any platform. opts->profile (opts may be
 * NULL) makes the queue record timestamps for the profiler's marks. Returns
 * NULL with a one-line reason in err; *no_device is set when the reason is
 * only that no such device exists. */
bt_backend *bt_opencl_backend_create(int platform, int device, const bt_backend_options *opts,
                                     char *err, size_t errlen, bool *no_device);

/* The one device whose name or vendor contains substr (any case), into
 * *platform and *device. Returns the number of matching devices (1: found;
 * 0 or more than 1: err says which, naming the candidates). */
int bt_opencl_find_device(const char *substr, int *platform, int *device, char *err,
                          size_t errlen);

/* Print every OpenCL platform and device with its opencl:P:D spec, vendor,
 * memory, compute units, work-group and local-memory limits and fp16/fp64
 * support (for `bertrain devices`). */
void bt_opencl_list_devices(FILE *out);

#endif
