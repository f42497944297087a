/* Whole-model conformance against PyTorch: loads a fixture written by
 * tests/python/torch_ref.py (initial weights, a batch, float64 reference outputs),
 * runs the same model on the CPU backend and requires
 *   loss within 1e-5 relative, MLM/NSP logits within 1e-5 relative L2,
 *   every parameter gradient within 1e-4 relative L2,
 *   10 AdamW and 10 LAMB step losses within 1e-4 relative.
 * usage: test_torch FIXTURE.safetensors */
#include "model/bert.h"
#include "config/config.h"
#include "data/dataset.h"
#include "model/optim.h"
#include "store/safetensors.h"
#include "train/train.h"
#include "backends/cpu/cpu_backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
static st_file fx;

static const float *tensor(const char *name, size_t expect_numel) {
    const st_entry *e = st_find(&fx, name);
    if (!e || st_numel(e) != expect_numel) {
        fprintf(stderr, "FAIL: fixture tensor %s missing or has %zu elements, expected %zu\n",
                name, e ? st_numel(e) : 0, expect_numel);
        exit(1);
    }
    return st_data(&fx, e);
}

static double meta_num(const char *key) {
    const char *v = st_meta(&fx, key);
    if (!v) {
        fprintf(stderr, "FAIL: fixture metadata %s missing\n", key);
        exit(1);
    }
    return atof(v);
}

static double rel_l2(const float *a, const float *ref, size_t n, double floor_norm) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    den = sqrt(den);
    if (den < floor_norm) den = floor_norm;
    return sqrt(num) / (den > 0 ? den : 1e-30);
}

static void check(bool ok, const char *what, double value, double tol) {
    printf("%s %-64s %.3e (tol %.0e)\n", ok ? "ok  " : "FAIL", what, value, tol);
    if (!ok) failures++;
}

/* One forward and backward in training (dropout 0.1 everywhere) with the top
 * layer at the heads' rows (dense 0; padded to a multiple of `pad` rows) or
 * at every row; its loss, and its gradients into g (n_params). */
static double train_pass(bert_model *m, const bert_batch *b, bert_pass pass, bool dense, int pad,
                         float *g) {
    bert_tape tape;
    bert_stats st;
    m->dense_top = dense;
    m->top_rows_multiple = pad;
    pass.train = true;
    pass.mlm_logits_out = pass.nsp_logits_out = NULL;
    bert_zero_grads(m);
    bert_forward(m, b, &pass, &tape, &st);
    bert_backward(m, b, &pass, &tape);
    const int L = m->cfg.num_hidden_layers;
    if (!dense)
        check(tape.top_layer == L - 1 && tape.n_top > 0 && tape.n_top < b->B * b->T,
              "the top layer ran at the heads' rows only", tape.top_layer, L - 1);
    if (!dense && pad > 1) {
        char what[96];
        snprintf(what, sizeof what, "the top layer's %d rows padded to a multiple of %d",
                 tape.n_top, pad);
        check(tape.n_top % pad == 0 && tape.n_top >= pad, what, tape.n_top, pad);
    }
    m->be->download(m->be, g, (bt_ptr){m->grads, 0}, m->n_params * 4);
    m->dense_top = false;
    m->top_rows_multiple = 1;
    return st.mlm_loss_sum + st.nsp_loss_sum;
}

/* The top layer at the heads' rows against every layer at every row, with
 * dropout: the same loss and gradients but for the GEMMs' summation order,
 * which holds only if each kept row draws the dropout mask of its place. */
static void check_top_rows(bert_model *m, const bert_batch *b, const bert_pass *pass, int pad) {
    const float hidden = m->cfg.hidden_dropout_prob, probs = m->cfg.attention_probs_dropout_prob;
    m->cfg.hidden_dropout_prob = m->cfg.attention_probs_dropout_prob = 0.1f;
    float *top = malloc(m->n_params * 4), *all = malloc(m->n_params * 4);
    const double loss_top = train_pass(m, b, *pass, false, pad, top);
    const double loss_all = train_pass(m, b, *pass, true, 1, all);
    const double e = fabs(loss_top - loss_all) / fabs(loss_all);
    char what[120];
    snprintf(what, sizeof what, "dropout 0.1: loss, top layer at its rows (padded to %d) vs every row",
             pad);
    check(e <= 1e-6, what, e, 1e-6);
    double worst = 0, total = 0;
    for (size_t j = 0; j < m->n_params; j++) total += (double)all[j] * all[j];
    for (int i = 0; i < m->n_tensors; i++) {
        const bert_tensor *t = &m->tensors[i];
        const double ei = rel_l2(top + t->offset, all + t->offset, t->numel, 1e-4 * sqrt(total));
        if (ei > worst) worst = ei;
    }
    snprintf(what, sizeof what, "dropout 0.1: gradients (worst tensor), top rows (padded to %d) vs every row",
             pad);
    check(worst <= 1e-5, what, worst, 1e-5);
    free(top);
    free(all);
    m->cfg.hidden_dropout_prob = hidden;
    m->cfg.attention_probs_dropout_prob = probs;
}

