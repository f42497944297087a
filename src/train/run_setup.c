/* Everything a training run does before its first step (run_setup), and
 * freeing it all (run_free). */
#include "train_internal.h"

#include "device.h"
#include "mpi/dist.h"
#include "rank_agree.h"
#include "store/run_dir.h"
#include "stop.h"
#include "util/clock.h"
#include "util/paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void run_free(run_state *s) {
    stop_uninstall();
    ckpt_writer_free(s->writer); /* waits for a write in flight */
    metrics_close(&s->metrics);
    tb_free(s->metrics.tb);
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
    guard_free(&s->guard);
    skips_free(&s->skips);
    skips_free(&s->rejected);
    run_dir_unlock(&s->lock); /* last: the checkpoint writer is done */
}

bool run_alloc_micro(run_state *s) {
    const batch_plan *p = &s->plan;
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
        if (!batch_buf_alloc(&s->mb[k], p->micro, s->T, s->max_masked)) return false;
        s->n_mb_alloc++;
    }
    return true;
}

/* The output directory made, locked, and (for a fresh run) free of another
 * run's checkpoints (rank 0); then the resume point (every rank). */
static int open_output_dir(run_state *s, const bt_config *cfg) {
    char err[1024];
    if (!cfg->data.vocab[0] || !cfg->data.train[0]) {
        fprintf(stderr, "bertrain: %s: data.train and data.vocab are required\n", cfg->path);
        return 2;
    }
    if (dist_rank() == 0 && !paths_check_own_dir(cfg->output_dir, "output_dir", err, sizeof err)) {
        fprintf(stderr, "bertrain: %s: %s\n", cfg->path, err);
        return 2;
    }
    if (dist_rank() == 0 && (!run_dir_check_outside_ckpt(cfg->output_dir, "train", err, sizeof err) ||
                             !paths_prepare_dir(cfg->output_dir, err, sizeof err))) {
        fprintf(stderr, "bertrain: %s: output_dir %s\n", cfg->path, err);
        return 2;
    }
    if (dist_rank() == 0 &&
        (!run_dir_lock(cfg->output_dir, &s->lock, err, sizeof err) ||
         (!cfg->resume[0] && !run_dir_check_fresh(cfg->output_dir, err, sizeof err)))) {
        fprintf(stderr, "bertrain: %s: output_dir %s\n", cfg->path, err);
        return 2;
    }
    return resume_prepare(cfg, &s->ri, false);
}

/* The vocab (the same as the resumed checkpoint's), the training and held-out
 * shards, their casing against the vocab's, and every rank's agreement on
 * all of it. */
static int open_data(run_state *s, const bt_config *cfg) {
    char err[1024];
    const int rank = dist_rank();
    if (!vocab_load(&s->vocab, cfg->data.vocab, err, sizeof err)) {
        fprintf(stderr, "bertrain: rank %d: %s\n", rank, err);
        return 2;
    }
    if (rank == 0 && !resume_check_vocab(&s->ri, &s->vocab, cfg->data.vocab, err, sizeof err)) {
        fprintf(stderr, "bertrain: resume: %s\n", err);
        return 2;
    }
    if (s->vocab.size > cfg->model.vocab_size) {
        fprintf(stderr, "bertrain: %s: model.vocab_size %d is smaller than the vocab %s (%d)\n",
                cfg->path, cfg->model.vocab_size, cfg->data.vocab, s->vocab.size);
        return 2;
    }
    s->ds = dataset_open(cfg->data.train, &cfg->data, &s->vocab, cfg->model.vocab_size,
                         cfg->seed, err, sizeof err);
    if (!s->ds) {
        fprintf(stderr, "bertrain: rank %d: %s\n", rank, err);
        return 2;
    }
    if (cfg->data.valid[0]) {
        bt_data_config valid_cfg = cfg->data;
        valid_cfg.limit_samples = 0; /* data.limit_samples limits training data only */
        s->valid = dataset_open(cfg->data.valid, &valid_cfg, &s->vocab, cfg->model.vocab_size,
                                cfg->seed, err, sizeof err);
        if (!s->valid) {
            fprintf(stderr, "bertrain: rank %d: %s\n", rank, err);
            return 2;
        }
        s->most_common = dataset_most_common_token(s->ds);
    }
    const dataset_ckpt_casing ckpt = {s->ri.active ? s->ri.lowercase : -1, s->ri.imported,
                                      s->ri.dir};
    if (!dataset_check_casing(&cfg->data, &s->vocab, s->ds, s->valid, &ckpt, err, sizeof err)) {
        if (rank == 0) fprintf(stderr, "bertrain: %s: %s\n", cfg->path, err);
        return 2;
    }
    if (!rank_agree(cfg, dataset_fingerprint(s->ds), dataset_fingerprint(s->valid),
                    s->vocab.hash)) {
        s->every_rank_stops = true; /* before anything is allocated on a device */
        return 2;
    }
    return 0;
}

