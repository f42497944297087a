/* 1-bit LAMB (optimizer.type "OneBitLamb"), DeepSpeed's algorithm:
 *
 *  - warm-up (freeze_step updates): LAMB on the device, bit for bit; after
 *    each update the host works out each tensor's trust ratio from copies of
 *    the weights before it and the new moments, and keeps their EMA
 *    (coeff_beta) over the ratios other than 1 as coeff_freeze. At the
 *    freeze, v_fresh starts as a copy of the second moment.
 *  - compressed: the second moment stays as it was. The new first moment
 *    (the ranks' exchanged average, or with one rank b1 m + (1-b1) g) gives
 *    a reconstructed gradient (m - b1 m_last) / (1 - b1), which v_fresh
 *    follows. Per tensor, factor = max over elements of (sqrt(v) + eps) /
 *    (sqrt(v_fresh) + eps), mixed towards 1 by the share of the update that
 *    is not weight decay, clamped to [factor_min, factor_max] and to within
 *    factor_threshold of the last factor; the trust ratio is coeff_freeze x
 *    factor. The update is AdamW's kernel with that ratio folded into the
 *    span's weight decay and first bias correction: w -= lr trust ((m/bc1)
 *    / (sqrt(v)/sqrt(bc2) + eps) + wd w), bc2 frozen at the freeze.
 *
 * The host work reads every parameter a few times a step (the device
 * buffers are copied to the host): the price of keeping the backends'
 * optimizer ops as they are. */
#include "optim.h"

#include "util/le.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAMB1_MAGIC "BTLAMB1"
#define LAMB1_VERSION 1

bt_onebit_lamb *onebit_lamb_new(const bert_model *m) {
    bt_onebit_lamb *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    const size_t nt = (size_t)m->n_tensors + 1, np = m->n_params + 1;
    s->coeff_freeze = calloc(nt, sizeof *s->coeff_freeze);
    s->last_factor = calloc(nt, sizeof *s->last_factor);
    s->scaling = calloc(nt, sizeof *s->scaling);
    s->v_fresh = calloc(np, sizeof *s->v_fresh);
    s->w = malloc(np * sizeof *s->w);
    s->m_last = malloc(np * sizeof *s->m_last);
    s->m_new = malloc(np * sizeof *s->m_new);
    s->v = malloc(np * sizeof *s->v);
    if (!s->coeff_freeze || !s->last_factor || !s->scaling || !s->v_fresh || !s->w ||
        !s->m_last || !s->m_new || !s->v) {
        onebit_lamb_free(s);
        return NULL;
    }
    onebit_lamb_reset(s, m);
    return s;
}

void onebit_lamb_free(bt_onebit_lamb *s) {
    if (!s) return;
    free(s->coeff_freeze);
    free(s->last_factor);
    free(s->scaling);
    free(s->v_fresh);
    free(s->w);
    free(s->m_last);
    free(s->m_new);
    free(s->v);
    free(s);
}

void onebit_lamb_reset(bt_onebit_lamb *s, const bert_model *m) {
    for (int i = 0; i < m->n_tensors; i++) {
        s->coeff_freeze[i] = 0.0;
        s->last_factor[i] = 1.0;
        s->scaling[i] = 0.0f;
    }
    memset(s->v_fresh, 0, m->n_params * sizeof *s->v_fresh);
    s->v_held = false;
}

/* Tensor t's LAMB trust ratio from the weights before the update (s->w) and
 * the new moments (s->m_new, s->v): ||w|| / ||u||, u = (m/bc1) /
 * (sqrt(v/bc2) + eps) + wd w, 1 when either norm is 0, clamped. */
