/* `bertrain bench`: time training steps of a preset on random tokens. */
#include "cli.h"

#include "backends/profile.h"
#include "train/train.h"
#include "util/clock.h"
#include "train/device.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(void) {
    fprintf(stderr, "usage: bertrain bench --preset P --seq S --batch B [--backend NAME] "
                    "[--steps N] [--warmup N] [--threads N] [--layers L] [--layerdrop P]\n"
                    "       [--precision fp32|bf16|fp16] [--norm post|pre]\n"
                    "       [--unfused gelu,join,attention|all|none] [--dense-top]\n"
                    "       [--profile] [--ceiling] [--json]\n"
                    "  --unfused: the model's fused ops (bias+GELU; bias+dropout+residual\n"
                    "             (+LayerNorm); softmax+dropout) done op by op, to measure them\n"
                    "             (none: all fused, also where the device says they do not pay)\n"
                    "  --dense-top: the last layer at every row, not only at the heads' rows\n"
                    "  --profile: time every op of the timed steps on the device's clock, and\n"
                    "             count launches, blocking reads, waits and memory per step\n"
                    "  --ceiling: --profile, then each GEMM shape of the steps replayed alone\n"
                    "             (the best of >= 3 calls and >= 0.25 s): the GEMM ceiling\n"
                    "             at this model's shapes\n"
                    "  --json:    print the results as one JSON object\n");
}

/* The command line of a bench. */
typedef struct {
    const char *preset, *backend, *precision;
    int seq, batch, steps, warmup, threads, layers;
    double layerdrop;
    bool profile, json, ceiling, dense_top;
    unsigned unfused; /* BERT_FUSE_* bits turned off */
    const char *unfused_list; /* as given */
    const char *norm;         /* post (the preset's) or pre */
} bench_opts;

/* The BERT_FUSE_* bits of a comma list of gelu, join, attention, all;
 * false on an unknown name. */
static bool parse_unfused(const char *list, unsigned *out) {
    static const struct { const char *name; unsigned bit; } names[] = {
        {"gelu", BERT_FUSE_GELU}, {"join", BERT_FUSE_JOIN},
        {"attention", BERT_FUSE_ATTENTION}, {"all", BERT_FUSE_ALL}, {"none", 0}};
    *out = 0;
    for (const char *p = list; *p;) {
        const size_t len = strcspn(p, ",");
        size_t i = 0;
        while (i < sizeof names / sizeof *names &&
               (strlen(names[i].name) != len || strncmp(p, names[i].name, len)))
            i++;
        if (i == sizeof names / sizeof *names) {
            fprintf(stderr, "bertrain bench: --unfused %s: expected a comma list of "
                            "gelu, join, attention, all, none\n", list);
            return false;
        }
        *out |= names[i].bit;
        p += len + (p[len] == ',');
    }
    return true;
}

/* Options into o (defaults first); false after printing why. */
static bool parse_args(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){"mini", "cpu", "fp32", 128, 8, 10, 2, 0, 0, 0.0, false, false, false, false,
                      0, "", "post"};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--profile") || !strcmp(a, "--json")) {
            *(a[2] == 'p' ? &o->profile : &o->json) = true;
            continue;
        }
        if (!strcmp(a, "--ceiling")) {
            o->ceiling = o->profile = true;
            continue;
        }
        if (!strcmp(a, "--dense-top")) {
            o->dense_top = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bertrain bench: %s needs a value\n", a);
            return false;
        }
        if (!strcmp(a, "--preset")) o->preset = v;
        else if (!strcmp(a, "--seq")) o->seq = atoi(v);
        else if (!strcmp(a, "--batch")) o->batch = atoi(v);
        else if (!strcmp(a, "--backend")) o->backend = v;
        else if (!strcmp(a, "--steps")) o->steps = atoi(v);
        else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(a, "--threads")) o->threads = atoi(v);
        else if (!strcmp(a, "--layers")) o->layers = atoi(v);
        else if (!strcmp(a, "--layerdrop")) o->layerdrop = atof(v);
        else if (!strcmp(a, "--precision")) o->precision = v;
        else if (!strcmp(a, "--norm")) o->norm = v;
        else if (!strcmp(a, "--unfused")) {
            if (!parse_unfused(v, &o->unfused)) return false;
            o->unfused_list = v;
        } else {
            fprintf(stderr, "bertrain bench: unknown option %s\n", a);
            usage();
            return false;
        }
        i++;
    }
    return true;
}

