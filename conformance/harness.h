/* Shared harness of the backend conformance suite (conformance.c): NMSE
 * thresholds, seeded random inputs, guard-banded device execution with
 * determinism and thread-invariance checks, and the verdicts that become the
 * rows of the results table. */
#ifndef BT_CONFORMANCE_HARNESS_H
#define BT_CONFORMANCE_HARNESS_H

#include "backends/backend.h"
#include "ref.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


/* NMSE thresholds against the float64 reference. fp32 unit roundoff is
 * u = 2^-24 ~ 6e-8, u^2 ~ 3.6e-15.
 *  THR_EXACT 0      ops that only move bits (copy, fill, gather, upload): any
 *                   difference is a bug.
 *  THR_ROUND 1e-12  a handful (<= ~8) of fp32 roundings per element and no long
 *                   sums (add, axpy, bias_add, embed_fwd, scatter, tanh_bwd,
 *                   optimizer steps): |err| <= 8u|ref| bounds NMSE by 2.3e-13.
 * Where the terms of an output can cancel, the NMSE denominator uses, per
 * element, max(ref^2, mag^2) with mag = sum of |terms| from the reference (see
 * ref_nmse_mag): fp32 error is bounded by a few u * mag, so the bounds above
 * hold, while plain NMSE over a handful of elements is decided by whichever
 * element happens to cancel. For well-conditioned data the two agree to a
 * small constant factor; a real bug still gives errors of order mag.
 *  THR_MATH  1e-9   libm-grade transcendentals (a few ulp) and fp32 reductions
 *                   over up to ~3e4 terms (gemm K <= 768, bias_grad over 256
 *                   rows, layernorm, softmax, xent): rounding errors add as a
 *                   random walk, NMSE ~ K u^2 ~ 3e-12 for K = 768; 1e-9 leaves
 *                   ~300x margin while any wrong or missing term gives >= ~1e-6.
 * Finite-difference checks of the references use a relative error of FD_TOL. */
#define THR_EXACT 0.0
#define THR_ROUND 1e-12
#define THR_MATH 1e-9
#define SCALAR_TOL 1e-6
#define FD_TOL 1e-6
#define FD_H 0x1p-10 /* exact in double next to any float; see ref_fd */

#define MAXT 16      /* tensors per op call */
#define GUARD 64     /* guard bytes on each side of every tensor (64-byte aligned) */
#define SENTINEL 0xA5

/* ---------------- global state (set by conformance.c's main) ---------------- */

extern ref_rng g_input_rng;            /* inputs: reseeded per test and shape (see reseed) */
extern ref_rng g_fd_rng;               /* finite-difference coordinates (independent of inputs) */
extern uint64_t g_seed;                /* --seed */
extern const char *g_op_filter;        /* --op: the only op to check; NULL: every op */
extern bool g_quick;                   /* --quick: only the shapes marked quick */
extern bool g_check_references;        /* validate the references (first pass only) */
extern const char *g_backend_name;     /* backend column of the rows being reported */
extern int g_n_passed, g_n_failed, g_n_skipped; /* the counts of the summary line */
extern int g_thread_mode;              /* 0 off, 1 record outputs, 2 compare with the record */

/* True when op is selected by --op (or no --op was given). */
bool want_op(const char *op);

/* ---------------- verdicts: one per row of the results table ---------------- */

typedef struct {
    bool ok, have;
    double shown, ratio;          /* worst metric and its ratio to its threshold */
    bool thr_checked, thr_same;   /* thread invariance (compare pass) */
    double thr_nmse;
    char note[240];
} verdict;

/* A fresh verdict: passing, no metric recorded yet. */
verdict v_new(void);
/* Fail v, appending the formatted message to its note (once per message). */
void v_fail(verdict *v, const char *fmt, ...);
/* Record a metric; fails when value > thr (or NaN). */
void v_metric(verdict *v, const char *what, double value, double thr);
/* Record the NMSE of out against ref; mag (or NULL): magnitudes of the terms
 * of each element, see ref_nmse_mag. */
void v_nmse(verdict *v, const char *what, const float *out, const double *ref,
            const double *mag, size_t n, double thr);
/* Require out to equal want_ bit for bit (NMSE shown for information). */
void v_bits(verdict *v, const char *what, const float *out, const float *want_, size_t n);
/* v_bits for n 16-bit values (bf16 or f16 bits): fails at the first that
 * differs; returns whether all are equal. */
