/* The profiler's steps and reports (profile.h). */
#define _POSIX_C_SOURCE 200809L
#include "profile_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void prof_destroy(bt_backend *be) {
    bt_profiler *p = be->ctx;
    p->inner->destroy(p->inner);
    free(p->ev);
    free(p->shapes);
    free(p);
    free(be);
}

bt_backend *bt_profile_wrap(bt_backend *inner) {
    bt_backend *w = calloc(1, sizeof *w);
    bt_profiler *p = calloc(1, sizeof *p);
    if (!w || !p) {
        free(w);
        free(p);
        return NULL;
    }
    p->inner = inner;
    w->name = inner->name;
    w->ctx = p;
    prof_fill_ops(w);
    w->destroy = prof_destroy;
    return w;
}

bt_profiler *bt_profiler_of(const bt_backend *be) {
    return be && be->destroy == prof_destroy ? be->ctx : NULL;
}

void bt_profile_step_begin(bt_profiler *p) {
    p->inner->marks_reset(p->inner);
    p->n_ev = 0;
    p->step_calls = 0;
    p->inner->counters(p->inner, &p->at_begin);
    p->in_step = true;
    p->step_t0 = wall_s();
}

void bt_profile_step_end(bt_profiler *p) {
    if (!p->in_step) return;
    bt_backend *in = p->inner;
    p->in_step = false;
    in->sync(in); /* the step ends when the device has finished it */
    const double wall = wall_s() - p->step_t0;
    bt_counters now;
    in->counters(in, &now);
    for (int i = 0; i < p->n_ev; i++) {
        const prof_event *e = &p->ev[i];
        prof_total *t = &p->total[e->op];
        const double seconds = in->mark_seconds(in, e->mark_before, e->mark_after);
        t->calls++;
        t->seconds += seconds;
        t->flops += e->flops;
        t->bytes += e->bytes;
        if (e->shape >= 0) {
            prof_gemm_shape *g = &p->shapes[e->shape];
            g->calls++;
            g->seconds += seconds;
            g->flops += e->flops;
        }
    }
    in->marks_reset(in);
    p->steps++;
    p->step_seconds += wall;
    p->calls += (double)p->step_calls;
    p->launches += (double)(now.launches - p->at_begin.launches);
    const long reads = now.host_reads - p->at_begin.host_reads,
               syncs = now.host_syncs - p->at_begin.host_syncs - 1; /* not the wait above */
    p->reads += (double)reads;
    p->syncs += (double)syncs;
    if (reads > p->most_reads) p->most_reads = reads;
    if (syncs > p->most_syncs) p->most_syncs = syncs;
    p->writes += (double)(now.host_writes - p->at_begin.host_writes);
    p->mem_peak = now.mem_peak;
}

int bt_profile_step_len(const bt_profiler *p) { return p->n_ev; }

void bt_profile_step_op(const bt_profiler *p, int i, const char **name, int *mark_before,
                        int *mark_after) {
    *name = prof_op_name(p->ev[i].op);
    *mark_before = p->ev[i].mark_before;
    *mark_after = p->ev[i].mark_after;
}

bt_profile_summary bt_profile_summarize(const bt_profiler *p) {
    const double n = p->steps > 0 ? p->steps : 1;
    return (bt_profile_summary){p->steps,        p->step_seconds / n, p->calls / n,
                                p->launches / n, p->reads / n,        p->syncs / n,
                                p->writes / n,   p->mem_peak,         p->most_reads,
                                p->most_syncs};
}

/* Op indices by total time, longest first (ops never called left out);
 * returns how many. */
