/* CPU reference backend: memory, GEMM (CBLAS), elementwise ops, reductions and
 * optimizer steps. fp32, OpenMP-parallel over independent outputs, and
 * bit-identical for any thread count. It is the oracle for the other backends. */
#include "cpu_internal.h"

#include "../common/half.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
void openblas_set_num_threads(int num_threads); /* OpenBLAS's; not in every cblas.h */
#endif


static void cpu_destroy(bt_backend *be) {
    cpu_ctx *ctx = be->ctx;
    bt_stage_release(be, &ctx->stage[0]);
    bt_stage_release(be, &ctx->stage[1]);
    bt_stage_release(be, &ctx->stage[2]);
    bt_wall_marks_free(&ctx->marks);
    free(ctx->deferred);
    free(ctx->chunk_part);
    bt_partials_free(&ctx->lamb_u);
    bt_partials_free(&ctx->col_part);
    bt_partials_free(&ctx->gemm_part);
    bt_partials_free(&ctx->attn_part);
    bt_partials_free(&ctx->wide16);
    bt_partials_free(&ctx->ln_dx);
    bt_partials_free(&ctx->xent_d);
    free(be->ctx);
    free(be);
}

/* A number from the first line of file `path` (a cgroup limit), or 0 when it
 * cannot be read or says "max". */
static double read_limit(const char *path) {
    FILE *f = fopen(path, "r");
    char line[64] = "";
    if (f && !fgets(line, sizeof line, f)) line[0] = 0;
    if (f) fclose(f);
    char *end;
    const double v = strtod(line, &end);
    return end != line && v > 0 ? v : 0;
}

/* The memory this process may use at most, in bytes (0: no limit found): its
 * address-space limit (ulimit -v) and its cgroup's (v2 memory.max, v1
 * memory.limit_in_bytes), as a batch scheduler sets them. */
static double process_mem_limit(void) {
    double limit = 0;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) limit = (double)rl.rlim_cur;
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[1024], path[1200];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        double v = 0;
        if (!strncmp(line, "0::", 3)) {
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", line + 3);
            v = read_limit(path);
        } else if (strstr(line, ":memory:")) {
            snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes",
                     strstr(line, ":memory:") + 8);
            v = read_limit(path);
        }
        if (v > 0 && v < 0x1p62 && (limit == 0 || v < limit)) limit = v;
    }
    if (f) fclose(f);
    return limit;
}

/* Bytes that new allocations can take now without swapping: the kernel's
 * MemAvailable (free memory plus the page cache it can drop); free pages
 * where /proc/meminfo does not say. */
static size_t available_memory(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    if (f) fclose(f);
    if (kib) return (size_t)(kib * 1024);
    long avail = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return avail > 0 && page > 0 ? (size_t)avail * (size_t)page : 0;
}

static void cpu_info(bt_backend *be, bt_device_info *out) {
    cpu_ctx *ctx = be->ctx;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "CPU reference (%d thread%s: %s; fewer while "
             "others take them)", ctx->threads_max, ctx->threads_max == 1 ? "" : "s", ctx->threads_why);
    snprintf(out->vendor, sizeof out->vendor, "host");
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) out->total_mem = (size_t)pages * (size_t)page;
    out->free_mem = available_memory();
    const double limit = process_mem_limit(); /* what this process may use of it */
    if (limit > 0 && limit < (double)out->total_mem) out->total_mem = (size_t)limit;
    if (limit > 0 && limit < (double)out->free_mem) out->free_mem = (size_t)limit;
    out->compute_units = ctx->threads_now; /* in use now (cpu_govern_threads) */
    out->has_fp16 = true; /* emulated storage */
    out->has_fp64 = true;
    out->fused_ops_pay = true;
}

static void cpu_sync(bt_backend *be) { ((cpu_ctx *)be->ctx)->count.host_syncs++; }

static bt_buffer *cpu_alloc(bt_backend *be, size_t bytes) {
    bt_buffer *b = malloc(sizeof *b);
    if (!b) return NULL;
    b->bytes = bytes;
    /* 64-byte alignment; round the size up as aligned_alloc requires */
    b->data = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!b->data) {
        free(b);
        return NULL;
    }
    bt_count_alloc(&((cpu_ctx *)be->ctx)->count, bytes);
    return b;
}

static void cpu_free(bt_backend *be, bt_buffer *buf) {
    if (!buf) return;
    bt_count_free(&((cpu_ctx *)be->ctx)->count, buf->bytes);
    free(buf->data);
    free(buf);
}

static void cpu_upload(bt_backend *be, bt_ptr dst, const void *src, size_t bytes) {
    ((cpu_ctx *)be->ctx)->count.host_writes++;
    memcpy((char *)dst.buf->data + dst.off, src, bytes);
}

static void cpu_download(bt_backend *be, void *dst, bt_ptr src, size_t bytes) {
    ((cpu_ctx *)be->ctx)->count.host_reads++;
    memcpy(dst, (char *)src.buf->data + src.off, bytes);
}

