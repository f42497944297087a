/* LayerDrop in the engine, on the CPU backend, for Post-LN and Pre-LN:
 *  - a pass that skips layers 1 and 3 of a 4-layer model gives the same bits
 *    (loss, MLM and NSP logits, gradients) as a 2-layer model holding only
 *    layers 0 and 2: a skipped layer is exactly the identity, forward and back;
 *  - the skipped layers' gradients stay exactly zero;
 *  - optim_step with that mask leaves the skipped layers' weights and Adam
 *    moments bit-identical, and after 3 such steps the kept tensors equal the
 *    2-layer model's trained with the same gradients (per-layer bias
 *    correction counts the updates a layer really received), and a layer's
 *    first update after being skipped is a first Adam update;
 *  - bert_layerdrop_draw is a pure function of (seed, step), drops a fraction
 *    p of layers, differs between steps and seeds, and drops none at p = 0.
 * Parameters and inputs are fresh seeded random values (no zeros); dropout is
 * off so the two models' passes are comparable bit for bit. */
#include "model/optim.h"
#include "backends/cpu/cpu_backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 12, M = 7, L = 4, KEPT = 2 };
static const int keep[KEPT] = {0, 2};
static int failures;

static void check(bool ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) failures++;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform01(void) { /* xorshift64*: the test's own input stream */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static bert_model *make(bt_backend *be, bert_config c, int layers) {
    char err[256];
    c.num_hidden_layers = layers;
    bert_model *m = bert_create(be, &c, B, T, M, err, sizeof err);
    if (!m) {
        fprintf(stderr, "FAIL: %s\n", err);
        exit(1);
    }
    return m;
}

/* The name of the 4-layer model's tensor that the pruned model's `name` holds. */
static void full_name(const char *name, char *out, size_t n) {
    int l;
    char rest[160];
    if (sscanf(name, "bert.encoder.layer.%d.%159s", &l, rest) == 2)
        snprintf(out, n, "bert.encoder.layer.%d.%s", keep[l], rest);
    else
        snprintf(out, n, "%s", name);
}

/* Compares every tensor of the pruned model p (host copy hp) with its
 * counterpart in the full model (hf), bit for bit. */
static bool same_as_pruned(const bert_model *p, const float *hp, const bert_model *f,
                           const float *hf) {
    char name[200];
    for (int i = 0; i < p->n_tensors; i++) {
        full_name(p->tensors[i].name, name, sizeof name);
        const bert_tensor *t = bert_find_tensor(f, name);
        if (!t || memcmp(hp + p->tensors[i].offset, hf + t->offset, t->numel * 4) != 0) {
            printf("     differs: %s\n", p->tensors[i].name);
            return false;
        }
    }
    return true;
}

/* Whether every tensor of skipped layers in f equals `ref` (when given) or is
 * all zeros (ref NULL). */
static bool skipped_layers_are(const bert_model *f, const float *h, const float *ref,
                               const unsigned char *skip) {
    for (int i = 0; i < f->n_tensors; i++) {
        const bert_tensor *t = &f->tensors[i];
        if (t->layer < 0 || !skip[t->layer]) continue;
        for (size_t j = 0; j < t->numel; j++)
            if (ref ? memcmp(&h[t->offset + j], &ref[t->offset + j], 4) != 0 : h[t->offset + j] != 0.0f)
                return false;
    }
    return true;
}

static float *download(bert_model *m, bt_buffer *buf) {
    float *h = malloc(m->n_params * 4);
    if (!h) exit(1);
    m->be->download(m->be, h, (bt_ptr){buf, 0}, m->n_params * 4);
    return h;
}

static void run_norm(bt_backend *be, int norm) {
    const char *nn = norm == BERT_NORM_PRE ? "Pre-LN" : "Post-LN";
    char what[200];
    bert_config c;
    bert_preset("tiny", &c);
    c.vocab_size = 300;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
    c.intermediate_size = 64;
    c.max_position_embeddings = 32;
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0f;
    c.nsp = true;
    c.norm = norm;
    bert_model *f = make(be, c, L), *p = make(be, c, KEPT);
    /* random parameters everywhere (LayerNorm and biases too), copied into p */
    float *hf = malloc(f->n_params * 4), *hp = malloc(p->n_params * 4);
    for (size_t i = 0; i < f->n_params; i++) hf[i] = (float)(0.2 * uniform01() - 0.1);
    for (int i = 0; i < f->n_tensors; i++)
        if (strstr(f->tensors[i].name, "LayerNorm.weight"))
            for (size_t j = 0; j < f->tensors[i].numel; j++) hf[f->tensors[i].offset + j] += 1.0f;
    char name[200];
    for (int i = 0; i < p->n_tensors; i++) {
        full_name(p->tensors[i].name, name, sizeof name);
        const bert_tensor *t = bert_find_tensor(f, name);
        memcpy(hp + p->tensors[i].offset, hf + t->offset, t->numel * 4);
    }
    be->upload(be, (bt_ptr){f->params, 0}, hf, f->n_params * 4);
    be->upload(be, (bt_ptr){p->params, 0}, hp, p->n_params * 4);

    int32_t ids[B * T], types[B * T], mask[B * T], pos[M], labels[M], nsp[B] = {1, 0};
    for (int i = 0; i < B * T; i++) {
        bool real = i < T || i % T < 9; /* the second sequence is padded after 9 */
        ids[i] = real ? 5 + (int)(uniform01() * (c.vocab_size - 5)) : 0;
        types[i] = real && i % T >= T / 2;
        mask[i] = real;
    }
    for (int k = 0; k < M; k++) {
        pos[k] = k < 4 ? 1 + 2 * k : T + 1 + k;
        labels[k] = 5 + (int)(uniform01() * (c.vocab_size - 5));
    }
    bert_batch batch = {B, T, ids, types, mask, M, pos, labels, nsp, 0, 0};
    unsigned char skip[L] = {0, 1, 0, 1};
    float lf[M * 300], lp[M * 300], nf[B * 2], np_[B * 2];
    bert_pass pass = {.train = true, .seed = 7, .mlm_grad_scale = 1.0f / M,
                      .nsp_grad_scale = 1.0f / B, .layer_skip = skip};
    bert_tape tape;
    bert_stats sf, sp;

    bt_optim_config oc = {.type = OPT_ADAMW, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f,
                          .weight_decay = 0.01f, .bias_correction = true, .min_coeff = 0.0f,
                          .max_coeff = 10.0f};
    bt_optimizer *of = optim_create(f, &oc, what, sizeof what),
                 *op = optim_create(p, &oc, what, sizeof what);
    if (!of || !op) exit(1);
    for (int step = 0; step < 3; step++) {
        pass.step = (uint64_t)step;
        pass.layer_skip = skip;
        pass.mlm_logits_out = lf;
        pass.nsp_logits_out = nf;
        bert_zero_grads(f);
        bert_forward(f, &batch, &pass, &tape, &sf);
        bert_backward(f, &batch, &pass, &tape);
        pass.layer_skip = NULL;
        pass.mlm_logits_out = lp;
        pass.nsp_logits_out = np_;
        bert_zero_grads(p);
        bert_forward(p, &batch, &pass, &tape, &sp);
        bert_backward(p, &batch, &pass, &tape);
        if (step == 0) {
            snprintf(what, sizeof what, "%s: skipping layers 1,3 = a model of layers 0,2: loss "
                     "%.6f, MLM and NSP logits (bits)", nn, sf.mlm_loss_sum / M);
            check(sf.mlm_loss_sum == sp.mlm_loss_sum && sf.nsp_loss_sum == sp.nsp_loss_sum &&
                      !memcmp(lf, lp, sizeof(float) * M * c.vocab_size) && !memcmp(nf, np_, sizeof nf),
                  what);
            float *gf = download(f, f->grads), *gp = download(p, p->grads);
            snprintf(what, sizeof what, "%s: gradients equal the 2-layer model's (bits)", nn);
            check(same_as_pruned(p, gp, f, gf), what);
            snprintf(what, sizeof what, "%s: the skipped layers' gradients are exactly zero", nn);
            check(skipped_layers_are(f, gf, NULL, skip), what);
            free(gf);
            free(gp);
        }
        float *before = download(f, f->params), *m_before = download(f, of->m);
        optim_step(of, f, 1e-3f, skip, 1.0f, NULL);
        optim_step(op, p, 1e-3f, NULL, 1.0f, NULL);
        float *after = download(f, f->params), *m_after = download(f, of->m),
              *v_after = download(f, of->v);
        if (step == 0) {
            snprintf(what, sizeof what, "%s: optim_step leaves the skipped layers' weights and "
                     "moments untouched (bits)", nn);
            check(skipped_layers_are(f, after, before, skip) &&
                      skipped_layers_are(f, m_after, m_before, skip) &&
                      skipped_layers_are(f, v_after, NULL, skip),
                  what);
            size_t changed = 0;
            for (size_t i = 0; i < f->n_params; i++) changed += after[i] != before[i];
            snprintf(what, sizeof what, "%s: the other tensors moved (%zu of %zu weights)", nn,
                     changed, f->n_params);
            check(changed > f->n_params / 3, what);
        }
        free(before);
        free(m_before);
        free(after);
        free(m_after);
        free(v_after);
    }
    float *af = download(f, f->params), *ap = download(p, p->params);
    snprintf(what, sizeof what, "%s: after 3 AdamW steps the kept tensors equal the 2-layer "
             "model's (bits); layer steps %ld %ld %ld %ld", nn, of->layer_steps[0],
             of->layer_steps[1], of->layer_steps[2], of->layer_steps[3]);
    check(same_as_pruned(p, ap, f, af) && of->layer_steps[0] == 3 && of->layer_steps[1] == 0 &&
              of->layer_steps[2] == 3 && of->layer_steps[3] == 0 && of->step == 3,
          what);
    /* step 4 runs every layer: layers 1 and 3 get their first update, with the
     * bias correction of step 1, as a fresh optimizer from these weights gives */
    bert_model *g = make(be, c, L);
    be->upload(be, bert_params_at(g, 0), af, f->n_params * 4);
    bt_optimizer *og = optim_create(g, &oc, what, sizeof what);
    if (!og) exit(1);
    pass.layer_skip = NULL;
    pass.mlm_logits_out = NULL;
    pass.nsp_logits_out = NULL;
    bert_model *both[2] = {f, g};
    for (int k = 0; k < 2; k++) {
        bert_zero_grads(both[k]);
        bert_forward(both[k], &batch, &pass, &tape, &sf);
        bert_backward(both[k], &batch, &pass, &tape);
    }
    optim_step(of, f, 1e-3f, NULL, 1.0f, NULL);
    optim_step(og, g, 1e-3f, NULL, 1.0f, NULL);
    float *a4 = download(f, f->params), *g4 = download(g, g->params);
    snprintf(what, sizeof what, "%s: a layer's first update after 3 skipped steps is a first "
             "Adam update (bits), layer steps %ld %ld %ld %ld", nn, of->layer_steps[0],
             of->layer_steps[1], of->layer_steps[2], of->layer_steps[3]);
    check(skipped_layers_are(f, a4, g4, skip) && !skipped_layers_are(f, a4, af, skip) &&
              of->layer_steps[1] == 1 && of->layer_steps[0] == 4,
          what);
    free(a4);
    free(g4);
    optim_free(og, g);
    bert_free(g);
    free(af);
    free(ap);
    free(hf);
    free(hp);
    optim_free(of, f);
    optim_free(op, p);
    bert_free(f);
    bert_free(p);
}

static void check_draw(void) {
    bert_config c;
    bert_preset("tiny", &c);
    c.num_hidden_layers = 24;
    c.layerdrop = 0.5f;
    unsigned char a[24], b[24];
    long dropped = 0, differ_step = 0, differ_seed = 0, n = 0;
    bool pure = true;
    for (uint64_t step = 0; step < 2000; step++) {
        int k = bert_layerdrop_draw(&c, 42, step, a);
        int k2 = bert_layerdrop_draw(&c, 42, step, b);
        pure = pure && k == k2 && !memcmp(a, b, sizeof a);
        dropped += k;
        n += 24;
        bert_layerdrop_draw(&c, 42, step + 1, b);
        differ_step += memcmp(a, b, sizeof a) != 0;
        bert_layerdrop_draw(&c, 43, step, b);
        differ_seed += memcmp(a, b, sizeof a) != 0;
    }
    double frac = (double)dropped / n; /* sd of the mean: 0.5/sqrt(48000) = 0.0023 */
    char what[200];
    snprintf(what, sizeof what, "draw: p = 0.5 drops %.4f of 48000 layer-steps (0.5 +- 0.01), "
             "the same bits twice; %ld/2000 steps differ from the next, %ld/2000 from seed 43",
             frac, differ_step, differ_seed);
    check(pure && fabs(frac - 0.5) < 0.01 && differ_step > 1990 && differ_seed > 1990, what);
    c.layerdrop = 0.0f;
    int none = 0;
    for (uint64_t step = 0; step < 100; step++) none += bert_layerdrop_draw(&c, 42, step, a);
    check(none == 0, "draw: p = 0 drops no layer");
}

int main(void) {
    bt_backend *be = bt_cpu_backend_create(1, 1);
    if (!be) return 99;
    run_norm(be, BERT_NORM_POST);
    run_norm(be, BERT_NORM_PRE);
    check_draw();
    be->destroy(be);
    printf("%s: LayerDrop (%d failures)\n", failures ? "FAIL" : "PASS", failures);
    return failures != 0;
}
