/* Inside the profiler (profile.c: steps and reports; profile_ops.c: the
 * wrapped ops and their cost model). */
#ifndef BT_PROFILE_INTERNAL_H
#define BT_PROFILE_INTERNAL_H

#include "op_list.h"
#include "profile.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

/* The ops the profiler times, in report order when they tie: every OP and
 * FUSED op of BT_OP_LIST (op_list.h), as PROF_<op>. */
#define BT_PROF_ENUM(op, kind) BT_OP_IF_TIMED(kind, PROF_##op, )
enum { BT_OP_LIST(BT_PROF_ENUM) PROF_N_OPS };
#undef BT_PROF_ENUM

/* One op issued inside a step: its marks before and after, its cost, and
 * for a GEMM its shape (an index into bt_profiler.shapes, else -1). */
typedef struct {
    int op, mark_before, mark_after;
    double flops, bytes;
    int shape;
} prof_event;

/* One GEMM shape of the profiled steps, operands' layout included (the
 * attention's slices of the QKV slab are not packed matrices), with its
 * time in the steps and, once replayed, the best time of one call alone. */
typedef struct {
    int dtype; /* -1: gemm (fp32), else gemm16's bt_dtype */
    unsigned stored16; /* gemm16: the operands stored in dtype (BT_GEMM_A16 | BT_GEMM_B16) */
    bool ta, tb;
    int m, n, k, lda, ldb, ldc, batch;
    long sa, sb, sc;
    int outer;      /* gemm_grid: its groups (0: gemm / gemm16) */
    long oa, ob, oc; /* gemm_grid: the groups' strides */
    float beta;
    long calls;
    double seconds, flops;
    double alone_s; /* 0: not replayed */
} prof_gemm_shape;

/* Totals of one op over the profiled steps. */
typedef struct {
    long calls;
    double seconds, flops, bytes;
} prof_total;

struct bt_profiler {
    bt_backend *inner;
    bool in_step;
    double step_t0;          /* wall clock at step begin */
    bt_counters at_begin;    /* inner's counters at step begin */
    prof_event *ev;
    int n_ev, cap_ev;
    long step_calls;         /* ops issued in this step */
    prof_total total[PROF_N_OPS];
    int steps;
    double step_seconds, calls, launches, reads, syncs, writes;
    long most_reads, most_syncs; /* in any one step: the host-sync budget is per step */
    size_t mem_peak;
    prof_gemm_shape *shapes;
    int n_shapes, cap_shapes;
};

/* items (used of *cap in use) with room for one more of size bytes: grown
 * to twice (first: first_cap) when full; out of host memory ends the run
 * with one line, as the profiler cannot report without its records. */
static inline void *prof_room(void *items, int used, int *cap, int first_cap, size_t size) {
    if (used < *cap) return items;
    const int grown = *cap ? 2 * *cap : first_cap;
    void *more = realloc(items, (size_t)grown * size);
    if (!more) {
        fprintf(stderr, "bertrain: profiler: out of host memory\n");
        exit(1);
    }
    *cap = grown;
    return more;
}

/* A mark before an op when a step is being recorded, else -1. */
int prof_before(bt_profiler *p);

/* Record the op that began at mark m0 (-1: not recording) with its cost:
 * flops (0 unless a GEMM) and the bytes it must read and write. */
void prof_after(bt_profiler *p, int op, int m0, double flops, double bytes);

/* The index of GEMM shape key in p->shapes, added when new (calls and
 * times zero). */
int prof_gemm_shape_of(bt_profiler *p, const prof_gemm_shape *key);

/* The per-shape GEMM table and, after bt_profile_gemm_alone, the ceiling
 * at the model's shapes (profile_gemm.c). */
void prof_gemm_print(const bt_profiler *p, FILE *out);

/* The same into obj: the array "gemm_shapes", then the ceiling's fields. */
void prof_gemm_json(const bt_profiler *p, cJSON *obj);

/* Fill wrapper w's table with the profiling ops (profile_ops.c). */
void prof_fill_ops(bt_backend *w);

/* The report name of op i. */
const char *prof_op_name(int i);

#endif
