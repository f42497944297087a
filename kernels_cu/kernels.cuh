/* Declarations of every kernel of kernels/ as CUDA compiles it (through
 * kernels/dialect_cuda.cuh: a BT_IN or BT_OUT tensor is a device pointer
 * already advanced by the bt_ptr's offset; uint, ulong and ushort are
 * unsigned int, unsigned long long and unsigned short), for the host launches
 * in backends/cuda/. Each kernels_cu/NAME.cu includes it before the kernels,
 * so that a definition that drifts from its declaration leaves the
 * declaration undefined and the plugin fails to link. Grouped by file. */
#ifndef BT_KERNELS_CU_KERNELS_CUH
#define BT_KERNELS_CU_KERNELS_CUH

#include <stddef.h>
#include <stdint.h>

/* ---- kernels/elementwise.cl ---- */
__global__ void bt_fill(float *out, float value, unsigned long long n);
__global__ void bt_add(float *out, const float *a, const float *b, unsigned long long n);
__global__ void bt_scale(float *x, float alpha, unsigned long long n);
__global__ void bt_axpy(float *y, float alpha, const float *x, unsigned long long n);
__global__ void bt_bias_add(float *y, const float *bias, unsigned short *y16, int rows, int cols,
                            int kind16, int copies16);
__global__ void bt_gelu_fwd(float *out, const float *x, unsigned long long n);
__global__ void bt_gelu_bwd(float *dx, const float *dout, const float *x, unsigned long long n);
__global__ void bt_tanh_fwd(float *out, const float *x, unsigned long long n);
__global__ void bt_tanh_bwd(float *dx, const float *dout, const float *y, unsigned long long n);
__global__ void bt_tanh_fwd16(unsigned short *out, const unsigned short *x, unsigned long long n,
                              int kind);
__global__ void bt_tanh_bwd16(unsigned short *dx, const unsigned short *dout,
                              const unsigned short *y, unsigned long long n, int kind);
__global__ void bt_dropout(float *out, const float *in, unsigned short *out16,
                           const unsigned short *in16, unsigned long long per_sample,
                           unsigned long long blocks_per_sample, unsigned long long blocks,
                           int in_kind, int out16_kind, int f32_out, unsigned int first_sample,
                           unsigned int thr, float keep_scale, unsigned int seed_lo,
                           unsigned int seed_hi, unsigned int stream_lo, unsigned int stream_hi);
__global__ void bt_dropout_rows(float *x, const int *idx, int n_idx, int cols,
                                unsigned long long per_sample, unsigned int first_sample,
                                unsigned int thr, float keep_scale, unsigned int seed_lo,
                                unsigned int seed_hi, unsigned int stream_lo,
                                unsigned int stream_hi);

/* ---- kernels/reduce.cl ---- */
__global__ void bt_bias_grad(float *dbias, const float *dy, int rows, int cols, int kind16);
__global__ void bt_bias_grad_partial(float *partial, const float *dy, const unsigned short *dy16,
                                     int rows, int cols, int kind16, int dy_is16);
__global__ void bt_sum_partial(float *partial, const float *x, unsigned long long n);
__global__ void bt_sumsq_partial(float *partial, const float *x, unsigned long long n);
__global__ void bt_all_finite(float *flag, const float *x, unsigned long long n);

/* ---- kernels/layernorm.cl ---- */
__global__ void bt_layernorm_fwd(float *out, float *mean, float *rstd, const float *x,
                                 const float *gamma, const float *beta, int rows, int cols,
                                 float eps, int kind16);
__global__ void bt_layernorm_bwd_dx(float *dx, unsigned short *dx16, const float *dout,
                                    const unsigned short *dout16, const float *dbranch,
                                    const unsigned short *dbranch16, const float *x,
                                    const unsigned short *x16, const float *mean,
                                    const float *rstd, const float *gamma, int rows, int cols,
                                    int kind16, int x_kind, int branch, int branch_kind,
                                    int dout_kind, int dx_kind,
                                    unsigned short *drop16, int drop_kind,
                                    unsigned long long per_sample, unsigned first_sample,
                                    unsigned thr, float keep_scale, unsigned seed_lo,
                                    unsigned seed_hi, unsigned stream_lo, unsigned stream_hi);
__global__ void bt_layernorm_bwd_dx_params(float *dx, unsigned short *dx16, float *partial,
                                           const float *dout, const unsigned short *dout16,
                                           const float *dbranch, const unsigned short *dbranch16,
                                           const float *x, const unsigned short *x16,
                                           const float *mean, const float *rstd,
                                           const float *gamma, int rows, int cols, int kind16,
                                           int x_kind, int branch, int branch_kind, int dout_kind,
                                           int dx_kind, unsigned short *drop16, int drop_kind,
                                           unsigned long long per_sample, unsigned first_sample,
                                           unsigned thr, float keep_scale, unsigned seed_lo,
                                           unsigned seed_hi, unsigned stream_lo,
                                           unsigned stream_hi);
