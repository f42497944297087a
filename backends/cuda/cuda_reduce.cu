/* CUDA backend: reductions whose value the host needs (opencl_reduce.c's
 * twin). Each writes float partials, one per chunk of BT_REDUCE_CHUNK
 * elements, which the host adds in chunk order in double. sum, sumsq and
 * all_finite read their result back at once; deferred ones write their
 * partials into one buffer that reduce_fetch reads in one go. */
#include "cuda_launch.cuh"

/* all_finite's flag cleared (one float), as a graph region records it */
static void clear_flag(bt_backend *be, const void *p) {
    cu_ctx *c = cu(be);
    CU_CHECK(cudaMemsetAsync(*(float *const *)p, 0, sizeof(float), c->stream));
    CU_SYNC_IF_DEBUG(c);
}

/* Enqueue the partials (or the flag) of reduction `kind` of x into out:
 * ceil(n / chunk) floats, or one for BT_REDUCE_FINITE. */
static void enqueue_partials(cu_ctx *c, bt_reduce_kind kind, float *out, bt_ptr x, size_t n) {
    if (kind == BT_REDUCE_FINITE) {
        cu_graph_op(c->graphs.be, clear_flag, &out, sizeof out);
        LAUNCH(c, all_finite, n, out, cu_f32(x), n);
        return;
    }
    const size_t chunks = (n + BT_REDUCE_CHUNK - 1) / BT_REDUCE_CHUNK;
    if (kind == BT_REDUCE_SUM)
        LAUNCH(c, sum_partial, chunks * BT_WG, out, cu_f32(x), n);
    else
        LAUNCH(c, sumsq_partial, chunks * BT_WG, out, cu_f32(x), n);
}

/* Host memory for `count` partials read back: page-locked (grown on demand),
 * so that the read is one DMA into it, not a copy through the driver's
 * staging; ordinary memory from the first time the driver grants no more
 * (not asked again at every read). */
static float *fetch_room(cu_ctx *c, size_t count) {
    if (count <= c->fetch_cap) return c->fetch_host;
    if (c->fetch_refused) return bt_partials_reserve(&c->partials, count, "cuda");
    size_t cap = c->fetch_cap ? 2 * c->fetch_cap : 4096;
    while (cap < count) cap *= 2;
    if (c->fetch_host) CU_CHECK(cudaFreeHost(c->fetch_host)); /* no copy uses it: reads block */
    c->fetch_host = NULL;
    c->fetch_cap = 0;
    if (cudaHostAlloc((void **)&c->fetch_host, cap * sizeof(float), cudaHostAllocDefault) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        c->fetch_host = NULL;
        c->fetch_refused = true;
        return bt_partials_reserve(&c->partials, count, "cuda");
    }
    c->fetch_cap = cap;
    return c->fetch_host;
}

/* Partials or flag of one reduction now, summed as bt_deferrals_resolve does. */
static double reduce_now(bt_backend *be, bt_reduce_kind kind, bt_ptr x, size_t n) {
    cu_ctx *c = cu(be);
    const size_t count = kind == BT_REDUCE_FINITE ? 1 : (n + BT_REDUCE_CHUNK - 1) / BT_REDUCE_CHUNK;
    if (!count) return 0.0;
    cu_graph_break(c, "a reduction read at once");
    float *host = fetch_room(c, count);
    float *part = (float *)cu_scratch(c, count * sizeof(float));
    enqueue_partials(c, kind, part, x, n);
    c->count.host_reads++;
    CU_CHECK(cudaMemcpyAsync(host, part, count * sizeof(float), cudaMemcpyDeviceToHost,
                             c->stream));
    CU_CHECK(cudaStreamSynchronize(c->stream));
    if (kind == BT_REDUCE_FINITE) return host[0] == 0.0f ? 1.0 : 0.0;
    const bt_partials read = {host, count};
    return bt_partials_sum(&read, count);
}

static double cu_sum(bt_backend *be, bt_ptr x, size_t n) { return reduce_now(be, BT_REDUCE_SUM, x, n); }

static double cu_sumsq(bt_backend *be, bt_ptr x, size_t n) {
    return reduce_now(be, BT_REDUCE_SUMSQ, x, n);
}

static bool cu_all_finite(bt_backend *be, bt_ptr x, size_t n) {
    return reduce_now(be, BT_REDUCE_FINITE, x, n) != 0.0;
}

/* Room for `floats` deferred partials: a larger buffer takes over the ones
 * queued so far by a copy on the stream (cudaFree of the old one waits for
 * it). */
