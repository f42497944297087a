/* The OpenCL backend's kernel launches: a launch's arguments set in order
 * (a tensor is its buffer and its offset in elements), then one 1-D
 * enqueue in work-groups of BT_WG. Shared by opencl_ops.c, opencl_reduce.c
 * and opencl_optim.c. */
#ifndef BT_OPENCL_LAUNCH_H
#define BT_OPENCL_LAUNCH_H

#include "opencl_internal.h"

#include "../philox.h"

#include <stdint.h>

/* Arguments of one launch, set in order. */
typedef struct {
    cl_kernel k;
    cl_uint n;
} args;

static inline args begin(bt_backend *be, ocl_kernel_id id) { return (args){ocl(be)->kernels[id], 0}; }

static inline void set(args *a, size_t size, const void *value) {
    cl_int e = clSetKernelArg(a->k, a->n, size, value);
    if (e != CL_SUCCESS) {
        char what[64];
        snprintf(what, sizeof what, "clSetKernelArg(argument %u)", a->n);
        ocl_fatal(what, e, __FILE__, __LINE__);
    }
    a->n++;
}

/* A tensor: its buffer and its offset in elements of esz bytes. */
static inline void arg_ptr(args *a, bt_ptr p, size_t esz) {
    cl_ulong off = ocl_elem_off(p, esz);
    set(a, sizeof(cl_mem), &p.buf->mem);
    set(a, sizeof off, &off);
}
static inline void arg_f32p(args *a, bt_ptr p) { arg_ptr(a, p, 4); }
static inline void arg_mem(args *a, cl_mem m) { set(a, sizeof m, &m); }
static inline void arg_f(args *a, float v) { set(a, sizeof v, &v); }
static inline void arg_i(args *a, int v) {
    cl_int x = v;
    set(a, sizeof x, &x);
}
static inline void arg_u(args *a, uint32_t v) {
    cl_uint x = v;
    set(a, sizeof x, &x);
}
static inline void arg_ul(args *a, size_t v) {
    cl_ulong x = v;
    set(a, sizeof x, &x);
}
/* A tensor stored in fp32 or in 16 bits (is16), for a kernel that takes
 * both an fp32 and a 16-bit pointer and reads the one of its type: the
 * tensor in both, the other type's at offset 0 (not read). */
static inline void arg_typed(args *a, bt_ptr p, bool is16) {
    if (is16) {
        arg_mem(a, p.buf->mem);
        arg_ul(a, 0);
    } else {
        arg_f32p(a, p);
    }
    arg_ptr(a, p, 2);
}

/* Dropout's arguments as dropout and every fused kernel take them: threshold,
 * scale, key (thr = 0 and scale 1 when p = 0, which keeps every element). */
static inline void arg_dropout(args *a, uint32_t first_sample, float p, bt_rng_key key) {
    arg_u(a, first_sample);
    arg_u(a, philox_drop_threshold(p));
    arg_f(a, 1.0f / (1.0f - p));
    arg_u(a, (uint32_t)key.seed);
    arg_u(a, (uint32_t)(key.seed >> 32));
    arg_u(a, (uint32_t)key.stream);
    arg_u(a, (uint32_t)(key.stream >> 32));
}

/* Enqueue the kernel over `items` work-items (rounded up to BT_WG) in
 * work-groups of BT_WG. */
static inline void launch(bt_backend *be, args *a, size_t items) {
    ocl_ctx *c = ocl(be);
    if (!items) return;
    size_t local = c->wg, global = (items + local - 1) / local * local;
    CL_CHECK(clEnqueueNDRangeKernel(c->queue, a->k, 1, NULL, &global, &local, 0, NULL, NULL));
    c->count.launches++;
}

/* The multi-tensor optimizers' gate arguments for `gate` (step_gate's index,
 * or -1: none): the gate's buffer and offset (any buffer without a gate),
 * then whether there is one (opencl_reduce.c). */
void ocl_gate_args(args *a, ocl_ctx *c, int gate);

#endif
