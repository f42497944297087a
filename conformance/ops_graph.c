/* Conformance of graph_begin and graph_end: the work of a region computes
 * what it would without one. A region of ops (an upload, fill, axpy, a
 * download_async into host_alloc memory, scale, dropout, gemm, copy and
 * deferred sums) runs 5 times with new scalars each
 * time (fill value, alpha, dropout key, uploaded values), as a training step
 * runs again; every round's results must be the bits of the same ops run
 * outside a region. Then rounds that a device's graph cannot replay as
 * recorded: another length (a shape change), and a download in the middle
 * of the region. On CUDA the rounds capture, replay with new kernel
 * arguments, and break; elsewhere the regions are no-ops and the check
 * holds trivially. */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GRAPH_N = 3000, GRAPH_D = 24, GRAPH_ROUNDS = 5 };

/* The region's buffers: x, y (GRAPH_N), a and c (GRAPH_D x GRAPH_D), and
 * host memory for a copy. */
typedef struct {
    bt_buffer *x, *y, *a, *c;
    float *staged; /* GRAPH_D^2 floats of host_alloc memory: download_async's */
} graph_bufs;

/* Round k of the region's work over n elements (n <= GRAPH_N); with
 * peek, a download of y in its middle. Returns the deferred sums' values
 * (2) in sums, y, c and c as the asynchronous copy took it into staged
 * (GRAPH_D^2 floats of host_alloc memory) in out (n + 2 GRAPH_D^2 floats). */
static void region_round(bt_backend *be, const graph_bufs *b, int k, size_t n, bool in_region,
                         bool peek, const float *host, float *staged, double *sums, float *out) {
    const int D = GRAPH_D;
    for (int i = 0; i < D * D; i++) staged[i] = (float)NAN; /* a copy that does not run shows */
    if (in_region) be->graph_begin(be, BT_GRAPH_STEP);
    be->upload(be, (bt_ptr){b->x, 0}, host, n * 4);
    be->fill(be, (bt_ptr){b->y, 0}, 0.25f * (float)(k + 1), n);
    be->axpy(be, (bt_ptr){b->y, 0}, 1.5f - 0.125f * (float)k, (bt_ptr){b->x, 0}, n);
    if (peek) be->download(be, out, (bt_ptr){b->y, 0}, n * 4);
    const bt_rng_key key = {77, (uint64_t)k << 24};
    be->dropout(be, (bt_ptr){b->y, 0}, (bt_ptr){b->y, 0}, n, n / 4, (uint32_t)k, 0.1f, key,
                BT_F32, BT_NO_PTR, BT_F32);
    be->scale(be, (bt_ptr){b->x, 0}, 0.5f + (float)k, n);
    be->copy(be, (bt_ptr){b->a, 0}, (bt_ptr){b->x, 0}, (size_t)D * D * 4);
    be->gemm(be, false, true, D, D, D, 1.0f, (bt_ptr){b->a, 0}, D, 0, (bt_ptr){b->y, 0}, D, 0,
             0.0f, (bt_ptr){b->c, 0}, D, 0, 1);
    /* c is not written again before the copy is seen to arrive (backend.h) */
    const long ticket = be->download_async(be, staged, (bt_ptr){b->c, 0}, (size_t)D * D * 4);
    (void)be->downloads_done(be, ticket, false); /* a look: no wait, the region goes on */
    const int t0 = be->reduce_defer(be, BT_REDUCE_SUM, (bt_ptr){b->y, 0}, n);
    const int t1 = be->reduce_defer(be, BT_REDUCE_SUMSQ, (bt_ptr){b->c, 0}, (size_t)D * D);
    if (in_region) be->graph_end(be);
    double v[8];
    be->reduce_fetch(be, v);
    sums[0] = v[t0];
    sums[1] = v[t1];
    be->download(be, out, (bt_ptr){b->y, 0}, n * 4);
    be->download(be, out + n, (bt_ptr){b->c, 0}, (size_t)D * D * 4);
    if (!be->downloads_done(be, ticket, true)) return; /* with wait it says true */
    memcpy(out + n + (size_t)D * D, staged, (size_t)D * D * 4);
}

/* Round k in a region and outside one: the same bits, else a failure. */
static void compare_round(bt_backend *be, const graph_bufs *b, verdict *v, int k, size_t n,
                          bool peek, const char *what) {
    const size_t room = (GRAPH_N + 2 * GRAPH_D * GRAPH_D) * 4;
    float *host = ref_alloc(GRAPH_N * 4), *want = ref_alloc(room), *got = ref_alloc(room);
    for (size_t i = 0; i < n; i++) host[i] = (float)(ref_uniform(&g_input_rng) * 2.0 - 1.0);
    double want_sums[2], got_sums[2];
    region_round(be, b, k, n, false, peek, host, b->staged, want_sums, want);
    region_round(be, b, k, n, true, peek, host, b->staged, got_sums, got);
    const size_t count = n + 2 * (size_t)GRAPH_D * GRAPH_D;
    if (memcmp(want, got, count * 4) != 0 || memcmp(want_sums, got_sums, sizeof want_sums) != 0) {
        size_t i = 0;
        while (i < count && !memcmp(&want[i], &got[i], 4)) i++;
        v_fail(v, "%s, round %d: %s differs (element %zu: %.9g, outside a region %.9g)", what, k,
               i < count ? "a result" : "a deferred sum", i, i < count ? (double)got[i] : 0.0,
               i < count ? (double)want[i] : 0.0);
    }
    free(host);
    free(want);
    free(got);
}

void test_graphs(bt_backend *be) {
    if (!want_op("graph_begin") && !want_op("graph_end")) return;
    reseed("graphs", 0);
    verdict v = v_new();
    const int D = GRAPH_D;
    graph_bufs b = {be->alloc(be, GRAPH_N * 4), be->alloc(be, GRAPH_N * 4),
                    be->alloc(be, (size_t)D * D * 4), be->alloc(be, (size_t)D * D * 4),
                    be->host_alloc(be, (size_t)D * D * 4)};
    if (!b.x || !b.y || !b.a || !b.c || !b.staged) {
        v_fail(&v, "alloc failed");
    } else {
        for (int k = 0; k < GRAPH_ROUNDS; k++) compare_round(be, &b, &v, k, GRAPH_N, false, "rounds");
        compare_round(be, &b, &v, GRAPH_ROUNDS, GRAPH_N - 1000, false, "a shorter round");
        compare_round(be, &b, &v, GRAPH_ROUNDS + 1, GRAPH_N, false, "the length again");
        compare_round(be, &b, &v, GRAPH_ROUNDS + 2, GRAPH_N, true, "a download in the region");
        compare_round(be, &b, &v, GRAPH_ROUNDS + 3, GRAPH_N, false, "after it");
    }
    be->free(be, b.x);
    be->free(be, b.y);
    be->free(be, b.a);
    be->free(be, b.c);
    be->host_free(be, b.staged);
    v_report(&v, "graph_begin", "%d rounds of 10 ops with new scalars, the bits of the ops alone",
             GRAPH_ROUNDS);
    v_report(&v, "graph_end", "a shape change and a download inside a region: the same bits");
}
