/* A projected step time on a GPU from counted device work (projection.h). */
#include "projection.h"

#include <stdlib.h>
#include <string.h>

/* The model's constants (docs/PERFORMANCE.md, "Projection"). */
#define GEMM_EFFICIENCY 0.7
#define HBM_EFFICIENCY 0.8
#define SMEM_EFFICIENCY 0.8
#define THREADS_PER_SM 2048.0
#define ACCESS_S 0.5e-9
#define LAUNCH_S 4e-6
#define GRAPH_LAUNCH_S 1e-6
#define ROUND_TRIP_S 20e-6

/* NVIDIA's datasheets, dense (no sparsity): H100 SXM5 (H100 datasheet:
 * FP32 67, TF32 989 / 2, BF16/FP16 1979 / 2 TFLOPS, 3.35 TB/s, 132 SMs),
 * A100 SXM 80GB (A100 datasheet: FP32 19.5, TF32 156, BF16/FP16 312,
 * 2039 GB/s, 108 SMs), V100 SXM2 (V100 datasheet: FP32 15.7, tensor FP16
 * 125, 900 GB/s, 80 SMs; no TF32, no BF16). Shared memory: 32 banks of 4
 * bytes, 128 bytes a clock per SM on all three, at the boost clock (H100 SXM
 * 1.98 GHz, A100 1.41 GHz, V100 1.53 GHz). */
static const proj_card known_cards[] = {
    {"h100-sxm", 132, 3350.0, 67.0, 494.5, 989.5, 132 * 128 * 1.98e-3},
    {"a100-sxm-80gb", 108, 2039.0, 19.5, 156.0, 312.0, 108 * 128 * 1.41e-3},
    {"v100-sxm2", 80, 900.0, 15.7, 0.0, 125.0, 80 * 128 * 1.53e-3},
};

/* One "key value" line of a card file into c; false when the key is unknown
 * or the value not a positive number (name: any word). */
static bool card_line(proj_card *c, const char *key, const char *value) {
    if (!strcmp(key, "name")) {
        snprintf(c->name, sizeof c->name, "%.63s", value);
        return true;
    }
    char *end;
    const double v = strtod(value, &end);
    if (end == value || *end || v < 0) return false;
    if (!strcmp(key, "sms")) c->sms = (int)v;
    else if (!strcmp(key, "hbm_gbs")) c->hbm_gbs = v;
    else if (!strcmp(key, "fp32_tflops")) c->fp32 = v;
    else if (!strcmp(key, "tf32_tflops")) c->tf32 = v;
    else if (!strcmp(key, "f16_tflops")) c->f16 = v;
    else if (!strcmp(key, "smem_tbs")) c->smem_tbs = v;
    else return false;
    return true;
}

bool proj_card_get(const char *name_or_file, proj_card *out, char *err, size_t n) {
    for (size_t i = 0; i < sizeof known_cards / sizeof *known_cards; i++)
        if (!strcmp(name_or_file, known_cards[i].name)) {
            *out = known_cards[i];
            return true;
        }
    FILE *f = fopen(name_or_file, "r");
    if (!f) {
        snprintf(err, n, "%s: not a known card (h100-sxm, a100-sxm-80gb, v100-sxm2) nor a "
                         "readable card file", name_or_file);
        return false;
    }
    *out = (proj_card){{0}, 0, 0, 0, 0, 0, 0};
    snprintf(out->name, sizeof out->name, "%.63s", name_or_file);
    char line[256], key[64], value[128];
    int no = 0;
    bool ok = true;
    while (ok && fgets(line, sizeof line, f)) {
        no++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        const int got = sscanf(line, "%63s %127s", key, value);
        if (got <= 0) continue;
        ok = got == 2 && card_line(out, key, value);
        if (!ok) snprintf(err, n, "%s:%d: expected name, sms, hbm_gbs, fp32_tflops, "
                                  "tf32_tflops, f16_tflops or smem_tbs and a value",
                          name_or_file, no);
    }
    fclose(f);
    if (ok && (out->sms <= 0 || out->hbm_gbs <= 0 || out->fp32 <= 0)) {
        snprintf(err, n, "%s: sms, hbm_gbs and fp32_tflops are required", name_or_file);
        ok = false;
    }
    return ok;
}

/* The card's peak for a precision, FLOP/s: the fp32 peak where it has none. */
static double peak(const proj_card *c, int precision) {
    const double t = precision == PROJ_TF32 ? c->tf32 : precision == PROJ_F16 ? c->f16 : c->fp32;
    return 1e12 * (t > 0 ? t : c->fp32);
}

