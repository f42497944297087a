/* Declarations of every kernel in the kernels_cu/ files, for the host
 * launches in backends/cuda/ (and for the kernel files themselves, so that a
 * definition that drifts from its declaration fails to compile). Grouped by
 * file; each kernel has the name, the math and the launch geometry of its
 * twin in kernels_cl/ (see the comment at each definition). A tensor
 * argument is a device pointer already advanced by the bt_ptr's offset. */
#ifndef BT_KERNELS_CU_KERNELS_CUH
#define BT_KERNELS_CU_KERNELS_CUH

#include <stddef.h>
#include <stdint.h>

/* ---- elementwise.cu ---- */
__global__ void fill(float *out, float value, size_t n);
__global__ void add(float *out, const float *a, const float *b, size_t n);
__global__ void scale(float *x, float alpha, size_t n);
__global__ void axpy(float *y, float alpha, const float *x, size_t n);
__global__ void bias_add(float *y, const float *bias, int rows, int cols);
__global__ void gelu_fwd(float *out, const float *x, size_t n);
__global__ void gelu_bwd(float *dx, const float *dout, const float *x, size_t n);
__global__ void tanh_fwd(float *out, const float *x, size_t n);
__global__ void tanh_bwd(float *dx, const float *dout, const float *y, size_t n);
__global__ void dropout(float *out, const float *in, size_t per_sample, size_t blocks_per_sample,
                        size_t blocks, uint32_t first_sample, uint32_t thr, float keep_scale,
                        uint32_t seed_lo, uint32_t seed_hi, uint32_t stream_lo,
                        uint32_t stream_hi);

/* ---- reduce.cu ---- */
__global__ void bias_grad(float *dbias, const float *dy, int rows, int cols);
__global__ void bias_grad_partial(float *partial, const float *dy, int rows, int cols);
__global__ void sum_partial(float *partial, const float *x, size_t n);
__global__ void sumsq_partial(float *partial, const float *x, size_t n);
__global__ void all_finite(float *flag, const float *x, size_t n);

/* ---- layernorm.cu ---- */
__global__ void layernorm_fwd(float *out, float *mean, float *rstd, const float *x,
                              const float *gamma, const float *beta, int cols, float eps);
__global__ void layernorm_bwd_dx(float *dx, const float *dout, const float *x, const float *mean,
                                 const float *rstd, const float *gamma, int cols);
__global__ void layernorm_bwd_params(float *dgamma, float *dbeta, const float *dout,
                                     const float *x, const float *mean, const float *rstd,
                                     int rows, int cols);
__global__ void layernorm_bwd_params_partial(float *partial, const float *dout, const float *x,
                                             const float *mean, const float *rstd, int rows,
                                             int cols);
__global__ void layernorm_bwd_params_sum(float *dgamma, float *dbeta, const float *partial,
                                         int chunks, int cols);

/* ---- softmax.cu ---- */
__global__ void softmax_fwd(float *probs, const float *scores, const int *key_mask, int HT, int T,
                            float scale);
__global__ void softmax_bwd(float *dscores, const float *dprobs, const float *probs, int T,
                            float scale);

/* ---- embedding.cu ---- */
__global__ void embed_fwd(float *out, const int *ids, const int *tt, const float *wte,
                          const float *wpe, const float *wtt, int N, int T, int C);
__global__ void row_links(int *links, const int *idx, int n, int skip);
__global__ void embed_bwd_type(float *dwtt, const float *dout, const int *tt, int N, int C,
                               int TV);
__global__ void embed_bwd_type_partial(float *partial, const float *dout, const int *tt, int N,
                                       int C, int TV);
__global__ void embed_bwd_pos(float *dwpe, const float *dout, int B, int T, int C);
__global__ void gather_rows(float *out, const float *src, const int *idx, int n_idx, int cols);
__global__ void scatter_rows(float *dst, const float *src, const int *idx, const int *links,
                             int n_idx, int cols);

