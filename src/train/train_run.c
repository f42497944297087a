/* The training run: data, device, model, batch plan, the step loop with
 * evaluation and checkpoints, console and JSONL metrics, and the checks that
 * keep ranks consistent (initial broadcast, drift checks, re-balancing). */
#include "mpi/dist.h"
#include "store/ckpt.h"
#include "eval.h"
#include "util/paths.h"
#include "plan.h"
#include "rank_agree.h"
#include "resume.h"
#include "store/run_dir.h"
#include "train.h"
#include "train_internal.h"
#include "util/clock.h"
#include "device.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Set when every rank knows that the run stops (it does not abort the job). */
static bool g_every_rank_stops;

static void run_free(run_state *s) {
    stop_uninstall();
    ckpt_writer_free(s->writer); /* waits for a write in flight */
    if (s->metrics) fclose(s->metrics);
    for (int k = 0; s->mb && k < s->n_mb_alloc; k++) batch_buf_free(&s->mb[k]);
    free(s->mb);
    free(s->first);
    grad_sync_free(s->gs);
    optim_free(s->opt, s->m);
    bert_free(s->m);
    if (s->be) s->be->destroy(s->be);
    dataset_close(s->ds);
    dataset_close(s->valid);
    run_fill_mask_free(s);
    vocab_free(&s->vocab);
    run_dir_unlock(s->lock_fd); /* last: the checkpoint writer is done */
}

/* Host buffers for this rank's micro-batches under plan p. */
static bool alloc_micro(run_state *s, const batch_plan *p, int T, int max_masked) {
    int n = (int)((p->share[dist_rank()] + p->micro - 1) / p->micro);
    if (n <= s->n_mb_alloc) return true;
    for (int k = 0; s->mb && k < s->n_mb_alloc; k++) batch_buf_free(&s->mb[k]);
    free(s->mb);
    free(s->first);
    s->mb = calloc((size_t)n, sizeof *s->mb);
    s->first = calloc((size_t)n, sizeof *s->first);
    s->n_mb_alloc = 0;
    if (!s->mb || !s->first) return false;
    for (int k = 0; k < n; k++) {
        if (!batch_buf_alloc(&s->mb[k], p->micro, T, max_masked)) return false;
        s->n_mb_alloc++;
    }
    return true;
}

/* Fill this rank's micro-batches of the step whose first sample is at run
 * position g0 (step: 1-based, for the sample log test hook); returns their count. */
static int fill_step(run_state *s, const batch_plan *p, uint64_t g0, long step) {
    int sizes[4096];
    int n = plan_micro_batches(p, dist_rank(), sizes);
    long pos = p->offset[dist_rank()];
    const bool log = getenv("BERTRAIN_TEST_LOG_SAMPLES") != NULL; /* test hook */
    for (int k = 0; k < n; k++) {
        s->first[k] = (uint32_t)pos;
        dataset_fill(s->ds, g0 + (uint64_t)pos, sizes[k], false, &s->mb[k]);
        if (log)
            fprintf(stderr, "samples rank %d step %ld: %llu %llu\n", dist_rank(), step,
                    (unsigned long long)(g0 + (uint64_t)pos),
                    (unsigned long long)(g0 + (uint64_t)pos + (uint64_t)sizes[k]));
        pos += sizes[k];
    }
    return n;
}

/* Samples/s of this rank's device on real micro-batches (forward + backward,
 * no update), for the auto plan: one warm-up, then `reps` timed. */
static double measure_speed(run_state *s, const bt_config *cfg, int reps) {
    bert_pass pass = {.train = true, .seed = cfg->seed, .mlm_grad_scale = 1e-3f,
                      .nsp_grad_scale = 1e-3f};
    bt_batch_buf *b = &s->mb[0];
    dataset_fill(s->ds, (uint64_t)dist_rank() * (uint64_t)b->B, b->B, false, b);
    bert_batch bb = {b->B, b->T, b->input_ids, b->token_type_ids, b->attention_mask, b->n_masked,
                     b->mlm_positions, b->mlm_labels, s->m->cfg.nsp ? b->nsp_labels : NULL, 0};
    bert_stats st;
    double t0 = 0;
    for (int i = 0; i <= reps; i++) {
        if (i == 1) {
            s->be->sync(s->be);
            t0 = now_s();
        }
        bert_forward(s->m, &bb, &pass, &st);
        bert_backward(s->m, &bb, &pass);
    }
    s->be->sync(s->be);
    bert_zero_grads(s->m);
    return reps * b->B / (now_s() - t0);
}

