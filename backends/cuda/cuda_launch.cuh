/* The CUDA backend's kernel launches (opencl_launch.h's twin): 1-D, blocks
 * of BT_WG threads on the backend's one stream, each counted and checked.
 * Shared by cuda_ops.cu, cuda_reduce.cu and cuda_optim.cu. */
#ifndef BT_CUDA_LAUNCH_CUH
#define BT_CUDA_LAUNCH_CUH

#include "cuda_internal.h"

#include "../../kernels/constants.h"
#include "../../kernels_cu/kernels.cuh"
#include "../philox.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Blocks for `items` threads, rounded up to whole blocks of BT_WG. */
static inline unsigned grid_of(size_t items) {
    size_t g = (items + BT_WG - 1) / BT_WG;
    if (g > 0x7fffffffu) {
        fprintf(stderr, "bertrain: cuda: %zu threads exceed the grid limit\n", items);
        exit(1);
    }
    return (unsigned)g;
}

/* A launch error (bad configuration, missing kernel image for this GPU). */
static inline void check_launch(const char *kernel, const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "%s<<<>>>", kernel);
        cu_fatal(what, e, file, line);
    }
}

/* Dropout's arguments as dropout and every fused kernel take them (p = 0:
 * thr 0 and scale 1, which keep every element). */
typedef struct {
    uint32_t first_sample, thr;
    float keep_scale;
    uint32_t seed_lo, seed_hi, stream_lo, stream_hi;
} drop_args;

static inline drop_args drop_args_of(uint32_t first_sample, float p, bt_rng_key key) {
    drop_args d = {first_sample,           philox_drop_threshold(p), 1.0f / (1.0f - p),
                   (uint32_t)key.seed,     (uint32_t)(key.seed >> 32), (uint32_t)key.stream,
                   (uint32_t)(key.stream >> 32)};
    return d;
}
#define DROP_ARGS(d) \
    (d).first_sample, (d).thr, (d).keep_scale, (d).seed_lo, (d).seed_hi, (d).stream_lo, (d).stream_hi

/* Launch kernel bt_`kernel` (kernels/) over `items` threads (rounded up to
 * BT_WG) in blocks of BT_WG on context c's stream; nothing for 0 items. */
#define LAUNCH(c, kernel, items, ...)                                                 \
    do {                                                                              \
        const size_t items_ = (items);                                                \
        if (items_) {                                                                 \
            BT_KERNEL_LAUNCH(bt_##kernel, grid_of(items_), BT_WG, (c)->stream, __VA_ARGS__); \
            (c)->count.launches++;                                                    \
            check_launch("bt_" #kernel, __FILE__, __LINE__);                         \
            CU_SYNC_IF_DEBUG(c);                                                      \
        }                                                                             \
    } while (0)

static inline const uint16_t *u16c(bt_ptr p) { return (const uint16_t *)cu_addr(p, 2); }
static inline uint16_t *u16(bt_ptr p) { return (uint16_t *)cu_addr(p, 2); }
static inline uint32_t *u32(bt_ptr p) { return (uint32_t *)cu_addr(p, 4); }

#endif
