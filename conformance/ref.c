/* Float64 reference implementations for the backend conformance suite; see
 * conformance_ref.h. Deliberately naive: clarity over speed, except that the
 * GEMM materializes op(A), op(B) to keep its inner loop contiguous. */
#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers ---- */

uint64_t ref_next(ref_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double ref_uniform(ref_rng *r) { return (double)(ref_next(r) >> 11) * 0x1p-53; }

double ref_normal(ref_rng *r) {
    double u1 = 1.0 - ref_uniform(r), u2 = ref_uniform(r); /* u1 in (0, 1] */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int ref_int(ref_rng *r, int n) { return (int)(ref_next(r) % (uint64_t)n); }

/* ---- helpers ---- */

void *ref_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "conformance: out of host memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

void *ref_zalloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "conformance: out of host memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

double *ref_dup(const float *x, size_t n) {
    double *d = ref_alloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

double ref_nmse_mag(const float *out, const double *ref, const double *mag, size_t n) {
    long double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        long double d = (long double)out[i] - ref[i];
        double s = mag ? fmax(fabs(ref[i]), fabs(mag[i])) : ref[i];
        num += d * d;
        den += (long double)s * s;
    }
    if (isnan((double)num)) return INFINITY;
    return (double)(num / (den > 1e-300L ? den : 1e-300L));
}

double ref_nmse(const float *out, const double *ref, size_t n) {
    return ref_nmse_mag(out, ref, NULL, n);
}

double *ref_abs(const float *x, size_t n) {
    double *d = ref_alloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = fabs((double)x[i]);
    return d;
}

/* ---- linear algebra ---- */

void ref_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double *a, int lda,
              long sa, const double *b, int ldb, long sb, double beta, double *c, int ldc,
              long sc, int batch) {
    double *A = ref_alloc((size_t)m * k * sizeof *A + 8), *B = ref_alloc((size_t)k * n * sizeof *B + 8);
    double *row = ref_alloc((size_t)n * sizeof *row + 8);
    for (int bi = 0; bi < batch; bi++) {
        const double *ab = a + bi * sa, *bb = b + bi * sb;
        double *cb = c + bi * sc;
        for (int i = 0; i < m; i++) /* op(A)[i][p] */
            for (int p = 0; p < k; p++) A[(size_t)i * k + p] = ta ? ab[(size_t)p * lda + i] : ab[(size_t)i * lda + p];
        for (int p = 0; p < k; p++) /* op(B)[p][j] */
            for (int j = 0; j < n; j++) B[(size_t)p * n + j] = tb ? bb[(size_t)j * ldb + p] : bb[(size_t)p * ldb + j];
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < n; j++) row[j] = 0.0;
            for (int p = 0; p < k; p++) {
                double aip = A[(size_t)i * k + p];
                const double *bp = B + (size_t)p * n;
                for (int j = 0; j < n; j++) row[j] += aip * bp[j];
            }
            double *ci = cb + (size_t)i * ldc;
            for (int j = 0; j < n; j++) ci[j] = alpha * row[j] + (beta != 0.0 ? beta * ci[j] : 0.0);
        }
    }
    free(A);
    free(B);
    free(row);
}

void ref_gemm_bwd(int m, int n, int k, double alpha, const double *a, const double *b,
                  const double *dc, double *da, double *db) {
    for (int i = 0; i < m; i++)
        for (int p = 0; p < k; p++) {
            double s = 0.0;
            for (int j = 0; j < n; j++) s += dc[(size_t)i * n + j] * b[(size_t)p * n + j];
            da[(size_t)i * k + p] += alpha * s;
        }
    for (int i = 0; i < m; i++)
        for (int p = 0; p < k; p++) {
            double aip = alpha * a[(size_t)i * k + p];
            for (int j = 0; j < n; j++) db[(size_t)p * n + j] += aip * dc[(size_t)i * n + j];
        }
}

/* ---- nn ops ---- */

void ref_bias_add(double *y, const double *bias, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) y[(size_t)r * cols + c] += bias[c];
}

void ref_bias_grad(double *dbias, const double *dy, int rows, int cols) {
    for (int c = 0; c < cols; c++) {
        double s = 0.0;
        for (int r = 0; r < rows; r++) s += dy[(size_t)r * cols + c];
        dbias[c] += s;
    }
}