/* Rank 0 prints one row per rank: host, backend, device, memory, share, speed. */
static void print_rank_table(run_state *s, const batch_plan *p, double speed) {
    const int world = dist_world();
    bt_device_info info;
    s->be->info(s->be, &info);
    char mine[256], *all = malloc((size_t)world * 256);
    double nums[2] = {(double)info.total_mem, speed}, *allnums = malloc((size_t)world * 16);
    if (!all || !allnums) dist_abort(1);
    snprintf(mine, sizeof mine, "%s|%s|%s", dist_hostname(), s->be->name, info.name);
    dist_allgather_str(mine, 256, all);
    dist_allgather_f64(nums, 2, allnums);
    if (dist_rank() == 0) {
        printf("rank | host | backend | device | memory | share | samples/s\n");
        for (int r = 0; r < world; r++) {
            char *host = all + (size_t)r * 256, *be = strchr(host, '|'), *dev = NULL;
            if (be) {
                *be++ = 0;
                dev = strchr(be, '|');
                if (dev) *dev++ = 0;
            }
            char sp[32] = "-";
            if (allnums[2 * r + 1] > 0) snprintf(sp, sizeof sp, "%.1f", allnums[2 * r + 1]);
            printf("%4d | %s | %s | %s | %.1f GB | %ld | %s\n", r, host, be ? be : "?",
                   dev ? dev : "?", allnums[2 * r] / 1e9, p->share[r], sp);
        }
        fflush(stdout);
    }
    free(all);
    free(allnums);
}

/* Compare parameter checksums across ranks; on drift beyond the tolerance, log
 * it and copy rank 0's parameters and moments to every rank. */
static void check_drift(run_state *s, const bt_config *cfg, long step) {
    const int world = dist_world();
    bt_backend *be = s->be;
    double mine[2] = {be->sum(be, (bt_ptr){s->m->params, 0}, s->m->n_params),
                      be->sumsq(be, (bt_ptr){s->m->params, 0}, s->m->n_params)};
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
    if (dist_rank() == 0)
        printf("drift step %ld | rank %d parameters differ from rank 0 by %.3e (relative, "
               "tolerance %.1e); re-syncing from rank 0\n", step, worst_rank, worst,
               cfg->drift_tolerance);
    size_t bytes = s->m->n_params * sizeof(float);
    float *host = malloc(bytes);
    if (!host) dist_abort(1);
    bt_buffer *bufs[3] = {s->m->params, s->opt->m, s->opt->v};
    for (int i = 0; i < 3; i++) {
        be->download(be, host, (bt_ptr){bufs[i], 0}, bytes);
        dist_broadcast(host, bytes);
        be->upload(be, (bt_ptr){bufs[i], 0}, host, bytes);
    }
    free(host);
}

/* Test hook: BERTRAIN_TEST_DIE="RANK,STEP" kills RANK with SIGKILL after STEP,
 * to check that the job ends instead of hanging. */
static void maybe_die(long step) {
    const char *env = getenv("BERTRAIN_TEST_DIE");
    int rank = -1;
    long at = -1;
    if (env && sscanf(env, "%d,%ld", &rank, &at) == 2 && rank == dist_rank() && at == step) {
        fprintf(stderr, "bertrain: rank %d: test hook killing this rank after step %ld\n", rank,
                step);
        fflush(stderr);
        raise(SIGKILL);
    }
}

/* Test hook: BERTRAIN_TEST_PERTURB="RANK,STEP" adds 1e-2 to one parameter on
 * RANK after STEP, so the drift check has something to find. */