static void defer_reserve(cu_ctx *c, size_t floats) {
    if (floats <= c->defer_cap) return;
    cu_graph_break(c, "the deferred reductions' buffer grows");
    size_t cap = c->defer_cap ? 2 * c->defer_cap : 65536;
    while (cap < floats) cap *= 2;
    float *mem = NULL;
    CU_CHECK(cudaMalloc((void **)&mem, cap * sizeof(float)));
    if (c->defer_mem && c->defer.used)
        CU_CHECK(cudaMemcpyAsync(mem, c->defer_mem, c->defer.used * sizeof(float),
                                 cudaMemcpyDeviceToDevice, c->stream));
    if (c->defer_mem) CU_CHECK(cudaFree(c->defer_mem));
    c->defer_mem = mem;
    c->defer_cap = cap;
}

static int cu_reduce_defer(bt_backend *be, bt_reduce_kind kind, bt_ptr x, size_t n) {
    cu_ctx *c = cu(be);
    const size_t count = kind == BT_REDUCE_FINITE ? 1 : (n + BT_REDUCE_CHUNK - 1) / BT_REDUCE_CHUNK;
    defer_reserve(c, c->defer.used + count);
    const size_t first = c->defer.used;
    const int index = bt_deferrals_add(&c->defer, kind, count, "cuda");
    if (count) enqueue_partials(c, kind, c->defer_mem + first, x, n);
    return index;
}

static void cu_reduce_fetch(bt_backend *be, double *out) {
    cu_ctx *c = cu(be);
    cu_graph_break(c, "reduce_fetch");
    float *host = fetch_room(c, c->defer.used ? c->defer.used : 1);
    if (c->defer.used) {
        c->count.host_reads++;
        CU_CHECK(cudaMemcpyAsync(host, c->defer_mem, c->defer.used * sizeof(float),
                                 cudaMemcpyDeviceToHost, c->stream));
        CU_CHECK(cudaStreamSynchronize(c->stream));
    }
    bt_deferrals_resolve(&c->defer, host, out);
}

/* Room for `bytes` of step_gate's table on the device and on the host. */
static void gate_reserve(cu_ctx *c, size_t bytes) {
    if (bytes > c->gate_bytes) {
        cu_graph_break(c, "the step gate's table grows");
        if (c->gate_mem) CU_CHECK(cudaFree(c->gate_mem));
        CU_CHECK(cudaMalloc(&c->gate_mem, bytes));
        c->gate_bytes = bytes;
    }
    bt_host_reserve(&c->gate_host, bytes, "cuda", "a step's gate");
}

static int cu_step_gate(bt_backend *be, const bt_step_gate *rule) {
    cu_ctx *c = cu(be);
    const size_t tab_len = bt_gate_table_len(rule->n_mlm + rule->n_nsp),
                 bytes = tab_len * sizeof(unsigned long long) + 3 * sizeof(double);
    gate_reserve(c, bytes);
    unsigned long long *tab = (unsigned long long *)c->gate_host.p;
    double *num = (double *)(tab + tab_len);
    const int n_terms = bt_gate_table(&c->defer, rule, tab, num, "cuda");
    if (!cu_graph_upload(c, c->gate_mem, tab, bytes)) {
        cu_graph_break(c, "the step gate's table"); /* pageable: not in a capture */
        CU_CHECK(cudaMemcpyAsync(c->gate_mem, tab, bytes, cudaMemcpyHostToDevice, c->stream));
    }
    defer_reserve(c, c->defer.used + 2);
    int index;
    const size_t first = bt_gate_queue(&c->defer, &index, "cuda");
    const unsigned long long *dev_tab = (const unsigned long long *)c->gate_mem;
    LAUNCH(c, step_gate_decide, BT_WG, (const float *)c->defer_mem, dev_tab, n_terms,
           (const double *)(dev_tab + tab_len), rule->guard ? 1 : 0, rule->max_norm,
           c->defer_mem + first);
    return index;
}

const float *cu_gate_arg(cu_ctx *c, int gate) {
    return gate < 0 ? NULL : c->defer_mem + bt_gate_first(&c->defer, gate, "cuda");
}

void cu_reduce_release(cu_ctx *c) {
    if (c->gate_mem) (void)cudaFree(c->gate_mem);
    bt_host_buf_free(&c->gate_host);
    c->gate_mem = NULL;
    c->gate_bytes = 0;
    if (c->fetch_host) (void)cudaFreeHost(c->fetch_host);
    c->fetch_host = NULL;
    c->fetch_cap = 0;
    if (c->defer_mem) (void)cudaFree(c->defer_mem);
    c->defer_mem = NULL;
    c->defer_cap = 0;
    bt_deferrals_free(&c->defer);
}

void cu_fill_reduce_ops(bt_backend *be) {
    be->sum = cu_sum;
    be->sumsq = cu_sumsq;
    be->all_finite = cu_all_finite;
    be->reduce_defer = cu_reduce_defer;
    be->reduce_fetch = cu_reduce_fetch;
    be->step_gate = cu_step_gate;
}