/* The run config of a bench: the preset's model as o shapes it, 16-bit
 * storage as bf16.enabled / fp16.enabled give it (fp16: a fixed loss scale
 * of 1, so no step is skipped and every timed step does the same work).
 * false after printing why. */
static bool bench_config(const bench_opts *o, bt_config *cfg) {
    config_defaults(cfg);
    if (!bert_preset(o->preset, &cfg->model)) {
        fprintf(stderr, "bertrain bench: --preset %s: expected tiny|mini|small|medium|base|large\n",
                o->preset);
        return false;
    }
    if (o->layers) cfg->model.num_hidden_layers = o->layers;
    cfg->model.layerdrop = (float)o->layerdrop;
    if (!strcmp(o->norm, "pre"))
        cfg->model.norm = BERT_NORM_PRE;
    else if (strcmp(o->norm, "post")) {
        fprintf(stderr, "bertrain bench: --norm %s: expected post|pre\n", o->norm);
        return false;
    }
    if (o->seq < 8 || o->seq > cfg->model.max_position_embeddings || o->batch < 1 ||
        o->steps < 1 || o->warmup < 0 || o->layers < 0 ||
        !(o->layerdrop >= 0.0 && o->layerdrop < 1.0)) {
        fprintf(stderr, "bertrain bench: need 8 <= --seq <= %d, --batch >= 1, --steps >= 1, "
                        "--layers >= 1, 0 <= --layerdrop < 1\n",
                cfg->model.max_position_embeddings);
        return false;
    }
    if (strcmp(o->precision, "fp32") && strcmp(o->precision, "bf16") &&
        strcmp(o->precision, "fp16")) {
        fprintf(stderr, "bertrain bench: --precision %s: expected fp32|bf16|fp16\n", o->precision);
        return false;
    }
    cfg->model.storage = !strcmp(o->precision, "bf16")   ? BT_BF16
                         : !strcmp(o->precision, "fp16") ? BT_F16
                                                         : BT_F32;
    snprintf(cfg->preset, sizeof cfg->preset, "%s", o->preset);
    cfg->micro_batch = cfg->train_batch_size = o->batch;
    cfg->grad_accum = 1;
    return true;
}

/* Step s's batch: random tokens with BERT's special ids at 0..4, masked as
 * training masks. */
static void random_batch(bt_batch_buf *mb, const bt_vocab *vocab, const bt_config *cfg, int s,
                         int max_pred) {
    const int seq = mb->T, batch = mb->B;
    mb->n_masked = 0;
    for (int b = 0; b < batch; b++) {
        int32_t *ids = mb->input_ids + (size_t)b * seq;
        for (int t = 0; t < seq; t++) {
            uint32_t r[4];
            rng_block(cfg->seed, RNG_STREAM_BENCH, (uint32_t)t, (uint32_t)(s * batch + b), r);
            ids[t] = t == 0 ? 2 : t == seq - 1 ? 3 : 5 + (int32_t)(r[0] % (uint32_t)(vocab->size - 5));
            mb->token_type_ids[(size_t)b * seq + t] = t >= seq / 2;
            mb->attention_mask[(size_t)b * seq + t] = 1;
        }
        mb->n_masked += mask_sequence(ids, seq, vocab, vocab->size, 0.15f, max_pred, cfg->seed,
                                      (uint64_t)s, (uint64_t)b, b * seq,
                                      mb->mlm_positions + mb->n_masked,
                                      mb->mlm_labels + mb->n_masked);
    }
}

/* What a bench measured. */
typedef struct {
    double ms_per_step, activation_mb, tflops, samples_per_s, layers_run;
    double masked_per_seq, top_rows_per_seq; /* the timed steps' means */
    double loss, grad_norm; /* the last step's: the same bits whatever --unfused says */
    unsigned unfused;       /* the fusions that were off */
} bench_figures;