static void maybe_perturb(run_state *s, long step) {
    const char *env = getenv("BERTRAIN_TEST_PERTURB");
    int rank = -1;
    long at = -1;
    if (!env || sscanf(env, "%d,%ld", &rank, &at) != 2 || rank != dist_rank() || at != step)
        return;
    float x;
    bt_ptr p = {s->m->params, 4 * 1000};
    s->be->download(s->be, &x, p, 4);
    x += 1e-2f;
    s->be->upload(s->be, p, &x, 4);
    fprintf(stderr, "bertrain: rank %d: test hook perturbed a parameter after step %ld\n",
            dist_rank(), step);
}

/* Rank 0 logs a rollback: console and metrics.jsonl (a line with the step it
 * went back to and every sample range now skipped after it). */
static void log_rollback(run_state *s, long at_step, long back_to, uint64_t cursor,
                         const sample_skips *skips) {
    if (dist_rank() != 0) return;
    char ranges[1024];
    skips_format(skips, cursor, ranges, sizeof ranges);
    printf("bertrain: rolled back from step %ld to step %ld; the data continues at sample %llu "
           "and never trains on samples %s\n", at_step, back_to, (unsigned long long)cursor,
           ranges);
    fprintf(s->metrics, "{\"step\": %ld, \"rollback_to_step\": %ld, \"skipped_samples\": [",
            at_step, back_to);
    for (int i = 0; i < skips->n; i++)
        fprintf(s->metrics, "%s[%llu, %llu]", i ? ", " : "", (unsigned long long)skips->r[i].from,
                (unsigned long long)skips->r[i].to);
    fprintf(s->metrics, "]}\n");
    fflush(s->metrics);
    fflush(stdout);
}

/* Test hook: does $name ("64,1000") list a run position in [from, to)? */
static bool test_samples_listed(const char *name, uint64_t from, uint64_t to) {
    const char *env = getenv(name);
    for (const char *p = env; p && *p;) {
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p) return false;
        if (v >= from && v < to) return true;
        p = *end == ',' ? end + 1 : end;
    }
    return false;
}

/* fp16: log a step the loss scaler skipped (console and metrics, rank 0), or
 * why the run stops when it happened at the minimum scale. */
static void log_overflow(run_state *s, const bt_config *cfg, const step_result *r, long step,
                         const loss_scaler *scaler) {
    if (dist_rank() != 0) return;
    if (r->at_min_scale) {
        fprintf(stderr, "bertrain: step %ld: fp16 gradient overflow at the minimum loss scale %.10g "
                        "(fp16.min_loss_scale): the gradients overflow even at the smallest "
                        "scale allowed, so every step would be skipped; stopping. Resume from "
                        "the last checkpoint in %s with bf16, a lower learning rate or a "
                        "smaller fp16.min_loss_scale\n", step, r->loss_scale, cfg->output_dir);
    } else {
        fprintf(stderr, "bertrain: step %ld skipped: %s; parameters and optimizer state "
                        "unchanged; loss scale %.10g -> %.10g (%ld overflow steps so far)\n",
                step, r->skip_why, r->loss_scale, r->next_loss_scale, scaler->skipped);
    }
    fprintf(s->metrics, "{\"step\": %ld, \"skipped\": \"%s\", \"loss_scale\": %.9g, "
                        "\"next_loss_scale\": %.9g}\n", step, r->skip_why, r->loss_scale,
            r->next_loss_scale);
    fflush(s->metrics);
}

