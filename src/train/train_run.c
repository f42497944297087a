/* The training run: set up (run_setup.c), then the step loop, which reads as
 * the algorithm: the next global batch, the step, what to do when it was
 * skipped, and at their intervals the drift check, the printed metrics, the
 * re-balancing of auto shares, the evaluation and the checkpoint. */
#include "train_internal.h"

#include "mpi/dist.h"
#include "stop.h"
#include "util/clock.h"
#include "config/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Set when every rank knows that the run stops (it does not abort the job). */
static bool g_every_rank_stops;

/* What a step's outcome asks of the loop. */
typedef enum {
    STEP_ON,          /* go on */
    STEP_ROLLED_BACK, /* continue from the step the rollback went back to */
    STEP_STOP_3,      /* stop with exit status 3 (the guard or the loss scaler gave up) */
    STEP_STOP_2,      /* stop with exit status 2 (the rollback could not load) */
    STEP_OOM          /* out of host memory */
} step_verdict;

/* Fill this rank's micro-batches of the step whose first sample is at run
 * position g0 under plan p (step: 1-based, for the observer); returns their
 * count. */
static int fill_step(run_state *s, const batch_plan *p, uint64_t g0, long step) {
    int sizes[4096];
    int n = plan_micro_batches(p, dist_rank(), sizes);
    long pos = p->offset[dist_rank()];
    for (int k = 0; k < n; k++) {
        s->first[k] = (uint32_t)pos;
        dataset_fill(s->ds, g0 + (uint64_t)pos, sizes[k], false, &s->mb[k]);
        if (s->obs && s->obs->micro_batch)
            s->obs->micro_batch(s->obs->ctx, dist_rank(), step, g0 + (uint64_t)pos,
                                g0 + (uint64_t)pos + (uint64_t)sizes[k]);
        pos += sizes[k];
    }
    return n;
}

/* The next global batch: past the ranges never to train on, shrunk by the
 * batch-size rampup; this rank's micro-batches filled. Advances the cursor. */
static step_batch next_batch(run_state *s, const bt_config *cfg, long step) {
    const double t0 = now_s();
    s->cursor = skips_next(&s->skips, s->cursor); /* batches rejected before a rollback */
    const uint64_t g0 = s->cursor;
    batch_plan p = s->plan;
    if (cfg->rampup_start > 0) plan_set_accum(&p, rampup_accum(cfg, (long long)g0));
    s->cursor += (uint64_t)p.global;
    step_batch in = {s->mb, s->first, fill_step(s, &p, g0, step + 1), g0, p.global};
    const double t_data = now_s() - t0;
    s->data_time += t_data;
    s->win.data_s += t_data;
    return in;
}

/* The guard refused a step (every rank alike: it sees global values): log
 * it; after too many in its window, roll back (*step set to continue after
 * the step rolled back to) or stop. */
static step_verdict guard_refused(run_state *s, const bt_config *cfg, const step_result *r,
                                  const step_batch *in, long *step) {
    const long at = *step + 1;
    const bool too_many = guard_reject(&s->guard, at);
    if (!skips_add(&s->rejected, in->run_position, in->run_position + (uint64_t)in->global))
        return STEP_OOM;
    if (dist_rank() == 0)
        metrics_guard_skip(&s->metrics, at, r->skip_why, in->run_position,
                           in->run_position + (uint64_t)in->global);
    if (!too_many) return STEP_ON;
    if (s->rollbacks < cfg->guard_max_rollbacks) {
        s->rollbacks++;
        if (dist_rank() == 0)
            printf("bertrain: step %ld: %d of the last %d steps were skipped (guard.max_bad_steps, "
                   "guard.window): rolling back (%d of guard.max_rollbacks %d)\n", at,
                   cfg->guard_max_bad, cfg->guard_window, s->rollbacks, cfg->guard_max_rollbacks);
        const long back = run_rollback(s, cfg, &s->ri, s->plan.micro, &s->skips, &s->rejected,
                                       &s->cursor, &s->scaler);
        if (back < 0) return STEP_STOP_2;
        guard_forget_bad(&s->guard);
        if (dist_rank() == 0) {
            char ranges[1024];
            skips_format(&s->skips, s->cursor, ranges, sizeof ranges);
            uint64_t(*pairs)[2] = calloc((size_t)s->skips.n + 1, sizeof *pairs);
            if (!pairs) return STEP_OOM;
            for (int i = 0; i < s->skips.n; i++) {
                pairs[i][0] = s->skips.r[i].from;
                pairs[i][1] = s->skips.r[i].to;
            }
            metrics_rollback(&s->metrics, at, back, s->cursor, ranges,
                             (const uint64_t(*)[2])pairs, s->skips.n);
            free(pairs);
        }
        *step = back - 1; /* the loop's step++ continues at step back + 1 */
        return STEP_ROLLED_BACK;
    }
    if (dist_rank() == 0) {
        char where[1400];
        run_where_to_resume(s, cfg, &s->ri, where, sizeof where);
        fprintf(stderr, "bertrain: step %ld: %d of the last %d steps were skipped "
                        "(guard.max_bad_steps, guard.window)%s: stopping; %s with a lower "
                        "learning rate\n", at, cfg->guard_max_bad, cfg->guard_window,
                s->rollbacks ? " after guard.max_rollbacks rollbacks" : "", where);
    }
    return STEP_STOP_3;
}