double proj_seconds(const proj_card *c, const proj_work *w) {
    const double launch = w->in_graph ? GRAPH_LAUNCH_S : LAUNCH_S;
    if (w->kind == PROJ_GEMM) return launch + w->flops / (GEMM_EFFICIENCY * peak(c, w->precision));
    if (w->kind == PROJ_HOST_COPY) return launch;
    double occupancy = 1.0;
    if (w->kind == PROJ_KERNEL) {
        occupancy = w->threads / (c->sms * THREADS_PER_SM);
        if (occupancy > 1.0) occupancy = 1.0;
        if (occupancy <= 0.0) occupancy = 1.0 / (c->sms * THREADS_PER_SM);
    }
    double t = (w->read + w->written) / (HBM_EFFICIENCY * c->hbm_gbs * 1e9) / occupancy;
    const double serial = w->most_accesses * ACCESS_S;
    if (t < serial) t = serial;
    if (w->shared > 0 && c->smem_tbs > 0) { /* shared memory, on the SMs the blocks fill */
        double sms_used = w->blocks / c->sms;
        if (sms_used > 1.0) sms_used = 1.0;
        if (sms_used <= 0.0) sms_used = 1.0 / c->sms;
        const double ts = w->shared / (SMEM_EFFICIENCY * c->smem_tbs * 1e12) / sms_used;
        if (t < ts) t = ts;
    }
    return launch + t;
}

/* Room for one more element in the array *items of *cap elements of size
 * bytes holding n (doubled when full, first when empty); false when out of
 * memory, the array unchanged. */
static bool room_for_one(void **items, int *cap, int n, size_t size, int first) {
    if (n < *cap) return true;
    const int more_cap = *cap ? 2 * *cap : first;
    void *more = realloc(*items, (size_t)more_cap * size);
    if (!more) return false;
    *items = more;
    *cap = more_cap;
    return true;
}

