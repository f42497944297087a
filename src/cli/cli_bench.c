/* `bertrain bench`: time training steps of a preset on random tokens. */
#include "cli.h"
#include "cli_args.h"

#include "mpi/dist.h"

#include "backends/profile.h"
#include "cli_project.h"
#include "train/train.h"
#include "util/clock.h"
#include "train/device.h"

#include <cjson/cJSON.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The bench masks as training does by default (data.mask_prob). */
#define BENCH_MASK_PROB 0.15f

#define BENCH_USAGE                                                                          \
    "usage: bertrain bench --preset P --seq S --batch B [--accum K] [--backend NAME]\n"     \
    "       [--steps N]\n"                                                                  \
    "       [--warmup N] [--threads N] [--layers L] [--layerdrop P]\n"                        \
    "       [--precision fp32|bf16|fp16] [--norm post|pre]\n"                                 \
    "       [--unfused gelu,join,attention,cast,epilogue|all|none] [--dense-top]\n"           \
    "       [--profile] [--ceiling] [--json] [--project CARD[,CARD...] [--counts FILE]]\n"  \
    "       [--set key.path=value]...\n"                                                     \
    "  --preset, --seq, --batch, --precision, --layers, --layerdrop, --norm: the config\n"   \
    "             keys model.preset, data.seq_len, train_micro_batch_size_per_gpu,\n"       \
    "             fp16/bf16.enabled, model.num_hidden_layers, model.layerdrop and\n"        \
    "             model.norm (defaults: mini, 128, 8, fp32, the preset's)\n"                \
    "  --accum:   micro-batches a step (gradient_accumulation_steps; default 1): a step\n"  \
    "             trains K x B samples\n"                                                    \
    "  --set:     any other config key (docs/CONFIG.md), validated as train validates\n"    \
    "             it; applied after the options above\n"                                    \
    "  --unfused: the model's fused ops (bias+GELU; bias+dropout+residual\n"                 \
    "             (+LayerNorm), and residual+LayerNorm backward; softmax+dropout;\n"     \
    "             one 16-bit copy of a backward operand for its two GEMMs; a linear\n"    \
    "             layer's bias and bias gradient in its 16-bit GEMMs' epilogues) done\n"  \
    "             op by op, to measure them\n"                                             \
    "             (none: all fused, also where the device says they do not pay)\n"          \
    "  --dense-top: the last layer at every row, not only at the heads' rows\n"              \
    "  --profile: time every op of the timed steps on the device's clock, and\n"            \
    "             count launches, blocking reads, waits and memory per step\n"              \
    "  --ceiling: --profile, then each GEMM shape of the steps replayed alone\n"            \
    "             (the best of >= 3 calls and >= 0.25 s): the GEMM ceiling\n"               \
    "             at this model's shapes\n"                                                 \
    "  --json:    print the results as one JSON object\n"                                  \
    "  --project: --profile, and the timed steps' device work as the device counted it\n"  \
    "             (global bytes per kernel, GEMM FLOPs: the emulated CUDA device built\n"   \
    "             to count, tests/cuda-emu-count.sh) projected onto each CARD: h100-sxm,\n" \
    "             a100-sxm-80gb, v100-sxm2 or a card file (docs/PERFORMANCE.md,\n"          \
    "             \"Projection\"): a per-op table, the step time and MFU\n"                 \
    "  --counts:  the device's trace of counted work (default $CUDA_EMU_TRACE)\n"

/* The command line of a bench. */
typedef struct {
    const char *preset, *backend, *precision;
    const char *project, *counts; /* --project's cards, --counts' file (NULL: not given) */
    int seq, batch, accum, steps, warmup, threads, layers; /* accum: micro-batches a step */
    double layerdrop;
    bool profile, json, ceiling, dense_top;
    unsigned unfused; /* BERT_FUSE_* bits turned off */
    const char *unfused_list; /* as given */
    const char *norm;         /* post (the preset's) or pre */
} bench_opts;

/* The BERT_FUSE_* bits of a comma list of gelu, join, attention, cast, epilogue, all;
 * false on an unknown name. */
