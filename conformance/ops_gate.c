/* Conformance of step_gate: the update's gate decided on the device is the
 * host's decision (src/train/step.c: the loss scaler's, the divergence
 * guard's, clipping's) on the values the fetch brings, the scale it reads
 * back is the host's clipping factor, and a multi-tensor
 * step given the gate is the ungated step at the gate's scale, or changes
 * nothing when the gate skips. Every case runs inside a graph region, so a
 * device that replays graphs replays the gate with new numbers. */
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* MLM and NSP loss vectors of a step's micro-batches (as many sums). */
static const size_t MLM_SIZES[] = {1000, 4097, 1}, NSP_SIZES[] = {64, 3};
#define N_MLM 3
#define N_NSP 2

typedef struct {
    const char *name;
    bool lamb;           /* lamb_multi, else adamw_multi */
    bool finite_check;   /* fp16: the gradients' finiteness queued */
    bool inf_grad;       /* an Inf among the gradients */
    bool nan_loss;       /* a NaN among the MLM losses */
    bool guard;          /* the guard's checks */
    double limit_factor; /* loss_limit = this x the step's loss (0: none) */
    double clip_factor;  /* max_norm = this x the gradients' norm (0: no clipping) */
    bool no_masked;      /* masked 0: the MLM loss counts 0 */
} gate_case;

/* Same structure next to each other: a graph-replaying device replays. */
static const gate_case CASES[] = {
    {"plain", false, false, false, false, false, 0, 0, false},
    {"clip", false, false, false, false, false, 0, 0.5, false},
    {"clip-not-reached", false, false, false, false, false, 0, 2.0, false},
    {"guard-passes", false, true, false, false, true, 2.0, 0.5, false},
    {"guard-spike", false, true, false, false, true, 0.5, 0.5, false},
    {"guard-at-limit", false, true, false, false, true, 1.0, 0.5, false},
    {"fp16-overflow", false, true, true, false, true, 2.0, 0.5, false},
    {"fp16-overflow-no-guard", false, true, true, false, false, 0, 0.5, false},
    {"guard-nan-loss", false, false, false, true, true, 0, 0.5, false},
    {"nan-loss-no-guard", false, false, false, true, false, 0, 0.5, false},
    {"guard-inf-norm", false, false, true, false, true, 0, 0.5, false},
    {"no-masked-spike", false, false, false, false, true, 0.999, 0, true},
    {"no-masked-passes", false, false, false, false, true, 1.001, 0, true},
    {"lamb-clip", true, false, false, false, true, 2.0, 0.5, false},
    {"lamb-spike", true, false, false, false, true, 0.5, 0.5, false},
};

/* The device buffers of every case (the same, so that regions replay). */
typedef struct {
    size_t n, n_loss;
    bt_buffer *buf;
    bt_ptr w, g, m, v, w16, loss, other;
    bt_tensor_span spans[3];
} gate_bufs;

/* The reductions a step queues, by index. */
typedef struct {
    int finite, norm, mlm[N_MLM], nsp[N_NSP];
} gate_idx;

static size_t sizes_total(const size_t *s, int n) {
    size_t t = 0;
    for (int i = 0; i < n; i++) t += s[i];
    return t;
}

/* Queue what a step queues before its gate: an unrelated sum first (the
 * indices do not start at 0), then the checks of the gradients and the
 * micro-batches' loss sums. */
static gate_idx queue_stats(bt_backend *be, const gate_bufs *b, const gate_case *k) {
    gate_idx q;
    be->reduce_defer(be, BT_REDUCE_SUM, b->other, 777);
    q.finite = k->finite_check ? be->reduce_defer(be, BT_REDUCE_FINITE, b->g, b->n) : -1;
    q.norm = be->reduce_defer(be, BT_REDUCE_SUMSQ, b->g, b->n);
    size_t at = 0;
    for (int i = 0; i < N_MLM; at += MLM_SIZES[i++])
        q.mlm[i] = be->reduce_defer(be, BT_REDUCE_SUM, bt_at(b->loss, at), MLM_SIZES[i]);
    for (int i = 0; i < N_NSP; at += NSP_SIZES[i++])
        q.nsp[i] = be->reduce_defer(be, BT_REDUCE_SUM, bt_at(b->loss, at), NSP_SIZES[i]);
    return q;
}

/* The host's decision (src/train/step.c, guard.c, optim.c) on fetched values. */
typedef struct {
    double loss, norm;
    bool skip;
    float scale;
} host_gate;

