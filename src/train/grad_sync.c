/* Bucketed, overlapped gradient allreduce over host-staged fp32, or over a
 * 16-bit wire. A bucket's copy to the host does not stop the backward
 * (download_async); its all-reduce starts once the copy has arrived, seen
 * between the backward's ops, and the sums go back in order with the ops
 * (upload_async). */
#include "grad_sync.h"

#include "mpi/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_BUCKETS 4096

struct grad_sync {
    bert_model *m;
    size_t bucket_elems;
    float *host;            /* (n_params) staging: the backend's host memory (host_alloc) */
    size_t lo, hi;          /* pending range, not yet launched (lo == hi: none) */
    bool bf16;              /* the 16-bit wire (dist_isum_bf16) */
    onebit *ob;             /* 1-bit Adam's exchange, or NULL */
    float *mom;             /* (n_params) 1-bit Adam: the first moment, on the host */
    double wire_bytes;      /* this step's, so far */
    int n;                  /* buckets this step (copies issued) */
    int started;            /* of which the first `started` have their all-reduce going */
    size_t begin[MAX_BUCKETS], end[MAX_BUCKETS];
    long ticket[MAX_BUCKETS]; /* the bucket's copy to the host (download_async) */
    dist_request *req[MAX_BUCKETS];
};

grad_sync *grad_sync_new(bert_model *m, size_t bucket_bytes, bool bf16, bool onebit) {
    if (dist_world() == 1) return NULL;
    const size_t n = bert_n_params(m);
    grad_sync *gs = calloc(1, sizeof *gs);
    if (!gs || !(gs->host = m->be->host_alloc(m->be, n * sizeof(float))) ||
        (onebit && (!(gs->mom = malloc(n * sizeof(float))) || !(gs->ob = onebit_new(n))))) {
        fprintf(stderr, "bertrain: rank %d: out of host memory for gradient staging\n",
                dist_rank());
        dist_abort(1);
    }
    gs->m = m;
    gs->bf16 = bf16;
    gs->bucket_elems = bucket_bytes / sizeof(float);
    if (gs->bucket_elems < 1024) gs->bucket_elems = 1024;
    return gs;
}

void grad_sync_free(grad_sync *gs) {
    if (!gs) return;
    onebit_free(gs->ob);
    free(gs->mom);
    if (gs->host) gs->m->be->host_free(gs->m->be, gs->host);
    free(gs);
}

/* The pending range becomes a bucket: its copy to the host starts, and the
 * backward goes on. */
static void launch(grad_sync *gs) {
    if (gs->lo == gs->hi) return;
    if (gs->n == MAX_BUCKETS) {
        fprintf(stderr, "bertrain: internal error: too many gradient buckets\n");
        dist_abort(1);
    }
    bt_backend *be = gs->m->be;
    const size_t n = gs->hi - gs->lo;
    gs->ticket[gs->n] = be->download_async(be, gs->host + gs->lo, bert_grads_at(gs->m, gs->lo),
                                           n * 4);
    gs->begin[gs->n] = gs->lo;
    gs->end[gs->n++] = gs->hi;
    gs->hi = gs->lo;
}

/* Start the all-reduce of each bucket whose copy has arrived, in bucket
 * order (every rank starts them in the same order); with wait, of every
 * bucket, waiting for the copies. */
static void start_arrived(grad_sync *gs, bool wait) {
    bt_backend *be = gs->m->be;
    for (; gs->started < gs->n; gs->started++) {
        const int i = gs->started;
        if (!be->downloads_done(be, gs->ticket[i], wait)) return;
        const size_t n = gs->end[i] - gs->begin[i];
        float *h = gs->host + gs->begin[i];
        gs->req[i] = gs->bf16 ? dist_isum_bf16(h, n) : dist_iallreduce_sum_f32(h, n);
        const double W = dist_world();
        gs->wire_bytes += 2.0 * (W - 1) / W * (double)n * (gs->bf16 ? 2 : 4);
    }
}