static double trust_ratio(const bt_onebit_lamb *s, const bt_optim_config *c, const bert_tensor *t,
                          const bt_tensor_span *sp) {
    double ww = 0.0, uu = 0.0;
    for (size_t i = t->offset; i < t->offset + t->numel; i++) {
        const float u = (s->m_new[i] / sp->bc1) / (sqrtf(s->v[i] / sp->bc2) + c->eps) +
                        sp->weight_decay * s->w[i];
        ww += (double)s->w[i] * s->w[i];
        uu += (double)u * u;
    }
    double trust = ww > 0.0 && uu > 0.0 ? sqrt(ww) / sqrt(uu) : 1.0;
    if (trust > c->max_coeff) trust = c->max_coeff;
    if (trust < c->min_coeff) trust = c->min_coeff;
    return trust;
}

void onebit_lamb_keep_weights(bt_onebit_lamb *s, bert_model *m) {
    m->be->download(m->be, s->w, bert_params_at(m, 0), m->n_params * sizeof(float));
}

void onebit_lamb_after_warmup(bt_optimizer *o, bert_model *m) {
    bt_onebit_lamb *s = o->lamb1;
    bt_backend *be = m->be;
    const size_t bytes = m->n_params * sizeof(float);
    be->download(be, s->m_new, (bt_ptr){o->m, 0}, bytes);
    be->download(be, s->v, (bt_ptr){o->v, 0}, bytes);
    s->v_held = true;
    const double beta = o->cfg.coeff_beta;
    for (int i = 0; i < m->n_tensors; i++) {
        const double trust = trust_ratio(s, &o->cfg, &m->tensors[i], &o->spans[i]);
        if (trust != 1.0) s->coeff_freeze[i] = beta * s->coeff_freeze[i] + (1.0 - beta) * trust;
    }
    if (o->step == o->cfg.freeze_step) memcpy(s->v_fresh, s->v, bytes);
}

/* Tensor t's factor at a compressed step, from the new first moment `now`
 * and the one before it: v_fresh follows the reconstructed gradient, and
 * the factor is bounded as DeepSpeed bounds it. Each block's elementwise
 * work (the square roots and divisions) runs as SIMD; its sums then run in
 * four lanes (element i into lane i mod 4, added up at the end), a fixed
 * order whatever the vector width. The largest ratio of denominators is
 * found by cross products (exact in double for float operands; each lane
 * keeps its own, and the lanes' largest is the tensor's), so one division
 * gives it. */
