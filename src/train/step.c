/* One optimizer step: global counts, forward and backward over this rank's
 * micro-batches, the gradient allreduce, the fp16 loss scaler and the
 * divergence guard, clipping and the update. */
#include "train.h"

#include "mpi/dist.h"
#include "util/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What every rank adds up before any backward, so that each loss gradient is
 * seeded with 1/global count. */
typedef struct {
    double masked;     /* MLM tokens */
    double nsp;        /* NSP samples */
    double scores;     /* attention scores per layer: samples x heads x T x T */
} step_counts;

/* Per-step sums over micro-batches and ranks, by index. */
enum {
    SUM_MLM_LOSS, SUM_MLM_CORRECT, SUM_NSP_LOSS, SUM_NSP_CORRECT, SUM_SAMPLES, SUM_TOKENS,
    SUM_LOG_Z_SQ, SUM_ATTN_SQ, N_SUMS
};

static step_counts global_counts(const bert_model *m, const step_batch *in) {
    double c[3] = {0, 0, 0};
    for (int k = 0; k < in->n_micro; k++) {
        const bt_batch_buf *b = &in->mb[k];
        c[0] += b->n_masked;
        c[1] += m->cfg.nsp ? b->B : 0;
        c[2] += (double)b->B * m->cfg.num_attention_heads * b->T * b->T;
    }
    dist_allreduce_sum_f64(c, 3);
    return (step_counts){c[0], c[1], c[2]};
}

/* LayerDrop's layers for this step: the same on every rank (seed, step);
 * told to the observer. Returns how many are dropped. */
static int draw_layerdrop(const bert_model *m, const bt_config *cfg, long step,
                          unsigned char *skip, const train_observer *obs) {
    const int dropped = bert_layerdrop_draw(&m->cfg, cfg->seed, (uint64_t)step, skip);
    if (obs && obs->layerdrop)
        obs->layerdrop(obs->ctx, dist_rank(), step + 1, skip, m->cfg.num_hidden_layers);
    return dropped;
}

/* Forward and backward over every micro-batch, its sums queued on the
 * device in st[k]; the last backward hands finished gradient buckets to gs
 * as they complete. Adds the rows the top layers and the MLM heads computed
 * to r's counts. */
static void forward_backward(bert_model *m, const step_batch *in, bert_pass *pass,
                             grad_sync *gs, bert_stats *st, step_result *r) {
    pass->defer_stats = true;
    for (int k = 0; k < in->n_micro; k++) {
        const bt_batch_buf *mb = &in->mb[k];
        bert_batch b = {mb->B, mb->T, mb->input_ids, mb->token_type_ids, mb->attention_mask,
                        mb->n_masked, mb->mlm_positions, mb->mlm_labels,
                        m->cfg.nsp ? mb->nsp_labels : NULL, in->first_sample[k],
                        mb->masked_bound};
        if (k == in->n_micro - 1 && gs) { /* the step's gradients become final: reduce early */
            pass->grads_ready = grad_sync_ready;
            pass->between_ops = grad_sync_progress;
            pass->grads_ready_ctx = gs;
        }
        pass->grads_accumulate = k < in->n_micro - 1;
        bert_tape tape;
        bert_forward(m, &b, pass, &tape, &st[k]);
        bert_backward(m, &b, pass, &tape);
        r->top_rows += tape.top_layer >= 0 ? tape.n_top_read : (long)b.B * b.T;
        r->top_rows_run += tape.top_layer >= 0 ? tape.n_top : (long)b.B * b.T;
        r->head_rows_run += tape.n_head;
    }
}

/* The micro-batches' sums in one blocking read, which also waits for the
 * backward to finish, added up in micro-batch order into sums. The read
 * brings the values of every reduction queued before it, those queued
 * after the micro-batches' too (a rank's gradient checks): the values are
 * returned for them (the caller frees them). */