int train_run(const bt_config *cfg, float **final_params, size_t *n_params) {
    const int rank = dist_rank(), world = dist_world();
    const int T = cfg->data.seq_len;
    char err[1024];
    run_state s = {0};
    bt_guard guard = {0};
    sample_skips skips = {0}, rejected = {0}; /* never trained on; rejected since a rollback */
    int rc = 1;
    const double t_run = now_s();

    if (!cfg->data.vocab[0] || !cfg->data.train[0]) {
        fprintf(stderr, "bertrain: %s: data.train and data.vocab are required\n", cfg->path);
        return 2;
    }
    s.lock_fd = -1;
    if (rank == 0 && !paths_prepare_dir(cfg->output_dir, err, sizeof err)) {
        fprintf(stderr, "bertrain: %s: output_dir %s\n", cfg->path, err);
        return 2;
    }
    if (rank == 0 && ((s.lock_fd = run_dir_lock(cfg->output_dir, err, sizeof err)) < 0 ||
                      (!cfg->resume[0] && !run_dir_check_fresh(cfg->output_dir, err, sizeof err)))) {
        fprintf(stderr, "bertrain: %s: output_dir %s\n", cfg->path, err);
        run_dir_unlock(s.lock_fd);
        return 2;
    }
    resume_info ri;
    rc = resume_prepare(cfg, &ri, false);
    if (rc != 0) {
        run_dir_unlock(s.lock_fd);
        return rc;
    }
    rc = 1;
    if (!vocab_load(&s.vocab, cfg->data.vocab, err, sizeof err)) {
        fprintf(stderr, "bertrain: rank %d: %s\n", rank, err);
        run_free(&s);
        return 2;
    }
    if (rank == 0 && !resume_check_vocab(&ri, &s.vocab, cfg->data.vocab, err, sizeof err)) {
        fprintf(stderr, "bertrain: resume: %s\n", err);
        run_free(&s);
        return 2;
    }
    if (s.vocab.size > cfg->model.vocab_size) {
        fprintf(stderr, "bertrain: %s: model.vocab_size %d is smaller than the vocab %s (%d)\n",
                cfg->path, cfg->model.vocab_size, cfg->data.vocab, s.vocab.size);
        run_free(&s);
        return 2;
    }
    s.ds = dataset_open(cfg->data.train, &cfg->data, &s.vocab, cfg->model.vocab_size, cfg->seed,
                        err, sizeof err);
    if (!s.ds) {
        fprintf(stderr, "bertrain: rank %d: %s\n", rank, err);
        run_free(&s);
        return 2;
    }
    s.most_common = -1;
    if (cfg->data.valid[0]) {
        bt_data_config valid_cfg = cfg->data;
        valid_cfg.limit_samples = 0; /* data.limit_samples limits training data only */
        s.valid = dataset_open(cfg->data.valid, &valid_cfg, &s.vocab, cfg->model.vocab_size,
                               cfg->seed, err, sizeof err);
        if (!s.valid) {
            fprintf(stderr, "bertrain: rank %d: %s\n", rank, err);
            run_free(&s);
            return 2;
        }
        s.most_common = dataset_most_common_token(s.ds);
    }
    if (!dataset_check_casing(&cfg->data, &s.vocab, s.ds, s.valid, ri.active ? ri.lowercase : -1,
                              ri.dir, err, sizeof err)) {
        if (rank == 0) fprintf(stderr, "bertrain: %s: %s\n", cfg->path, err);
        run_free(&s);
        return 2;
    }
    if (!rank_agree(cfg, dataset_fingerprint(s.ds), dataset_fingerprint(s.valid), s.vocab.hash)) {
        run_free(&s); /* before anything is allocated on a device */
        g_every_rank_stops = true;
        return 2;
    }
    s.eval_batch = cfg->eval_batch > 0 ? cfg->eval_batch : (int)cfg->micro_batch;
    if (!run_fill_mask_prepare(&s, cfg)) {
        run_free(&s);
        return 2;
    }
    char spec[256];
    plan_device_spec(cfg, spec, sizeof spec);
    s.be = open_backend(spec, cfg->cpu_threads, cfg->tf32);
    if (!s.be) { /* a device that cannot be opened: the config's spec, exit 2 */
        rc = 2;
        goto out;
    }

    batch_plan plan;
    plan_from_config(&plan, cfg, world);
    const int B = plan.micro;
    int max_masked = B * dataset_max_predictions(s.ds);
    if (s.valid && s.eval_batch * dataset_max_predictions(s.valid) > max_masked)
        max_masked = s.eval_batch * dataset_max_predictions(s.valid);
    bert_config mc = cfg->model;
    mc.pad_id = s.vocab.pad_id;
    const int max_B = s.valid && s.eval_batch > B ? s.eval_batch : B;
    s.m = bert_create(s.be, &mc, max_B, T, max_masked, err, sizeof err);
    if (!s.m) {
        fprintf(stderr, "bertrain: rank %d (%s): %s\n", rank, dist_hostname(), err);
        goto out;
    }
    s.opt = optim_create(s.m, &cfg->optim, err, sizeof err);
    if (!s.opt) {
        fprintf(stderr, "bertrain: rank %d (%s): %s\n", rank, dist_hostname(), err);
        goto out;
    }
    if (ri.active && !resume_load(&ri, s.m, s.opt)) {
        rc = 2;
        goto out;
    }
    s.gs = grad_sync_new(s.m, (size_t)(cfg->bucket_mb * 1e6));
    if (!alloc_micro(&s, &plan, T, max_masked)) goto oom;
    if (!ri.active && !run_start_fresh(&s, cfg, B)) goto oom;
    double speed = 0;
    if (cfg->shares_auto && world > 1) { /* shares in proportion to measured speed */
        speed = measure_speed(&s, cfg, 3);
        double *all = malloc((size_t)world * sizeof *all);
        if (!all) goto oom;
        dist_allgather_f64(&speed, 1, all);
        plan_proportional(&plan, all);
        dist_broadcast(plan.share, sizeof plan.share); /* rank 0's plan is the plan */
        dist_broadcast(plan.offset, sizeof plan.offset);
        free(all);
        if (!alloc_micro(&s, &plan, T, max_masked)) goto oom;
    }
    if (rank == 0) {
        char path[1200];
        snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->output_dir);
        s.metrics = resume_open_metrics(path, &ri);
        if (!s.metrics) {
            fprintf(stderr, "bertrain: %s: cannot write: %s\n", path, strerror(errno));
            dist_abort(1);
        }
        s.writer = ckpt_writer_new(cfg, s.m, ri.run_id, err, sizeof err);
        if (!s.writer || (ri.active && !ckpt_writer_carry(s.writer, ri.dir, err, sizeof err))) {
            fprintf(stderr, "bertrain: %s\n", err);
            dist_abort(1);
        }
        bt_device_info info;
        s.be->info(s.be, &info);
        char shares[512];
        plan_format(&plan, shares, sizeof shares);
        char model_name[256];
        bert_describe(cfg->preset, &mc, model_name, sizeof model_name);
        printf("bertrain: model %s: %d layers, hidden %d, heads %d, vocab %d, %.2fM parameters\n",
               model_name, mc.num_hidden_layers, mc.hidden_size,
               mc.num_attention_heads, mc.vocab_size, s.m->n_params / 1e6);
        printf("bertrain: data %s: %llu tokens, %llu samples of %d per epoch\n", cfg->data.train,
               (unsigned long long)dataset_num_tokens(s.ds),
               (unsigned long long)dataset_num_samples(s.ds), T);
        printf("bertrain: device %s (%s); activations %.1f MB, stored in %s\n", info.name,
               s.be->name, bert_activation_bytes(s.m) / 1e6,
               mc.storage == BT_BF16 ? "bf16" : mc.storage == BT_F16 ? "fp16" : "fp32");
        if (cfg->n_shares > 0 || cfg->shares_auto)
            printf("bertrain: effective global batch %ld = shares %s over %d ranks "
                   "(micro-batch <= %d)\n", plan.global, shares, world, B);
        else
            printf("bertrain: effective global batch %ld = micro-batch %ld x accumulation %ld x "
                   "%d rank%s\n", cfg->train_batch_size, cfg->micro_batch, cfg->grad_accum,
                   world, world == 1 ? "" : "s");
        if (cfg->rampup_start > 0)
            printf("bertrain: batch-size rampup (%s): the global batch grows from %ld to %ld "
                   "samples over the first %ld samples, through each rank's accumulation count\n",
                   cfg->rampup_type == RAMPUP_STEPWISE ? "stepwise" : "linear",
                   cfg->rampup_start, plan.global, cfg->rampup_samples);
        fflush(stdout);
    }
    if (world > 1) print_rank_table(&s, &plan, speed);

    loss_scaler scaler; /* fp16 */
    loss_scaler_init(&scaler, cfg->fp16_loss_scale, cfg->fp16_initial_scale_power,
                     cfg->fp16_loss_scale_window, cfg->fp16_hysteresis,
                     cfg->fp16_consecutive_hysteresis, cfg->fp16_min_loss_scale);
    if (cfg->fp16 && ri.active) resume_scaler(&ri, &scaler);
    if (ri.active && !resume_skips(&ri, &skips)) {
        rc = 2;
        goto out;
    }
    if (!guard_init(&guard, cfg->guard_spike_factor, cfg->guard_median_window, cfg->guard_max_bad,
                    cfg->guard_window))
        goto oom;
    const long step0 = ri.step;
    const double t_start = now_s();
    int stop = 0;
    long reached = step0; /* steps done when the loop ends */
    stop_install();
    double t_window = t_start, data_window = 0.0, data_time = 0.0;
    double compute_window = 0, idle_window = 0, comm_window = 0;
    long samples_window = 0, tokens_window = 0;
    uint64_t cursor = (uint64_t)ri.position; /* run position of the next step's first sample */
    int rollbacks = 0;
    for (long step = step0; step < cfg->train_steps && !stop; step++) {
        double t0 = now_s();
        cursor = skips_next(&skips, cursor); /* batches rejected before a rollback: never again */
        const uint64_t g0 = cursor;
        batch_plan step_plan = plan; /* batch-size rampup: fewer micro-batches per rank */
        if (cfg->rampup_start > 0) plan_set_accum(&step_plan, rampup_accum(cfg, (long long)g0));
        const long G = step_plan.global;
        cursor += (uint64_t)G;
        reached = step + 1;
        if (test_samples_listed("BERTRAIN_TEST_NAN_SAMPLES", g0, cursor)) train_test_poison_next_step();
        int n_micro = fill_step(&s, &step_plan, g0, step + 1);
        double t_data = now_s() - t0;
        data_time += t_data;
        data_window += t_data;
        step_result r = train_step(s.m, s.opt, cfg, step, s.mb, s.first, n_micro,
                                   sched_lr(cfg, sched_position(cfg, s.opt->step, (long long)g0)), s.gs,
                                   &guard, cfg->fp16 ? &scaler : NULL);
        samples_window += r.n_samples;
        tokens_window += r.n_tokens;
        compute_window += r.compute_s;
        idle_window += r.idle_s;
        comm_window += r.comm_s;
        if (r.overflow) { /* the loss scaler's skip, not a bad step for the guard */
            log_overflow(&s, cfg, &r, step + 1, &scaler);
            if (r.at_min_scale) {
                rc = 3;
                goto out;
            }
        } else if (r.skipped) { /* every rank skipped it: the guard sees global values */
            bool too_many = guard_reject(&guard, step + 1);
            if (!skips_add(&rejected, g0, cursor)) goto oom;
            if (rank == 0) {
                fprintf(stderr, "bertrain: step %ld skipped: %s; parameters and optimizer state "
                                "unchanged, samples [%llu, %llu) not learned from\n",
                        step + 1, r.skip_why, (unsigned long long)g0,
                        (unsigned long long)(g0 + (uint64_t)G));
                fprintf(s.metrics, "{\"step\": %ld, \"skipped\": \"%s\", \"samples_from\": %llu, "
                                   "\"samples_to\": %llu}\n", step + 1, r.skip_why,
                        (unsigned long long)g0, (unsigned long long)(g0 + (uint64_t)G));
                fflush(s.metrics);
            }
            if (too_many && rollbacks < cfg->guard_max_rollbacks) {
                rollbacks++;
                if (rank == 0)
                    printf("bertrain: step %ld: %d of the last %d steps were skipped "
                           "(guard.max_bad_steps, guard.window): rolling back (%d of "
                           "guard.max_rollbacks %d)\n", step + 1, cfg->guard_max_bad,
                           cfg->guard_window, rollbacks, cfg->guard_max_rollbacks);
                long back = run_rollback(&s, cfg, &ri, B, &skips, &rejected, &cursor, &scaler);
                if (back < 0) {
                    rc = 2;
                    goto out;
                }
                guard_forget_bad(&guard);
                log_rollback(&s, step + 1, back, cursor, &skips);
                step = back - 1; /* the loop's step++ continues at step back + 1 */
                continue;
            }
            if (too_many) {
                char where[1400];
                if (rank == 0) run_where_to_resume(&s, cfg, &ri, where, sizeof where);
                if (rank == 0)
                    fprintf(stderr, "bertrain: step %ld: %d of the last %d steps were skipped "
                                    "(guard.max_bad_steps, guard.window)%s: stopping; %s with a "
                                    "lower learning rate\n",
                            step + 1, cfg->guard_max_bad, cfg->guard_window,
                            rollbacks ? " after guard.max_rollbacks rollbacks" : "", where);
                rc = 3;
                goto out;
            }
        } else {
            guard_accept(&guard, r.loss);
        }
        maybe_perturb(&s, step + 1);
        maybe_die(step + 1);
        stop = stop_agree(cfg->max_runtime, now_s() - t_run); /* every rank: the same step */
        const bool last = step + 1 == cfg->train_steps, final = last || stop;
        if (world > 1 && cfg->sync_check_interval > 0 &&
            ((step + 1) % cfg->sync_check_interval == 0 || final))
            check_drift(&s, cfg, step + 1);
        if (!r.skipped && (step == step0 || (step + 1) % cfg->steps_per_print == 0 || final)) {
            double t = now_s(), dt = t - t_window;
            double per_rank[3] = {compute_window, comm_window, idle_window};
            double *all = malloc((size_t)world * 3 * sizeof *all);
            if (!all) goto oom;
            dist_allgather_f64(per_rank, 3, all);
            if (rank == 0) {
                double sps = samples_window / dt, tps = tokens_window / dt;
                double eta = (t - t_start) / (step + 1 - step0) * (cfg->train_steps - step - 1);
                char eta_s[32];
                format_eta(eta, eta_s, sizeof eta_s);
                char extra_s[96] = "";
                if (cfg->fp16) snprintf(extra_s, sizeof extra_s, " | loss_scale %.10g", r.loss_scale);
                if (cfg->rampup_start > 0)
                    snprintf(extra_s + strlen(extra_s), sizeof extra_s - strlen(extra_s),
                             " | batch %ld", G);
                printf("step %6ld | loss %.4f | mlm_acc %.4f | lr %.3e | grad_norm %.3f%s | "
                       "%.1f samples/s | %.0f tokens/s | data %.2f%% | ETA %s\n",
                       step + 1, r.loss, r.mlm_acc, r.lr, r.grad_norm, extra_s, sps, tps,
                       100.0 * data_window / dt, eta_s);
                fprintf(s.metrics,
                        "{\"step\": %ld, \"loss\": %.9g, \"mlm_loss\": %.9g, \"mlm_acc\": %.6g, "
                        "\"lr\": %.9g, \"grad_norm\": %.9g, \"samples_per_s\": %.4g, "
                        "\"tokens_per_s\": %.4g, \"data_time_frac\": %.4g, \"eta_s\": %.0f",
                        step + 1, r.loss, r.mlm_loss, r.mlm_acc, r.lr, r.grad_norm, sps, tps,
                        data_window / dt, eta);
                if (s.m->cfg.nsp)
                    fprintf(s.metrics, ", \"nsp_loss\": %.9g, \"nsp_acc\": %.6g", r.nsp_loss,
                            r.nsp_acc);
                if (cfg->fp16) fprintf(s.metrics, ", \"loss_scale\": %.9g", r.loss_scale);
                if (s.m->cfg.z_loss > 0) fprintf(s.metrics, ", \"z_loss\": %.9g", r.z_loss);
                if (s.m->cfg.attention_logit_penalty > 0)
                    fprintf(s.metrics, ", \"attn_penalty\": %.9g", r.attn_penalty);
                if (world > 1) {
                    fprintf(s.metrics, ", \"ranks\": [");
                    for (int q = 0; q < world; q++) {
                        printf("  rank %d | compute %.3f s | communication not hidden %.3f s | "
                               "idle (waiting for slower ranks) %.3f s | share %ld\n", q,
                               all[3 * q], all[3 * q + 1], all[3 * q + 2], plan.share[q]);
                        fprintf(s.metrics, "%s{\"compute_s\": %.4g, \"comm_s\": %.4g, "
                                "\"idle_s\": %.4g, \"share\": %ld}", q ? ", " : "", all[3 * q],
                                all[3 * q + 1], all[3 * q + 2], plan.share[q]);
                    }
                    fprintf(s.metrics, "]");
                }
                fprintf(s.metrics, ", \"batch_size\": %ld, \"samples\": %lld}\n", G,
                        (long long)(g0 + (uint64_t)G));
                fflush(s.metrics);
                fflush(stdout);
            }
            free(all);
            t_window = t;
            data_window = compute_window = idle_window = comm_window = 0.0;
            samples_window = tokens_window = 0;
        }
        if (cfg->shares_auto && world > 1 && cfg->rebalance_interval > 0 &&
            (step + 1) % cfg->rebalance_interval == 0 && !final) {
            /* re-plan from this rank's measured compute speed over the last step */
            double sp = r.compute_s > 0 ? plan.share[rank] / r.compute_s : 0;
            double *all = malloc((size_t)world * sizeof *all);
            if (!all) goto oom;
            dist_allgather_f64(&sp, 1, all);
            plan_proportional(&plan, all);
            dist_broadcast(plan.share, sizeof plan.share);
            dist_broadcast(plan.offset, sizeof plan.offset);
            free(all);
            if (!alloc_micro(&s, &plan, T, max_masked)) goto oom;
            if (rank == 0) {
                char shares[512];
                plan_format(&plan, shares, sizeof shares);
                printf("rebalance step %ld | shares %s\n", step + 1, shares);
            }
        }
        if ((s.valid || cfg->eval_fill_mask_json[0]) &&
            (last || (cfg->eval_interval > 0 && (step + 1) % cfg->eval_interval == 0))) {
            double te = now_s();
            run_evaluate(&s, cfg, step + 1);
            t_window += now_s() - te; /* evaluation is not training throughput */
        }
        if (final || (cfg->ckpt_interval > 0 && (step + 1) % cfg->ckpt_interval == 0)) {
            double tc = now_s();
            dist_barrier(); /* every rank has reached the step boundary */
            if (rank == 0) {
                /* the host copy is taken now; the files are written in the background */
                ckpt_progress pr = {step + 1, (long long)(g0 + (uint64_t)G), G,
                                    (unsigned long long)dataset_num_samples(s.ds),
                                    dataset_lowercase(s.ds), cfg->fp16 ? &scaler : NULL, &skips,
                                    s.last_eval_step == step + 1 ? &s.last_eval : NULL};
                if (!ckpt_writer_start(s.writer, s.m, s.opt, &pr, err, sizeof err)) {
                    fprintf(stderr, "bertrain: checkpoint: %s\n", err);
                    dist_abort(1);
                }
            }
            t_window += now_s() - tc;
        }
    }
    if (rank == 0 && !ckpt_writer_wait(s.writer, err, sizeof err)) {
        fprintf(stderr, "bertrain: checkpoint: %s\n", err);
        dist_abort(1);
    }
    if (rank == 0 && stop)
        printf("bertrain: %s: stopped after step %ld with checkpoint %s/ckpt-%08ld; the same "
               "train command with --resume auto continues from it\n", stop_reason_name(stop),
               reached, cfg->output_dir, reached);
    const long done = reached - step0;
    if (rank == 0) {
        double total = now_s() - t_start;
        printf("bertrain: %ld steps in %.1f s (data %.2f%% of the time); metrics in "
               "%s/metrics.jsonl\n", done, total, 100.0 * data_time / (total > 0 ? total : 1),
               cfg->output_dir);
    }
    if (final_params) {
        *final_params = malloc(s.m->n_params * sizeof(float));
        *n_params = s.m->n_params;
        if (*final_params)
            s.be->download(s.be, *final_params, (bt_ptr){s.m->params, 0}, s.m->n_params * 4);
    }
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "bertrain: rank %d: out of host memory\n", rank);
out:
    guard_free(&guard);
    skips_free(&skips);
    skips_free(&rejected);
    run_free(&s);
    return rc;
}

int train_main(const bt_config *cfg) {
    int rc = train_run(cfg, NULL, NULL);
    if (rc != 0 && dist_world() > 1 && !g_every_rank_stops) { /* stop the others, not leave
                                                                  * them waiting */
        fprintf(stderr, "bertrain: rank %d (%s) failed; stopping the job\n", dist_rank(),
                dist_hostname());
        dist_abort(rc);
    }
    return rc;
}