/* What the timed steps did, summed over them. */
typedef struct {
    long layers_dropped; /* LayerDrop: layers skipped */
    double masked, top_rows; /* masked tokens; rows the top layer computed (every row: B*T) */
} bench_work;

/* The figures: time per step, activation memory, TFLOP/s of the work done (a
 * dropped layer costs one layer's FLOPs less; the top layer at its rows),
 * samples/s. */
static bench_figures measure(const bench_opts *o, const bt_config *cfg, bert_model *m, double dt,
                             const bench_work *w) {
    const double sps = (double)o->batch * o->steps / dt, seqs = (double)o->batch * o->steps;
    const double masked = w->masked / seqs, top_rows = w->top_rows / seqs;
    bert_config one_less = cfg->model;
    one_less.num_hidden_layers--;
    const double per_sample = bert_train_flops_per_sample(&cfg->model, o->seq, masked, top_rows),
                 per_layer = per_sample - bert_train_flops_per_sample(&one_less, o->seq, masked,
                                                                      top_rows);
    const double mean_dropped = (double)w->layers_dropped / o->steps;
    return (bench_figures){1e3 * dt / o->steps, bert_activation_bytes(m) / 1e6,
                           (per_sample - mean_dropped * per_layer) * sps / 1e12, sps,
                           cfg->model.num_hidden_layers - mean_dropped, masked, top_rows,
                           0.0, 0.0, 0};
}

/* The bench's lines, then the profile when there is one. */
static void report_text(const bench_opts *o, const bt_config *cfg, bt_backend *be,
                        const bench_figures *f) {
    bt_device_info info;
    be->info(be, &info);
    printf("bench: preset %s (%d layers, layerdrop %g), seq %d, batch %d, %d steps after %d "
           "warm-up, backend %s (%s)\n", o->preset, cfg->model.num_hidden_layers,
           (double)cfg->model.layerdrop, o->seq, o->batch, o->steps, o->warmup, be->name,
           info.name);
    printf("fused ops: %s\n", !f->unfused ? "all" : f->unfused == BERT_FUSE_ALL ? "none" : "some");
    printf("ms/step: %.1f\n", f->ms_per_step);
    printf("activations: %.1f MB (%s storage)\n", f->activation_mb, o->precision);
    if (cfg->model.layerdrop > 0.0f)
        printf("layers run per step: %.2f of %d (LayerDrop)\n", f->layers_run,
               cfg->model.num_hidden_layers);
    printf("top layer: %.1f of %d rows a sequence after its attention (%s)\n",
           f->top_rows_per_seq, o->seq, o->dense_top ? "--dense-top" : "the heads' rows");
    printf("TFLOP/s: %.3f\n", f->tflops);
    printf("samples/s: %.2f\n", f->samples_per_s);
    printf("last step: loss %.17g, grad_norm %.17g\n", f->loss, f->grad_norm);
    if (bt_profiler_of(be)) bt_profile_print(bt_profiler_of(be), stdout);
}

/* The same as {"bench": {...}, "profile": {...}} on one line. */
static void report_json(const bench_opts *o, const bt_config *cfg, bt_backend *be,
                        const bench_figures *f) {
    bt_device_info info;
    be->info(be, &info);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "preset", o->preset);
    cJSON_AddNumberToObject(j, "layers", cfg->model.num_hidden_layers);
    cJSON_AddNumberToObject(j, "layerdrop", cfg->model.layerdrop);
    cJSON_AddNumberToObject(j, "seq", o->seq);
    cJSON_AddNumberToObject(j, "batch", o->batch);
    cJSON_AddNumberToObject(j, "steps", o->steps);
    cJSON_AddNumberToObject(j, "warmup", o->warmup);
    cJSON_AddStringToObject(j, "precision", o->precision);
    cJSON_AddStringToObject(j, "unfused", o->unfused_list);
    cJSON_AddStringToObject(j, "norm", o->norm);
    cJSON_AddBoolToObject(j, "dense_top", o->dense_top);
    cJSON_AddNumberToObject(j, "top_rows_per_seq", f->top_rows_per_seq);
    cJSON_AddStringToObject(j, "backend", be->name);
    cJSON_AddStringToObject(j, "device", info.name);
    cJSON_AddNumberToObject(j, "ms_per_step", f->ms_per_step);
    cJSON_AddNumberToObject(j, "activation_mb", f->activation_mb);
    cJSON_AddNumberToObject(j, "layers_run", f->layers_run);
    cJSON_AddNumberToObject(j, "tflops", f->tflops);
    cJSON_AddNumberToObject(j, "samples_per_s", f->samples_per_s);
    cJSON_AddNumberToObject(j, "loss", f->loss);
    cJSON_AddNumberToObject(j, "grad_norm", f->grad_norm);
    char *text = cJSON_PrintUnformatted(j);
    printf("{\"bench\": %s, \"profile\": ", text ? text : "null");
    free(text);
    cJSON_Delete(j);
    if (bt_profiler_of(be))
        bt_profile_json(bt_profiler_of(be), stdout);
    else
        printf("null");
    printf("}\n");
}