__global__ void bt_layernorm_bwd_params(float *dgamma, float *dbeta, const float *dout,
                                        const unsigned short *dout16, const float *dbranch,
                                        const unsigned short *dbranch16, const float *x,
                                        const unsigned short *x16, const float *mean,
                                        const float *rstd, int rows, int cols, int x_kind,
                                        int kind16, int branch, int branch_kind, int dout_kind);
__global__ void bt_layernorm_bwd_params_partial(float *partial, const float *dout,
                                                const unsigned short *dout16,
                                                const float *dbranch,
                                                const unsigned short *dbranch16, const float *x,
                                                const unsigned short *x16, const float *mean,
                                                const float *rstd, int rows, int cols,
                                                int x_kind, int kind16, int branch,
                                                int branch_kind, int dout_kind);
__global__ void bt_layernorm_bwd_params_sum(float *dgamma, float *dbeta, const float *partial,
                                            int chunks, int cols);

/* ---- kernels/softmax.cl ---- */
__global__ void bt_softmax_fwd(float *probs, const float *scores, const int *key_mask, int rows,
                               int HT, int T, float scale);
__global__ void bt_softmax_bwd(float *dscores, const float *dprobs, const float *probs, int rows,
                               int T, float scale);

/* ---- kernels/embedding.cl ---- */
__global__ void bt_embed_fwd(float *out, const int *ids, const int *tt, const float *wte,
                             const float *wpe, const float *wtt, int N, int T, int C);
__global__ void bt_embed_bwd_type(float *dwtt, const float *dout, const int *tt, int N, int C,
                                  int TV);
__global__ void bt_embed_bwd_type_partial(float *partial, const float *dout, const int *tt, int N,
                                          int C, int TV);
__global__ void bt_embed_bwd_pos(float *dwpe, const float *dout, int B, int T, int C);
__global__ void bt_gather_rows(float *out, const float *src, const int *idx, int n_idx, int cols);
__global__ void bt_scatter_rows(float *dst, const float *src, const int *idx, const int *links,
                                int n_idx, int cols);

/* ---- kernels/xent.cl ---- */
__global__ void bt_xent_fwd_bwd(float *dlogits, float *loss, float *correct, float *log_z,
                                const float *logits, const int *labels, int V, float grad_scale,
                                float z_loss, int kind16, unsigned short *dlogits16,
                                int grad16_only, const unsigned short *logits16, int logits_kind);

/* ---- kernels/optim.cl ---- */
__global__ void bt_adamw_step(float *w, const float *g, float *m, float *v, unsigned long long n,
                              float beta1, float beta2, float eps, float decay, float step,
                              float sqrt_bc2);
__global__ void bt_lamb_update(float *u, const float *w, const float *g, float *m, float *v,
                               unsigned long long n, float beta1, float beta2, float eps, float wd,
                               float bc1, float bc2);
__global__ void bt_adamw_multi(float *w, const float *g, float *m, float *v,
                               unsigned short *w16, int kind16, const unsigned long long *tab,
                               const float *ftab, int n_spans, float beta1, float beta2,
                               float eps, float grad_scale, const float *gate, int gated);
__global__ void bt_lamb_multi_moments(const float *w, const float *g, float *m, float *v,
                                      const unsigned long long *tab, const float *ftab,
                                      float *partial, int n_spans, float beta1, float beta2,
                                      float eps, float grad_scale, const float *gate, int gated);
__global__ void bt_lamb_multi_trust(const unsigned long long *tab, const float *partial,
                                    float *coef, int n_spans, float lr, float min_coeff,
                                    float max_coeff, const float *gate, int gated);
__global__ void bt_lamb_multi_apply(float *w, const float *m, const float *v,
                                    unsigned short *w16, int kind16,
                                    const unsigned long long *tab, const float *ftab,
                                    const float *coef, int n_spans, float eps, const float *gate,
                                    int gated);
__global__ void bt_step_gate_decide(const float *partial, const unsigned long long *tab,
                                    int n_terms, const double *num, int guard, float max_norm,
                                    float *gate);

/* ---- kernels/cast.cl ---- */
__global__ void bt_cast_f32_to_bf16(unsigned short *dst, const unsigned int *src,
                                    unsigned long long n);
__global__ void bt_cast_f32_to_f16(unsigned short *dst, const unsigned int *src,
                                   unsigned long long n);
__global__ void bt_cast_bf16_to_f32(unsigned int *dst, const unsigned short *src,
                                    unsigned long long n);
__global__ void bt_cast_f16_to_f32(unsigned int *dst, const unsigned short *src,
                                   unsigned long long n);