static void *cpu_host_alloc(bt_backend *be, size_t bytes) {
    (void)be;
    return malloc(bytes ? bytes : 1);
}

static void cpu_host_free(bt_backend *be, void *p) {
    (void)be;
    free(p);
}

/* The copy is done before it returns: no ticket ever waits. */
static long cpu_download_async(bt_backend *be, void *dst, bt_ptr src, size_t bytes) {
    memcpy(dst, (char *)src.buf->data + src.off, bytes);
    return ++((cpu_ctx *)be->ctx)->downloads;
}

static bool cpu_downloads_done(bt_backend *be, long ticket, bool wait) {
    (void)wait;
    return ticket <= ((cpu_ctx *)be->ctx)->downloads;
}

static void cpu_upload_async(bt_backend *be, bt_ptr dst, const void *src, size_t bytes) {
    (void)be;
    memcpy((char *)dst.buf->data + dst.off, src, bytes);
}

static void cpu_copy(bt_backend *be, bt_ptr dst, bt_ptr src, size_t bytes) {
    (void)be;
    memmove((char *)dst.buf->data + dst.off, (char *)src.buf->data + src.off, bytes);
}

/* Zeros (+0.0, all bits clear) by memset, one span a thread: glibc's
 * non-temporal stores fill the 440 MB of BERT-base's gradients 3x faster
 * than a store loop, which first reads every line it writes. */
static void cpu_fill(bt_backend *be, bt_ptr dst, float value, size_t n) {
    (void)be;
    float *d = cpu_f32(dst);
    if (value == 0.0f && !signbit(value)) {
#pragma omp parallel
        {
            const size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
            const size_t from = n / nt * t + (t < n % nt ? t : n % nt),
                         count = n / nt + (t < n % nt);
            memset(d + from, 0, count * sizeof *d);
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) d[i] = value;
}

/* y16's rows = round16(0 + bias): bias_add of a zero y (backend.h), the
 * first row converted, the others copies of it */
static void cpu_bias_broadcast16(uint16_t *y16, const float *bias, int rows, int cols,
                                 bt_dtype round16) {
    for (int c = 0; c < cols; c++) {
        const float v = 0.0f + bias[c];
        uint32_t u;
        memcpy(&u, &v, 4);
        y16[c] = round16 == BT_BF16 ? f32_to_bf16(u) : f32_to_f16(u);
    }
#pragma omp parallel for schedule(static)
    for (int r = 1; r < rows; r++) memcpy(y16 + (size_t)r * cols, y16, (size_t)cols * 2);
}

static void cpu_bias_add(bt_backend *be, bt_ptr y, bt_ptr bias, int rows, int cols,
                         bt_dtype round16, bt_ptr y16, bool y_kept) {
    (void)be, (void)y_kept; /* y is the row's workspace: written either way */
    if (!y.buf) {
        if (rows > 0) cpu_bias_broadcast16(cpu_u16(y16), cpu_f32(bias), rows, cols, round16);
        return;
    }
    float *Y = cpu_f32(y);
    uint16_t *Y16 = y16.buf ? cpu_u16(y16) : NULL;
    const float *bb = cpu_f32(bias);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t at = (size_t)r * cols;
        cpu_bias_row(Y + at, bb, cols, round16, Y16 ? Y16 + at : NULL);
    }
}

static void cpu_bias_grad(bt_backend *be, bt_ptr dbias, bt_ptr dy, int rows, int cols,
                          bt_dtype round16, bt_dtype dy_dtype) {
    const size_t n = (size_t)rows * cols;
    const float *D = dy_dtype != BT_F32 ? cpu_widen16(be->ctx, dy, dy_dtype, n)
                     : round16 == BT_F32 ? cpu_f32(dy)
                                         : cpu_rounded16(be->ctx, dy, round16, n);
    cpu_column_sums(be->ctx, cpu_f32(dbias), NULL, D, NULL, NULL, NULL, rows, cols);
}

static void cpu_add(bt_backend *be, bt_ptr out, bt_ptr a, bt_ptr b, size_t n) {
    (void)be;
    float *O = cpu_f32(out);
    const float *A = cpu_f32(a), *B = cpu_f32(b);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) O[i] = A[i] + B[i];
}

static void cpu_scale(bt_backend *be, bt_ptr x, float alpha, size_t n) {
    (void)be;
    float *X = cpu_f32(x);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) X[i] *= alpha;
}

static void cpu_axpy(bt_backend *be, bt_ptr y, float alpha, bt_ptr x, size_t n) {
    (void)be;
    float *Y = cpu_f32(y);
    const float *X = cpu_f32(x);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) Y[i] += alpha * X[i];
}

