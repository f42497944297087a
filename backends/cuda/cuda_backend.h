/* The CUDA backend's public entry points (built with configure --with-cuda).
 * C-compatible: the backend is CUDA C++ compiled by nvcc, with C linkage at
 * this interface.
 *
 * The backend is a plugin, bertrain-cuda.so, that the program loads with
 * dlopen only when a CUDA device is asked for (bt_cuda_plugin_load): the CUDA
 * runtime and cuBLAS (hundreds of MB mapped, a fifth of a second to load) are
 * then never loaded by commands that do not use them, and a CUDA build still
 * runs where those libraries are missing. The plugin exports one symbol, its
 * table of the functions below. */
#ifndef BT_CUDA_BACKEND_H
#define BT_CUDA_BACKEND_H

#include "../backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Create the CUDA backend on device ordinal `device` (>= 0), or with device
 * < 0 on ordinal (-device - 1) % count (auto:LOCAL_RANK). Returns NULL with a
 * one-line reason in err; *no_device is set when the reason is only that no
 * such device exists (no driver, no GPU, or an ordinal beyond the count).
 * opts->tf32 (BERTRAIN_CUDA_TF32=1 or 0 in the environment overrides it)
 * turns TF32 tensor-core GEMMs on where the device has them, sm_80 and
 * later (cublasGemmStridedBatchedEx with
 * CUBLAS_COMPUTE_32F_FAST_TF32: inputs rounded to 10 mantissa bits, fp32
 * accumulation; the conformance suite's GEMM thresholds assume fp32, so TF32
 * fails them by design). BERTRAIN_CUDA_SYNC=1 synchronises after every
 * launch and cuBLAS call, so that a fault inside a kernel is reported at the
 * launch's file:line (debugging). */
bt_backend *bt_cuda_backend_create(int device, const bt_backend_options *opts, char *err,
                                   size_t errlen, bool *no_device);

/* Print every CUDA device with its cuda:N spec, compute capability, SM count
 * and memory, or why there is none (for `bertrain devices`). */
void bt_cuda_list_devices(FILE *out);

/* Fill a dispatch table with the CUDA backend's ops exactly as
 * bt_cuda_backend_create does and check it with bt_backend_complete (which
 * names the first empty slot), without touching a device: the slots are only
 * filled, never called. True when every slot is filled. For
 * tests/cuda-parity.sh. */
bool bt_cuda_op_table_complete(void);

/* What the plugin exports under BT_CUDA_PLUGIN_SYMBOL. */
typedef struct {
    size_t abi; /* BT_CUDA_PLUGIN_ABI of the plugin's build: must equal the program's */
    bt_backend *(*create)(int device, const bt_backend_options *opts, char *err, size_t errlen,
                          bool *no_device);
    void (*list_devices)(FILE *out);
    bool (*op_table_complete)(void);
} bt_cuda_plugin;

#define BT_CUDA_PLUGIN_FILE "bertrain-cuda.so"
/* The same backend sources built by make check against the emulated device
 * (tests/cuda_emu): device "cuda-emu[:N]". Never installed. */
#define BT_CUDA_EMU_PLUGIN_FILE "bertrain-cuda-emu.so"
#define BT_CUDA_PLUGIN_SYMBOL "bt_cuda_plugin_entry"
/* A program and a plugin built from different bt_backend layouts must not mix */
#define BT_CUDA_PLUGIN_ABI (sizeof(bt_backend) * 1000u + sizeof(bt_device_info))

/* The program's side (backends/cuda_plugin.c): load the plugin once, from
 * $BERTRAIN_CUDA_PLUGIN, beside the running program, the install's
 * pkglibdir or the build tree; with emu the emulated device's, from
 * $BERTRAIN_CUDA_EMU or the build tree's tests/cuda_emu/. NULL with one line
 * in err (the CUDA libraries are missing, or the plugin is). */
const bt_cuda_plugin *bt_cuda_plugin_load(bool emu, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