/* The op named `name` in s, added when new; NULL when out of memory. */
static proj_op *op_named(proj_step *s, const char *name) {
    for (int i = 0; i < s->n_ops; i++)
        if (!strcmp(s->ops[i].name, name)) return &s->ops[i];
    void *ops = s->ops;
    if (!room_for_one(&ops, &s->cap_ops, s->n_ops, sizeof *s->ops, 64)) return NULL;
    s->ops = ops;
    proj_op *o = &s->ops[s->n_ops++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    return o;
}

/* Add w to op o's totals and work; false when out of memory. */
static bool op_add(proj_op *o, const proj_work *w, double blocks, int block) {
    void *work = o->work;
    if (!room_for_one(&work, &o->cap_work, o->n_work, sizeof *o->work, 16)) return false;
    o->work = work;
    o->work[o->n_work++] = *w;
    o->launches++;
    o->blocks += blocks;
    if (block > o->block) o->block = block;
    o->read += w->read;
    o->written += w->written;
    if (w->most_accesses > o->most_accesses) o->most_accesses = w->most_accesses;
    o->shared += w->shared;
    if (w->kind == PROJ_GEMM) o->flops[w->precision] += w->flops;
    return true;
}

/* One work line of the trace into w (and a kernel's blocks and block size);
 * false when it is not one. */
static bool parse_work(const char *line, proj_work *w, double *blocks, int *block) {
    *w = (proj_work){0};
    *blocks = 0;
    *block = 0;
    char name[128], kind[16];
    unsigned g[3], b[3];
    double r, wr, most, flops, bytes, shared = 0;
    int m, n, k, batch, got;
    /* SHARED is the eleventh field; a trace from before it has ten */
    if ((got = sscanf(line, "launch %127s %u %u %u %u %u %u %lf %lf %lf %lf", name, &g[0], &g[1],
                      &g[2], &b[0], &b[1], &b[2], &r, &wr, &most, &shared)) >= 10) {
        *blocks = (double)g[0] * g[1] * g[2];
        *block = (int)(b[0] * b[1] * b[2]);
        *w = (proj_work){PROJ_KERNEL, *blocks * *block, *blocks, r, wr, most, got == 11 ? shared : 0,
                         0, 0, false};
        return true;
    }
    if (sscanf(line, "gemm %15s %d %d %d %d %lf", kind, &m, &n, &k, &batch, &flops) == 6) {
        const int prec = !strcmp(kind, "tf32") ? PROJ_TF32 : !strcmp(kind, "fp32") ? PROJ_FP32
                                                                                   : PROJ_F16;
        *w = (proj_work){PROJ_GEMM, 0, 0, 0, 0, 0, 0, flops, prec, false};
        return true;
    }
    if (sscanf(line, "copy %15s %lf", kind, &bytes) == 2) {
        const bool d2d = !strcmp(kind, "d2d"), set = !strcmp(kind, "memset");
        *w = (proj_work){d2d || set ? PROJ_COPY : PROJ_HOST_COPY, 0, 0, d2d ? bytes : 0,
                         d2d || set ? bytes : 0, 0, 0, 0, 0, false};
        return true;
    }
    return false;
}

/* The event that begins at mark m, else -1. */
static int event_at(const proj_event *ev, int n_ev, int m) {
    for (int i = 0; i < n_ev; i++)
        if (ev[i].mark_before == m) return i;
    return -1;
}

bool proj_read_step(FILE *f, const proj_event *ev, int n_ev, proj_step *s, char *err,
                    size_t n) {
    char line[512];
    int mark = 0, cur = -1, counted;
    bool started = false; /* past the step's first mark: work before it is not the step's */
    long no = 0;
    while (fgets(line, sizeof line, f)) {
        no++;
        proj_work w;
        double blocks;
        int block;
        if (!strcmp(line, "mark\n")) {
            const int e = event_at(ev, n_ev, mark);
            started = true;
            if (e >= 0) cur = e;
            else if (cur >= 0 && ev[cur].mark_after == mark) cur = -1;
            mark++;
        } else if (sscanf(line, "cuda-emu trace counted %d", &counted) == 1) {
            s->counted = counted == 1;
        } else if (parse_work(line, &w, &blocks, &block)) {
            if (!started) continue;
            proj_op *o = op_named(s, cur >= 0 ? ev[cur].name : "(outside ops)");
            if (!o || !op_add(o, &w, blocks, block)) {
                snprintf(err, n, "out of host memory");
                return false;
            }
        } else {
            snprintf(err, n, "trace line %ld of the step is not one of the trace's: %.60s", no,
                     line);
            return false;
        }
    }
    for (int i = 0; i < n_ev; i++) { /* the calls, also of ops that did no device work */
        proj_op *o = op_named(s, ev[i].name);
        if (!o) {
            snprintf(err, n, "out of host memory");
            return false;
        }
        o->calls++;
    }
    s->steps++;
    return true;
}

/* Seconds of op o on card c, all steps; graphed: each piece launched inside
 * a CUDA Graph. */
static double op_seconds(const proj_op *o, const proj_card *c, bool graphed) {
    double t = 0.0;
    for (int i = 0; i < o->n_work; i++) {
        proj_work w = o->work[i];
        w.in_graph = w.in_graph || graphed;
        t += proj_seconds(c, &w);
    }
    return t;
}

double proj_step_seconds(const proj_step *s, const proj_card *c, double *mfu) {
    const double st = s->steps > 0 ? s->steps : 1;
    double t = s->round_trips * ROUND_TRIP_S + s->graph_launches * LAUNCH_S, flops = 0.0;
    for (int i = 0; i < s->n_ops; i++) {
        t += op_seconds(&s->ops[i], c, s->graph_launches > 0) / st;
        for (int p = 0; p < PROJ_N_PREC; p++) flops += s->ops[i].flops[p] / st;
    }
    if (mfu) *mfu = t > 0 ? flops / (t * peak(c, PROJ_F16)) : 0.0;
    return t;
}

void proj_step_free(proj_step *s) {
    for (int i = 0; i < s->n_ops; i++) free(s->ops[i].work);
    free(s->ops);
    memset(s, 0, sizeof *s);
}

/* The header lines of the table: the cards and the columns. */
static void print_header(const proj_step *s, const proj_card *cards, int n, FILE *out) {
    fprintf(out, "projection: %d step(s) counted%s; model: docs/PERFORMANCE.md, \"Projection\"\n",
            s->steps, s->counted ? "" : " (global memory NOT counted)");
    if (s->graph_launches > 0)
        fprintf(out, "launched as %d CUDA Graph%s a step (as the device ran it unprofiled): every "
                     "piece of work priced inside a graph\n", s->graph_launches,
                s->graph_launches == 1 ? "" : "s");
    else
        fprintf(out, "launched op by op\n");
    for (int j = 0; j < n; j++)
        fprintf(out, "card %s: %d SMs, HBM %.0f GB/s, shared memory %.1f TB/s, dense TFLOP/s "
                     "fp32 %g, tf32 %g, 16-bit %g\n",
                cards[j].name, cards[j].sms, cards[j].hbm_gbs, cards[j].smem_tbs, cards[j].fp32,
                cards[j].tf32, cards[j].f16);
    fprintf(out, "%-22s %6s %8s %9s %5s %10s %10s %7s %10s %9s %9s %9s", "op", "calls",
            "launches", "blocks", "block", "MB read", "MB written", "acc/thr", "MB shared",
            "GF fp32", "GF tf32", "GF 16bit");
    for (int j = 0; j < n; j++) fprintf(out, " %14.14s", cards[j].name);
    fprintf(out, "\n%-22s %6s %8s %9s %5s %10s %10s %7s %10s %9s %9s %9s", "", "/step", "/step",
            "/step", "max", "/step", "/step", "max", "/step", "/step", "/step", "/step");
    for (int j = 0; j < n; j++) fprintf(out, " %14s", "ms/step");
    fputc('\n', out);
}

void proj_print(const proj_step *s, const proj_card *cards, int n, FILE *out) {
    const double st = s->steps > 0 ? s->steps : 1;
    print_header(s, cards, n, out);
    int *order = malloc((size_t)(s->n_ops + 1) * sizeof *order);
    double *t0 = malloc((size_t)(s->n_ops + 1) * sizeof *t0);
    if (!order || !t0) {
        free(order);
        free(t0);
        fprintf(out, "projection: out of host memory\n");
        return;
    }
    for (int i = 0; i < s->n_ops; i++) {
        order[i] = i;
        t0[i] = n > 0 ? op_seconds(&s->ops[i], &cards[0], s->graph_launches > 0) : 0.0;
    }
    for (int i = 1; i < s->n_ops; i++) /* longest first on the first card */
        for (int j = i; j > 0 && t0[order[j]] > t0[order[j - 1]]; j--) {
            const int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    double flops[PROJ_N_PREC] = {0};
    for (int k = 0; k < s->n_ops; k++) {
        const proj_op *o = &s->ops[order[k]];
        char block[16] = "-";
        if (o->block) snprintf(block, sizeof block, "%d", o->block);
        fprintf(out, "%-22s %6.1f %8.1f %9.0f %5s %10.3f %10.3f %7.0f %10.3f %9.3f %9.3f %9.3f",
                o->name, o->calls / st, o->launches / st, o->blocks / st, block,
                o->read / st / 1e6, o->written / st / 1e6, o->most_accesses,
                o->shared / st / 1e6, o->flops[PROJ_FP32] / st / 1e9,
                o->flops[PROJ_TF32] / st / 1e9, o->flops[PROJ_F16] / st / 1e9);
        for (int p = 0; p < PROJ_N_PREC; p++) flops[p] += o->flops[p] / st;
        for (int j = 0; j < n; j++)
            fprintf(out, " %14.3f", 1e3 * op_seconds(o, &cards[j], s->graph_launches > 0) / st);
        fputc('\n', out);
    }
    fprintf(out, "%-22s %6.1f %8s %9s %5s %10s %10s %7s %10s %9s %9s %9s", "(host waits)",
            s->round_trips, "", "", "", "", "", "", "", "", "", "");
    for (int j = 0; j < n; j++) fprintf(out, " %14.3f", 1e3 * s->round_trips * ROUND_TRIP_S);
    if (s->graph_launches > 0) {
        fprintf(out, "\n%-22s %6s %8d %9s %5s %10s %10s %7s %10s %9s %9s %9s", "(graph launches)", "",
                s->graph_launches, "", "", "", "", "", "", "", "", "");
        for (int j = 0; j < n; j++) fprintf(out, " %14.3f", 1e3 * s->graph_launches * LAUNCH_S);
    }
    const double all = flops[0] + flops[1] + flops[2];
    fprintf(out, "\nstep: GEMM GFLOP %.3f (fp32 %.3f, tf32 %.3f, 16-bit %.3f)\n", all / 1e9,
            flops[0] / 1e9, flops[1] / 1e9, flops[2] / 1e9);
    if (s->model_flops > 0)
        fprintf(out, "step: model GFLOP %.3f (what the model needs, without the rows the "
                     "device pads)\n", s->model_flops / 1e9);
    for (int j = 0; j < n; j++) {
        double mfu;
        const double t = proj_step_seconds(s, &cards[j], &mfu);
        const double f16 = peak(&cards[j], PROJ_F16);
        fprintf(out, "projected on %s: %.3f ms a step, MFU %.1f%% (of %g dense 16-bit TFLOP/s)",
                cards[j].name, 1e3 * t, 100.0 * mfu, f16 / 1e12);
        if (s->model_flops > 0 && t > 0)
            fprintf(out, ", %.1f%% of the model's FLOPs", 100.0 * s->model_flops / (t * f16));
        fputc('\n', out);
    }
    free(order);
    free(t0);
}