static bool parse_unfused(const char *list, unsigned *out) {
    static const struct { const char *name; unsigned bit; } names[] = {
        {"gelu", BERT_FUSE_GELU}, {"join", BERT_FUSE_JOIN},
        {"attention", BERT_FUSE_ATTENTION}, {"cast", BERT_FUSE_CAST},
        {"epilogue", BERT_FUSE_EPILOGUE}, {"all", BERT_FUSE_ALL},
        {"none", 0}};
    *out = 0;
    for (const char *p = list; *p;) {
        const size_t len = strcspn(p, ",");
        size_t i = 0;
        while (i < sizeof names / sizeof *names &&
               (strlen(names[i].name) != len || strncmp(p, names[i].name, len)))
            i++;
        if (i == sizeof names / sizeof *names) {
            fprintf(stderr, "bertrain bench: --unfused %s: expected a comma list of "
                            "gelu, join, attention, cast, epilogue, all, none\n", list);
            return false;
        }
        *out |= names[i].bit;
        p += len + (p[len] == ',');
    }
    return true;
}

/* The options as given (0 or NULL: not given), before the config resolves
 * them into a bench_opts and a bt_config. */
typedef struct {
    const char *preset, *precision, *norm;
    int seq, batch, accum, layers;
    double layerdrop;
    bool has_layerdrop;
    cli_list sets;
} bench_given;

/* Options into o (defaults first) and g; CLI_OK, CLI_HELP, or CLI_ERROR after
 * one line. */
static int parse_args(int argc, char **argv, bench_opts *o, bench_given *g) {
    *o = (bench_opts){"mini", "cpu", "fp32", NULL, NULL, 128, 8, 1, 10, 2, 0, 0, 0.0, false,
                      false, false, false, 0, "", "post"};
    *g = (bench_given){.layerdrop = -1.0, .sets = cli_list_new(argc)};
    if (!g->sets.items) return CLI_ERROR;
    const cli_opt opts[] = {
        {"--preset", ARG_CHOICE, &g->preset, "P", 0, 0, false, "tiny|mini|small|medium|base|large"},
        {"--seq", ARG_INT, &g->seq, "S", 8, 1 << 16, false, NULL},
        {"--batch", ARG_INT, &g->batch, "B", 1, 1e7, false, NULL},
        {"--accum", ARG_INT, &g->accum, "K", 1, 1e7, false, NULL},
        {"--backend", ARG_STRING, &o->backend, "NAME", 0, 0, false, NULL},
        {"--steps", ARG_INT, &o->steps, "N", 1, 1e9, false, NULL},
        {"--warmup", ARG_INT, &o->warmup, "N", 0, 1e9, false, NULL},
        {"--threads", ARG_INT, &o->threads, "N", 0, 65536, false, NULL},
        {"--layers", ARG_INT, &g->layers, "L", 1, BERT_MAX_LAYERS, false, NULL},
        {"--layerdrop", ARG_DOUBLE, &g->layerdrop, "P", 0, BERT_MAX_LAYERDROP, false, NULL},
        {"--precision", ARG_CHOICE, &g->precision, "fp32|bf16|fp16", 0, 0, false, "fp32|bf16|fp16"},
        {"--norm", ARG_CHOICE, &g->norm, "post|pre", 0, 0, false, "post|pre"},
        {"--unfused", ARG_STRING, &o->unfused_list, "a comma list", 0, 0, false, NULL},
        {"--dense-top", ARG_FLAG, &o->dense_top, NULL, 0, 0, false, NULL},
        {"--profile", ARG_FLAG, &o->profile, NULL, 0, 0, false, NULL},
        {"--ceiling", ARG_FLAG, &o->ceiling, NULL, 0, 0, false, NULL},
        {"--json", ARG_FLAG, &o->json, NULL, 0, 0, false, NULL},
        {"--project", ARG_STRING, &o->project, "CARD[,CARD...]", 0, 0, false, NULL},
        {"--counts", ARG_STRING, &o->counts, "FILE", 0, 0, false, NULL},
        {"--set", ARG_LIST, &g->sets, "key.path=value", 0, 0, false, NULL},
    };
    const cli_spec spec = {"bench", opts, sizeof opts / sizeof *opts, 0, "", BENCH_USAGE};
    int n_pos = 0;
    const int rc = cli_parse(&spec, argc, argv, NULL, &n_pos);
    if (rc != CLI_OK) return rc;
    g->has_layerdrop = g->layerdrop >= 0.0;
    o->profile |= o->ceiling || o->project;
    if (o->project && (o->json || o->ceiling)) {
        fprintf(stderr, "bertrain bench: --project prints a table of its own: not with --json "
                        "or --ceiling\n");
        return CLI_ERROR;
    }
    if (*o->unfused_list && !parse_unfused(o->unfused_list, &o->unfused)) return CLI_ERROR;
    return CLI_OK;
}