/* Samples/s of this rank's device on real micro-batches (forward + backward,
 * no update), for the auto plan: one warm-up, then `reps` timed. */
static double measure_speed(run_state *s, const bt_config *cfg, int reps) {
    bert_pass pass = {.train = true, .seed = cfg->seed, .mlm_grad_scale = 1e-3f,
                      .nsp_grad_scale = 1e-3f};
    bt_batch_buf *b = &s->mb[0];
    dataset_fill(s->ds, (uint64_t)dist_rank() * (uint64_t)b->B, b->B, false, b);
    bert_batch bb = {b->B, b->T, b->input_ids, b->token_type_ids, b->attention_mask, b->n_masked,
                     b->mlm_positions, b->mlm_labels, s->m->cfg.nsp ? b->nsp_labels : NULL, 0,
                     b->masked_bound};
    bert_stats st;
    double t0 = 0;
    for (int i = 0; i <= reps; i++) {
        if (i == 1) {
            s->be->sync(s->be);
            t0 = now_s();
        }
        bert_tape tape;
        bert_forward(s->m, &bb, &pass, &tape, &st);
        bert_backward(s->m, &bb, &pass, &tape);
    }
    s->be->sync(s->be);
    bert_zero_grads(s->m);
    return reps * b->B / (now_s() - t0);
}

/* The device, the batch plan, the model (sized for the larger of a training
 * micro-batch and an evaluation batch), its optimizer, the resumed or fresh
 * state and the micro-batch buffers. *speed: this rank's measured samples/s
 * when the auto plan measured it (0 otherwise). */
static int open_model(run_state *s, const bt_config *cfg, double *speed) {
    char err[1400], spec[256];
    const int rank = dist_rank(), world = dist_world();
    plan_device_spec(cfg, spec, sizeof spec);
    s->be = open_backend(spec, cfg->cpu_threads, cfg->tf32, cfg->profile_steps > 0);
    if (!s->be) return 2; /* a device that cannot be opened: the config's spec */
    if (s->obs && s->obs->wrap_backend) {
        bt_backend *w = s->obs->wrap_backend(s->obs->ctx, s->be);
        if (!w) return -1;
        s->be = w;
    }
    plan_from_config(&s->plan, cfg, world);
    const int B = s->plan.micro;
    /* sized in 64 bits and checked against the device before anything is allocated;
     * auto shares may give one rank the whole batch */
    const long share = cfg->shares_auto ? s->plan.global : s->plan.share[rank];
    const size_request req = {B, (share + B - 1) / B, dataset_max_predictions(s->ds),
                              s->valid ? s->eval_batch : 0,
                              s->valid ? dataset_max_predictions(s->valid) : 0};
    bt_device_info info;
    s->be->info(s->be, &info);
    run_sizes sz;
    if (!plan_sizes(cfg, &req, &info, &sz, err, sizeof err)) {
        fprintf(stderr, "bertrain: rank %d (%s): %s: %s\n", rank, dist_hostname(), cfg->path, err);
        return 2;
    }
    s->max_masked = sz.max_masked;
    bert_config mc = cfg->model;
    mc.pad_id = s->vocab.pad_id;
    if (!(s->m = bert_create(s->be, &mc, sz.max_batch, s->T, s->max_masked, err, sizeof err)) ||
        !(s->opt = optim_create(s->m, &cfg->optim, err, sizeof err))) {
        fprintf(stderr, "bertrain: rank %d (%s): %s\n", rank, dist_hostname(), err);
        return 1;
    }
    if (s->ri.active && !resume_load(&s->ri, s->m, s->opt)) return 2;
    s->gs = grad_sync_new(s->m, (size_t)(cfg->bucket_mb * 1e6), cfg->grad_bf16,
                          cfg->optim.type == OPT_ONEBIT_ADAM ||
                              cfg->optim.type == OPT_ONEBIT_LAMB);
    if (s->ri.active && !run_load_onebit(s, s->ri.dir)) return 2;
    if (!run_alloc_micro(s) || (!s->ri.active && !run_start_fresh(s, cfg, B))) return -1;
    if (cfg->shares_auto && world > 1) { /* shares in proportion to measured speed */
        *speed = measure_speed(s, cfg, 3);
        double *all = malloc((size_t)world * sizeof *all);
        if (!all) return -1;
        dist_allgather_f64(speed, 1, all);
        plan_proportional(&s->plan, all);
        dist_broadcast(s->plan.share, sizeof s->plan.share); /* rank 0's plan is the plan */
        dist_broadcast(s->plan.offset, sizeof s->plan.offset);
        free(all);
        if (!run_alloc_micro(s)) return -1;
    }
    return 0;
}

