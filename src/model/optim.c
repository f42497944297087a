/* Optimizer steps: one multi-tensor backend op per step over the named
 * tensors' spans, so decay flags, LayerDrop's per-layer bias corrections and
 * LAMB's per-tensor trust ratios follow the tensor table while the launches
 * stay constant and nothing is read back. */
#include "optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

const char *optim_type_name(int type) {
    static const char *const names[] = {"AdamW", "Lamb", "OneBitAdam", "OneBitLamb"};
    return type >= 0 && type < 4 ? names[type] : "unknown";
}

bool optim_frozen(const bt_optimizer *o) {
    return (o->cfg.type == OPT_ONEBIT_ADAM || o->cfg.type == OPT_ONEBIT_LAMB) &&
           o->step >= o->cfg.freeze_step;
}

bt_optimizer *optim_create(bert_model *m, const bt_optim_config *cfg, char *err, size_t errlen) {
    bt_backend *be = m->be;
    bt_optimizer *o = calloc(1, sizeof *o);
    if (!o) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    o->cfg = *cfg;
    o->n_layers = m->cfg.num_hidden_layers;
    o->layer_steps = calloc((size_t)o->n_layers, sizeof *o->layer_steps);
    if (!o->layer_steps) {
        snprintf(err, errlen, "out of host memory");
        free(o);
        return NULL;
    }
    o->spans = malloc((size_t)(m->n_tensors > 0 ? m->n_tensors : 1) * sizeof *o->spans);
    if (!o->spans) {
        snprintf(err, errlen, "out of host memory");
        free(o->layer_steps);
        free(o);
        return NULL;
    }
    o->m = be->alloc(be, m->n_params * 4);
    o->v = be->alloc(be, m->n_params * 4);
    if (!o->m || !o->v) {
        snprintf(err, errlen, "out of device memory on %s for optimizer state (%.1f MB)",
                 be->name, 2.0 * m->n_params * 4 / 1e6);
        optim_free(o, m);
        return NULL;
    }
    if (cfg->type == OPT_ONEBIT_LAMB && !(o->lamb1 = onebit_lamb_new(m))) {
        snprintf(err, errlen, "out of host memory for 1-bit LAMB's state (%.1f MB)",
                 5.0 * m->n_params * 4 / 1e6);
        optim_free(o, m);
        return NULL;
    }
    be->fill(be, (bt_ptr){o->m, 0}, 0.0f, m->n_params);
    be->fill(be, (bt_ptr){o->v, 0}, 0.0f, m->n_params);
    return o;
}

bt_ptr optim_moment_at(const bt_optimizer *o, int k, size_t off) {
    return (bt_ptr){k ? o->v : o->m, off * 4};
}

void optim_reset(bt_optimizer *o, bert_model *m) {
    m->be->fill(m->be, (bt_ptr){o->m, 0}, 0.0f, m->n_params);
    m->be->fill(m->be, (bt_ptr){o->v, 0}, 0.0f, m->n_params);
    o->step = 0;
    for (int l = 0; l < o->n_layers; l++) o->layer_steps[l] = 0;
    if (o->lamb1) onebit_lamb_reset(o->lamb1, m);
}

void optim_free(bt_optimizer *o, bert_model *m) {
    if (!o) return;
    if (o->m) m->be->free(m->be, o->m);
    if (o->v) m->be->free(m->be, o->v);
    onebit_lamb_free(o->lamb1);
    free(o->spans);
    free(o->layer_steps);
    free(o);
}

int optim_defer_grad_sumsq(bert_model *m) {
    return m->be->reduce_defer(m->be, BT_REDUCE_SUMSQ, (bt_ptr){m->grads, 0}, m->n_params);
}

