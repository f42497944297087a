/* Float64 reference implementations for the backend conformance suite.
 *
 * Plain loops in double (long double for a few long sums), written from the
 * op semantics in backends/backend.h and independent of every backend: they
 * are the oracle the backends are compared against, and are themselves
 * checked against finite differences by the suite. Matrices are row-major. */
#ifndef BT_CONFORMANCE_REF_H
#define BT_CONFORMANCE_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- seeded random numbers (splitmix64) ---- */
typedef struct {
    uint64_t s;
} ref_rng;

uint64_t ref_next(ref_rng *r);
double ref_uniform(ref_rng *r);    /* [0, 1) */
double ref_normal(ref_rng *r);     /* N(0, 1) */
int ref_int(ref_rng *r, int n);    /* [0, n) */

/* ---- helpers ---- */
void *ref_alloc(size_t bytes);     /* malloc that exits on failure */
void *ref_zalloc(size_t bytes);    /* calloc that exits on failure */
double *ref_dup(const float *x, size_t n);  /* widen to double */
/* sum((out-ref)^2) / max(sum(ref^2), tiny); +inf when out holds a NaN */
double ref_nmse(const float *out, const double *ref, size_t n);
/* The same with each ref[i]^2 in the denominator raised to at least mag[i]^2
 * (mag NULL: plain NMSE). mag is the magnitude of the terms that make up
 * ref[i] (sum of |terms|): fp32 error is bounded by a few u * mag, not by
 * u * |ref|, so this keeps the metric meaningful when terms cancel (which, with
 * a handful of elements, decides the plain NMSE). */
double ref_nmse_mag(const float *out, const double *ref, const double *mag, size_t n);
double *ref_abs(const float *x, size_t n);  /* |x| widened to double */
/* magnitudes (sums of |terms|) of layernorm_bwd's dx and softmax_bwd's dscores */
void ref_layernorm_bwd_mag(double *dx, const double *dout, const double *x, const double *mean,
                           const double *rstd, const double *g, int rows, int cols);
void ref_softmax_bwd_mag(double *ds, const double *dp, const double *p, int rows, int T,
                         double scale);

/* ---- linear algebra ---- */
/* C_b = alpha op(A_b) op(B_b) + beta C_b for b < batch (beta == 0: C ignored). */
void ref_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double *a, int lda,
              long sa, const double *b, int ldb, long sb, double beta, double *c, int ldc,
              long sc, int batch);
/* Gradients of L = sum(dC .* alpha A B) for dense A (m,k), B (k,n):
 * dA += alpha dC B^T, dB += alpha A^T dC. */
void ref_gemm_bwd(int m, int n, int k, double alpha, const double *a, const double *b,
                  const double *dc, double *da, double *db);

/* ---- nn ops (same argument meaning as backend.h) ---- */
void ref_bias_add(double *y, const double *bias, int rows, int cols);
void ref_bias_grad(double *dbias, const double *dy, int rows, int cols);
void ref_embed_fwd(double *out, const int32_t *ids, const int32_t *tt, const double *wte,
                   const double *wpe, const double *wtt, int B, int T, int C);
void ref_embed_bwd(double *dwte, double *dwpe, double *dwtt, const double *dout,
                   const int32_t *ids, const int32_t *tt, int B, int T, int C, int pad_id);
void ref_layernorm_fwd(double *out, double *mean, double *rstd, const double *x,
                       const double *g, const double *b, int rows, int cols, double eps);
/* dx = ..., dg += ..., db += ...  using the given mean and rstd */
void ref_layernorm_bwd(double *dx, double *dg, double *db, const double *dout, const double *x,
                       const double *mean, const double *rstd, const double *g, int rows,
                       int cols);
double ref_gelu(double x);
double ref_gelu_grad(double x);
void ref_softmax_fwd(double *p, const double *s, const int32_t *mask, int B, int H, int T,
                     double scale);
void ref_softmax_bwd(double *ds, const double *dp, const double *p, int rows, int T,
                     double scale);
/* rows [r0, r1) only; loss, correct and dlogits may be NULL */
void ref_xent(double *dlogits, double *loss, double *correct, double *log_z, const double *logits,
              const int32_t *labels, int r0, int r1, int V, double grad_scale, double z_loss);
void ref_gather_rows(double *out, const double *src, const int32_t *idx, int n_idx, int cols);
void ref_scatter_rows(double *dst, const double *src, const int32_t *idx, int n_idx, int cols);

/* ---- optimizers: w, m, v (and u) updated in place ---- */
void ref_adamw(double *w, const double *g, double *m, double *v, size_t n, double lr,
               double b1, double b2, double eps, double wd, double bc1, double bc2);
void ref_lamb(double *u, const double *w, const double *g, double *m, double *v, size_t n,
              double b1, double b2, double eps, double wd, double bc1, double bc2);

/* ---- 16-bit formats, by arithmetic on values (no bit tricks on floats) ---- */
double ref_round_f16(double x);   /* nearest binary16 value, ties to even; Inf on overflow */
double ref_round_bf16(double x);  /* nearest bfloat16 value, ties to even */
double ref_f16_value(uint16_t h);
double ref_bf16_value(uint16_t h);
uint16_t ref_f16_bits(double v);  /* encoding of a representable binary16 value (not NaN) */
uint16_t ref_bf16_bits(double v); /* encoding of a representable bfloat16 value (not NaN) */

/* ---- finite differences ---- */
/* fwd(ctx, out) evaluates a forward function into out (nout values) from
 * parameters reachable through ctx. ref_fd returns the Richardson-extrapolated
 * central difference of sum_i w[i] out[i] (w NULL: all ones) with respect to
 * param[idx], with steps h and 2h. */
typedef void (*ref_fwd_fn)(void *ctx, double *out);
double ref_fd(ref_fwd_fn fwd, void *ctx, size_t nout, const double *w, double *param,
              size_t idx, double h);

#endif