/* Rank 0: the start-up lines: model, data, device, the effective batch. */
static void print_start(const run_state *s, const bt_config *cfg) {
    bt_device_info info;
    s->be->info(s->be, &info);
    const bert_config *mc = &s->m->cfg;
    char shares[512], model_name[256];
    plan_format(&s->plan, shares, sizeof shares);
    bert_describe(cfg->preset, mc, model_name, sizeof model_name);
    printf("bertrain: model %s: %d layers, hidden %d, heads %d, vocab %d, %.2fM parameters\n",
           model_name, mc->num_hidden_layers, mc->hidden_size, mc->num_attention_heads,
           mc->vocab_size, bert_n_params(s->m) / 1e6);
    const int read = dataset_shards_read(s->ds), shards = dataset_num_shards(s->ds);
    printf("bertrain: data %s: %llu tokens, %llu samples of %d per epoch; %d of %d shard%s "
           "read and verified, %d unchanged since verified\n", cfg->data.train,
           (unsigned long long)dataset_num_tokens(s->ds),
           (unsigned long long)dataset_num_samples(s->ds), s->T, read, shards,
           shards == 1 ? "" : "s", shards - read);
    char split[160] = "";
    const int buffers = bert_activation_buffers(s->m);
    if (buffers > 2 || (buffers == 2 && mc->storage == BT_F32))
        snprintf(split, sizeof split, " in %d buffers (the device's largest is %.1f MB)",
                 buffers, info.max_alloc / 1e6);
    static const char *const recompute[] = {"", "; the backward recomputes the attention "
                                                "probabilities", "; the backward recomputes "
                                                "each layer"};
    printf("bertrain: device %s (%s%s%s); activations %.1f MB%s, stored in %s%s%s\n", info.name,
           s->be->name, *info.tuning ? "; " : "", info.tuning, bert_activation_bytes(s->m) / 1e6,
           split,
           mc->storage == BT_BF16 ? "bf16" : mc->storage == BT_F16 ? "fp16" : "fp32",
           recompute[mc->recompute],
           info.gemm_tf32 ? "; fp32 GEMMs on TF32 tensor cores (tf32: false for exact fp32)"
                          : "");
    const int world = dist_world();
    if (cfg->n_shares > 0 || cfg->shares_auto)
        printf("bertrain: effective global batch %ld = shares %s over %d ranks (micro-batch <= "
               "%d)\n", s->plan.global, shares, world, s->plan.micro);
    else
        printf("bertrain: effective global batch %ld = micro-batch %ld x accumulation %ld x %d "
               "rank%s\n", cfg->train_batch_size, cfg->micro_batch, cfg->grad_accum, world,
               world == 1 ? "" : "s");
    if (cfg->rampup_start > 0)
        printf("bertrain: batch-size rampup (%s): the global batch grows from %ld to %ld samples "
               "over the first %ld samples, through each rank's accumulation count\n",
               cfg->rampup_type == RAMPUP_STEPWISE ? "stepwise" : "linear", cfg->rampup_start,
               s->plan.global, cfg->rampup_samples);
    fflush(stdout);
}