static double *fetch_sums(bert_model *m, const step_batch *in, bert_stats *st, double *sums,
                          int also_queued) {
    const size_t most =
        (size_t)in->n_micro * (6 + (size_t)m->cfg.num_hidden_layers) + (size_t)also_queued;
    double *values = malloc(most * sizeof *values);
    if (!values) {
        fprintf(stderr, "bertrain: out of host memory\n");
        exit(1);
    }
    bool queued = also_queued > 0;
    for (int k = 0; k < in->n_micro && !queued; k++)
        queued = st[k].ticket.mlm_loss >= 0 || st[k].ticket.nsp_loss >= 0 || st[k].ticket.n_attn;
    m->be->reduce_fetch(m->be, values);
    if (!queued) m->be->sync(m->be); /* nothing to read: wait for the backward */
    for (int k = 0; k < in->n_micro; k++) {
        const bt_batch_buf *mb = &in->mb[k];
        bert_stats_resolve(m, &st[k], values);
        sums[SUM_MLM_LOSS] += st[k].mlm_loss_sum;
        sums[SUM_MLM_CORRECT] += st[k].mlm_correct;
        sums[SUM_NSP_LOSS] += st[k].nsp_loss_sum;
        sums[SUM_NSP_CORRECT] += st[k].nsp_correct;
        sums[SUM_SAMPLES] += mb->B;
        for (size_t i = 0; i < (size_t)mb->B * mb->T; i++) sums[SUM_TOKENS] += mb->attention_mask[i];
        sums[SUM_LOG_Z_SQ] += st[k].mlm_log_z_sq;
        sums[SUM_ATTN_SQ] += st[k].attn_score_sq;
    }
    return values;
}

/* The step's losses and counts from the global sums. */
static void fill_result(step_result *r, const bert_model *m, const step_counts *c,
                        const double *sums, double n_scores) {
    r->n_masked = (long)c->masked;
    r->n_nsp = (long)c->nsp;
    r->mlm_loss = c->masked > 0 ? sums[SUM_MLM_LOSS] / c->masked : 0.0;
    r->mlm_acc = c->masked > 0 ? sums[SUM_MLM_CORRECT] / c->masked : 0.0;
    r->nsp_loss = c->nsp > 0 ? sums[SUM_NSP_LOSS] / c->nsp : 0.0;
    r->nsp_acc = c->nsp > 0 ? sums[SUM_NSP_CORRECT] / c->nsp : 0.0;
    r->loss = r->mlm_loss + r->nsp_loss;
    r->z_loss = c->masked > 0 ? m->cfg.z_loss * sums[SUM_LOG_Z_SQ] / c->masked : 0.0;
    r->attn_penalty =
        n_scores > 0 ? m->cfg.attention_logit_penalty * sums[SUM_ATTN_SQ] / n_scores : 0.0;
    r->n_samples = (long)sums[SUM_SAMPLES];
    r->n_tokens = (long)sums[SUM_TOKENS];
}

/* The tickets of the gradients' statistics among the deferred reductions. */
typedef struct {
    int finite, norm; /* -1: not queued */
} grad_tickets;

/* Queue the gradients' statistics: the global norm and, with fp16, whether
 * they are finite, checked before they are unscaled (exact for the dynamic
 * scaler's powers of 2). */
static grad_tickets queue_gradient_checks(bert_model *m, const loss_scaler *scaler,
                                          double scale) {
    bt_backend *be = m->be;
    grad_tickets t = {-1, -1};
    if (scaler) {
        t.finite = be->reduce_defer(be, BT_REDUCE_FINITE, bert_grads_at(m, 0), bert_n_params(m));
        if (scale != 1.0)
            be->scale(be, bert_grads_at(m, 0), (float)(1.0 / scale), bert_n_params(m));
    }
    t.norm = optim_defer_grad_sumsq(m);
    return t;
}

/* The queued statistics from the values read: the sum of squares; *finite
 * gets the check (true without fp16). */
static double gradient_checks_of(grad_tickets t, const double *values, bool *finite) {
    *finite = t.finite < 0 || values[t.finite] != 0.0;
    return values[t.norm];
}

/* The gradients' statistics in one blocking read of their own: under MPI,
 * once the gradients are summed. */
static double gradient_checks(bert_model *m, const loss_scaler *scaler, double scale,
                              bool *finite) {
    const grad_tickets t = queue_gradient_checks(m, scaler, scale);
    double values[2];
    m->be->reduce_fetch(m->be, values);
    return gradient_checks_of(t, values, finite);
}

/* 1-bit Adam past its warm-up: the gradients were not summed, so the ranks
 * agree on a norm from their own, sqrt(W x the sum of their squared norms)
 * (the global norm when their gradients are equal, more as they differ),
 * and on whether all are finite. Returns the agreed sum of squares. */
static double agree_local_norm(double sumsq, bool *finite) {
    double v[2] = {sumsq, *finite ? 0.0 : 1.0};
    dist_allreduce_sum_f64(v, 2);
    *finite = v[1] == 0.0;
    return v[0] * dist_world();
}