static void load_weights(bert_model *m, const char *prefix) {
    char name[200];
    for (int i = 0; i < m->n_tensors; i++) {
        const bert_tensor *t = &m->tensors[i];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        m->be->upload(m->be, (bt_ptr){m->params, t->offset * 4}, tensor(name, t->numel),
                      t->numel * 4);
    }
}

static void run_optimizer(bert_model *m, bt_config *cfg, const char *opt_name, bt_batch_buf *mb) {
    char key[64];
    cfg->optim.type = strcmp(opt_name, "lamb") == 0 ? OPT_LAMB : OPT_ADAMW;
#define META(field, suffix)                                                                  \
    (snprintf(key, sizeof key, "%s_%s", opt_name, suffix), cfg->optim.field = (float)meta_num(key))
    META(lr, "lr");
    META(beta1, "beta1");
    META(beta2, "beta2");
    META(eps, "eps");
    META(weight_decay, "weight_decay");
    if (cfg->optim.type == OPT_LAMB) {
        META(min_coeff, "min_coeff");
        META(max_coeff, "max_coeff");
    }
#undef META
    snprintf(key, sizeof key, "%s_clip", opt_name);
    cfg->gradient_clipping = (float)meta_num(key);
    cfg->optim.bias_correction = true;
    load_weights(m, "init.");
    char err[256];
    bt_optimizer *opt = optim_create(m, &cfg->optim, err, sizeof err);
    if (!opt) {
        fprintf(stderr, "FAIL: %s\n", err);
        exit(1);
    }
    snprintf(key, sizeof key, "%s.losses", opt_name);
    const float *ref = tensor(key, 10);
    uint32_t first = 0;
    for (int s = 0; s < 10; s++) {
        const step_batch in = {mb, &first, 1, 0, mb->B};
        step_result r = train_step(m, opt, cfg, s, &in, cfg->optim.lr, NULL, NULL, NULL, NULL);
        char what[96];
        double objective = r.loss + r.z_loss + r.attn_penalty;
        snprintf(what, sizeof what, "%s step %d loss %.6f vs torch %.6f", opt_name, s, objective,
                 ref[s]);
        double rel = fabs(objective - ref[s]) / fabs(ref[s]);
        check(rel <= 1e-4, what, rel, 1e-4);
    }
    optim_free(opt, m);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_torch FIXTURE.safetensors\n");
        return 2;
    }
    char err[512];
    if (!st_open(&fx, argv[1], err, sizeof err)) {
        fprintf(stderr, "FAIL: %s\n", err);
        return 1;
    }
    bert_config c = {0};
    c.vocab_size = (int)meta_num("vocab_size");
    c.hidden_size = (int)meta_num("hidden_size");
    c.num_hidden_layers = (int)meta_num("num_hidden_layers");
    c.num_attention_heads = (int)meta_num("num_attention_heads");
    c.intermediate_size = (int)meta_num("intermediate_size");
    c.max_position_embeddings = (int)meta_num("max_position_embeddings");
    c.type_vocab_size = (int)meta_num("type_vocab_size");
    c.layer_norm_eps = (float)meta_num("layer_norm_eps");
    c.nsp = meta_num("nsp") != 0;
    c.z_loss = st_meta(&fx, "z_loss") ? (float)meta_num("z_loss") : 0.0f;
    c.attention_logit_penalty = st_meta(&fx, "attn_penalty") ? (float)meta_num("attn_penalty") : 0.0f;
    const char *norm = st_meta(&fx, "norm"); /* absent in fixtures older than Pre-LN */
    c.norm = !norm                   ? BERT_NORM_POST
             : !strcmp(norm, "pre")   ? BERT_NORM_PRE
             : !strcmp(norm, "admin") ? BERT_NORM_ADMIN
                                      : BERT_NORM_POST;
    for (int i = 0; i < 2 * BERT_MAX_LAYERS; i++) c.admin_omega[i] = 1.0f;
    if (c.norm == BERT_NORM_ADMIN) { /* "w0,w1,...": one per sublayer */
        const char *w = st_meta(&fx, "admin_omega");
        for (int i = 0; w && i < 2 * c.num_hidden_layers; i++) {
            char *end;
            c.admin_omega[i] = strtof(w, &end);
            w = *end == ',' ? end + 1 : NULL;
        }
    }
    c.initializer_range = 0.02f;
    c.pad_id = 0;
    const int B = (int)meta_num("batch"), T = (int)meta_num("seq_len");
    const st_entry *pos_e = st_find(&fx, "batch.mlm_positions");
    const int M = pos_e ? (int)st_numel(pos_e) : 0;
    printf("fixture %s (torch %s): V=%d H=%d L=%d heads=%d I=%d B=%d T=%d masked=%d nsp=%d norm=%s\n",
           argv[1], st_meta(&fx, "torch_version") ? st_meta(&fx, "torch_version") : "?",
           c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
           c.intermediate_size, B, T, M, c.nsp, norm ? norm : "post");

    bt_backend *be = bt_cpu_backend_create(0, 1);
    bert_model *m = bert_create(be, &c, B, T, M, err, sizeof err);
    if (!m) {
        fprintf(stderr, "FAIL: %s\n", err);
        return 1;
    }
    load_weights(m, "init.");
    bt_batch_buf mb;
    batch_buf_alloc(&mb, B, T, M);
    memcpy(mb.input_ids, tensor("batch.input_ids", (size_t)B * T), (size_t)B * T * 4);
    memcpy(mb.token_type_ids, tensor("batch.token_type_ids", (size_t)B * T), (size_t)B * T * 4);
    memcpy(mb.attention_mask, tensor("batch.attention_mask", (size_t)B * T), (size_t)B * T * 4);
    memcpy(mb.mlm_positions, tensor("batch.mlm_positions", M), (size_t)M * 4);
    memcpy(mb.mlm_labels, tensor("batch.mlm_labels", M), (size_t)M * 4);
    if (c.nsp) memcpy(mb.nsp_labels, tensor("batch.nsp_labels", B), (size_t)B * 4);
    mb.n_masked = M;

    /* forward + backward at the initial weights */
    float *logits = malloc((size_t)M * c.vocab_size * 4), nsp_logits[512];
    bert_pass pass = {.train = false, .seed = 1, .step = 0, .mlm_grad_scale = 1.0f / M,
                      .nsp_grad_scale = 1.0f / B, .mlm_logits_out = logits,
                      .nsp_logits_out = c.nsp ? nsp_logits : NULL,
                      .attn_penalty_grad_scale = (float)(c.attention_logit_penalty /
                                                         ((double)c.num_hidden_layers * B *
                                                          c.num_attention_heads * T * T))};
    bert_batch b = {B, T, mb.input_ids, mb.token_type_ids, mb.attention_mask, M,
                    mb.mlm_positions, mb.mlm_labels, c.nsp ? mb.nsp_labels : NULL, 0, 0};
    bert_tape tape;
    bert_stats st;
    bert_zero_grads(m);
    bert_forward(m, &b, &pass, &tape, &st);
    bert_backward(m, &b, &pass, &tape);
    const double n_scores = (double)c.num_hidden_layers * B * c.num_attention_heads * T * T;
    double loss = st.mlm_loss_sum / M + (c.nsp ? st.nsp_loss_sum / B : 0.0) +
                  c.z_loss * st.mlm_log_z_sq / M + c.attention_logit_penalty * st.attn_score_sq / n_scores;
    double ref_loss = tensor("out.loss", 1)[0];
    char what[160];
    snprintf(what, sizeof what, "loss %.8f vs torch %.8f", loss, ref_loss);
    check(fabs(loss - ref_loss) / fabs(ref_loss) <= 1e-5, what, fabs(loss - ref_loss) / fabs(ref_loss), 1e-5);
    double e = rel_l2(logits, tensor("out.mlm_logits", (size_t)M * c.vocab_size),
                      (size_t)M * c.vocab_size, 0);
    check(e <= 1e-5, "MLM logits at masked positions (relative L2)", e, 1e-5);
    if (c.nsp) {
        e = rel_l2(nsp_logits, tensor("out.nsp_logits", (size_t)B * 2), (size_t)B * 2, 0);
        check(e <= 1e-5, "NSP logits (relative L2)", e, 1e-5);
    }
    /* gradients: relative L2 against max(|ref|, 1e-4 |all ref grads|), so a
     * tensor whose exact gradient is zero (the attention key bias: softmax is
     * shift-invariant) is measured against the model's gradient scale */
    float *grads = malloc(m->n_params * 4);
    be->download(be, grads, (bt_ptr){m->grads, 0}, m->n_params * 4);
    double total = 0;
    char name[200];
    for (int i = 0; i < m->n_tensors; i++) {
        snprintf(name, sizeof name, "grad.%s", m->tensors[i].name);
        const float *g = tensor(name, m->tensors[i].numel);
        for (size_t j = 0; j < m->tensors[i].numel; j++) total += (double)g[j] * g[j];
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const bert_tensor *t = &m->tensors[i];
        snprintf(name, sizeof name, "grad.%s", t->name);
        e = rel_l2(grads + t->offset, tensor(name, t->numel), t->numel, 1e-4 * sqrt(total));
        check(e <= 1e-4, name, e, 1e-4);
    }
    free(grads);
    free(logits);
    check_top_rows(m, &b, &pass, 1);
    check_top_rows(m, &b, &pass, 8); /* rows no head reads added: the same values */

    /* 10 optimizer steps each, dropout 0, through the training step itself */
    bt_config cfg;
    config_defaults(&cfg);
    cfg.model = c;
    cfg.seed = 1;
    run_optimizer(m, &cfg, "adamw", &mb);
    run_optimizer(m, &cfg, "lamb", &mb);

    batch_buf_free(&mb);
    bert_free(m);
    be->destroy(be);
    st_close(&fx);
    printf("%s: %d failure(s)\n", argv[1], failures);
    return failures ? 1 : 0;
}
