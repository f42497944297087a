/* OpenCL backend: reductions whose value the host needs. Each writes float
 * partials, one per chunk of OCL_REDUCE_CHUNK elements, which the host adds
 * in chunk order in double: deterministic and independent of the device's
 * size. sum, sumsq and all_finite read their result back at once; deferred
 * ones write their partials into one buffer that reduce_fetch reads in one
 * go. */
#include "opencl_launch.h"

#include <stdlib.h>

static const cl_float zero = 0.0f; /* what a flag starts as (static: writes are asynchronous) */

/* Enqueue the partials (or the flag) of reduction `kind` of x into
 * out[off ...]: ceil(n / chunk) floats, or one for BT_REDUCE_FINITE. */
static void enqueue_partials(bt_backend *be, bt_reduce_kind kind, cl_mem out, size_t off, bt_ptr x,
                             size_t n) {
    ocl_ctx *c = ocl(be);
    if (kind == BT_REDUCE_FINITE) {
        CL_CHECK(clEnqueueWriteBuffer(c->queue, out, CL_FALSE, off * sizeof zero, sizeof zero,
                                      &zero, 0, NULL, NULL));
        args a = begin(be, K_all_finite);
        arg_mem(&a, out);
        arg_ul(&a, off);
        arg_f32p(&a, x);
        arg_ul(&a, n);
        launch(be, &a, n);
        return;
    }
    const size_t chunks = (n + OCL_REDUCE_CHUNK - 1) / OCL_REDUCE_CHUNK;
    args a = begin(be, kind == BT_REDUCE_SUM ? K_sum_partial : K_sumsq_partial);
    arg_mem(&a, out);
    arg_ul(&a, off);
    arg_f32p(&a, x);
    arg_ul(&a, n);
    launch(be, &a, chunks * c->wg);
}

/* Partials or flag of one reduction now, summed as bt_deferrals_resolve does. */
static double reduce_now(bt_backend *be, bt_reduce_kind kind, bt_ptr x, size_t n) {
    ocl_ctx *c = ocl(be);
    const size_t count = kind == BT_REDUCE_FINITE ? 1 : (n + OCL_REDUCE_CHUNK - 1) / OCL_REDUCE_CHUNK;
    if (!count) return 0.0;
    float *host = bt_partials_reserve(&c->partials, count, "opencl");
    cl_mem part = ocl_scratch(c, count * sizeof(float));
    enqueue_partials(be, kind, part, 0, x, n);
    c->count.host_reads++;
    CL_CHECK(clEnqueueReadBuffer(c->queue, part, CL_TRUE, 0, count * sizeof(float), host, 0, NULL,
                                 NULL));
    if (kind == BT_REDUCE_FINITE) return host[0] == 0.0f ? 1.0 : 0.0;
    return bt_partials_sum(&c->partials, count);
}

static double ocl_sum(bt_backend *be, bt_ptr x, size_t n) { return reduce_now(be, BT_REDUCE_SUM, x, n); }

static double ocl_sumsq(bt_backend *be, bt_ptr x, size_t n) {
    return reduce_now(be, BT_REDUCE_SUMSQ, x, n);
}

static bool ocl_all_finite(bt_backend *be, bt_ptr x, size_t n) {
    return reduce_now(be, BT_REDUCE_FINITE, x, n) != 0.0;
}

/* Room for `floats` deferred partials: a larger buffer takes over the ones
 * queued so far by a copy on the queue (no wait). */
static void defer_reserve(ocl_ctx *c, size_t floats) {
    if (floats <= c->defer_cap) return;
    size_t cap = c->defer_cap ? 2 * c->defer_cap : 65536;
    while (cap < floats) cap *= 2;
    cl_int e;
    cl_mem mem = clCreateBuffer(c->context, CL_MEM_READ_WRITE, cap * sizeof(float), NULL, &e);
    CL_CHECK_CODE("clCreateBuffer", e);
    if (c->defer_mem && c->defer.used)
        CL_CHECK(clEnqueueCopyBuffer(c->queue, c->defer_mem, mem, 0, 0,
                                     c->defer.used * sizeof(float), 0, NULL, NULL));
    if (c->defer_mem) CL_CHECK(clReleaseMemObject(c->defer_mem)); /* freed after its copy */
    c->defer_mem = mem;
    c->defer_cap = cap;
}

static int ocl_reduce_defer(bt_backend *be, bt_reduce_kind kind, bt_ptr x, size_t n) {
    ocl_ctx *c = ocl(be);
    const size_t count = kind == BT_REDUCE_FINITE ? 1 : (n + OCL_REDUCE_CHUNK - 1) / OCL_REDUCE_CHUNK;
    defer_reserve(c, c->defer.used + count);
    const size_t first = c->defer.used;
    const int index = bt_deferrals_add(&c->defer, kind, count, "opencl");
    if (count) enqueue_partials(be, kind, c->defer_mem, first, x, n);
    return index;
}