static double lamb_factor(bt_onebit_lamb *s, const bt_optim_config *c, const bert_tensor *t,
                          float wd, int k, const float *now, const float *before) {
    enum { BLOCK = 512 };
    const float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
    /* lane q: the sums p_q and a_q, and the largest ratio so far, md_q / mr_q */
    double p0 = 0, p1 = 0, p2 = 0, p3 = 0, a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    double md0 = 0, md1 = 0, md2 = 0, md3 = 0, mr0 = 1, mr1 = 1, mr2 = 1, mr3 = 1;
    float denom[BLOCK], real[BLOCK], up[BLOCK], u[BLOCK];
    const size_t end = t->offset + t->numel;
    for (size_t i0 = t->offset; i0 < end; i0 += BLOCK) {
        const size_t len = end - i0 < BLOCK ? end - i0 : BLOCK;
        float *vf = s->v_fresh + i0;
        const float *v = s->v + i0, *mn = now + i0, *ml = before + i0, *w = s->w + i0;
#pragma omp simd
        for (size_t j = 0; j < len; j++) {
            const float g = (mn[j] - b1 * ml[j]) / (1.0f - b1);
            vf[j] = b2 * vf[j] + (1.0f - b2) * g * g;
            denom[j] = sqrtf(v[j]) + eps;
            real[j] = sqrtf(vf[j]) + eps;
            up[j] = mn[j] / denom[j];
            u[j] = up[j] + wd * w[j];
        }
#define LAMB_LANE(q, j)                                                                         \
    do {                                                                                        \
        if ((double)denom[j] * mr##q > md##q * (double)real[j]) /* a larger ratio */             \
            md##q = denom[j], mr##q = real[j];                                                  \
        p##q += (double)up[j] * up[j];                                                          \
        a##q += (double)u[j] * u[j];                                                            \
    } while (0)
        size_t j = 0; /* BLOCK is a multiple of 4: element j goes to lane j mod 4 */
        for (; j + 4 <= len; j += 4) {
            LAMB_LANE(0, j);
            LAMB_LANE(1, j + 1);
            LAMB_LANE(2, j + 2);
            LAMB_LANE(3, j + 3);
        }
        if (j < len) LAMB_LANE(0, j);
        if (j + 1 < len) LAMB_LANE(1, j + 1);
        if (j + 2 < len) LAMB_LANE(2, j + 2);
#undef LAMB_LANE
    }
    const double md[4] = {md0, md1, md2, md3}, mr[4] = {mr0, mr1, mr2, mr3};
    int best = 0;
    for (int q = 1; q < 4; q++)
        if (md[q] * mr[best] > md[best] * mr[q]) best = q;
    double factor = md[best] / mr[best];
    const double pre_sum = (p0 + p1) + (p2 + p3), all_sum = (a0 + a1) + (a2 + a3);
    if (wd > 0.0f && all_sum > 0.0) {
        const double share = fmin(1.0, sqrt(pre_sum) / sqrt(all_sum));
        factor = factor * share + (1.0 - share);
    }
    factor = fmin(fmax(factor, c->factor_min), c->factor_max);
    const double last = s->last_factor[k];
    factor = fmin(fmax(factor, last * (1.0 - c->factor_threshold)), last * (1.0 + c->factor_threshold));
    s->last_factor[k] = factor;
    return factor;
}

void onebit_lamb_frozen_step(bt_optimizer *o, bert_model *m, float lr, float grad_scale,
                             const bt_host_momentum *given, float bc1, float frozen_bc2) {
    bt_onebit_lamb *s = o->lamb1;
    bt_backend *be = m->be;
    const bt_optim_config *c = &o->cfg;
    const size_t n = m->n_params, bytes = n * sizeof(float);
    if (!s->v_held) { /* the first compressed step since a load or a reset */
        be->download(be, s->v, (bt_ptr){o->v, 0}, bytes);
        s->v_held = true;
    }
    be->download(be, s->w, bert_params_at(m, 0), bytes);
    if (!given) { /* one rank: its own momentum */
        be->download(be, s->m_last, (bt_ptr){o->m, 0}, bytes);
        be->download(be, s->m_new, bert_grads_at(m, 0), bytes);
        for (size_t i = 0; i < n; i++)
            s->m_new[i] = c->beta1 * s->m_last[i] + (1.0f - c->beta1) * (s->m_new[i] * grad_scale);
        be->upload(be, bert_grads_at(m, 0), s->m_new, bytes);
    }
    const float *now = given ? given->now : s->m_new, *before = given ? given->before : s->m_last;
    for (int i = 0; i < m->n_tensors; i++) {
        const bert_tensor *t = &m->tensors[i];
        const float wd = t->decay ? c->weight_decay : 0.0f;
        const double trust = s->coeff_freeze[i] * lamb_factor(s, c, t, wd, i, now, before);
        o->spans[i] = (bt_tensor_span){t->offset, t->numel, (float)(trust * wd),
                                       (float)(bc1 / trust), frozen_bc2};
    }
    /* beta1 0: m becomes the given momentum; beta2 1: v stays */
    be->adamw_multi(be, (bt_ptr){m->params, 0}, (bt_ptr){m->grads, 0}, (bt_ptr){o->m, 0},
                    (bt_ptr){o->v, 0}, (bt_ptr){m->params16, 0}, (bt_dtype)m->cfg.storage,
                    o->spans, m->n_tensors, lr, 0.0f, 1.0f, c->eps, 1.0f, -1);
}

const float *optim_momentum_scaling(bt_optimizer *o, const bert_model *m, const float *mom) {
    bt_onebit_lamb *s = o->lamb1;
    if (!s) return NULL;
    if (s->scaling[0] != 0.0f) return s->scaling;
    double *rms = malloc(((size_t)m->n_tensors + 1) * sizeof *rms), united = 0.0;
    if (!rms) {
        fprintf(stderr, "bertrain: out of host memory\n");
        exit(1);
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const bert_tensor *t = &m->tensors[i];
        double sq = 0.0;
        for (size_t k = t->offset; k < t->offset + t->numel; k++) sq += (double)mom[k] * mom[k];
        rms[i] = sqrt(sq / (double)t->numel);
        united += rms[i];
    }
    united /= m->n_tensors;
    for (int i = 0; i < m->n_tensors; i++)
        s->scaling[i] = rms[i] > 0.0 ? (float)(united / rms[i]) : 1.0f;
    free(rms);
    return s->scaling;
}

void *onebit_lamb_save(const bt_onebit_lamb *s, const bert_model *m, size_t *len) {
    const size_t nt = (size_t)m->n_tensors, per = 8 + 8 + 4;
    *len = 24 + nt * per + m->n_params * 4;
    unsigned char *b = malloc(*len), *p = b + 24;
    if (!b) return NULL;
    memcpy(b, LAMB1_MAGIC, 8);
    le_put(b + 8, LAMB1_VERSION, 4);
    le_put(b + 12, nt, 4);
    le_put(b + 16, m->n_params, 8);
    for (size_t i = 0; i < nt; i++, p += per) {
        memcpy(p, &s->coeff_freeze[i], 8);
        memcpy(p + 8, &s->last_factor[i], 8);
        memcpy(p + 16, &s->scaling[i], 4);
    }
    memcpy(p, s->v_fresh, m->n_params * 4);
    return b;
}

bool onebit_lamb_load(bt_onebit_lamb *s, const bert_model *m, const void *bytes, size_t len,
                      char *err, size_t errlen) {
    const unsigned char *b = bytes, *p = b + 24;
    const size_t nt = (size_t)m->n_tensors, per = 8 + 8 + 4;
    if (len < 24 || memcmp(b, LAMB1_MAGIC, 8) != 0) {
        snprintf(err, errlen, "not a 1-bit LAMB state file (bad magic or truncated)");
        return false;
    }
    if (le_get(b + 8, 4) != LAMB1_VERSION || le_get(b + 12, 4) != nt ||
        le_get(b + 16, 8) != m->n_params || len != 24 + nt * per + m->n_params * 4) {
        snprintf(err, errlen, "version %u, %u tensors, %llu parameters, %zu bytes: not this "
                 "bertrain's state of this model (%zu tensors, %zu parameters)",
                 (unsigned)le_get(b + 8, 4), (unsigned)le_get(b + 12, 4),
                 (unsigned long long)le_get(b + 16, 8), len, nt, m->n_params);
        return false;
    }
    for (size_t i = 0; i < nt; i++, p += per) {
        memcpy(&s->coeff_freeze[i], p, 8);
        memcpy(&s->last_factor[i], p + 8, 8);
        memcpy(&s->scaling[i], p + 16, 4);
        if (!isfinite(s->coeff_freeze[i]) || !isfinite(s->last_factor[i]) ||
            !isfinite(s->scaling[i]) || s->last_factor[i] <= 0.0) {
            snprintf(err, errlen, "tensor %s: a coefficient that is not finite or positive",
                     m->tensors[i].name);
            return false;
        }
    }
    memcpy(s->v_fresh, p, m->n_params * 4);
    for (size_t i = 0; i < m->n_params; i++)
        if (!(s->v_fresh[i] >= 0.0f) || isinf(s->v_fresh[i])) {
            snprintf(err, errlen, "v_fresh value %zu is negative or not finite", i);
            return false;
        }
    return true;
}
