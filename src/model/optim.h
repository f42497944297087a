/* AdamW, LAMB, and 1-bit Adam's and 1-bit LAMB's updates over the model's
 * named tensors, plus global-norm clipping. Moments live in flat buffers laid
 * out like the parameters. */
#ifndef BT_OPTIM_H
#define BT_OPTIM_H

#include "bert.h"

/* OPT_ONEBIT_ADAM: AdamW for freeze_step updates, then the second moment is
 * frozen and the first moment is what the ranks exchange, compressed
 * (train/onebit.h). OPT_ONEBIT_LAMB: the same after LAMB, with the trust
 * ratios frozen too and rescaled by how far the frozen second moment has
 * drifted (optim_onebit_lamb.c). */
typedef enum { OPT_ADAMW = 0, OPT_LAMB = 1, OPT_ONEBIT_ADAM = 2, OPT_ONEBIT_LAMB = 3 } bt_optim_type;

/* The config's name of an optimizer type ("AdamW", "Lamb", "OneBitAdam",
 * "OneBitLamb"). */
const char *optim_type_name(int type);

/* The optimizer's settings (config "optimizer"). */
typedef struct {
    bt_optim_type type;
    float lr, beta1, beta2, eps, weight_decay;
    bool bias_correction;
    float min_coeff, max_coeff; /* LAMB trust-ratio clamp */
    long freeze_step;           /* 1-bit: updates in full precision before the freeze */
    float coeff_beta;           /* 1-bit LAMB: the EMA of the warm-up's trust ratios */
    float factor_max, factor_min, factor_threshold; /* 1-bit LAMB: the factor's bounds */
} bt_optim_config;

/* 1-bit LAMB's state beyond the moments (DeepSpeed's names), the same bits
 * on every rank; on the host. */
typedef struct {
    double *coeff_freeze; /* (n_tensors) EMA of the warm-up's trust ratios other than 1 */
    double *last_factor;  /* (n_tensors) the last compressed step's factor (1 before) */
    float *scaling;       /* (n_tensors) each tensor's momentum scaling for the exchange,
                           * set at the first compressed step (0 before) */
    float *v_fresh;       /* (n_params) the second moment as it would have gone on after the
                           * freeze, from reconstructed gradients */
    float *w, *m_last, *m_new, *v; /* (n_params each) scratch copies of device buffers (m_last
                                    * and m_new only where no exchange gives them) */
    bool v_held; /* v is the device's second moment: after the freeze it stays (beta2 1),
                  * so the compressed steps download it once; onebit_lamb_reset (a load,
                  * a reset) clears it */
} bt_onebit_lamb;

typedef struct {
    bt_optim_config cfg;
    bt_buffer *m, *v; /* (n_params) first and second moments */
    bt_tensor_span *spans; /* (n_tensors) the spans of one step's multi-tensor update */
    long step;        /* updates applied so far */
    long *layer_steps; /* (num_hidden_layers) updates each encoder layer received: fewer
                        * than step under LayerDrop; its bias correction counts these */
    int n_layers;
    bt_onebit_lamb *lamb1; /* OPT_ONEBIT_LAMB only, else NULL */
} bt_optimizer;

/* Allocate moments (zeroed) for m; NULL with a reason in err. */
bt_optimizer *optim_create(bert_model *m, const bt_optim_config *cfg, char *err, size_t errlen);
void optim_free(bt_optimizer *o, bert_model *m);

/* Moment k (0: the first, 1: the second) at element off, as a device
 * pointer, in the parameters' layout. */
bt_ptr optim_moment_at(const bt_optimizer *o, int k, size_t off);

/* Back to the state of a fresh optimizer: zero moments, no updates. */
void optim_reset(bt_optimizer *o, bert_model *m);

/* Queue the sum of squares of all gradients on the device (reduce_defer):
 * its index; the global norm is the square root of the fetched value. */
int optim_defer_grad_sumsq(bert_model *m);

/* The factor that brings gradients of global norm `norm` to at most
 * max_norm (torch's clip_grad_norm_: max_norm / (norm + 1e-6) when below 1,
 * else 1; 1 when max_norm <= 0), for optim_step's grad_scale. A gated step
 * computes it on the device too (kernels/optim.cl's bt_step_gate_decide,
 * the CPU's cpu_step_gate), and the trainer checks the two agree. */
float optim_clip_scale(double norm, float max_norm);

/* Whether the next update is past 1-bit Adam's warm-up: the second moment
 * is frozen (and, over several ranks, the first moment is exchanged instead
 * of the gradients). */
bool optim_frozen(const bt_optimizer *o);