/* fp16: the loss scaler's decision on the gradients' finiteness; false: the
 * step is skipped. */
static bool loss_scale_step(loss_scaler *scaler, bool finite, double scale, step_result *r) {
    const loss_scale_verdict v = loss_scaler_update(scaler, !finite);
    if (v == SCALE_STEP_OK) return true;
    r->skipped = r->overflow = true;
    r->at_min_scale = v == SCALE_STEP_AT_MIN;
    r->next_loss_scale = scaler->scale;
    r->grad_norm = INFINITY;
    snprintf(r->skip_why, sizeof r->skip_why, "fp16 gradient overflow at loss scale %.10g", scale);
    return false;
}

/* One rank whose device replays graphs: queue the step's gate (step_gate:
 * the loss scaler's and the guard's skip and the clipping, decided on the
 * device as the host decides them below) and the update it governs, so
 * that the whole step is one region with one read. Returns the gate's
 * index among the queued values. */
static int queue_gated_update(bert_model *m, bt_optimizer *opt, const bt_config *cfg,
                              const step_batch *in, const bert_stats *st, grad_tickets checks,
                              const step_counts *c, const bt_guard *guard, double lr,
                              const unsigned char *layer_skip) {
    int mlm[in->n_micro > 0 ? in->n_micro : 1], nsp[in->n_micro > 0 ? in->n_micro : 1];
    bt_step_gate rule = {.finite = checks.finite, .norm_sumsq = checks.norm,
                         .mlm_loss = mlm, .masked = c->masked, .nsp_loss = nsp, .nsp = c->nsp,
                         .guard = guard != NULL, .loss_limit = guard ? guard_loss_limit(guard) : 0,
                         .max_norm = cfg->gradient_clipping};
    for (int k = 0; k < in->n_micro; k++) { /* as fetch_sums adds them */
        if (st[k].ticket.mlm_loss >= 0) mlm[rule.n_mlm++] = st[k].ticket.mlm_loss;
        if (st[k].ticket.nsp_loss >= 0) nsp[rule.n_nsp++] = st[k].ticket.nsp_loss;
    }
    const int gate = m->be->step_gate(m->be, &rule);
    optim_step_gated(opt, m, (float)lr, layer_skip, gate);
    return gate;
}

/* What the device decided at a step's gate (step_gate's two values). */
typedef struct {
    bool applied;
    float scale; /* the gradients' scale (clipping) */
} device_gate;

/* A gated step's end: the host's decision (r.skipped) and, for an applied
 * step, its clipping factor `clip` must be the device's, which the update
 * has obeyed already; a skipped step is taken back from the optimizer's
 * count. */
static step_result gate_verdict(step_result r, device_gate dev, float clip, bt_optimizer *opt,
                                const unsigned char *layer_skip) {
    if (r.skipped == dev.applied) {
        fprintf(stderr,
                "bertrain: internal error: the device %s the update and the host %s it (step "
                "gate)\n",
                dev.applied ? "applied" : "skipped", r.skipped ? "skips" : "applies");
        exit(1);
    }
    if (!r.skipped && memcmp(&clip, &dev.scale, sizeof clip) != 0) {
        fprintf(stderr,
                "bertrain: internal error: the device clipped the gradients by %.9g and the "
                "host by %.9g (step gate)\n",
                (double)dev.scale, (double)clip);
        exit(1);
    }
    if (r.skipped) optim_unstep(opt, layer_skip);
    return r;
}