/* ---- xent.cu ---- */
__global__ void xent_fwd_bwd(float *dlogits, float *loss, float *correct, float *log_z,
                             const float *logits, const int *labels, int V, float grad_scale,
                             float z_loss);

/* ---- optim.cu ---- */
__global__ void adamw_step(float *w, const float *g, float *m, float *v, size_t n, float beta1,
                           float beta2, float eps, float decay, float step, float sqrt_bc2);
__global__ void lamb_update(float *u, const float *w, const float *g, float *m, float *v,
                            size_t n, float beta1, float beta2, float eps, float wd, float bc1,
                            float bc2);
__global__ void adamw_multi(float *w, const float *g, float *m, float *v,
                            const unsigned long long *tab, const float *ftab, int n_spans,
                            float beta1, float beta2, float eps, float grad_scale);
__global__ void lamb_multi_moments(const float *w, const float *g, float *m, float *v,
                                   const unsigned long long *tab, const float *ftab,
                                   float *partial, int n_spans, float beta1, float beta2,
                                   float eps, float grad_scale);
__global__ void lamb_multi_trust(const unsigned long long *tab, const float *partial, float *coef,
                                 int n_spans, float lr, float min_coeff, float max_coeff);
__global__ void lamb_multi_apply(float *w, const float *m, const float *v,
                                 const unsigned long long *tab, const float *ftab,
                                 const float *coef, int n_spans, float eps);

/* ---- cast.cu ---- */
__global__ void cast_f32_to_bf16(uint16_t *dst, const uint32_t *src, size_t n);
__global__ void cast_f32_to_f16(uint16_t *dst, const uint32_t *src, size_t n);
__global__ void cast_bf16_to_f32(uint32_t *dst, const uint16_t *src, size_t n);
__global__ void cast_f16_to_f32(uint32_t *dst, const uint16_t *src, size_t n);
__global__ void cast_bf16_to_f16(uint16_t *dst, const uint16_t *src, size_t n);
__global__ void cast_f16_to_bf16(uint16_t *dst, const uint16_t *src, size_t n);
__global__ void round16_bf16(uint32_t *x, size_t n);
__global__ void round16_f16(uint32_t *x, size_t n);

/* ---- fused.cu ---- */
__global__ void bias_gelu_fwd(float *out, float *y, const float *bias, int rows, int cols);
__global__ void bias_gelu_bwd(float *partial, float *dx, const float *dout, const float *x,
                              int rows, int cols, int chunk_rows, int accumulate);
__global__ void bias_dropout_add(float *out, const float *y, const float *bias,
                                 const float *resid, int rows, int cols, size_t per_sample,
                                 uint32_t first_sample, uint32_t thr, float keep_scale,
                                 uint32_t seed_lo, uint32_t seed_hi, uint32_t stream_lo,
                                 uint32_t stream_hi);
__global__ void residual_layernorm_fwd(float *sum, float *out, float *mean, float *rstd,
                                       const float *y, const float *bias, const float *resid,
                                       const float *gamma, const float *beta, int cols,
                                       float eps, size_t per_sample, uint32_t first_sample,
                                       uint32_t thr, float keep_scale, uint32_t seed_lo,
                                       uint32_t seed_hi, uint32_t stream_lo,
                                       uint32_t stream_hi);
__global__ void softmax_dropout_fwd(float *dropped, float *probs, const float *scores,
                                    const int *key_mask, int HT, int T, float scale,
                                    uint32_t first_sample, uint32_t thr, float keep_scale,
                                    uint32_t seed_lo, uint32_t seed_hi, uint32_t stream_lo,
                                    uint32_t stream_hi);
__global__ void dropout_softmax_bwd(float *dscores, const float *dprobs, const float *probs,
                                    int HT, int T, float scale, uint32_t first_sample,
                                    uint32_t thr, float keep_scale, uint32_t seed_lo,
                                    uint32_t seed_hi, uint32_t stream_lo, uint32_t stream_hi);

#endif