/* One loop per conversion, free of per-element dispatch. */
static void cpu_cast(bt_backend *be, bt_ptr dst, bt_dtype dt, bt_ptr src, bt_dtype st,
                     size_t n) {
    (void)be;
    const uint32_t *x = (const uint32_t *)cpu_f32(src);
    const uint16_t *h = cpu_u16(src);
    uint32_t *y = (uint32_t *)cpu_f32(dst);
    uint16_t *g = cpu_u16(dst);
    if (st == dt) {
        memmove(g, h, n * bt_dtype_size(st));
    } else if (st == BT_F32 && dt == BT_BF16) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) g[i] = f32_to_bf16(x[i]);
    } else if (st == BT_F32 && dt == BT_F16) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) g[i] = f32_to_f16(x[i]);
    } else if (st == BT_BF16 && dt == BT_F32) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) y[i] = bf16_to_f32(h[i]);
    } else if (st == BT_F16 && dt == BT_F32) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) y[i] = f16_to_f32(h[i]);
    } else if (st == BT_BF16) { /* -> f16 */
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) g[i] = f32_to_f16(bf16_to_f32(h[i]));
    } else { /* f16 -> bf16 */
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) g[i] = f32_to_bf16(f16_to_f32(h[i]));
    }
}

static void cpu_round16(bt_backend *be, bt_ptr x, bt_dtype dt, size_t n) {
    (void)be;
    uint32_t *v = (uint32_t *)cpu_f32(x);
    const size_t chunk = 16384;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i += chunk) cpu_round16_span(v + i, dt, n - i < chunk ? n - i : chunk);
}

/* ---- profiling: counters, and marks that read the wall clock (the CPU's
 * ops return when their work is done) ---- */

static void cpu_counters(bt_backend *be, bt_counters *out) { *out = ((cpu_ctx *)be->ctx)->count; }

static int cpu_mark(bt_backend *be) { return bt_wall_mark(&((cpu_ctx *)be->ctx)->marks, "cpu"); }

static double cpu_mark_seconds(bt_backend *be, int a, int b) {
    return bt_wall_mark_seconds(&((cpu_ctx *)be->ctx)->marks, a, b);
}

static void cpu_marks_reset(bt_backend *be) { ((cpu_ctx *)be->ctx)->marks.n = 0; }

/* gemm16 on the CPU: fp32 copies of both operands' 16-bit values, then the
 * fp32 GEMM. */
static void cpu_gemm16(bt_backend *be, bt_dtype dt, unsigned stored16, bool ta, bool tb, int m,
                       int n, int k, float alpha, bt_ptr a, int lda, long sa, bt_ptr b, int ldb,
                       long sb, float beta, bt_ptr c, int ldc, long sc, int batch) {
    cpu_ctx *ctx = be->ctx;
    bt_gemm16_staged(be, ctx->stage, dt, stored16, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c,
                     ldc, sc, batch);
}

bt_backend *bt_cpu_backend_create(int threads, int local_ranks) {
    bt_backend *be = calloc(1, sizeof *be);
    cpu_ctx *ctx = calloc(1, sizeof *ctx);
    if (!be || !ctx) {
        free(be);
        free(ctx);
        return NULL;
    }
    ctx->gate = -1;
    if (threads > 0) {
        snprintf(ctx->threads_why, sizeof ctx->threads_why, "cpu_threads");
    } else {
        threads = cpu_default_threads(local_ranks, ctx->threads_why, sizeof ctx->threads_why);
    }
    if (threads > 0) omp_set_num_threads(threads);
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    openblas_set_num_threads(1); /* cpu_gemm threads over a fixed tile grid */
#endif
    ctx->threads_max = ctx->threads_now = omp_get_max_threads();
    cpu_govern_start(ctx);
    be->name = "cpu";
    be->ctx = ctx;
    be->destroy = cpu_destroy;
    be->info = cpu_info;
    be->sync = cpu_sync;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->upload = cpu_upload;
    be->download = cpu_download;
    be->host_alloc = cpu_host_alloc;
    be->host_free = cpu_host_free;
    be->download_async = cpu_download_async;
    be->downloads_done = cpu_downloads_done;
    be->upload_async = cpu_upload_async;
    be->copy = cpu_copy;
    be->fill = cpu_fill;
    be->gemm = cpu_gemm;
    be->gemm16 = cpu_gemm16;
    be->gemm_grid = bt_gemm_grid_loop; /* each group's GEMM already threads its matrices */
    be->bias_add = cpu_bias_add;
    be->bias_grad = cpu_bias_grad;
    be->add = cpu_add;
    be->scale = cpu_scale;
    be->axpy = cpu_axpy;
    be->cast = cpu_cast;
    be->round16 = cpu_round16;
    be->counters = cpu_counters;
    be->mark = cpu_mark;
    be->mark_seconds = cpu_mark_seconds;
    be->marks_reset = cpu_marks_reset;
    be->graph_begin = bt_graph_begin_none;
    be->graph_end = bt_graph_end_none;
    cpu_fill_reduce_ops(be);
    cpu_fill_nn_ops(be);
    cpu_fill_optim_ops(be);
    cpu_fill_fused_ops(be);
    cpu_fill_attention_ops(be);
    return be;
}