static void ocl_reduce_fetch(bt_backend *be, double *out) {
    ocl_ctx *c = ocl(be);
    float *host = bt_partials_reserve(&c->partials, c->defer.used ? c->defer.used : 1, "opencl");
    if (c->defer.used) {
        c->count.host_reads++;
        CL_CHECK(clEnqueueReadBuffer(c->queue, c->defer_mem, CL_TRUE, 0,
                                     c->defer.used * sizeof(float), host, 0, NULL, NULL));
    }
    bt_deferrals_resolve(&c->defer, host, out);
}

/* The host's copy of step_gate's table, at least `bytes`, once its last
 * upload is done; the device's grown to match. */
static void *gate_room(ocl_ctx *c, size_t bytes) {
    if (c->gate_write) {
        CL_CHECK(clWaitForEvents(1, &c->gate_write));
        CL_CHECK(clReleaseEvent(c->gate_write));
        c->gate_write = NULL;
    }
    if (bytes > c->gate_bytes) {
        if (c->gate_mem) CL_CHECK(clReleaseMemObject(c->gate_mem));
        cl_int e;
        c->gate_mem = clCreateBuffer(c->context, CL_MEM_READ_ONLY, bytes, NULL, &e);
        CL_CHECK_CODE("clCreateBuffer", e);
        c->gate_bytes = bytes;
    }
    return bt_host_reserve(&c->gate_host, bytes, "opencl", "a step's gate");
}

/* step_gate's kernel reads its numbers in double where the device has fp64
 * (kernels/optim.cl's trust_t), in float where not. */
static int ocl_step_gate(bt_backend *be, const bt_step_gate *rule) {
    ocl_ctx *c = ocl(be);
    const size_t tab_len = bt_gate_table_len(rule->n_mlm + rule->n_nsp),
                 num_size = c->info.has_fp64 ? sizeof(double) : sizeof(float),
                 bytes = tab_len * sizeof(cl_ulong) + 3 * num_size;
    cl_ulong *tab = gate_room(c, bytes);
    double num[3];
    const int n_terms = bt_gate_table(&c->defer, rule, (unsigned long long *)tab, num, "opencl");
    for (int i = 0; i < 3; i++) {
        if (c->info.has_fp64)
            ((double *)(tab + tab_len))[i] = num[i];
        else
            ((float *)(tab + tab_len))[i] = (float)num[i];
    }
    CL_CHECK(clEnqueueWriteBuffer(c->queue, c->gate_mem, CL_FALSE, 0, bytes, tab, 0, NULL,
                                  &c->gate_write));
    defer_reserve(c, c->defer.used + 2);
    int index;
    const size_t first = bt_gate_queue(&c->defer, &index, "opencl");
    args a = begin(be, K_step_gate_decide);
    arg_mem(&a, c->defer_mem);
    arg_ul(&a, 0);
    arg_mem(&a, c->gate_mem);
    arg_i(&a, n_terms);
    arg_mem(&a, c->gate_mem);
    arg_ul(&a, tab_len * sizeof(cl_ulong) / num_size);
    arg_i(&a, rule->guard ? 1 : 0);
    arg_f(&a, rule->max_norm);
    arg_mem(&a, c->defer_mem);
    arg_ul(&a, first);
    launch(be, &a, c->wg);
    return index;
}

void ocl_gate_args(args *a, ocl_ctx *c, int gate) {
    if (gate < 0) {
        arg_mem(a, c->defer_mem ? c->defer_mem : c->multi_mem); /* never read */
        arg_ul(a, 0);
        arg_i(a, 0);
        return;
    }
    arg_mem(a, c->defer_mem);
    arg_ul(a, bt_gate_first(&c->defer, gate, "opencl"));
    arg_i(a, 1);
}

void ocl_reduce_release(ocl_ctx *c) {
    if (c->gate_write) {
        clWaitForEvents(1, &c->gate_write);
        clReleaseEvent(c->gate_write);
    }
    if (c->gate_mem) clReleaseMemObject(c->gate_mem);
    bt_host_buf_free(&c->gate_host);
    c->gate_write = NULL;
    c->gate_mem = NULL;
    c->gate_bytes = 0;
    if (c->defer_mem) clReleaseMemObject(c->defer_mem);
    c->defer_mem = NULL;
    c->defer_cap = 0;
    bt_deferrals_free(&c->defer);
}

void ocl_fill_reduce_ops(bt_backend *be) {
    be->sum = ocl_sum;
    be->sumsq = ocl_sumsq;
    be->all_finite = ocl_all_finite;
    be->reduce_defer = ocl_reduce_defer;
    be->reduce_fetch = ocl_reduce_fetch;
    be->step_gate = ocl_step_gate;
}
