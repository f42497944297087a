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
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

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

/* A recorded launch's arguments for a kernel with parameters P...: a tuple
 * of them, and the cu_kernel_kind that compares, copies and launches it
 * again (cuda_graph.cu). */
template <typename... P> struct cu_kernel_of {
    typedef std::tuple<typename std::decay<P>::type...> args_t;
    template <size_t... I>
    static bool same_at(const args_t &a, const args_t &b, std::index_sequence<I...>) {
        return (true && ... && !memcmp(&std::get<I>(a), &std::get<I>(b), sizeof(std::get<I>(a))));
    }
    static bool same(const void *a, const void *b) {
        return same_at(*(const args_t *)a, *(const args_t *)b, std::index_sequence_for<P...>{});
    }
    static void *clone(const void *a) { return new args_t(*(const args_t *)a); }
    static void release(void *a) { delete (args_t *)a; }
    template <size_t... I> static void params_at(args_t &a, void **out, std::index_sequence<I...>) {
        (void)a;
        (void)out;
        ((out[I] = (void *)&std::get<I>(a)), ...);
    }
    static void params(void *a, void **out) {
        params_at(*(args_t *)a, out, std::index_sequence_for<P...>{});
    }
    template <size_t... I>
    static void launch_at(cu_ctx *c, const cu_call *r, args_t &a, std::index_sequence<I...>) {
        (void)a;
#ifdef CUEMU_LAUNCH
        cuemu::launch(r->name, (void (*)(P...))r->fn, dim3(r->grid), dim3(r->block), 0, c->stream,
                      std::get<I>(a)...);
#else
        void *p[sizeof...(P) + 1] = {(void *)&std::get<I>(a)...};
        CU_CHECK(cudaLaunchKernel(r->fn, dim3(r->grid), dim3(r->block), p, 0, c->stream));
#endif
    }
    static void launch(cu_ctx *c, const cu_call *r) {
        launch_at(c, r, *(args_t *)r->args, std::index_sequence_for<P...>{});
    }
    static const cu_kernel_kind kind;
};
template <typename... P>
const cu_kernel_kind cu_kernel_of<P...>::kind = {same, clone, release, params, launch};

/* A launch inside a graph region: recorded or matched (cu_graph_kernel);
 * false when the caller launches it as usual. */
template <typename... P, typename... A>
static inline bool cu_graph_launch(cu_ctx *c, const char *name, void (*k)(P...), unsigned grid,
                                   unsigned block, A &&...args) {
    static_assert(sizeof...(P) == sizeof...(A), "a kernel launch with the wrong argument count");
    if (c->graphs.mode == CU_EAGER || c->graphs.nested) return false;
    typename cu_kernel_of<P...>::args_t t(
        static_cast<typename std::decay<P>::type>(std::forward<A>(args))...);
    return cu_graph_kernel(c, name, (const void *)k, grid, block, &cu_kernel_of<P...>::kind, &t);
}

/* Launch kernel bt_`kernel` (kernels/) over `items` threads (rounded up to
 * BT_WG) in blocks of BT_WG on context c's stream; nothing for 0 items.
 * Inside a graph region the launch is recorded, or matched with its record. */
#define LAUNCH(c, kernel, items, ...)                                                 \
    do {                                                                              \
        const size_t items_ = (items);                                                \
        if (items_ && !cu_graph_launch((c), "bt_" #kernel, bt_##kernel, grid_of(items_), \
                                       BT_WG, __VA_ARGS__)) {                         \
            BT_KERNEL_LAUNCH(bt_##kernel, grid_of(items_), BT_WG, (c)->stream, __VA_ARGS__); \
            (c)->count.launches++;                                                    \
            check_launch("bt_" #kernel, __FILE__, __LINE__);                         \
            CU_SYNC_IF_DEBUG(c);                                                      \
        }                                                                             \
    } while (0)

static inline const uint16_t *u16c(bt_ptr p) { return (const uint16_t *)cu_addr(p, 2); }
static inline uint16_t *u16(bt_ptr p) { return (uint16_t *)cu_addr(p, 2); }
static inline uint32_t *u32(bt_ptr p) { return (uint32_t *)cu_addr(p, 4); }
/* A tensor stored in fp32 or in 16 bits (is16), as the fp32 pointer of a
 * kernel that takes both and reads the one of its type: the tensor's address
 * either way (opencl_launch.h's arg_typed is the twin). */
static inline const float *f32c_typed(bt_ptr p, bool is16) {
    return is16 ? (const float *)u16c(p) : cu_f32(p);
}

#endif