/* What the step's result asks of the loop: an fp16 overflow the loss scaler
 * skipped (not a bad step for the guard), a step the guard refused, or an
 * accepted step the guard remembers. */
static step_verdict handle_result(run_state *s, const bt_config *cfg, const step_result *r,
                                  const step_batch *in, long *step) {
    if (r->overflow) {
        if (dist_rank() == 0)
            metrics_overflow(&s->metrics, r, *step + 1, s->scaler.skipped, cfg->output_dir);
        return r->at_min_scale ? STEP_STOP_3 : STEP_ON;
    }
    if (r->skipped) return guard_refused(s, cfg, r, in, step);
    guard_accept(&s->guard, r->loss);
    return STEP_ON;
}

/* Compare parameter checksums across ranks; on drift beyond the tolerance, log
 * it and copy rank 0's parameters and moments to every rank. */
static void check_drift(run_state *s, const bt_config *cfg, long step) {
    const int world = dist_world();
    bt_backend *be = s->be;
    double mine[2] = {be->sum(be, bert_params_at(s->m, 0), bert_n_params(s->m)),
                      be->sumsq(be, bert_params_at(s->m, 0), bert_n_params(s->m))};
    double *all = malloc((size_t)world * 2 * sizeof *all);
    if (!all) dist_abort(1);
    dist_allgather_f64(mine, 2, all);
    double worst = 0;
    int worst_rank = 0;
    for (int r = 1; r < world; r++) {
        double d = fabs(all[2 * r + 1] - all[1]) / (fabs(all[1]) > 0 ? fabs(all[1]) : 1.0);
        d = fmax(d, fabs(all[2 * r] - all[0]) / sqrt(all[1] > 0 ? all[1] : 1.0));
        if (d > worst) {
            worst = d;
            worst_rank = r;
        }
    }
    free(all);
    if (worst <= cfg->drift_tolerance) return;
    if (dist_rank() == 0) metrics_drift(step, worst_rank, worst, cfg->drift_tolerance);
    broadcast_weights(s->m, s->opt);
}

/* The printed step: every rank gives its compute, communication and idle
 * seconds; rank 0 prints the line and writes the record. false when out of
 * host memory. */
static bool log_step(run_state *s, const bt_config *cfg, const step_result *r,
                     const step_batch *in, long step) {
    const int world = dist_world();
    const double t = now_s();
    double mine[3] = {s->win.compute_s, s->win.comm_s, s->win.idle_s};
    double *all = malloc((size_t)world * 3 * sizeof *all);
    if (!all) return false;
    dist_allgather_f64(mine, 3, all);
    if (dist_rank() == 0) {
        const metrics_step_info info = {
            .step = step + 1,
            .train_steps = cfg->train_steps,
            .eta_s = (t - s->t_start) / (step + 1 - s->step0) * (cfg->train_steps - step - 1),
            .global_batch = in->global,
            .samples = (long long)(in->run_position + (uint64_t)in->global),
            .fp16 = cfg->fp16,
            .rampup = cfg->rampup_start > 0,
            .nsp = s->m->cfg.nsp,
            .z_loss = s->m->cfg.z_loss > 0,
            .attn_penalty = s->m->cfg.attention_logit_penalty > 0,
            .world = world,
            .grad_bf16 = cfg->grad_bf16,
            .per_rank = all,
            .shares = s->plan.share};
        metrics_step(&s->metrics, r, &s->win, t, &info);
    }
    free(all);
    metrics_window_reset(&s->win, t);
    return true;
}

/* Auto shares: re-plan from each rank's compute speed over the last step.
 * false when out of host memory. */