/* The run config of a bench: the options as config keys (the preset's model
 * as they shape it; 16-bit storage as bf16.enabled / fp16.enabled give it;
 * --accum as gradient_accumulation_steps),
 * then --set, loaded and validated as train's config; o's preset, seq, batch,
 * accum, precision and norm read back from it. A bench is one rank. bench passes no loss scaler: fp16
 * runs at a fixed loss scale of 1, so no step is skipped and every timed
 * step does the same work. false after one line. */
static bool bench_config(bench_opts *o, const bench_given *g, bt_config *cfg) {
    char given[8][64];
    int n = 0;
    snprintf(given[n++], sizeof *given, "model.preset=%s", g->preset ? g->preset : o->preset);
    snprintf(given[n++], sizeof *given, "data.seq_len=%d", g->seq ? g->seq : o->seq);
    snprintf(given[n++], sizeof *given, "train_micro_batch_size_per_gpu=%d",
             g->batch ? g->batch : o->batch);
    if (g->accum) snprintf(given[n++], sizeof *given, "gradient_accumulation_steps=%d", g->accum);
    if (g->precision && strcmp(g->precision, "fp32"))
        snprintf(given[n++], sizeof *given, "%s.enabled=true", g->precision);
    if (g->layers) snprintf(given[n++], sizeof *given, "model.num_hidden_layers=%d", g->layers);
    if (g->has_layerdrop)
        snprintf(given[n++], sizeof *given, "model.layerdrop=%.17g", g->layerdrop);
    if (g->norm) snprintf(given[n++], sizeof *given, "model.norm=\"%s\"", g->norm);
    const char **all = calloc((size_t)(n + g->sets.n), sizeof *all);
    if (!all) return false;
    for (int i = 0; i < n; i++) all[i] = given[i];
    for (int i = 0; i < g->sets.n; i++) all[n + i] = g->sets.items[i];
    const bool ok = config_load_named(cfg, "bench", all, n + g->sets.n, dist_world());
    free(all);
    if (!ok) return false;
    config_free(cfg); /* bench needs no resolved_json */
    o->preset = cfg->preset;
    o->seq = cfg->data.seq_len;
    o->batch = (int)cfg->micro_batch;
    o->accum = (int)cfg->grad_accum;
    o->precision = cfg->fp16 ? "fp16" : cfg->bf16 ? "bf16" : "fp32";
    o->norm = cfg->model.norm == BERT_NORM_PRE ? "pre" : cfg->model.norm == BERT_NORM_ADMIN ? "admin"
                                                                                           : "post";
    cfg->train_batch_size = (long)o->batch * o->accum;
    return true;
}

/* A micro-batch of step s, samples [first, first + B) of the step's total:
 * random tokens with BERT's special ids at 0..4, masked as training masks,
 * and a random next-sentence label (read where model.nsp is on).
 * Each sample's tokens and mask depend on (s, its place in the step) only,
 * so K micro-batches of B samples hold the batch of K x B samples. */
