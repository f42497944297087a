/* The training run: data, model, optimizer, the step loop, console and JSONL
 * metrics. */
#include "train.h"

#include "mpi/dist.h"
#include "store/ckpt.h"
#include "eval.h"
#include "backends/registry.h"
#include "util/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Test hook: is 1-based step listed in $name ("3,5,6")? */
static bool test_step_listed(const char *name, long step) {
    const char *env = getenv(name);
    if (!env) return false;
    for (const char *p = env; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) return false;
        if (v == step) return true;
        p = *end == ',' ? end + 1 : end;
    }
    return false;
}

static bool poison_next_step; /* test hook: BERTRAIN_TEST_NAN_SAMPLES (train_run.c) */

void train_test_poison_next_step(void) { poison_next_step = true; }

step_result train_step(bert_model *m, bt_optimizer *opt, const bt_config *cfg, long step,
                       bt_batch_buf *mb, const uint32_t *first_sample, int n_micro, double lr,
                       grad_sync *gs, const bt_guard *guard, loss_scaler *scaler) {
    step_result r = {0};
    const double scale = scaler ? scaler->scale : 1.0; /* fp16: the loss is scaled by this */
    double t0 = now_s();
    /* global counts before any backward: [masked tokens, NSP samples, attention scores
     * per layer (samples x heads x T x T)] */
    double counts[3] = {0, 0, 0};
    for (int k = 0; k < n_micro; k++) {
        counts[0] += mb[k].n_masked;
        counts[1] += m->cfg.nsp ? mb[k].B : 0;
        counts[2] += (double)mb[k].B * m->cfg.num_attention_heads * mb[k].T * mb[k].T;
    }
    dist_allreduce_sum_f64(counts, 3);
    bert_pass pass = {.train = true,
                      .seed = cfg->seed,
                      .step = (uint64_t)step,
                      .mlm_grad_scale = counts[0] > 0 ? (float)(scale / counts[0]) : 0.0f,
                      .nsp_grad_scale = counts[1] > 0 ? (float)(scale / counts[1]) : 0.0f};
    unsigned char skip_mask[BERT_MAX_LAYERS], *skip = NULL; /* LayerDrop: the same layers on
                                                             * every rank (seed, step) */
    if (m->cfg.layerdrop > 0.0f) {
        skip = skip_mask;
        r.layers_dropped = bert_layerdrop_draw(&m->cfg, cfg->seed, (uint64_t)step, skip);
        pass.layer_skip = skip;
        if (getenv("BERTRAIN_TEST_LOG_LAYERDROP")) { /* test hook: what this rank drops */
            char line[4096]; /* one write, so ranks' lines do not interleave */
            int n = snprintf(line, sizeof line, "layerdrop rank %d step %ld:", dist_rank(), step + 1);
            for (int l = 0; l < m->cfg.num_hidden_layers && n < (int)sizeof line - 16; l++)
                if (skip[l]) n += snprintf(line + n, sizeof line - (size_t)n, " %d", l);
            fprintf(stderr, "%s\n", line);
        }
    }
    /* the attention-logit penalty averages over the scores of the layers that run */
    const double n_scores = counts[2] * (m->cfg.num_hidden_layers - r.layers_dropped);
    if (m->cfg.attention_logit_penalty > 0.0f && n_scores > 0)
        pass.attn_penalty_grad_scale = (float)(scale * m->cfg.attention_logit_penalty / n_scores);
    bert_zero_grads(m);
    /* mlm loss, mlm correct, nsp loss, nsp correct, samples, tokens, sum log_z^2,
     * sum of squared attention scores */
    double sums[8] = {0};
    for (int k = 0; k < n_micro; k++) {
        bert_batch b = {mb[k].B, mb[k].T, mb[k].input_ids, mb[k].token_type_ids,
                        mb[k].attention_mask, mb[k].n_masked, mb[k].mlm_positions,
                        mb[k].mlm_labels, m->cfg.nsp ? mb[k].nsp_labels : NULL, first_sample[k]};
        bert_stats st;
        if (k == n_micro - 1 && gs) { /* the step's gradients become final: reduce early */
            pass.grads_ready = grad_sync_ready;
            pass.grads_ready_ctx = gs;
        }
        bert_forward(m, &b, &pass, &st);
        bert_backward(m, &b, &pass);
        sums[0] += st.mlm_loss_sum;
        sums[1] += st.mlm_correct;
        sums[2] += st.nsp_loss_sum;
        sums[3] += st.nsp_correct;
        sums[4] += mb[k].B;
        for (size_t i = 0; i < (size_t)mb[k].B * mb[k].T; i++) sums[5] += mb[k].attention_mask[i];
        sums[6] += st.mlm_log_z_sq;
        sums[7] += st.attn_score_sq;
    }
    m->be->sync(m->be);
    double t1 = now_s();
    dist_allreduce_sum_f64(sums, 8); /* returns when the slowest rank has computed */
    double t2 = now_s();
    double comm = grad_sync_finish(gs);
    /* test hooks, on every rank alike: a NaN in the summed gradients (as a NaN
     * batch on any rank gives after the allreduce), or a 1000x loss */
    if (test_step_listed("BERTRAIN_TEST_NAN_STEPS", step + 1) || poison_next_step)
        m->be->fill(m->be, (bt_ptr){m->grads, 4 * 7}, NAN, 1);
    poison_next_step = false;
    if (test_step_listed("BERTRAIN_TEST_SPIKE_STEPS", step + 1)) sums[0] *= 1000.0;
    r.compute_s = t1 - t0;
    r.idle_s = t2 - t1;
    r.comm_s = comm;
    r.n_masked = (long)counts[0];
    r.n_nsp = (long)counts[1];
    r.mlm_loss = counts[0] > 0 ? sums[0] / counts[0] : 0.0;
    r.mlm_acc = counts[0] > 0 ? sums[1] / counts[0] : 0.0;
    r.nsp_loss = counts[1] > 0 ? sums[2] / counts[1] : 0.0;
    r.nsp_acc = counts[1] > 0 ? sums[3] / counts[1] : 0.0;
    r.loss = r.mlm_loss + r.nsp_loss;
    r.z_loss = counts[0] > 0 ? m->cfg.z_loss * sums[6] / counts[0] : 0.0;
    r.attn_penalty = n_scores > 0 ? m->cfg.attention_logit_penalty * sums[7] / n_scores : 0.0;
    r.n_samples = (long)sums[4];
    r.n_tokens = (long)sums[5];
    r.lr = lr;
    r.loss_scale = scale;
    if (scaler) { /* fp16: an overflow anywhere (the same on every rank after the allreduce) */
        if (test_step_listed("BERTRAIN_TEST_OVERFLOW_STEPS", step + 1))
            m->be->fill(m->be, (bt_ptr){m->grads, 4 * 11}, INFINITY, 1);
        bool overflow = !m->be->all_finite(m->be, (bt_ptr){m->grads, 0}, m->n_params);
        loss_scale_verdict v = loss_scaler_update(scaler, overflow);
        if (v != SCALE_STEP_OK) {
            r.skipped = r.overflow = true;
            r.at_min_scale = v == SCALE_STEP_AT_MIN;
            r.next_loss_scale = scaler->scale;
            r.grad_norm = INFINITY;
            snprintf(r.skip_why, sizeof r.skip_why, "fp16 gradient overflow at loss scale %.10g",
                     scale);
            return r;
        }
        if (scale != 1.0) /* unscale (exact for the dynamic scaler's powers of 2) */
            m->be->scale(m->be, (bt_ptr){m->grads, 0}, (float)(1.0 / scale), m->n_params);
    }
    r.next_loss_scale = scaler ? scaler->scale : 1.0;
    r.grad_norm = optim_grad_norm(m);
    if (guard && guard_check(guard, r.loss, r.grad_norm, r.skip_why, sizeof r.skip_why)) {
        r.skipped = true; /* no update: parameters and optimizer moments untouched */
        return r;
    }
    optim_clip(m, r.grad_norm, cfg->gradient_clipping);
    optim_step(opt, m, (float)lr, skip);
    return r;
}