step_result train_step(bert_model *m, bt_optimizer *opt, const bt_config *cfg, long step,
                       const step_batch *in, double lr, grad_sync *gs, const bt_guard *guard,
                       loss_scaler *scaler, const train_observer *obs) {
    step_result r = {.lr = lr};
    if (obs && obs->step_begin)
        obs->step_begin(obs->ctx, m, step + 1, in->run_position,
                        in->run_position + (uint64_t)in->global);
    const double scale = scaler ? scaler->scale : 1.0; /* fp16: the loss is scaled by this */
    r.loss_scale = scale;
    const double t0 = now_s();
    const step_counts c = global_counts(m, in);
    bert_pass pass = {.train = true,
                      .seed = cfg->seed,
                      .step = (uint64_t)step,
                      .mlm_grad_scale = c.masked > 0 ? (float)(scale / c.masked) : 0.0f,
                      .nsp_grad_scale = c.nsp > 0 ? (float)(scale / c.nsp) : 0.0f};
    unsigned char skip[BERT_MAX_LAYERS];
    if (m->cfg.layerdrop > 0.0f) {
        r.layers_dropped = draw_layerdrop(m, cfg, step, skip, obs);
        pass.layer_skip = skip;
    }
    /* the attention-logit penalty averages over the scores of the layers that run */
    const double n_scores = c.scores * (m->cfg.num_hidden_layers - r.layers_dropped);
    if (m->cfg.attention_logit_penalty > 0.0f && n_scores > 0)
        pass.attn_penalty_grad_scale = (float)(scale * m->cfg.attention_logit_penalty / n_scores);
    double sums[N_SUMS] = {0};
    bert_stats *st = malloc((size_t)in->n_micro * sizeof *st);
    if (!st) {
        fprintf(stderr, "bertrain: out of host memory\n");
        exit(1);
    }
    /* 1-bit Adam past its warm-up exchanges momentum, not gradients */
    const bool frozen = optim_frozen(opt), exchange = frozen && gs;
    /* the forward and backward passes are one region, with the gradient
     * buckets' copies to the host under MPI (their collectives start once
     * the region is launched); on one rank the gradients' checks join it,
     * and where the device replays graphs the update too, behind the step's
     * gate, up to the step's read */
    const bool gated = !gs && m->replays_graphs && optim_gateable(opt);
    m->be->graph_begin(m->be, BT_GRAPH_STEP);
    bert_zero_grads(m);
    forward_backward(m, in, &pass, frozen ? NULL : gs, st, &r);
    /* one rank: the gradients are final, and their checks come with the sums */
    const grad_tickets early = gs ? (grad_tickets){-1, -1} : queue_gradient_checks(m, scaler, scale);
    const int gate = gated ? queue_gated_update(m, opt, cfg, in, st, early, &c, guard, lr,
                                                pass.layer_skip)
                           : -1;
    m->be->graph_end(m->be);
    grad_sync_start(frozen ? NULL : gs); /* every bucket's collective before the sums' */
    /* blocking read 1 (one rank: the only) */
    double *values = fetch_sums(m, in, st, sums, gs ? 0 : gated ? 4 : 2);
    free(st);
    const double t1 = now_s();
    dist_allreduce_sum_f64(sums, N_SUMS); /* returns when the slowest rank has computed */
    const double t2 = now_s();
    r.comm_s = grad_sync_finish(frozen ? NULL : gs, &r.wire_bytes);
    r.compute_s = t1 - t0;
    r.idle_s = t2 - t1;
    if (obs && obs->loss_summed) obs->loss_summed(obs->ctx, step + 1, &sums[SUM_MLM_LOSS]);
    fill_result(&r, m, &c, sums, n_scores);
    bool finite;
    double grad_sumsq = gs ? gradient_checks(m, scaler, scale, &finite) /* read 2 */
                           : gradient_checks_of(early, values, &finite);
    const device_gate dev = {gate >= 0 && values[gate] != 0.0,
                             gate >= 0 ? (float)values[gate + 1] : 1.0f};
    free(values);
    if (exchange) grad_sumsq = agree_local_norm(grad_sumsq, &finite);
    if (scaler && !loss_scale_step(scaler, finite, scale, &r))
        return gate >= 0 ? gate_verdict(r, dev, 1.0f, opt, pass.layer_skip) : r;
    r.next_loss_scale = scaler ? scaler->scale : 1.0;
    r.grad_norm = sqrt(grad_sumsq);
    if (guard && guard_check(guard, r.loss, r.grad_norm, r.skip_why, sizeof r.skip_why))
        r.skipped = true; /* no update: parameters and optimizer moments untouched */
    const float clip = optim_clip_scale(r.grad_norm, cfg->gradient_clipping);
    if (gate >= 0) return gate_verdict(r, dev, clip, opt, pass.layer_skip);
    if (r.skipped) return r;
    bt_host_momentum given;
    if (exchange) r.comm_s += grad_sync_momentum(gs, opt, clip, &r.wire_bytes, &given);
    r.onebit = exchange;
    m->be->graph_begin(m->be, BT_GRAPH_UPDATE);
    optim_step(opt, m, (float)lr, pass.layer_skip, exchange ? 1.0f : clip, exchange ? &given : NULL);
    m->be->graph_end(m->be);
    return r;
}
