/* What the conformance checks of the fused ops share (ops_fused.c,
 * ops_fused_join.c, fused_case.c): a case's arguments, the outputs it
 * compares, and the run of a fused op beside the unfused ops it replaces. */
#ifndef BT_CONFORMANCE_FUSED_CASE_H
#define BT_CONFORMANCE_FUSED_CASE_H

#include "ops.h"

#include <stdbool.h>
#include <stdint.h>

/* Everything one fused-op case needs: shapes, dropout, aliasing. */
typedef struct {
    int rows, cols;   /* row ops; attention: rows = B*H*T, cols = T */
    int B, H, T;      /* attention ops */
    size_t per_sample;
    uint32_t first_sample;
    float p;
    bt_rng_key key;
    int inplace;      /* the op's allowed aliasing (see each runner) */
    float eps;
    bt_dtype round16; /* the fused op's storage rounding (BT_F32: none) */
    bool copies16;    /* the op also writes its outputs' 16-bit copies (round16's dtype) */
    bool copy_only;   /* with copies16: the fp32 outputs the op may leave out are (buf
                       * NULL, or not kept), their copies alone checked */
    bool resid16;     /* residual_layernorm_fwd: the residual in round16's dtype (with
                       * copy_only the LayerNorm's fp32 output not kept either);
                       * add_dropout: b in round16's dtype */
} fused_args;

/* One output to compare: tensor index, float64 reference, magnitudes, and
 * the index of the 16-bit tensor that holds its copy (0: none); left_out:
 * the fused op was not given this fp32 output, only its copy, which must
 * then be the unfused run's output in 16 bits. */
typedef struct {
    int t;
    const double *ref, *mag;
    double thr;
    int copy16;
    bool left_out;
} fused_out;

/* Fail v unless the n 16-bit values of got are the bits of the floats of
 * out in dt (half.h's conversion: cast's bits) and equal the unfused run's
 * (want). */
void v_copy16(verdict *v, const char *what, const uint16_t *got, const uint16_t *want,
              const float *out, size_t n, bt_dtype dt);
/* Float64 dropout factor of element i: 1/(1-p) (as float, as the ops) or 0. */
double keep_factor(const fused_args *a, size_t i);
/* Run the fused op and the unfused sequence on copies of the same inputs
 * (make builds the tensors); compare bits and the references. */
void fused_case(bt_backend *be, const char *op, void (*make)(tensor *, void *), void *inputs,
                int nt, run_fn fused, run_fn unfused, fused_args *a, const fused_out *outs,
                int nout, const char *shape);
/* The suffix of a row's shape for storage rounding dt. */
const char *storage_suffix(bt_dtype dt);
/* Fail v unless each of the n values of out is a value of dt (its float
 * bits survive the round trip through dt). */
void v_stored16(verdict *v, const char *what, const float *out, size_t n, bt_dtype dt);

/* ---- ops_fused_join.c ---- */
/* bias_dropout_add, residual_layernorm_fwd and add_dropout on the rows and
 * columns of a (seed si), in every storage. */
void fused_join_cases(bt_backend *be, int si, fused_args a);

#endif
