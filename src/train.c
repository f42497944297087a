/* The training run: data, model, optimizer, the step loop, console and JSONL
 * metrics. */
#include "train.h"

#include "../mpi/dist.h"
#include "ckpt.h"
#include "eval.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

bt_backend *open_backend(const char *spec, int cpu_threads) {
    char err[256];
    bool no_device = false;
    bt_backend *be = strcmp(spec, "cpu") == 0 ? bt_cpu_backend_create(cpu_threads)
                                              : bt_backend_create(spec, err, sizeof err, &no_device);
    if (!be) {
        if (strcmp(spec, "cpu") == 0) snprintf(err, sizeof err, "cannot create the CPU backend");
        fprintf(stderr, "bertrain: rank %d: %s\n", dist_rank(), err);
    }
    return be;
}

step_result train_step(bert_model *m, bt_optimizer *opt, const bt_config *cfg, long step,
                       bt_batch_buf *mb, const uint32_t *first_sample, int n_micro, double lr) {
    step_result r = {0};
    /* global counts before any backward: [masked tokens, NSP samples] */
    double counts[2] = {0, 0};
    for (int k = 0; k < n_micro; k++) {
        counts[0] += mb[k].n_masked;
        counts[1] += m->cfg.nsp ? mb[k].B : 0;
    }
    dist_allreduce_sum_f64(counts, 2);
    bert_pass pass = {.train = true,
                      .seed = cfg->seed,
                      .step = (uint64_t)step,
                      .mlm_grad_scale = counts[0] > 0 ? (float)(1.0 / counts[0]) : 0.0f,
                      .nsp_grad_scale = counts[1] > 0 ? (float)(1.0 / counts[1]) : 0.0f};
    bert_zero_grads(m);
    double sums[6] = {0}; /* mlm loss, mlm correct, nsp loss, nsp correct, samples, tokens */
    for (int k = 0; k < n_micro; k++) {
        bert_batch b = {mb[k].B, mb[k].T, mb[k].input_ids, mb[k].token_type_ids,
                        mb[k].attention_mask, mb[k].n_masked, mb[k].mlm_positions,
                        mb[k].mlm_labels, m->cfg.nsp ? mb[k].nsp_labels : NULL, first_sample[k]};
        bert_stats st;
        bert_forward(m, &b, &pass, &st);
        bert_backward(m, &b, &pass);
        sums[0] += st.mlm_loss_sum;
        sums[1] += st.mlm_correct;
        sums[2] += st.nsp_loss_sum;
        sums[3] += st.nsp_correct;
        sums[4] += mb[k].B;
        for (size_t i = 0; i < (size_t)mb[k].B * mb[k].T; i++) sums[5] += mb[k].attention_mask[i];
    }
    dist_allreduce_sum_f64(sums, 6);
    r.n_masked = (long)counts[0];
    r.n_nsp = (long)counts[1];
    r.mlm_loss = counts[0] > 0 ? sums[0] / counts[0] : 0.0;
    r.mlm_acc = counts[0] > 0 ? sums[1] / counts[0] : 0.0;
    r.nsp_loss = counts[1] > 0 ? sums[2] / counts[1] : 0.0;
    r.nsp_acc = counts[1] > 0 ? sums[3] / counts[1] : 0.0;
    r.loss = r.mlm_loss + r.nsp_loss;
    r.n_samples = (long)sums[4];
    r.n_tokens = (long)sums[5];
    r.grad_norm = optim_grad_norm(m);
    optim_clip(m, r.grad_norm, cfg->gradient_clipping);
    r.lr = lr;
    optim_step(opt, m, (float)lr);
    return r;
}

static bool mkdir_p(const char *path) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return false;
        *p = '/';
    }
    return mkdir(tmp, 0777) == 0 || errno == EEXIST;
}

static void format_eta(double s, char *out, size_t n) {
    if (s < 0 || !isfinite(s)) s = 0;
    long t = (long)(s + 0.5);
    snprintf(out, n, "%ldh%02ldm%02lds", t / 3600, (t / 60) % 60, t % 60);
}