static void random_batch(bt_batch_buf *mb, const bt_vocab *vocab, const bt_config *cfg, int s,
                         int first, int total, int max_pred) {
    const int seq = mb->T, batch = mb->B;
    mb->n_masked = 0;
    mb->masked_bound = mask_total_bound(batch, seq - 2, BENCH_MASK_PROB, max_pred);
    for (int b = 0; b < batch; b++) {
        int32_t *ids = mb->input_ids + (size_t)b * seq;
        for (int t = 0; t < seq; t++) {
            uint32_t r[4];
            rng_block(cfg->seed, RNG_STREAM_BENCH, (uint32_t)t, (uint32_t)(s * total + first + b), r);
            ids[t] = t == 0 ? 2 : t == seq - 1 ? 3 : 5 + (int32_t)(r[0] % (uint32_t)(vocab->size - 5));
            mb->token_type_ids[(size_t)b * seq + t] = t >= seq / 2;
            mb->attention_mask[(size_t)b * seq + t] = 1;
        }
        uint32_t r[4]; /* the counter after the tokens' */
        rng_block(cfg->seed, RNG_STREAM_BENCH, (uint32_t)seq, (uint32_t)(s * total + first + b), r);
        mb->nsp_labels[b] = (int32_t)(r[0] & 1);
        mb->n_masked += mask_sequence(ids, seq, vocab, vocab->size, BENCH_MASK_PROB, max_pred, cfg->seed,
                                      (uint64_t)s, (uint64_t)(first + b), b * seq,
                                      mb->mlm_positions + mb->n_masked,
                                      mb->mlm_labels + mb->n_masked);
    }
}

/* A step's input: accum micro-batches of batch samples each. */
typedef struct {
    bt_batch_buf *mb;
    uint32_t *first; /* each micro-batch's first sample in the step */
    int n;
} bench_input;

/* The micro-batches' buffers; false when out of host memory. */
static bool bench_input_alloc(bench_input *in, int accum, int batch, int seq, int cap_masked) {
    in->n = 0;
    in->mb = calloc((size_t)accum, sizeof *in->mb);
    in->first = calloc((size_t)accum, sizeof *in->first);
    if (!in->mb || !in->first) return false;
    for (; in->n < accum; in->n++) {
        if (!batch_buf_alloc(&in->mb[in->n], batch, seq, cap_masked)) return false;
        in->first[in->n] = (uint32_t)(in->n * batch);
    }
    return true;
}

static void bench_input_free(bench_input *in) {
    for (int k = 0; k < in->n; k++) batch_buf_free(&in->mb[k]);
    free(in->mb);
    free(in->first);
}

/* What a bench measured. */
typedef struct {
    double ms_per_step, activation_mb, tflops, samples_per_s, layers_run;
    double masked_per_seq, top_rows_per_seq; /* the timed steps' means */
    double top_rows_run_per_seq, head_rows_run_per_seq; /* the same with their padding */
    double loss, grad_norm; /* the last step's: the same bits whatever --unfused says */
    unsigned unfused;       /* the fusions that were off */
    double voluntary, involuntary; /* the process's context switches a timed step: a thread
                                    * that sleeps at a barrier switches voluntarily */
    double host_cpu_ms;            /* CPU time of the thread that issues the ops, a step: on a
                                    * device, the host's own work and any waiting it spins */
    double units_mean;             /* the device's compute units in use after each timed step,
                                    * their mean (the CPU: threads, fewer while contended) */
    double launches, host_reads, host_syncs, host_writes; /* the device's counters a timed
                                    * step (a CUDA Graph's launch counts one) */
    double model_flops;            /* the FLOPs the model needs a step (no padded rows) */
} bench_figures;

/* What the timed steps did, summed over them. */
typedef struct {
    long layers_dropped; /* LayerDrop: layers skipped */
    double masked, top_rows; /* masked tokens; rows the top layer computed (every row: B*T) */
    double top_rows_run, head_rows_run; /* the rows the top layer and the MLM head ran, padded */
    double units;            /* the device's compute units in use after each step */
} bench_work;

/* User and system CPU time in r, seconds. */
static double cpu_seconds(const struct rusage *r) {
    return (double)r->ru_utime.tv_sec + r->ru_utime.tv_usec * 1e-6 + (double)r->ru_stime.tv_sec +
           r->ru_stime.tv_usec * 1e-6;
}

/* The figures: time per step, activation memory, TFLOP/s of the work done (a
 * dropped layer costs one layer's FLOPs less; the top layer at its rows),
 * samples/s. */