float optim_clip_scale(double norm, float max_norm) {
    if (max_norm <= 0.0f) return 1.0f;
    const double coef = max_norm / (norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}

static void multi_update(bt_optimizer *o, bert_model *m, float lr, const unsigned char *layer_skip,
                         float grad_scale, bool momentum_given, int gate);

void optim_bias_corrections(const bt_optim_config *c, long t, float *bc1, float *bc2) {
    *bc1 = *bc2 = 1.0f;
    if (!c->bias_correction) return;
    *bc1 = (float)(1.0 - pow(c->beta1, (double)t));
    *bc2 = (float)(1.0 - pow(c->beta2, (double)t));
}

void optim_step(bt_optimizer *o, bert_model *m, float lr, const unsigned char *layer_skip,
                float grad_scale, const bt_host_momentum *given) {
    if (o->lamb1 && optim_frozen(o)) { /* LayerDrop is refused with it: every layer steps */
        o->step++;
        for (int l = 0; l < o->n_layers; l++) o->layer_steps[l]++;
        float bc1, bc2, unused, frozen_bc2;
        optim_bias_corrections(&o->cfg, o->step, &bc1, &bc2);
        optim_bias_corrections(&o->cfg, o->cfg.freeze_step, &unused, &frozen_bc2);
        onebit_lamb_frozen_step(o, m, lr, grad_scale, given, bc1, frozen_bc2);
        return;
    }
    if (o->lamb1) onebit_lamb_keep_weights(o->lamb1, m);
    multi_update(o, m, lr, layer_skip, grad_scale, given != NULL, -1);
    if (o->lamb1) onebit_lamb_after_warmup(o, m);
}

bool optim_gateable(const bt_optimizer *o) { return !o->lamb1; }

void optim_step_gated(bt_optimizer *o, bert_model *m, float lr, const unsigned char *layer_skip,
                      int gate) {
    if (!optim_gateable(o)) {
        fprintf(stderr, "bertrain: internal error: 1-bit LAMB's step cannot be gated\n");
        exit(1);
    }
    multi_update(o, m, lr, layer_skip, 1.0f, false, gate);
}

void optim_unstep(bt_optimizer *o, const unsigned char *layer_skip) {
    o->step--;
    for (int l = 0; l < o->n_layers; l++)
        if (!layer_skip || !layer_skip[l]) o->layer_steps[l]--;
}

/* optim_step's update on the device: AdamW's kernel (AdamW, 1-bit Adam) or
 * LAMB's (LAMB, 1-bit LAMB's warm-up) on every span. */
static void multi_update(bt_optimizer *o, bert_model *m, float lr, const unsigned char *layer_skip,
                         float grad_scale, bool momentum_given, int gate) {
    bt_backend *be = m->be;
    const bt_optim_config *c = &o->cfg;
    /* frozen: v = 1 v + 0 g^2 is v, and with the momentum given m = 0 m + 1 g is g, exactly */
    const bool frozen = optim_frozen(o);
    const float beta1 = momentum_given ? 0.0f : c->beta1, beta2 = frozen ? 1.0f : c->beta2;
    o->step++;
    for (int l = 0; l < o->n_layers; l++)
        if (!layer_skip || !layer_skip[l]) o->layer_steps[l]++;
    int n = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const bert_tensor *t = &m->tensors[i];
        if (t->layer >= 0 && layer_skip && layer_skip[t->layer]) continue;
        bt_tensor_span *s = &o->spans[n++];
        s->offset = t->offset;
        s->numel = t->numel;
        s->weight_decay = t->decay ? c->weight_decay : 0.0f;
        optim_bias_corrections(c, t->layer >= 0 ? o->layer_steps[t->layer] : o->step, &s->bc1, &s->bc2);
        if (frozen) { /* the second moment's correction stays the freeze's */
            float unused;
            optim_bias_corrections(c, c->freeze_step, &unused, &s->bc2);
        }
    }
    /* the 16-bit weights the GEMMs read, written in the same pass */
    bt_ptr w = {m->params, 0}, g = {m->grads, 0}, mm = {o->m, 0}, vv = {o->v, 0},
           w16 = {m->params16, 0};
    const bt_dtype dt16 = (bt_dtype)m->cfg.storage;
    if (c->type == OPT_ADAMW || c->type == OPT_ONEBIT_ADAM)
        be->adamw_multi(be, w, g, mm, vv, w16, dt16, o->spans, n, lr, beta1, beta2, c->eps,
                        grad_scale, gate);
    else
        be->lamb_multi(be, w, g, mm, vv, w16, dt16, o->spans, n, lr, c->beta1, c->beta2, c->eps,
                       c->min_coeff, c->max_coeff, grad_scale, gate);
}
