/* A projected step time on a GPU from counted device work: the per-op table
 * of `bertrain bench --project CARD` (docs/PERFORMANCE.md, "Projection").
 *
 * The model is fixed, not tuned:
 *   a GEMM          FLOPs / (0.7 x the card's dense peak of its precision)
 *   any other work  bytes read and written / (0.8 x HBM bandwidth), divided
 *                   by its occupancy min(1, threads / (SMs x 2048)), and at
 *                   least its busiest thread's global accesses x 0.5 ns, and
 *                   at least its threads' shared-memory bytes / (0.8 x the
 *                   card's shared-memory bandwidth, SMs x 128 bytes a clock)
 *                   over the share of SMs its blocks fill, min(1, blocks /
 *                   SMs); arithmetic is not priced
 *   each launch     4 us (1 us inside a CUDA Graph), added
 *   each blocking host round trip 20 us, added; MPI left out.
 * A copy or memset on the device counts as a kernel of full occupancy that
 * reads and writes its bytes; a host copy costs its launch only (its wait is
 * a round trip). MFU = the GEMM FLOPs / (step time x the dense 16-bit peak).
 * Nothing here knows which backend counted the work: it reads the trace
 * format of tests/cuda_emu/count.cpp. */
#ifndef BT_PROJECTION_H
#define BT_PROJECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* A card's figures: dense peaks (no sparsity), TFLOP/s; 0: none (the fp32
 * peak is used instead). */
typedef struct {
    char name[64];
    int sms;
    double hbm_gbs; /* HBM bandwidth, GB/s (1e9 bytes) */
    double fp32, tf32, f16;
    double smem_tbs; /* shared memory, all SMs, TB/s (1e12 bytes); 0: not priced */
} proj_card;

/* The card named (h100-sxm, a100-sxm-80gb, v100-sxm2) or described by the
 * file at that path ("key value" lines: name, sms, hbm_gbs, fp32_tflops,
 * tf32_tflops, f16_tflops, smem_tbs; # comments). false with a reason in err. */
bool proj_card_get(const char *name_or_file, proj_card *out, char *err, size_t n);

enum { PROJ_KERNEL, PROJ_GEMM, PROJ_COPY, PROJ_HOST_COPY };
enum { PROJ_FP32, PROJ_TF32, PROJ_F16, PROJ_N_PREC };

/* One piece of device work as counted. */
typedef struct {
    int kind;              /* PROJ_KERNEL, ... */
    double threads;        /* a kernel's grid x block */
    double blocks;         /* a kernel's grid */
    double read, written;  /* bytes of global memory */
    double most_accesses;  /* a kernel's busiest thread's global accesses */
    double shared;         /* a kernel's bytes of shared memory read and written */
    double flops;          /* a GEMM's */
    int precision;         /* a GEMM's PROJ_FP32, ... */
    bool in_graph;         /* launched inside a CUDA Graph */
} proj_work;

/* Seconds of w on card c by the model, its launch included. */
double proj_seconds(const proj_card *c, const proj_work *w);

/* One op's counted work over a step. */
typedef struct {
    char name[32];
    long calls, launches;
    double blocks;   /* kernels' blocks */
    int block;       /* the largest kernel block, threads */
    double read, written, most_accesses, shared;
    double flops[PROJ_N_PREC];
    proj_work *work; /* each piece, for the model */
    int n_work, cap_work;
} proj_op;

/* The counted work of one or more steps, by op (zero it before the first
 * proj_read_step). */
typedef struct {
    proj_op *ops;
    int n_ops, cap_ops;
    int steps;          /* steps read */
    double round_trips; /* blocking host round trips a step (the caller's) */
    int graph_launches; /* the caller's: > 0, the step runs as this many CUDA Graphs, and its
                         * work is priced as launched inside one; 0: launched op by op */
    bool counted;       /* the trace counted global memory ("counted 1") */
    double model_flops; /* the caller's: the FLOPs the model needs a step, without the
                         * padding the device runs (0: not known, not printed) */
} proj_step;

/* One op of the step as the profiler recorded it: its name and the numbers
 * of the marks before and after it. */
typedef struct {
    const char *name;
    int mark_before, mark_after;
} proj_event;

/* Add the trace lines of one step from f (from where it stands to its end)
 * to s: marks are numbered from 0 in the order read; work between an op's
 * two marks is that op's, work before the first mark is left out (it is not
 * the step's: warm-up, setup), other work goes to "(outside ops)". false with
 * a reason in err (a malformed line, out of memory). */
bool proj_read_step(FILE *f, const proj_event *ev, int n_ev, proj_step *s, char *err,
                    size_t n);

/* The per-op table (per step: the steps' means), the step time and MFU on
 * each of the n cards. */
void proj_print(const proj_step *s, const proj_card *cards, int n, FILE *out);

/* The projected seconds of a step of s on card c (the steps' mean), and
 * its MFU into *mfu (NULL: not wanted). */
double proj_step_seconds(const proj_step *s, const proj_card *c, double *mfu);

/* Free what s holds. */
void proj_step_free(proj_step *s);

#endif