static bench_figures measure(const bench_opts *o, const bt_config *cfg, bert_model *m, double dt,
                             const bench_work *w) {
    const double seqs = (double)o->batch * o->accum * o->steps, sps = seqs / dt;
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
                           w->top_rows_run / seqs, w->head_rows_run / seqs,
                           0.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                           (per_sample - mean_dropped * per_layer) * seqs / o->steps};
}

/* The bench's lines, then the profile when there is one. */
static void report_text(const bench_opts *o, const bt_config *cfg, bt_backend *be,
                        const bench_figures *f) {
    bt_device_info info;
    be->info(be, &info);
    char accum[48] = "";
    if (o->accum > 1) snprintf(accum, sizeof accum, " x %d micro-batches", o->accum);
    printf("bench: preset %s (%d layers, layerdrop %g), seq %d, batch %d%s, %d steps after %d "
           "warm-up, backend %s (%s)\n", o->preset, cfg->model.num_hidden_layers,
           (double)cfg->model.layerdrop, o->seq, o->batch, accum, o->steps, o->warmup, be->name,
           info.name);
    if (*info.tuning) printf("tuning: %s\n", info.tuning);
    printf("fused ops: %s\n", !f->unfused ? "all" : f->unfused == BERT_FUSE_ALL ? "none" : "some");
    printf("fp32 GEMMs: %s\n", info.gemm_tf32 ? "TF32 tensor cores" : "fp32");
    printf("ms/step: %.1f\n", f->ms_per_step);
    printf("a step: %.1f launches (a CUDA Graph's counts one), %.1f blocking reads, %.1f waits, "
           "%.1f blocking writes\n", f->launches, f->host_reads, f->host_syncs, f->host_writes);
    printf("activations: %.1f MB (%s storage)\n", f->activation_mb, o->precision);
    if (cfg->model.layerdrop > 0.0f)
        printf("layers run per step: %.2f of %d (LayerDrop)\n", f->layers_run,
               cfg->model.num_hidden_layers);
    printf("top layer: %.1f of %d rows a sequence after its attention (%s)\n",
           f->top_rows_per_seq, o->seq, o->dense_top ? "--dense-top" : "the heads' rows");
    printf("padded rows: the top layer ran %.1f a sequence, the MLM head %.1f for %.1f masked\n",
           f->top_rows_run_per_seq, f->head_rows_run_per_seq, f->masked_per_seq);
    printf("TFLOP/s: %.3f\n", f->tflops);
    printf("samples/s: %.2f\n", f->samples_per_s);
    printf("context switches a step: %.1f voluntary, %.1f involuntary\n", f->voluntary,
           f->involuntary);
    printf("host thread CPU: %.1f ms a step\n", f->host_cpu_ms);
    printf("compute units in use: %.2f a step on average, %d at the end\n", f->units_mean,
           info.compute_units);
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
    cJSON_AddNumberToObject(j, "accum", o->accum);
    cJSON_AddNumberToObject(j, "steps", o->steps);
    cJSON_AddNumberToObject(j, "warmup", o->warmup);
    cJSON_AddStringToObject(j, "precision", o->precision);
    cJSON_AddBoolToObject(j, "tf32", info.gemm_tf32);
    cJSON_AddStringToObject(j, "unfused", o->unfused_list);
    cJSON_AddStringToObject(j, "norm", o->norm);
    cJSON_AddBoolToObject(j, "dense_top", o->dense_top);
    cJSON_AddNumberToObject(j, "top_rows_per_seq", f->top_rows_per_seq);
    cJSON_AddNumberToObject(j, "top_rows_run_per_seq", f->top_rows_run_per_seq);
    cJSON_AddNumberToObject(j, "head_rows_run_per_seq", f->head_rows_run_per_seq);
    cJSON_AddNumberToObject(j, "masked_per_seq", f->masked_per_seq);
    cJSON_AddStringToObject(j, "backend", be->name);
    cJSON_AddStringToObject(j, "device", info.name);
    cJSON_AddNumberToObject(j, "ms_per_step", f->ms_per_step);
    cJSON_AddNumberToObject(j, "activation_mb", f->activation_mb);
    cJSON_AddNumberToObject(j, "layers_run", f->layers_run);
    cJSON_AddNumberToObject(j, "tflops", f->tflops);
    cJSON_AddNumberToObject(j, "model_gflop_per_step", f->model_flops / 1e9);
    cJSON_AddNumberToObject(j, "samples_per_s", f->samples_per_s);
    cJSON_AddNumberToObject(j, "voluntary_switches_per_step", f->voluntary);
    cJSON_AddNumberToObject(j, "involuntary_switches_per_step", f->involuntary);
    cJSON_AddNumberToObject(j, "host_thread_cpu_ms_per_step", f->host_cpu_ms);
    cJSON_AddNumberToObject(j, "compute_units_mean", f->units_mean);
    cJSON_AddNumberToObject(j, "launches_per_step", f->launches);
    cJSON_AddNumberToObject(j, "host_reads_per_step", f->host_reads);
    cJSON_AddNumberToObject(j, "host_syncs_per_step", f->host_syncs);
    cJSON_AddNumberToObject(j, "host_writes_per_step", f->host_writes);
    cJSON_AddNumberToObject(j, "loss", f->loss);
    cJSON_AddNumberToObject(j, "grad_norm", f->grad_norm);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "bench", j);
    cJSON *prof = bt_profiler_of(be) ? bt_profile_to_json(bt_profiler_of(be)) : NULL;
    cJSON_AddItemToObject(root, "profile", prof ? prof : cJSON_CreateNull());
    char *text = cJSON_PrintUnformatted(root);
    puts(text ? text : "{\"error\": \"out of memory\"}");
    free(text);
    cJSON_Delete(root);
}

