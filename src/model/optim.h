/* AdamW, LAMB and 1-bit Adam's update over the model's named tensors, plus
 * global-norm clipping. Moments live in flat buffers laid out like the
 * parameters. */
#ifndef BT_OPTIM_H
#define BT_OPTIM_H

#include "bert.h"

/* OPT_ONEBIT_ADAM: AdamW for freeze_step updates, then the second moment is
 * frozen and the first moment is what the ranks exchange, compressed
 * (train/onebit.h). */
typedef enum { OPT_ADAMW = 0, OPT_LAMB = 1, OPT_ONEBIT_ADAM = 2 } bt_optim_type;

/* The config's name of an optimizer type ("AdamW", "Lamb", "OneBitAdam"). */
const char *optim_type_name(int type);

/* The optimizer's settings (config "optimizer"). */
typedef struct {
    bt_optim_type type;
    float lr, beta1, beta2, eps, weight_decay;
    bool bias_correction;
    float min_coeff, max_coeff; /* LAMB trust-ratio clamp */
    long freeze_step;           /* 1-bit Adam: updates in full precision before the freeze */
} bt_optim_config;

typedef struct {
    bt_optim_config cfg;
    bt_buffer *m, *v; /* (n_params) first and second moments */
    bt_tensor_span *spans; /* (n_tensors) the spans of one step's multi-tensor update */
    long step;        /* updates applied so far */
    long *layer_steps; /* (num_hidden_layers) updates each encoder layer received: fewer
                        * than step under LayerDrop; its bias correction counts these */
    int n_layers;
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
 * else 1; 1 when max_norm <= 0), for optim_step's grad_scale. */
float optim_clip_scale(double norm, float max_norm);

/* Whether the next update is past 1-bit Adam's warm-up: the second moment
 * is frozen (and, over several ranks, the first moment is exchanged instead
 * of the gradients). */
bool optim_frozen(const bt_optimizer *o);

/* One update with learning rate lr of every tensor except those of the
 * encoder layers with layer_skip[l] set (LayerDrop: their weights and
 * moments stay as they are); layer_skip may be NULL. Each gradient is read
 * as g * grad_scale, in the update's own pass (the gradients stay as they
 * are): the bits of scaling them first. Past 1-bit Adam's warm-up the second
 * moment and its bias correction stay as they were at the freeze; with
 * momentum_given the gradient buffer holds the new first moment itself (the
 * ranks' exchanged average), which the update takes as it is. */
void optim_step(bt_optimizer *o, bert_model *m, float lr, const unsigned char *layer_skip,
                float grad_scale, bool momentum_given);

#endif