/* The first moment exchanged among the ranks (1-bit Adam and LAMB past the
 * warm-up), on the host as the exchange left it: `now` the ranks' average
 * (the gradient buffer holds the same values), `before` the first moment it
 * follows (the optimizer's, before the update). Each n_params values. */
typedef struct {
    const float *now, *before;
} bt_host_momentum;

/* One update with learning rate lr of every tensor except those of the
 * encoder layers with layer_skip[l] set (LayerDrop: their weights and
 * moments stay as they are); layer_skip may be NULL. Each gradient is read
 * as g * grad_scale, in the update's own pass (the gradients stay as they
 * are): the bits of scaling them first. Past 1-bit Adam's warm-up the second
 * moment and its bias correction stay as they were at the freeze; with
 * `given` (else NULL) the gradient buffer holds the new first moment itself
 * (the ranks' exchanged average), which the update takes as it is, and
 * `given` its host copies (1-bit LAMB reads them rather than the device's). */
void optim_step(bt_optimizer *o, bert_model *m, float lr, const unsigned char *layer_skip,
                float grad_scale, const bt_host_momentum *given);

/* Whether optim_step_gated can run this optimizer (not 1-bit LAMB, whose
 * step reads the host's copies). */
bool optim_gateable(const bt_optimizer *o);

/* optim_step (no momentum given) whose update obeys `gate`, a step_gate's
 * index on the model's backend: the gradients' scale is the gate's, and a
 * skipped gate leaves the weights and moments as they were. The step is
 * counted; once the gate is read as skipped, optim_unstep takes it back. */
void optim_step_gated(bt_optimizer *o, bert_model *m, float lr, const unsigned char *layer_skip,
                      int gate);

/* Take back the count of a gated step that its gate skipped (the same
 * layer_skip). */
void optim_unstep(bt_optimizer *o, const unsigned char *layer_skip);

/* Adam's bias corrections after t updates (1 without bias correction). */
void optim_bias_corrections(const bt_optim_config *c, long t, float *bc1, float *bc2);

/* ---- 1-bit LAMB (optim_onebit_lamb.c; optim_step calls these) ---- */

/* 1-bit LAMB's state for m: coefficients zero, factors 1, no scaling; NULL
 * when out of host memory. */
bt_onebit_lamb *onebit_lamb_new(const bert_model *m);
void onebit_lamb_free(bt_onebit_lamb *s);
/* Back to a fresh state (optim_reset). */
void onebit_lamb_reset(bt_onebit_lamb *s, const bert_model *m);

/* Before a warm-up update: a host copy of the weights it starts from. */
void onebit_lamb_keep_weights(bt_onebit_lamb *s, bert_model *m);
/* After a warm-up update (o->step counts it; o->spans hold its bias
 * corrections and weight decays): the EMA of each tensor's trust ratio, and
 * v_fresh at the freeze. */
void onebit_lamb_after_warmup(bt_optimizer *o, bert_model *m);
/* A compressed update (o->step already counts it): the new momentum (given's,
 * which the gradient buffer holds too; with no `given`, b1 m + (1-b1) g
 * grad_scale, put there), the factors, then AdamW's kernel with each tensor's trust ratio
 * folded into its span; bc1 this step's first bias correction, frozen_bc2
 * the freeze's second. */
void onebit_lamb_frozen_step(bt_optimizer *o, bert_model *m, float lr, float grad_scale,
                             const bt_host_momentum *given, float bc1, float frozen_bc2);

/* Each tensor's factor for the momentum exchange of a frozen 1-bit LAMB
 * step (DeepSpeed's scaling_coeff: the mean over tensors of the momentum's
 * root mean square over this tensor's, fixed at the first compressed step
 * from mom, the first moment on the host), or NULL for other optimizers. */
const float *optim_momentum_scaling(bt_optimizer *o, const bert_model *m, const float *mom);

/* The state checkpoints keep (onebit_lamb.bin): a 24-byte little-endian
 * header (magic BTLAMB1\0, u32 version 1, u32 tensor count, u64 parameter
 * count), per tensor coeff_freeze and last_factor (fp64) and scaling (fp32),
 * then v_fresh (fp32). Returns malloc'd bytes (*len their count), NULL when
 * out of memory. */
void *onebit_lamb_save(const bt_onebit_lamb *s, const bert_model *m, size_t *len);
/* Load what onebit_lamb_save wrote; false with the problem in err. */
bool onebit_lamb_load(bt_onebit_lamb *s, const bert_model *m, const void *bytes, size_t len,
                      char *err, size_t errlen);

#endif