void ref_embed_fwd(double *out, const int32_t *ids, const int32_t *tt, const double *wte,
                   const double *wpe, const double *wtt, int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t n = (size_t)b * T + t;
            for (int c = 0; c < C; c++)
                out[n * C + c] = wte[(size_t)ids[n] * C + c] + wpe[(size_t)t * C + c] +
                                 wtt[(size_t)tt[n] * C + c];
        }
}

void ref_embed_bwd(double *dwte, double *dwpe, double *dwtt, const double *dout,
                   const int32_t *ids, const int32_t *tt, int B, int T, int C, int pad_id) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t n = (size_t)b * T + t;
            for (int c = 0; c < C; c++) {
                double d = dout[n * C + c];
                if (ids[n] != pad_id) dwte[(size_t)ids[n] * C + c] += d;
                dwpe[(size_t)t * C + c] += d;
                dwtt[(size_t)tt[n] * C + c] += d;
            }
        }
}

void ref_layernorm_fwd(double *out, double *mean, double *rstd, const double *x,
                       const double *g, const double *b, int rows, int cols, double eps) {
    for (int r = 0; r < rows; r++) {
        const double *xr = x + (size_t)r * cols;
        long double s = 0;
        for (int c = 0; c < cols; c++) s += xr[c];
        double mu = (double)(s / cols);
        long double v = 0;
        for (int c = 0; c < cols; c++) v += (long double)(xr[c] - mu) * (xr[c] - mu);
        double rs = 1.0 / sqrt((double)(v / cols) + eps);
        for (int c = 0; c < cols; c++) out[(size_t)r * cols + c] = (xr[c] - mu) * rs * g[c] + b[c];
        if (mean) mean[r] = mu;
        if (rstd) rstd[r] = rs;
    }
}

void ref_layernorm_bwd(double *dx, double *dg, double *db, const double *dout, const double *x,
                       const double *mean, const double *rstd, const double *g, int rows,
                       int cols) {
    for (int r = 0; r < rows; r++) {
        const double *d = dout + (size_t)r * cols, *xr = x + (size_t)r * cols;
        long double s1 = 0, s2 = 0; /* mean of dxhat, mean of dxhat * xhat */
        for (int c = 0; c < cols; c++) {
            double xhat = (xr[c] - mean[r]) * rstd[r], dxhat = d[c] * g[c];
            s1 += dxhat;
            s2 += dxhat * xhat;
            dg[c] += d[c] * xhat;
            db[c] += d[c];
        }
        double m1 = (double)(s1 / cols), m2 = (double)(s2 / cols);
        for (int c = 0; c < cols; c++) {
            double xhat = (xr[c] - mean[r]) * rstd[r];
            dx[(size_t)r * cols + c] = rstd[r] * (d[c] * g[c] - m1 - xhat * m2);
        }
    }
}

/* x Phi(x), with erfc for an accurate tail at negative x */
void ref_layernorm_bwd_mag(double *dx, const double *dout, const double *x, const double *mean,
                           const double *rstd, const double *g, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        const double *d = dout + (size_t)r * cols, *xr = x + (size_t)r * cols;
        double s1 = 0, s2 = 0;
        for (int c = 0; c < cols; c++) {
            double xhat = (xr[c] - mean[r]) * rstd[r];
            s1 += fabs(d[c] * g[c]);
            s2 += fabs(d[c] * g[c] * xhat);
        }
        for (int c = 0; c < cols; c++) {
            double xhat = (xr[c] - mean[r]) * rstd[r];
            dx[(size_t)r * cols + c] = rstd[r] * (fabs(d[c] * g[c]) + s1 / cols + fabs(xhat) * s2 / cols);
        }
    }
}

void ref_softmax_bwd_mag(double *ds, const double *dp, const double *p, int rows, int T,
                         double scale) {
    for (int r = 0; r < rows; r++) {
        const double *dpr = dp + (size_t)r * T, *pr = p + (size_t)r * T;
        double dot = 0;
        for (int j = 0; j < T; j++) dot += fabs(dpr[j]) * pr[j];
        for (int j = 0; j < T; j++) ds[(size_t)r * T + j] = fabs(scale) * pr[j] * (fabs(dpr[j]) + dot);
    }
}