/* Step s of the bench: its micro-batches drawn (random_batch), then trained. */
static step_result bench_step(bert_model *m, bt_optimizer *opt, const bt_config *cfg,
                              const bench_opts *o, bench_input *in, const bt_vocab *vocab,
                              int max_pred, int s) {
    for (int k = 0; k < in->n; k++)
        random_batch(&in->mb[k], vocab, cfg, s, (int)in->first[k], o->batch * in->n, max_pred);
    const step_batch step_in = {in->mb, in->first, in->n, 0, (long)o->batch * in->n};
    return train_step(m, opt, cfg, s, &step_in, 1e-4, NULL, NULL, NULL, NULL);
}

/* The launches of one more step, run without the profiler's marks: at most
 * one a graph region when the device captures the step's regions as CUDA
 * Graphs (the profiled steps before it have grown every buffer), which the
 * projection then prices so; else 0 (printed: "launched op by op"). One
 * step, as it costs the emulator as much as a profiled one. */
static int graph_launches_unprofiled(bert_model *m, bt_optimizer *opt, const bt_config *cfg,
                                     const bench_opts *o, bench_input *in, const bt_vocab *vocab,
                                     int max_pred) {
    bt_backend *be = m->be;
    bt_counters before, after;
    be->counters(be, &before);
    bench_step(m, opt, cfg, o, in, vocab, max_pred, o->warmup + o->steps);
    be->counters(be, &after);
    const long launches = after.launches - before.launches;
    return launches >= 1 && launches <= BT_GRAPH_UPDATE + 1 ? (int)launches : 0;
}