static bool rebalance(run_state *s, const step_result *r, long step) {
    const int world = dist_world();
    double sp = r->compute_s > 0 ? s->plan.share[dist_rank()] / r->compute_s : 0;
    double *all = malloc((size_t)world * sizeof *all);
    if (!all) return false;
    dist_allgather_f64(&sp, 1, all);
    plan_proportional(&s->plan, all);
    dist_broadcast(s->plan.share, sizeof s->plan.share);
    dist_broadcast(s->plan.offset, sizeof s->plan.offset);
    free(all);
    if (!run_alloc_micro(s)) return false;
    if (dist_rank() == 0) {
        char shares[512];
        plan_format(&s->plan, shares, sizeof shares);
        metrics_rebalance(step, shares);
    }
    return true;
}

/* A checkpoint at the step boundary after `step` (1-based): every rank
 * arrives; rank 0 takes the host copy now and writes it in the background
 * (after collecting the write before it). */
static void checkpoint(run_state *s, const bt_config *cfg, const step_batch *in, long step) {
    dist_barrier();
    size_t onebit_len = 0; /* 1-bit Adam's errors, every rank's, gathered to rank 0 */
    void *onebit_errors = onebit_active(grad_sync_onebit(s->gs))
                              ? onebit_gather(grad_sync_onebit(s->gs), &onebit_len) : NULL;
    if (dist_rank() != 0 || s->lock_lost) {
        free(onebit_errors);
        return;
    }
    ckpt_writer_set_onebit(s->writer, onebit_errors, onebit_len);
    char err[1400];
    run_collect_checkpoint(s, true);
    if (!run_dir_lock_check(cfg->output_dir, &s->lock, err, sizeof err)) {
        fprintf(stderr, "bertrain: step %ld: %s; stopping without writing more checkpoints\n",
                step, err);
        s->lock_lost = true;
        stop_request(STOP_FAILED_WRITE);
        return;
    }
    cJSON *eval = s->last_eval_step == step ? eval_result_json(&s->last_eval) : NULL;
    const ckpt_progress pr = {step, (long long)(in->run_position + (uint64_t)in->global),
                              in->global, (unsigned long long)dataset_num_samples(s->ds),
                              dataset_lowercase(s->ds), cfg->fp16 ? &s->scaler : NULL, &s->skips,
                              eval};
    const bool ok = ckpt_writer_start(s->writer, s->m, s->opt, &pr, err, sizeof err);
    cJSON_Delete(eval);
    if (!ok) {
        fprintf(stderr, "bertrain: checkpoint: %s\n", err);
        dist_abort(1);
    }
}

/* After step `step` (0-based) was accepted: the checks and outputs due at
 * this step boundary. false when out of host memory. */
static bool after_step(run_state *s, const bt_config *cfg, const step_result *r,
                       const step_batch *in, long step) {
    const long done = step + 1;
    const int world = dist_world();
    if (dist_rank() == 0) { /* what failed to reach the disk since the last boundary */
        run_collect_checkpoint(s, false);
        if (metrics_check(&s->metrics, done, cfg->metrics_on_error))
            stop_request(STOP_FAILED_WRITE);
    }
    s->stop = stop_agree(cfg->max_runtime, now_s() - s->t_run); /* every rank: the same step */
    const bool last = done == cfg->train_steps, final = last || s->stop;
    if (world > 1 && cfg->sync_check_interval > 0 &&
        (done % cfg->sync_check_interval == 0 || final))
        check_drift(s, cfg, done);
    if (!r->skipped && (step == s->step0 || done % cfg->steps_per_print == 0 || final) &&
        !log_step(s, cfg, r, in, step))
        return false;
    if (cfg->shares_auto && world > 1 && cfg->rebalance_interval > 0 &&
        done % cfg->rebalance_interval == 0 && !final && !rebalance(s, r, done))
        return false;
    if ((s->valid || cfg->eval_fill_mask_json[0]) &&
        (last || (cfg->eval_interval > 0 && done % cfg->eval_interval == 0))) {
        const double te = now_s();
        run_evaluate(s, cfg, done);
        s->win.t0 += now_s() - te; /* evaluation is not training throughput */
    }
    if (final || (cfg->ckpt_interval > 0 && done % cfg->ckpt_interval == 0)) {
        const double tc = now_s();
        checkpoint(s, cfg, in, done);
        s->win.t0 += now_s() - tc;
    }
    return true;
}