/* Rank 0 prints one row per rank: host, backend, device, memory, share, speed. */
static void print_rank_table(run_state *s, double speed) {
    const int world = dist_world();
    bt_device_info info;
    s->be->info(s->be, &info);
    char mine[256], *all = malloc((size_t)world * 256);
    double nums[2] = {(double)info.total_mem, speed}, *allnums = malloc((size_t)world * 16);
    if (!all || !allnums) dist_abort(1);
    snprintf(mine, sizeof mine, "%s|%s|%s", dist_hostname(), s->be->name, info.name);
    dist_allgather_str(mine, 256, all);
    dist_allgather_f64(nums, 2, allnums);
    for (int r = 0; dist_rank() == 0 && r < world; r++) {
        char *host = all + (size_t)r * 256, *be = strchr(host, '|'), *dev = NULL;
        if (be) {
            *be++ = 0;
            dev = strchr(be, '|');
            if (dev) *dev++ = 0;
        }
        metrics_rank_row(r, host, be ? be : "?", dev ? dev : "?", allnums[2 * r] / 1e9,
                         s->plan.share[r], allnums[2 * r + 1]);
    }
    if (dist_rank() == 0) fflush(stdout);
    free(all);
    free(allnums);
}

/* Rank 0: metrics.jsonl and the TensorBoard event files (kept up to the
 * resumed step) and the checkpoint
 * writer (carrying an import's untrained heads); both abort the job when
 * they cannot be made. Then the start-up lines. */
static void open_outputs(run_state *s, const bt_config *cfg) {
    char err[1024];
    char *path = s->metrics.path;
    snprintf(path, sizeof s->metrics.path, "%s/metrics.jsonl", cfg->output_dir);
    s->metrics.f = resume_open_metrics(path, &s->ri);
    if (!s->metrics.f) {
        fprintf(stderr, "bertrain: %s: cannot write: %s\n", path, strerror(errno));
        dist_abort(1);
    }
    const long kept_step = s->ri.active ? s->ri.step : -1; /* -1: a fresh run */
    if (cfg->metrics_tensorboard &&
        !(s->metrics.tb = tb_open(cfg->output_dir, kept_step, err, sizeof err))) {
        fprintf(stderr, "bertrain: metrics.tensorboard: %s\n", err);
        dist_abort(1);
    }
    s->writer = ckpt_writer_new(cfg, s->m, s->ri.run_id, s->obs ? &s->obs->ckpt : NULL,
                                err, sizeof err);
    if (!s->writer || (s->ri.active && !ckpt_writer_carry(s->writer, s->ri.dir, err, sizeof err))) {
        fprintf(stderr, "bertrain: %s\n", err);
        dist_abort(1);
    }
    print_start(s, cfg);
}

/* The fp16 loss scaler, the skipped ranges and the guard, as the run starts
 * (a resumed run's from its checkpoint). */
static int open_loop_state(run_state *s, const bt_config *cfg) {
    loss_scaler_init(&s->scaler, cfg->fp16_loss_scale, cfg->fp16_initial_scale_power,
                     cfg->fp16_loss_scale_window, cfg->fp16_hysteresis,
                     cfg->fp16_consecutive_hysteresis, cfg->fp16_min_loss_scale);
    if (cfg->fp16 && s->ri.active) resume_scaler(&s->ri, &s->scaler);
    if (s->ri.active && !resume_skips(&s->ri, &s->skips)) return 2;
    if (!guard_init(&s->guard, cfg->guard_spike_factor, cfg->guard_median_window,
                    cfg->guard_max_bad, cfg->guard_window))
        return -1;
    s->step0 = s->reached = s->ri.step;
    s->cursor = (uint64_t)s->ri.position;
    return 0;
}

int run_setup(run_state *s, const bt_config *cfg) {
    s->lock.file_fd = s->lock.dir_fd = -1;
    s->most_common = -1;
    s->T = cfg->data.seq_len;
    s->eval_batch = cfg->eval_batch > 0 ? cfg->eval_batch : (int)cfg->micro_batch;
    int rc = open_output_dir(s, cfg);
    if (rc == 0) rc = open_data(s, cfg);
    if (rc == 0 && !run_fill_mask_prepare(s, cfg)) rc = 2;
    double speed = 0;
    if (rc == 0) rc = open_model(s, cfg, &speed);
    if (rc == 0 && dist_rank() == 0) open_outputs(s, cfg);
    if (rc == 0 && dist_world() > 1) print_rank_table(s, speed);
    if (rc == 0) rc = open_loop_state(s, cfg);
    if (rc < 0) { /* out of host memory */
        fprintf(stderr, "bertrain: rank %d: out of host memory\n", dist_rank());
        rc = 1;
    }
    return rc;
}