__global__ void bt_cast_bf16_to_f16(unsigned short *dst, const unsigned short *src,
                                    unsigned long long n);
__global__ void bt_cast_f16_to_bf16(unsigned short *dst, const unsigned short *src,
                                    unsigned long long n);
__global__ void bt_round16_bf16(unsigned int *x, unsigned long long n);
__global__ void bt_round16_f16(unsigned int *x, unsigned long long n);

/* ---- kernels/fused.cl ---- */
__global__ void bt_bias_gelu_fwd(float *out, float *y, const float *bias, unsigned short *out16,
                                 unsigned short *y16, int rows, int cols, int kind16,
                                 int copies16);
__global__ void bt_bias_gelu_bwd(float *partial, float *dx, const float *dout,
                                 const unsigned short *dout16, const float *x,
                                 const unsigned short *x16, unsigned short *dx16, int rows,
                                 int cols, int chunk_rows, int accumulate, int kind16, int x_is16,
                                 int dout_is16, int copies16);
__global__ void bt_bias_dropout_add(float *out, const float *y, const float *bias,
                                    const float *resid, int rows, int cols, int kind16,
                                    unsigned long long per_sample, unsigned int first_sample,
                                    unsigned int thr, float keep_scale, unsigned int seed_lo,
                                    unsigned int seed_hi, unsigned int stream_lo,
                                    unsigned int stream_hi);
__global__ void bt_add_dropout(float *out, const float *a, const float *b,
                               const unsigned short *b16, unsigned long long per_sample,
                               unsigned long long blocks_per_sample, unsigned long long blocks,
                               int b_is16, int kind16, unsigned int first_sample,
                               unsigned int thr, float keep_scale, unsigned int seed_lo,
                               unsigned int seed_hi, unsigned int stream_lo,
                               unsigned int stream_hi);
__global__ void bt_residual_layernorm_fwd(float *sum, float *out, float *mean, float *rstd,
                                          const float *y, const float *bias, const float *resid,
                                          const unsigned short *resid16, const float *gamma,
                                          const float *beta, unsigned short *sum16,
                                          unsigned short *out16, int rows, int cols, float eps,
                                          int kind16, int copies16, int resid_is16,
                                          unsigned long long per_sample,
                                          unsigned int first_sample, unsigned int thr,
                                          float keep_scale, unsigned int seed_lo,
                                          unsigned int seed_hi, unsigned int stream_lo,
                                          unsigned int stream_hi);
__global__ void bt_softmax_dropout_fwd(float *dropped, float *probs, const float *scores,
                                       const int *key_mask, unsigned short *dropped16,
                                       unsigned short *probs16, int rows, int HT, int T,
                                       float scale, int kind16, int copies16,
                                       unsigned int first_sample, unsigned int thr,
                                       float keep_scale, unsigned int seed_lo, unsigned int seed_hi,
                                       unsigned int stream_lo, unsigned int stream_hi);
__global__ void bt_dropout_softmax_bwd(float *dscores, const float *dprobs, const float *probs,
                                       const unsigned short *probs16, unsigned short *dscores16,
                                       int rows, int HT, int T, float scale, int kind16,
                                       int probs_kind, int copies16, unsigned int first_sample,
                                       unsigned int thr, float keep_scale, unsigned int seed_lo,
                                       unsigned int seed_hi, unsigned int stream_lo,
                                       unsigned int stream_hi);

/* ---- kernels/attention.cl ---- */
__global__ void bt_attention_fwd(float *ctx, float *lse, const float *qkv,
                                 const unsigned short *qkv16, const int *key_mask, int kind,
                                 int NH, int T, int D, float scale, unsigned int first_sample,
                                 unsigned int thr, float keep_scale, unsigned int seed_lo,
                                 unsigned int seed_hi, unsigned int stream_lo,
                                 unsigned int stream_hi);
__global__ void bt_attention_bwd_dq(float *dqkv, float *delta, const float *dctx,
                                    const float *ctx, const unsigned short *ctx16,
                                    const float *lse, const float *qkv,
                                    const unsigned short *qkv16, const int *key_mask, int kind,
                                    int ctx_kind, int NH, int T, int D, float scale,
                                    unsigned int first_sample, unsigned int thr,
                                    float keep_scale, unsigned int seed_lo, unsigned int seed_hi,
                                    unsigned int stream_lo, unsigned int stream_hi);
__global__ void bt_attention_bwd_dkv(float *dqkv, const float *dctx, const float *delta,
                                     const float *lse, const float *qkv,
                                     const unsigned short *qkv16, const int *key_mask, int kind,
                                     int NH, int T, int D, float scale,
                                     unsigned int first_sample, unsigned int thr,
                                     float keep_scale, unsigned int seed_lo,
                                     unsigned int seed_hi, unsigned int stream_lo,
                                     unsigned int stream_hi);

#endif