double ref_gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }

double ref_gelu_grad(double x) {
    return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * 3.141592653589793);
}

void ref_softmax_fwd(double *p, const double *s, const int32_t *mask, int B, int H, int T,
                     double scale) {
    for (int b = 0; b < B; b++)
        for (int r = 0; r < H * T; r++) {
            const double *sr = s + ((size_t)b * H * T + r) * T;
            double *pr = p + ((size_t)b * H * T + r) * T;
            const int32_t *km = mask + (size_t)b * T;
            double mx = -INFINITY;
            for (int j = 0; j < T; j++)
                if (km[j] != 0 && scale * sr[j] > mx) mx = scale * sr[j];
            long double sum = 0;
            for (int j = 0; j < T; j++) {
                pr[j] = km[j] != 0 ? exp(scale * sr[j] - mx) : 0.0;
                sum += pr[j];
            }
            for (int j = 0; j < T; j++) pr[j] = sum > 0 ? (double)(pr[j] / sum) : 0.0;
        }
}

void ref_softmax_bwd(double *ds, const double *dp, const double *p, int rows, int T,
                     double scale) {
    for (int r = 0; r < rows; r++) {
        const double *dpr = dp + (size_t)r * T, *pr = p + (size_t)r * T;
        long double dot = 0;
        for (int j = 0; j < T; j++) dot += (long double)dpr[j] * pr[j];
        for (int j = 0; j < T; j++) ds[(size_t)r * T + j] = scale * pr[j] * (dpr[j] - (double)dot);
    }
}

void ref_xent(double *dlogits, double *loss, double *correct, double *log_z, const double *logits,
              const int32_t *labels, int r0, int r1, int V, double grad_scale, double z_loss) {
    for (int r = r0; r < r1; r++) {
        const double *x = logits + (size_t)r * V;
        double *d = dlogits ? dlogits + (size_t)r * V : NULL;
        int y = labels[r];
        if (y < 0) {
            if (loss) loss[r] = 0.0;
            if (correct) correct[r] = 0.0;
            if (log_z) log_z[r] = 0.0;
            if (d)
                for (int j = 0; j < V; j++) d[j] = 0.0;
            continue;
        }
        int arg = 0;
        for (int j = 1; j < V; j++)
            if (x[j] > x[arg]) arg = j;
        double mx = x[arg];
        long double s = 0;
        for (int j = 0; j < V; j++) s += expl((long double)x[j] - mx);
        long double lse = mx + logl(s);
        if (loss) loss[r] = (double)(lse - x[y]);
        if (correct) correct[r] = arg == y ? 1.0 : 0.0;
        if (log_z) log_z[r] = (double)lse;
        const double zf = 1.0 + 2.0 * z_loss * (double)lse; /* d (z lse^2) / d lse, plus 1 */
        if (d)
            for (int j = 0; j < V; j++)
                d[j] = grad_scale * (zf * (double)expl(x[j] - lse) - (j == y ? 1.0 : 0.0));
    }
}

void ref_gather_rows(double *out, const double *src, const int32_t *idx, int n_idx, int cols) {
    for (int i = 0; i < n_idx; i++)
        for (int c = 0; c < cols; c++) out[(size_t)i * cols + c] = src[(size_t)idx[i] * cols + c];
}

void ref_scatter_rows(double *dst, const double *src, const int32_t *idx, int n_idx, int cols) {
    for (int i = 0; i < n_idx; i++)
        for (int c = 0; c < cols; c++) dst[(size_t)idx[i] * cols + c] += src[(size_t)i * cols + c];
}

/* ---- optimizers ---- */

void ref_adamw(double *w, const double *g, double *m, double *v, size_t n, double lr,
               double b1, double b2, double eps, double wd, double bc1, double bc2) {
    for (size_t i = 0; i < n; i++) {
        w[i] *= 1.0 - lr * wd;
        m[i] = b1 * m[i] + (1.0 - b1) * g[i];
        v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
        w[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
}

void ref_lamb(double *u, const double *w, const double *g, double *m, double *v, size_t n,
              double b1, double b2, double eps, double wd, double bc1, double bc2) {
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0 - b1) * g[i];
        v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
        u[i] = (m[i] / bc1) / (sqrt(v[i] / bc2) + eps) + wd * w[i];
    }
}