int cli_bench(int argc, char **argv) {
    bench_opts o;
    bt_config cfg;
    if (!parse_args(argc, argv, &o) || !bench_config(&o, &cfg)) return 2;
    bt_backend *be = open_backend(o.backend, o.threads, false, o.profile);
    if (!be) return 2; /* a device that cannot be opened: the user's spec, exit 2 */
    const bt_vocab vocab = {.size = cfg.model.vocab_size, .pad_id = 0, .unk_id = 1, .cls_id = 2,
                            .sep_id = 3, .mask_id = 4};
    const int max_pred = mask_cap_default(o.seq - 2, 0.15f); /* as training's default cap */
    char err[256];
    bert_model *m = bert_create(be, &cfg.model, o.batch, o.seq, o.batch * max_pred, err,
                                sizeof err);
    bt_optimizer *opt = m ? optim_create(m, &cfg.optim, err, sizeof err) : NULL;
    bt_batch_buf mb;
    if (!m || !opt || !batch_buf_alloc(&mb, o.batch, o.seq, o.batch * max_pred)) {
        fprintf(stderr, "bertrain bench: %s\n", m && opt ? "out of host memory" : err);
        optim_free(opt, m);
        bert_free(m);
        be->destroy(be);
        return 1;
    }
    bert_init_params(m, cfg.seed);
    if (*o.unfused_list) m->unfused = o.unfused; /* else the device's choice */
    m->dense_top = o.dense_top;
    uint32_t first = 0;
    double t0 = 0.0;
    bench_work work = {0};
    step_result last = {0};
    for (int s = 0; s < o.warmup + o.steps; s++) {
        if (s == o.warmup) {
            be->sync(be);
            t0 = now_s();
        }
        random_batch(&mb, &vocab, &cfg, s, max_pred);
        const step_batch in = {&mb, &first, 1, 0, mb.B};
        if (s >= o.warmup && bt_profiler_of(be)) bt_profile_step_begin(bt_profiler_of(be));
        step_result r = train_step(m, opt, &cfg, s, &in, 1e-4, NULL, NULL, NULL, NULL);
        last = r;
        if (s >= o.warmup && bt_profiler_of(be)) bt_profile_step_end(bt_profiler_of(be));
        if (s >= o.warmup) {
            work.layers_dropped += r.layers_dropped;
            work.masked += mb.n_masked;
            work.top_rows += m->top_layer >= 0 ? m->n_top : (double)mb.B * mb.T;
        }
    }
    be->sync(be);
    bench_figures f = measure(&o, &cfg, m, now_s() - t0, &work);
    f.loss = last.loss;
    f.grad_norm = last.grad_norm;
    f.unfused = m->unfused;
    /* the GEMMs alone only after the timed steps, so they cost those nothing */
    const int rc = o.ceiling && bt_profiler_of(be) && !bt_profile_gemm_alone(bt_profiler_of(be), 3) ? 1 : 0;
    if (rc == 0 && o.json)
        report_json(&o, &cfg, be, &f);
    else if (rc == 0)
        report_text(&o, &cfg, be, &f);
    batch_buf_free(&mb);
    optim_free(opt, m);
    bert_free(m);
    be->destroy(be);
    return rc;
}
