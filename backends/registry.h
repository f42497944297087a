/* The backend registry: creating a backend from a device spec with its
 * options, and listing what this binary was built with. The layers above
 * include this and backend.h (the contract), never a backend's own header. */
#ifndef BT_REGISTRY_H
#define BT_REGISTRY_H

#include "backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Create a backend by spec: "cpu", "opencl[:P:D]", "opencl:NAME" (the one
 * device whose name or vendor contains NAME, any case), "cuda:N" (device N),
 * "cuda" (device opts->local_rank modulo the count: one GPU per rank on a
 * node), "cuda-emu[:N]" (the same on the test suite's emulated CUDA device,
 * tests/cuda_emu, when built), or "auto[:LOCAL_RANK]" (CUDA device
 * LOCAL_RANK, else opts->local_rank, modulo the count, then the first OpenCL
 * GPU, then the CPU; a GPU that is there but unusable, such as one this
 * build has no code for, is skipped with one line on stderr saying why).
 * opts may be NULL (defaults). Returns NULL with a one-line reason in err
 * (size errlen) when unavailable; *no_device is set when the reason is only
 * that no such device exists. A CUDA device this build has no code for is
 * refused at creation, naming the card, its architecture and what the build
 * has code for. */
bt_backend *bt_backend_create(const char *spec, const bt_backend_options *opts, char *err,
                              size_t errlen, bool *no_device);

/* Print every device of every backend this binary was built with (for
 * `bertrain devices`): the CPU, CUDA devices, OpenCL platforms and devices. */
void bt_backends_list_devices(FILE *out);

/* List the spec names of the backends this binary was built with. */
const char *bt_backends_built(void);


#endif