/* ---- 16-bit formats ---- */

/* Round |x| to a format with `mant` fraction bits, smallest normal exponent
 * emin and largest finite value maxv (overflow threshold: the value halfway to
 * the next power, ties to even). x/q is exact for float-derived x. */
static double round_fmt(double x, int mant, int emin, double maxv) {
    if (isnan(x) || isinf(x) || x == 0.0) return x;
    double a = fabs(x);
    int e;
    frexp(a, &e); /* a = f 2^e, f in [0.5, 1): floor(log2 a) = e - 1 */
    int E = e - 1 < emin ? emin : e - 1;
    double q = ldexp(1.0, E - mant);
    double r = nearbyint(a / q) * q; /* default rounding mode: to nearest even */
    if (r > maxv) r = INFINITY;
    return copysign(r, x);
}

double ref_round_f16(double x) { return round_fmt(x, 10, -14, 65504.0); }

double ref_round_bf16(double x) { return round_fmt(x, 7, -126, ldexp(255.0, 120)); }

static double fmt_value(uint32_t bits, int ebits, int mant) {
    int bias = (1 << (ebits - 1)) - 1;
    uint32_t sign = bits >> (ebits + mant), exp = (bits >> mant) & ((1u << ebits) - 1),
             frac = bits & ((1u << mant) - 1);
    double v;
    if (exp == (1u << ebits) - 1)
        v = frac ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp((double)frac, 1 - bias - mant);
    else
        v = ldexp((double)(frac + (1u << mant)), (int)exp - bias - mant);
    return sign ? -v : v;
}

double ref_f16_value(uint16_t h) { return fmt_value(h, 5, 10); }

double ref_bf16_value(uint16_t h) { return fmt_value(h, 8, 7); }

static uint16_t fmt_bits(double v, int ebits, int mant) {
    int bias = (1 << (ebits - 1)) - 1;
    uint32_t sign = signbit(v) ? 1u << (ebits + mant) : 0u;
    double a = fabs(v);
    if (isinf(a)) return (uint16_t)(sign | (((1u << ebits) - 1) << mant));
    if (a == 0.0) return (uint16_t)sign;
    int e;
    frexp(a, &e);
    int E = e - 1;
    if (E < 1 - bias) /* subnormal: a = frac 2^(1-bias-mant) */
        return (uint16_t)(sign | (uint32_t)ldexp(a, bias - 1 + mant));
    uint32_t frac = (uint32_t)(ldexp(a, mant - E) - ldexp(1.0, mant));
    return (uint16_t)(sign | ((uint32_t)(E + bias) << mant) | frac);
}

uint16_t ref_f16_bits(double v) { return fmt_bits(v, 5, 10); }

uint16_t ref_bf16_bits(double v) { return fmt_bits(v, 8, 7); }

/* ---- finite differences ---- */

/* Richardson extrapolation of central differences, (4 D(h) - D(2h)) / 3, has
 * error O(h^4): with h = 2^-10 the truncation error is ~1e-12 relative, and
 * the rounding error of the double forward is divided by h, not by 1e-6 as a
 * plain central difference would need. Only outputs that changed contribute,
 * so untouched outputs add no summation noise. */
double ref_fd(ref_fwd_fn fwd, void *ctx, size_t nout, const double *w, double *param,
              size_t idx, double h) {
    double *op = ref_alloc(nout * sizeof *op), *om = ref_alloc(nout * sizeof *om);
    double x0 = param[idx], d[2];
    for (int s = 0; s < 2; s++) {
        double hh = h * (s + 1);
        param[idx] = x0 + hh;
        fwd(ctx, op);
        param[idx] = x0 - hh;
        fwd(ctx, om);
        long double acc = 0;
        for (size_t i = 0; i < nout; i++)
            if (op[i] != om[i]) acc += (long double)(w ? w[i] : 1.0) * (op[i] - om[i]);
        d[s] = (double)(acc / (2 * hh));
    }
    param[idx] = x0;
    free(op);
    free(om);
    return (4.0 * d[0] - d[1]) / 3.0;
}