bool v_bits16(verdict *v, const char *what, const uint16_t *got, const uint16_t *want, size_t n);
/* As v_bits16, against the n floats vals in dt (half.h's conversion: cast's
 * bits); the failure names the float. */
bool v_bits16_of(verdict *v, const char *what, const uint16_t *got, const float *vals, size_t n,
                 bt_dtype dt);
/* Print v as a table row for op and the formatted shape, and count it; under
 * --threads-check also the t1-vs-t2 row. */
void v_report(verdict *v, const char *op, const char *fmt, ...);

/* Reference self-checks (finite differences) are reported under "ref/fd". */
#define FD_REPORT(f, ...)                      \
    do {                                       \
        const char *save_ = g_backend_name;    \
        g_backend_name = "ref/fd";             \
        v_report(&(f), __VA_ARGS__);           \
        g_backend_name = save_;                \
    } while (0)

/* Record one finite-difference point: relative error, with a floor for
 * gradients that are (near) zero relative to the largest of their tensor. */
void fd_point(verdict *f, const char *what, double fd, double an, double floor_);

/* ---------------- random inputs ---------------- */

/* Reseed the input and finite-difference streams from (--seed, tag, k). */
void reseed(const char *tag, size_t k);
/* A random index whose analytic gradient an[] is nonzero, if one turns up quickly. */
size_t fd_pick(const double *an, size_t n);
/* n floats offset + scale * N(0, 1), never zero (caller frees). */
float *rand_floats(size_t n, double scale, double offset);
/* n integers uniform in [lo, hi) (caller frees). */
int32_t *rand_ints(size_t n, int lo, int hi);
/* The largest |x[i]| (0 for n = 0). */
double max_abs(const double *x, size_t n);

/* ---------------- device execution ---------------- */

typedef struct {
    const char *name;
    size_t n, esz;     /* elements, bytes per element */
    const void *init;  /* host contents before the op; NULL: NaN bytes (write-only) */
    bool out;          /* the op may write it */
    bt_ptr p;          /* device address during the op */
    void *res;         /* contents after the op */
} tensor;

/* A 4-byte tensor the op only reads: it must come back unchanged. */
tensor tensor_in(const char *name, const void *init, size_t n);
/* A 4-byte tensor the op may write (init NULL: starts as NaN bytes). */
tensor tensor_out(const char *name, const void *init, size_t n);
/* A 2-byte (f16 or bf16) tensor; out: the op may write it. */
tensor tensor_16bit(const char *name, const void *init, size_t n, bool out);
/* Free the results of the first nt tensors of t. */
void tensors_free(tensor *t, int nt);

/* Issues one op on the device tensors t[i].p; scalar results go to scal[0..3]. */
typedef void (*run_fn)(bt_backend *be, tensor *t, void *arg, double *scal);

/* Run an op twice on fresh guard-banded copies of the inputs; both runs must
 * give the same bits. On success t[i].res holds the outputs (free with
 * tensors_free). */
bool exec_op(verdict *v, bt_backend *be, tensor *t, int nt, run_fn fn, void *arg, double *scal);
/* Start a --threads-check pass: the next op compares with the first record. */
void thread_check_restart(void);
/* Free the outputs recorded by --threads-check. */
void thread_records_free(void);

/* A tensor's result as floats. */
#define RES(t) ((const float *)(t).res)

/* NMSE bound of an output rounded to 16-bit storage dt against its unrounded
 * float64 reference (THR_MATH for BT_F32); x rounded to dt's nearest value
 * (BT_F32: x), by backends/common/half.h. */
double round16_thr(bt_dtype dt);
float round16_host(float x, bt_dtype dt);
/* The 16 bits of v in dt (BT_BF16 or BT_F16): half.h's conversion, cast's bits. */
uint16_t bits16_of(float v, bt_dtype dt);
/* The value of the 16 bits h of dt, as a float (exact). */
float widen16(uint16_t h, bt_dtype dt);

/* ---------------- shapes ---------------- */

typedef struct {
    size_t n;
    bool quick, big;
} vector_shape;
/* Element counts of the elementwise ops and reductions (the last is BERT-size). */
extern const vector_shape VECTOR_SHAPES[8];

typedef struct {
    int r, c;
    bool quick, big;
} matrix_shape;
/* rows x cols of the row-wise ops (the last is BERT-size; 1024 and 1100
 * columns: the widest row the LayerNorm kernels keep in registers with 32
 * lanes, and one past it). */
extern const matrix_shape MATRIX_SHAPES[9];

/* True when --quick drops a shape not marked quick (BERT-size ones never are). */
bool skip_shape(bool quick);

#endif