static int ops_by_time(const bt_profiler *p, int *order) {
    int n = 0;
    for (int i = 0; i < PROF_N_OPS; i++)
        if (p->total[i].calls) order[n++] = i;
    for (int i = 1; i < n; i++) /* insertion sort: stable, so ties keep table order */
        for (int j = i; j > 0 && p->total[order[j]].seconds > p->total[order[j - 1]].seconds; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    return n;
}

/* GFLOP/s for ops that count FLOPs, else GB/s; *is_flops says which. */
static double op_rate(const prof_total *t, bool *is_flops) {
    *is_flops = t->flops > 0;
    if (t->seconds <= 0) return 0.0;
    return (*is_flops ? t->flops : t->bytes) / t->seconds / 1e9;
}

void bt_profile_print(const bt_profiler *p, FILE *out) {
    const bt_profile_summary s = bt_profile_summarize(p);
    const double n = s.steps > 0 ? s.steps : 1, step_ms = 1e3 * s.step_s;
    fprintf(out, "profile: %d step(s) on %s, %.2f ms a step (wall clock)\n", s.steps,
            p->inner->name, step_ms);
    fprintf(out, "%-16s %10s %10s %7s %10s %10s\n", "op", "calls/step", "ms/step", "share",
            "GFLOP/s", "GB/s");
    int order[PROF_N_OPS];
    const int k = ops_by_time(p, order);
    double op_ms = 0.0;
    for (int j = 0; j < k; j++) {
        const prof_total *t = &p->total[order[j]];
        bool fl;
        const double rate = op_rate(t, &fl), ms = 1e3 * t->seconds / n;
        op_ms += ms;
        char gf[16] = "-", gb[16] = "-";
        if (t->seconds > 0) snprintf(fl ? gf : gb, sizeof gf, "%.1f", rate);
        fprintf(out, "%-16s %10.1f %10.3f %6.1f%% %10s %10s\n", prof_op_name(order[j]),
                t->calls / n, ms, step_ms > 0 ? 100.0 * ms / step_ms : 0.0, gf, gb);
    }
    fprintf(out, "%-16s %10s %10.3f %6.1f%%\n", "(outside ops)", "", step_ms - op_ms,
            step_ms > 0 ? 100.0 * (step_ms - op_ms) / step_ms : 0.0);
    fprintf(out, "per step: %.1f op calls, %.1f kernel launches, %.1f blocking reads, %.1f "
                 "waits, %.1f uploads (at most %ld reads and %ld waits in a step); device "
                 "memory peak %.1f MB\n",
            s.op_calls, s.launches, s.host_reads, s.host_syncs, s.host_writes, s.most_reads,
            s.most_syncs, s.mem_peak / 1e6);
    prof_gemm_print(p, out);
}

void *bt_profile_to_json(const bt_profiler *p) {
    const bt_profile_summary s = bt_profile_summarize(p);
    const double n = s.steps > 0 ? s.steps : 1;
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON_AddStringToObject(root, "backend", p->inner->name);
    cJSON_AddNumberToObject(root, "steps", s.steps);
    cJSON_AddNumberToObject(root, "step_ms", 1e3 * s.step_s);
    cJSON *per_step = cJSON_AddObjectToObject(root, "per_step");
    cJSON_AddNumberToObject(per_step, "op_calls", s.op_calls);
    cJSON_AddNumberToObject(per_step, "launches", s.launches);
    cJSON_AddNumberToObject(per_step, "host_reads", s.host_reads);
    cJSON_AddNumberToObject(per_step, "host_syncs", s.host_syncs);
    cJSON_AddNumberToObject(per_step, "host_writes", s.host_writes);
    cJSON *most = cJSON_AddObjectToObject(root, "most_in_a_step");
    cJSON_AddNumberToObject(most, "host_reads", (double)s.most_reads);
    cJSON_AddNumberToObject(most, "host_syncs", (double)s.most_syncs);
    cJSON_AddNumberToObject(root, "mem_peak_bytes", (double)s.mem_peak);
    cJSON *ops = cJSON_AddArrayToObject(root, "ops");
    int order[PROF_N_OPS];
    const int k = ops_by_time(p, order);
    for (int j = 0; j < k; j++) {
        const prof_total *t = &p->total[order[j]];
        bool fl;
        const double rate = op_rate(t, &fl);
        cJSON *op = cJSON_CreateObject();
        cJSON_AddStringToObject(op, "op", prof_op_name(order[j]));
        cJSON_AddNumberToObject(op, "calls", t->calls / n);
        cJSON_AddNumberToObject(op, "ms", 1e3 * t->seconds / n);
        cJSON_AddNumberToObject(op, "share", s.step_s > 0 ? t->seconds / n / s.step_s : 0.0);
        cJSON_AddNumberToObject(op, fl ? "gflops" : "gbytes_s", rate);
        cJSON_AddItemToArray(ops, op);
    }
    prof_gemm_json(p, root);
    return root;
}