static host_gate host_decides(const bt_step_gate *r, const double *val) {
    host_gate h;
    double mlm = 0.0, nsp = 0.0;
    for (int i = 0; i < r->n_mlm; i++) mlm += val[r->mlm_loss[i]];
    for (int i = 0; i < r->n_nsp; i++) nsp += val[r->nsp_loss[i]];
    h.loss = (r->masked > 0 ? mlm / r->masked : 0.0) + (r->nsp > 0 ? nsp / r->nsp : 0.0);
    h.norm = sqrt(val[r->norm_sumsq]);
    h.skip = r->finite >= 0 && val[r->finite] == 0.0;
    if (r->guard && (!isfinite(h.loss) || !isfinite(h.norm) ||
                     (r->loss_limit > 0 && h.loss > r->loss_limit)))
        h.skip = true;
    h.scale = 1.0f;
    if (r->max_norm > 0.0f) {
        const double coef = r->max_norm / (h.norm + 1e-6);
        h.scale = coef < 1.0 ? (float)coef : 1.0f;
    }
    return h;
}

/* The case's rule over the indices q; its numbers from the probe's values. */
static bt_step_gate rule_of(const gate_case *k, const gate_idx *q, const double *probe) {
    bt_step_gate r = {.finite = q->finite, .norm_sumsq = q->norm, .mlm_loss = q->mlm,
                      .n_mlm = N_MLM, .masked = k->no_masked ? 0.0 : 5000.0, .nsp_loss = q->nsp,
                      .n_nsp = N_NSP, .nsp = 67.0, .guard = k->guard};
    const host_gate h = host_decides(&r, probe);
    r.loss_limit = k->limit_factor * h.loss;
    r.max_norm = (float)(k->clip_factor * h.norm);
    return r;
}

static void run_multi(bt_backend *be, const gate_bufs *b, bool lamb, float scale, int gate) {
    if (lamb)
        be->lamb_multi(be, b->w, b->g, b->m, b->v, b->w16, BT_BF16, b->spans, 3, 0.02f, 0.9f,
                       0.999f, 1e-6f, 0.01f, 10.0f, scale, gate);
    else
        be->adamw_multi(be, b->w, b->g, b->m, b->v, b->w16, BT_BF16, b->spans, 3, 0.02f, 0.9f,
                        0.999f, 1e-6f, scale, gate);
}

/* The case's inputs onto the device: w, g, m, v, w16 and the losses. */
static void put_inputs(bt_backend *be, const gate_bufs *b, const gate_case *k, const float *wgmv,
                       const uint16_t *w16, const float *loss) {
    float *g = malloc(b->n * sizeof *g), *l = malloc(b->n_loss * sizeof *l);
    if (!g || !l) abort();
    memcpy(g, wgmv + b->n, b->n * sizeof *g);
    memcpy(l, loss, b->n_loss * sizeof *l);
    if (k->inf_grad) g[b->n / 3] = INFINITY;
    if (k->nan_loss) l[2000] = NAN;
    be->upload(be, b->w, wgmv, 4 * b->n * sizeof(float)); /* w, g, m, v are adjacent */
    be->upload(be, b->g, g, b->n * sizeof *g);
    be->upload(be, b->w16, w16, b->n * 2);
    be->upload(be, b->loss, l, b->n_loss * sizeof *l);
    free(g), free(l);
}

/* w, m, v and w16 read back into out (4 n floats, then n halves). */
static void get_state(bt_backend *be, const gate_bufs *b, float *out) {
    be->download(be, out, b->w, b->n * sizeof(float));
    be->download(be, out + b->n, b->m, b->n * sizeof(float));
    be->download(be, out + 2 * b->n, b->v, b->n * sizeof(float));
    be->download(be, out + 3 * b->n, b->w16, b->n * 2);
}

/* One case: the probe fetch for the numbers, the gated step in a region
 * with its fetch, then the ungated reference step at the host's scale. */