void grad_sync_ready(void *ctx, size_t begin, size_t end) {
    grad_sync *gs = ctx;
    if (!gs) return;
    if (gs->lo != gs->hi && end != gs->lo) launch(gs); /* not adjacent: flush */
    if (gs->lo == gs->hi) gs->hi = end;
    gs->lo = begin;
    if (gs->hi - gs->lo >= gs->bucket_elems) launch(gs);
    grad_sync_progress(gs);
}

void grad_sync_progress(void *ctx) {
    grad_sync *gs = ctx;
    if (!gs) return;
    start_arrived(gs, false);
    for (int i = 0; i < gs->started && dist_progress(gs->req[i]); i++) { /* in order */
    }
}

void grad_sync_start(grad_sync *gs) {
    if (!gs) return;
    launch(gs);
    start_arrived(gs, true);
}

double grad_sync_finish(grad_sync *gs, double *wire_bytes) {
    *wire_bytes = 0.0;
    if (!gs) return 0.0;
    grad_sync_start(gs); /* nothing left, where the caller started them */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bt_backend *be = gs->m->be;
    /* the sums go back in order with the ops; gs->host is next written by
     * the next step's copies, which the device issues after these */
    for (int i = 0; i < gs->n; i++) {
        dist_wait(gs->req[i]);
        size_t n = gs->end[i] - gs->begin[i];
        be->upload_async(be, bert_grads_at(gs->m, gs->begin[i]), gs->host + gs->begin[i], n * 4);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    gs->n = gs->started = 0;
    gs->lo = gs->hi = 0;
    *wire_bytes = gs->wire_bytes;
    gs->wire_bytes = 0.0;
    return (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
}

/* host = b1 mom + (1 - b1) host gw over each tensor's span, times its
 * scaling (1-bit LAMB; 1 when scaling is NULL: a product with 1 is exact). */
static void momentum_estimate(const bert_model *m, float *host, const float *mom, float b1,
                              float gw, const float *scaling) {
    for (int t = 0; t < m->n_tensors; t++) {
        float *h = host + m->tensors[t].offset;
        const float *p = mom + m->tensors[t].offset, f = scaling ? scaling[t] : 1.0f;
        for (size_t i = 0; i < m->tensors[t].numel; i++)
            h[i] = (b1 * p[i] + (1.0f - b1) * (h[i] * gw)) * f;
    }
}

/* x /= scaling[t] over each tensor t's span; nothing when scaling is NULL. */
static void unscale_tensors(const bert_model *m, float *x, const float *scaling) {
    if (!scaling) return;
    for (int t = 0; t < m->n_tensors; t++) {
        float *p = x + m->tensors[t].offset;
        const float f = scaling[t];
        for (size_t i = 0; i < m->tensors[t].numel; i++) p[i] /= f;
    }
}

double grad_sync_momentum(grad_sync *gs, bt_optimizer *o, float grad_scale,
                          double *wire_bytes, bt_host_momentum *host) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bt_backend *be = gs->m->be;
    const size_t n = bert_n_params(gs->m);
    be->download(be, gs->host, bert_grads_at(gs->m, 0), n * sizeof(float));
    be->download(be, gs->mom, optim_moment_at(o, 0, 0), n * sizeof(float));
    /* 1-bit LAMB: each tensor's momentum brought to one scale for the exchange */
    const float *scaling = optim_momentum_scaling(o, gs->m, gs->mom);
    momentum_estimate(gs->m, gs->host, gs->mom, o->cfg.beta1, grad_scale * (float)dist_world(),
                      scaling);
    *wire_bytes = onebit_exchange(gs->ob, gs->host);
    unscale_tensors(gs->m, gs->host, scaling);
    be->upload(be, bert_grads_at(gs->m, 0), gs->host, n * sizeof(float));
    *host = (bt_host_momentum){gs->host, gs->mom};
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
}

onebit *grad_sync_onebit(grad_sync *gs) { return gs ? gs->ob : NULL; }