int train_run(const bt_config *cfg, float **final_params, size_t *n_params) {
    const int rank = dist_rank(), world = dist_world();
    char err[512];
    int rc = 1;
    bt_vocab vocab = {0};
    bt_dataset *ds = NULL, *valid = NULL;
    int most_common = -1, eval_batch = 0;
    bert_model *m = NULL;
    bt_optimizer *opt = NULL;
    bt_backend *be = NULL;
    bt_batch_buf *mb = NULL;
    FILE *metrics = NULL;
    uint32_t *first = NULL;
    const int n_micro = (int)cfg->grad_accum, B = (int)cfg->micro_batch, T = cfg->data.seq_len;

    if (!cfg->data.vocab[0] || !cfg->data.train[0]) {
        fprintf(stderr, "bertrain: %s: data.train and data.vocab are required\n", cfg->path);
        return 2;
    }
    if (!vocab_load(&vocab, cfg->data.vocab, err, sizeof err)) {
        fprintf(stderr, "bertrain: %s\n", err);
        return 2;
    }
    if (vocab.size > cfg->model.vocab_size) {
        fprintf(stderr, "bertrain: %s: model.vocab_size %d is smaller than the vocab %s (%d)\n",
                cfg->path, cfg->model.vocab_size, cfg->data.vocab, vocab.size);
        vocab_free(&vocab);
        return 2;
    }
    ds = dataset_open(cfg->data.train, &cfg->data, &vocab, cfg->model.vocab_size, cfg->seed, err,
                      sizeof err);
    if (!ds) {
        fprintf(stderr, "bertrain: %s\n", err);
        vocab_free(&vocab);
        return 2;
    }
    if (cfg->data.valid[0]) {
        bt_data_config valid_cfg = cfg->data;
        valid_cfg.limit_samples = 0; /* data.limit_samples limits training data only */
        valid = dataset_open(cfg->data.valid, &valid_cfg, &vocab, cfg->model.vocab_size,
                             cfg->seed, err, sizeof err);
        if (!valid) {
            fprintf(stderr, "bertrain: %s\n", err);
            dataset_close(ds);
            vocab_free(&vocab);
            return 2;
        }
        most_common = dataset_most_common_token(ds);
        eval_batch = cfg->eval_batch > 0 ? cfg->eval_batch : B;
    }
    be = open_backend(cfg->device, cfg->cpu_threads);
    if (!be) goto out;
    int max_masked = B * dataset_max_predictions(ds);
    if (valid && eval_batch * dataset_max_predictions(valid) > max_masked)
        max_masked = eval_batch * dataset_max_predictions(valid);
    bert_config mc = cfg->model;
    mc.pad_id = vocab.pad_id;
    m = bert_create(be, &mc, eval_batch > B ? eval_batch : B, T, max_masked, err, sizeof err);
    if (!m) {
        fprintf(stderr, "bertrain: rank %d: %s\n", rank, err);
        goto out;
    }
    bert_init_params(m, cfg->seed);
    opt = optim_create(m, &cfg->optim, err, sizeof err);
    if (!opt) {
        fprintf(stderr, "bertrain: rank %d: %s\n", rank, err);
        goto out;
    }
    mb = calloc((size_t)n_micro, sizeof *mb);
    first = calloc((size_t)n_micro, sizeof *first);
    for (int k = 0; mb && k < n_micro; k++)
        if (!batch_buf_alloc(&mb[k], B, T, max_masked)) goto out;
    if (rank == 0) {
        if (!mkdir_p(cfg->output_dir)) {
            fprintf(stderr, "bertrain: %s: output_dir %s: cannot create: %s\n", cfg->path,
                    cfg->output_dir, strerror(errno));
            goto out;
        }
        char path[1200];
        snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->output_dir);
        metrics = fopen(path, "w");
        if (!metrics) {
            fprintf(stderr, "bertrain: %s: cannot write: %s\n", path, strerror(errno));
            goto out;
        }
        bt_device_info info;
        be->info(be, &info);
        printf("bertrain: model %s: %d layers, hidden %d, heads %d, vocab %d, %.2fM parameters\n",
               cfg->preset[0] ? cfg->preset : "custom", mc.num_hidden_layers, mc.hidden_size,
               mc.num_attention_heads, mc.vocab_size, m->n_params / 1e6);
        printf("bertrain: data %s: %llu tokens, %llu samples of %d per epoch\n", cfg->data.train,
               (unsigned long long)dataset_num_tokens(ds),
               (unsigned long long)dataset_num_samples(ds), T);
        printf("bertrain: device %s (%s)\n", info.name, be->name);
        printf("bertrain: effective global batch %ld = micro-batch %ld x accumulation %ld x %d "
               "rank%s\n", cfg->train_batch_size, cfg->micro_batch, cfg->grad_accum, world,
               world == 1 ? "" : "s");
        fflush(stdout);
    }

    const long G = cfg->train_batch_size;
    const double t_start = now_s();
    double t_window = t_start, data_time = 0.0, data_window = 0.0;
    long samples_window = 0, tokens_window = 0;
    for (long step = 0; step < cfg->train_steps; step++) {
        double t0 = now_s();
        for (int k = 0; k < n_micro; k++) {
            /* rank r reads its slice of the global batch, micro-batch by micro-batch */
            uint32_t pos = (uint32_t)((long)rank * B * n_micro + (long)k * B);
            first[k] = pos;
            dataset_fill(ds, (uint64_t)step * (uint64_t)G + pos, B, false, &mb[k]);
        }
        double t_data = now_s() - t0;
        data_time += t_data;
        data_window += t_data;
        step_result r = train_step(m, opt, cfg, step, mb, first, n_micro, sched_lr(cfg, step));
        samples_window += r.n_samples;
        tokens_window += r.n_tokens;
        if (!isfinite(r.loss)) {
            if (rank == 0)
                fprintf(stderr, "bertrain: step %ld: loss is %g; stopping (lower the learning "
                                "rate or enable gradient_clipping)\n", step + 1, r.loss);
            goto out;
        }
        if (rank == 0 && (step == 0 || (step + 1) % cfg->steps_per_print == 0 ||
                          step + 1 == cfg->train_steps)) {
            double t = now_s(), dt = t - t_window;
            double sps = samples_window / dt, tps = tokens_window / dt;
            double eta = (t - t_start) / (step + 1) * (cfg->train_steps - step - 1);
            char eta_s[32];
            format_eta(eta, eta_s, sizeof eta_s);
            printf("step %6ld | loss %.4f | mlm_acc %.4f | lr %.3e | grad_norm %.3f | "
                   "%.1f samples/s | %.0f tokens/s | data %.2f%% | ETA %s\n",
                   step + 1, r.loss, r.mlm_acc, r.lr, r.grad_norm, sps, tps,
                   100.0 * data_window / dt, eta_s);
            fflush(stdout);
            fprintf(metrics,
                    "{\"step\": %ld, \"loss\": %.9g, \"mlm_loss\": %.9g, \"mlm_acc\": %.6g, "
                    "\"lr\": %.9g, \"grad_norm\": %.9g, \"samples_per_s\": %.4g, "
                    "\"tokens_per_s\": %.4g, \"data_time_frac\": %.4g, \"eta_s\": %.0f",
                    step + 1, r.loss, r.mlm_loss, r.mlm_acc, r.lr, r.grad_norm, sps, tps,
                    data_window / dt, eta);
            if (m->cfg.nsp)
                fprintf(metrics, ", \"nsp_loss\": %.9g, \"nsp_acc\": %.6g", r.nsp_loss, r.nsp_acc);
            fprintf(metrics, ", \"samples\": %ld}\n", (step + 1) * G);
            fflush(metrics);
            t_window = t;
            data_window = 0.0;
            samples_window = tokens_window = 0;
        }
        const bool last = step + 1 == cfg->train_steps;
        if (valid && (last || (cfg->eval_interval > 0 && (step + 1) % cfg->eval_interval == 0))) {
            eval_result ev;
            double te = now_s();
            eval_run(m, valid, eval_batch, cfg->eval_max_samples, most_common, &ev);
            if (rank == 0) {
                printf("eval step %ld | mlm_acc %.4f | perplexity %.3f | mlm_loss %.4f | "
                       "baseline_acc %.4f (most common token) | %ld masked tokens | %.1f s\n",
                       step + 1, ev.mlm_acc, ev.perplexity, ev.mlm_loss, ev.baseline_acc,
                       ev.n_masked, now_s() - te);
                fprintf(metrics,
                        "{\"step\": %ld, \"eval_mlm_loss\": %.9g, \"eval_mlm_acc\": %.6g, "
                        "\"eval_perplexity\": %.6g, \"eval_baseline_acc\": %.6g, "
                        "\"eval_masked\": %ld",
                        step + 1, ev.mlm_loss, ev.mlm_acc, ev.perplexity, ev.baseline_acc,
                        ev.n_masked);
                if (m->cfg.nsp) fprintf(metrics, ", \"eval_nsp_acc\": %.6g", ev.nsp_acc);
                fprintf(metrics, "}\n");
                fflush(metrics);
                fflush(stdout);
            }
            t_window += now_s() - te; /* evaluation is not training throughput */
        }
        if (rank == 0 &&
            (last || (cfg->ckpt_interval > 0 && (step + 1) % cfg->ckpt_interval == 0))) {
            double tc = now_s();
            if (!ckpt_save(cfg, m, step + 1, (step + 1) * G, err, sizeof err)) {
                fprintf(stderr, "bertrain: checkpoint at step %ld: %s\n", step + 1, err);
                goto out;
            }
            printf("checkpoint step %ld -> %s/ckpt-%08ld (%.2f s)\n", step + 1, cfg->output_dir,
                   step + 1, now_s() - tc);
            fflush(stdout);
            t_window += now_s() - tc;
        }
    }
    if (rank == 0) {
        double total = now_s() - t_start;
        printf("bertrain: %ld steps in %.1f s (data %.2f%% of the time); metrics in %s/metrics.jsonl\n",
               cfg->train_steps, total, 100.0 * data_time / (total > 0 ? total : 1),
               cfg->output_dir);
    }
    if (final_params) {
        *final_params = malloc(m->n_params * sizeof(float));
        *n_params = m->n_params;
        if (*final_params) be->download(be, *final_params, (bt_ptr){m->params, 0}, m->n_params * 4);
    }
    rc = 0;
out:
    if (metrics) fclose(metrics);
    for (int k = 0; mb && k < n_micro; k++) batch_buf_free(&mb[k]);
    free(mb);
    free(first);
    optim_free(opt, m);
    bert_free(m);
    if (be) be->destroy(be);
    dataset_close(ds);
    dataset_close(valid);
    vocab_free(&vocab);
    return rc;
}

int train_main(const bt_config *cfg) { return train_run(cfg, NULL, NULL); }