/* The step loop; returns the exit status. */
static int run_loop(run_state *s, const bt_config *cfg) {
    s->t_start = now_s();
    metrics_window_reset(&s->win, s->t_start);
    stop_install();
    run_profile_init(s, cfg);
    for (long step = s->step0; step < cfg->train_steps && !s->stop; step++) {
        const step_batch in = next_batch(s, cfg, step);
        s->reached = step + 1;
        const double lr = sched_lr(cfg, sched_position(cfg, s->opt->step, (long long)in.run_position));
        run_profile_begin(s, step);
        const step_result r = train_step(s->m, s->opt, cfg, step, &in, lr, s->gs, &s->guard,
                                         cfg->fp16 ? &s->scaler : NULL, s->obs);
        run_profile_end(s, cfg, step);
        metrics_window_add(&s->win, &r);
        switch (handle_result(s, cfg, &r, &in, &step)) {
        case STEP_ON: break;
        case STEP_ROLLED_BACK: continue;
        case STEP_STOP_3: return 3;
        case STEP_STOP_2: return 2;
        case STEP_OOM: return -1;
        }
        if (s->obs && s->obs->step_done) s->obs->step_done(s->obs->ctx, s->m, dist_rank(), step + 1);
        if (!after_step(s, cfg, &r, &in, step)) return -1;
    }
    return 0;
}

/* Rank 0 at the end of a run that got through its loop: the last checkpoint
 * and the last metrics written, what stopped the run, and the summary line.
 * Returns the exit status: 1 when a write failed at the end or stopped the
 * run. */
static int finish_rank0(run_state *s, const bt_config *cfg) {
    int rc = s->stop == STOP_FAILED_WRITE;
    if (metrics_check(&s->metrics, s->reached, cfg->metrics_on_error) ||
        (!metrics_close(&s->metrics) && metrics_check(&s->metrics, s->reached,
                                                      cfg->metrics_on_error)))
        rc = 1;
    if (!run_collect_checkpoint(s, true) || s->lock_lost) {
        char where[1400];
        run_where_to_resume(s, cfg, &s->ri, where, sizeof where);
        fprintf(stderr, "bertrain: the run ends without a checkpoint of step %ld; %s\n",
                s->reached, where);
        rc = 1;
    } else if (s->stop) {
        printf("bertrain: %s: stopped after step %ld with checkpoint %s/ckpt-%08ld; %sthe same "
               "train command with --resume auto continues from it\n",
               stop_reason_name(s->stop), s->reached, cfg->output_dir, s->reached,
               s->stop == STOP_FAILED_WRITE ? "when the write works again, " : "");
    }
    const double total = now_s() - s->t_start;
    char lost[96] = "";
    if (s->metrics.lost)
        snprintf(lost, sizeof lost, " (%ld record%s could not be written)", s->metrics.lost,
                 s->metrics.lost == 1 ? "" : "s");
    printf("bertrain: %ld steps in %.1f s (data %.2f%% of the time); metrics in "
           "%s/metrics.jsonl%s\n", s->reached - s->step0, total,
           100.0 * s->data_time / (total > 0 ? total : 1), cfg->output_dir, lost);
    return rc;
}

/* The end of a run that got through its loop (every rank): rank 0's
 * finish_rank0, and the final parameters when asked. Returns the exit
 * status. */
static int finish(run_state *s, const bt_config *cfg, float **final_params, size_t *n_params) {
    const int rc = dist_rank() == 0 ? finish_rank0(s, cfg) : 0;
    s->every_rank_stops = true; /* every rank has left the loop at the same step */
    if (final_params) {
        *final_params = malloc(bert_n_params(s->m) * sizeof(float));
        *n_params = bert_n_params(s->m);
        if (*final_params)
            s->be->download(s->be, *final_params, bert_params_at(s->m, 0), bert_n_params(s->m) * 4);
    }
    return rc;
}

int train_run(const bt_config *cfg, const train_observer *obs, float **final_params,
              size_t *n_params) {
    run_state *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "bertrain: rank %d: out of host memory\n", dist_rank());
        return 1;
    }
    s->obs = obs;
    s->t_run = now_s();
    int rc = run_setup(s, cfg);
    if (rc == 0) rc = run_loop(s, cfg);
    if (rc < 0) {
        fprintf(stderr, "bertrain: rank %d: out of host memory\n", dist_rank());
        rc = 1;
    }
    if (rc == 0) rc = finish(s, cfg, final_params, n_params);
    g_every_rank_stops = s->every_rank_stops;
    run_free(s);
    free(s);
    return rc;
}

int train_main(const bt_config *cfg, const train_observer *obs) {
    int rc = train_run(cfg, obs, NULL, NULL);
    if (rc != 0 && dist_world() > 1 && !g_every_rank_stops) { /* stop the others, not leave
                                                                  * them waiting */
        fprintf(stderr, "bertrain: rank %d (%s) failed; stopping the job\n", dist_rank(),
                dist_hostname());
        dist_abort(rc);
    }
    return rc;
}