static void gate_case_run(bt_backend *be, const gate_bufs *b, const gate_case *k,
                          const float *wgmv, const uint16_t *w16, const float *loss,
                          bool has_fp64) {
    verdict v = v_new();
    const size_t state = 3 * b->n + (b->n + 1) / 2;
    double probe[16], val[16];
    float *got = calloc(state, sizeof *got), *want_ = calloc(state, sizeof *want_);
    if (!got || !want_) abort();
    put_inputs(be, b, k, wgmv, w16, loss);
    gate_idx q = queue_stats(be, b, k);
    be->reduce_fetch(be, probe);
    q = queue_stats(be, b, k);
    const bt_step_gate rule = rule_of(k, &q, probe);
    be->graph_begin(be, BT_GRAPH_STEP);
    const int gate = be->step_gate(be, &rule);
    run_multi(be, b, k->lamb, 7.0f /* ignored: the gate's scale */, gate);
    be->graph_end(be);
    be->reduce_fetch(be, val);
    get_state(be, b, got);
    const host_gate h = host_decides(&rule, val);
    const bool applied = val[gate] != 0.0;
    if (gate != q.nsp[N_NSP - 1] + 1) v_fail(&v, "the gate's index %d is not next in the queue", gate);
    if (applied == h.skip)
        v_fail(&v, "the device %s the step, the host %s it (loss %.17g, norm %.17g)",
               applied ? "applies" : "skips", h.skip ? "skips" : "applies", h.loss, h.norm);
    const double want_scale = h.scale; /* the scale's value: the float, exactly */
    if ((has_fp64 || k->clip_factor == 0) && memcmp(&val[gate + 1], &want_scale, sizeof want_scale))
        v_fail(&v, "the device's scale %.9g, the host's %.9g", val[gate + 1], want_scale);
    put_inputs(be, b, k, wgmv, w16, loss);
    if (!h.skip) run_multi(be, b, k->lamb, h.scale, -1);
    get_state(be, b, want_);
    if (v.ok && (has_fp64 || h.skip)) {
        v_bits(&v, h.skip ? "w, m, v untouched" : "w, m, v as ungated at the host's scale", got,
               want_, 3 * b->n);
        if (memcmp(got + 3 * b->n, want_ + 3 * b->n, b->n * 2))
            v_fail(&v, "w16 %s", h.skip ? "written" : "not as ungated");
    }
    if (v.ok) v_metric(&v, "decision", 0.0, 0.0);
    v_report(&v, "step_gate", "%s: %s at scale %.9g%s", k->name, h.skip ? "skipped" : "applied",
             (double)h.scale, has_fp64 ? "" : " (no fp64: the decision only)");
    free(got), free(want_);
}

void test_step_gate(bt_backend *be) {
    if (!want_op("step_gate")) return;
    bt_device_info info;
    be->info(be, &info);
    reseed("step_gate", 0);
    gate_bufs b = {.n = (g_quick ? 10 : 259) * (size_t)4096 + 5,
                   .n_loss = sizes_total(MLM_SIZES, N_MLM) + sizes_total(NSP_SIZES, N_NSP)};
    /* w, g, m, v, w16 (n halves, rounded up to floats), losses, other */
    const size_t n16 = (b.n + 1) / 2, floats = 4 * b.n + n16 + b.n_loss + 777;
    b.buf = be->alloc(be, floats * sizeof(float));
    float *wgmv = rand_floats(4 * b.n, 1.0, 0.0), *loss = rand_floats(b.n_loss, 1.0, 2.0),
          *other = rand_floats(777, 1.0, 0.0);
    uint16_t *w16 = malloc(2 * n16 * sizeof *w16);
    if (!b.buf || !w16) {
        verdict v = v_new();
        v_fail(&v, "alloc failed");
        v_report(&v, "step_gate", "buffers");
    } else {
        for (size_t i = 0; i < 2 * n16; i++) w16[i] = (uint16_t)(0x7f80u + (i & 63u));
        for (size_t i = 3 * b.n; i < 4 * b.n; i++) wgmv[i] = fabsf(wgmv[i]) * 0.01f; /* v >= 0 */
        bt_ptr p = {b.buf, 0};
        b.w = p, b.g = bt_at(p, b.n), b.m = bt_at(p, 2 * b.n), b.v = bt_at(p, 3 * b.n);
        b.w16 = bt_at(p, 4 * b.n), b.loss = bt_at(p, 4 * b.n + n16);
        b.other = bt_at(p, 4 * b.n + n16 + b.n_loss);
        be->upload(be, b.other, other, 777 * sizeof(float));
        /* three spans with gaps: a tensor of each size class */
        b.spans[0] = (bt_tensor_span){1, 4095, 0.01f, 0.1f, 0.001f};
        b.spans[1] = (bt_tensor_span){4100, b.n - 4100 - 9, 0.0f, 0.19f, 0.002f};
        b.spans[2] = (bt_tensor_span){b.n - 7, 5, 0.01f, 0.271f, 0.003f};
        for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++)
            gate_case_run(be, &b, &CASES[c], wgmv, w16, loss, info.has_fp64);
    }
    if (b.buf) be->free(be, b.buf);
    free(wgmv), free(loss), free(other), free(w16);
}