int cli_bench(int argc, char **argv) {
    bench_opts o;
    bench_given g;
    bt_config cfg;
    const int parsed = parse_args(argc, argv, &o, &g);
    const bool ok = parsed == CLI_OK && bench_config(&o, &g, &cfg);
    free(g.sets.items);
    if (!ok) return parsed == CLI_HELP ? 0 : 2;
    bench_projection pr;
    if (o.project && !project_setup(&pr, o.project, o.counts)) return 2;
    bt_backend *be = open_backend(o.backend, o.threads, cfg.tf32, o.profile);
    if (!be) return 2; /* a device that cannot be opened: the user's spec, exit 2 */
    const bt_vocab vocab = {.size = cfg.model.vocab_size, .pad_id = 0, .unk_id = 1, .cls_id = 2,
                            .sep_id = 3, .mask_id = 4};
    const int max_pred = mask_cap_default(o.seq - 2, BENCH_MASK_PROB); /* training's default cap */
    char err[256];
    bert_model *m = bert_create(be, &cfg.model, o.batch, o.seq, o.batch * max_pred, err,
                                sizeof err);
    bt_optimizer *opt = m ? optim_create(m, &cfg.optim, err, sizeof err) : NULL;
    bench_input in = {0};
    if (!m || !opt || !bench_input_alloc(&in, o.accum, o.batch, o.seq, o.batch * max_pred)) {
        fprintf(stderr, "bertrain bench: %s\n", m && opt ? "out of host memory" : err);
        bench_input_free(&in);
        optim_free(opt, m);
        bert_free(m);
        be->destroy(be);
        return 1;
    }
    bert_init_params(m, cfg.seed);
    if (*o.unfused_list) m->unfused = o.unfused; /* else the device's choice */
    m->dense_top = o.dense_top;
    double t0 = 0.0;
    struct rusage ru0 = {0}, ru1, th0 = {0}, th1;
    bt_counters c0 = {0}, c1;
    bench_work work = {0};
    step_result last = {0};
    for (int s = 0; s < o.warmup + o.steps; s++) {
        if (s == o.warmup) {
            be->sync(be);
            t0 = now_s();
            getrusage(RUSAGE_SELF, &ru0);
            getrusage(RUSAGE_THREAD, &th0);
            be->counters(be, &c0);
        }
        if (s >= o.warmup && bt_profiler_of(be)) bt_profile_step_begin(bt_profiler_of(be));
        step_result r = bench_step(m, opt, &cfg, &o, &in, &vocab, max_pred, s);
        last = r;
        if (s >= o.warmup && bt_profiler_of(be)) bt_profile_step_end(bt_profiler_of(be));
        if (s >= o.warmup && o.project) project_after_step(&pr, bt_profiler_of(be));
        if (s >= o.warmup) {
            bt_device_info now;
            be->info(be, &now);
            work.units += now.compute_units;
            work.layers_dropped += r.layers_dropped;
            for (int k = 0; k < in.n; k++) work.masked += in.mb[k].n_masked;
            work.top_rows += (double)r.top_rows;
            work.top_rows_run += (double)r.top_rows_run;
            work.head_rows_run += (double)r.head_rows_run;
        }
    }
    be->counters(be, &c1); /* before the sync, which the steps did not make */
    be->sync(be);
    bench_figures f = measure(&o, &cfg, m, now_s() - t0, &work);
    f.launches = (double)(c1.launches - c0.launches) / o.steps;
    f.host_reads = (double)(c1.host_reads - c0.host_reads) / o.steps;
    f.host_syncs = (double)(c1.host_syncs - c0.host_syncs) / o.steps;
    f.host_writes = (double)(c1.host_writes - c0.host_writes) / o.steps;
    if (o.project) /* after the timing: these steps are not the bench's */
        pr.step.graph_launches =
            graph_launches_unprofiled(m, opt, &cfg, &o, &in, &vocab, max_pred);
    getrusage(RUSAGE_SELF, &ru1);
    getrusage(RUSAGE_THREAD, &th1);
    f.host_cpu_ms = 1e3 * (cpu_seconds(&th1) - cpu_seconds(&th0)) / o.steps;
    f.units_mean = work.units / o.steps;
    f.voluntary = (double)(ru1.ru_nvcsw - ru0.ru_nvcsw) / o.steps;
    f.involuntary = (double)(ru1.ru_nivcsw - ru0.ru_nivcsw) / o.steps;
    f.loss = last.loss;
    f.grad_norm = last.grad_norm;
    f.unfused = m->unfused;
    /* the GEMMs alone only after the timed steps, so they cost those nothing */
    int rc = o.ceiling && bt_profiler_of(be) && !bt_profile_gemm_alone(bt_profiler_of(be), 3) ? 1 : 0;
    if (rc == 0 && o.json)
        report_json(&o, &cfg, be, &f);
    else if (rc == 0)
        report_text(&o, &cfg, be, &f);
    if (o.project) {
        pr.step.model_flops = f.model_flops;
        rc = project_report(&pr, bt_profiler_of(be), stdout);
    }
    bench_input_free(&in);
    optim_free(opt, m);
    bert_free(m);
    be->destroy(be);
    return rc;
}
