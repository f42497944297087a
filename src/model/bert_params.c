/* BERT parameters: presets, config checks, the named-tensor table over one
 * flat buffer, allocation of parameters/gradients/activations, and init. */
#include "bert.h"
#include "bert_act.h"
#include "util/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool bert_preset(const char *name, bert_config *cfg) {
    static const struct {
        const char *name;
        int layers, hidden, heads;
    } presets[] = {{"tiny", 2, 128, 2},    {"mini", 4, 256, 4},  {"small", 4, 512, 8},
                   {"medium", 8, 512, 8},  {"base", 12, 768, 12}, {"large", 24, 1024, 16}};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(name, presets[i].name) != 0) continue;
        *cfg = (bert_config){.vocab_size = 30522,
                             .hidden_size = presets[i].hidden,
                             .num_hidden_layers = presets[i].layers,
                             .num_attention_heads = presets[i].heads,
                             .intermediate_size = 4 * presets[i].hidden,
                             .max_position_embeddings = 512,
                             .type_vocab_size = 2,
                             .layer_norm_eps = 1e-12f,
                             .hidden_dropout_prob = 0.1f,
                             .attention_probs_dropout_prob = 0.1f,
                             .initializer_range = 0.02f,
                             .nsp = false,
                             .pad_id = 0};
        for (int i = 0; i < 2 * BERT_MAX_LAYERS; i++) cfg->admin_omega[i] = 1.0f;
        return true;
    }
    return false;
}

void bert_describe(const char *preset, const bert_config *cfg, char *out, size_t n) {
    bert_config p;
    if (!preset || !preset[0] || !bert_preset(preset, &p)) {
        snprintf(out, n, "custom");
        return;
    }
    const struct {
        const char *key;
        int now, preset;
    } shape[] = {{"num_hidden_layers", cfg->num_hidden_layers, p.num_hidden_layers},
                 {"hidden_size", cfg->hidden_size, p.hidden_size},
                 {"num_attention_heads", cfg->num_attention_heads, p.num_attention_heads},
                 {"intermediate_size", cfg->intermediate_size, p.intermediate_size}};
    const int n_keys = (int)(sizeof shape / sizeof shape[0]);
    int len = snprintf(out, n, "%s", preset), changed = 0;
    for (int i = 0; i < n_keys && len < (int)n; i++)
        if (shape[i].now != shape[i].preset)
            len += snprintf(out + len, n - (size_t)len, "%s%s %d instead of %d",
                            changed++ ? ", " : " modified (", shape[i].key, shape[i].now,
                            shape[i].preset);
    if (changed == n_keys)
        snprintf(out, n, "custom");
    else if (changed && len < (int)n)
        snprintf(out + len, n - (size_t)len, ")");
}

bool bert_config_valid(const bert_config *c, char *err, size_t errlen) {
#define REQUIRE(cond, ...)                                                                   \
    if (!(cond)) {                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                  \
        return false;                                                                        \
    }
    REQUIRE(c->vocab_size >= 8, "model.vocab_size: must be >= 8 (got %d)", c->vocab_size);
    REQUIRE(c->hidden_size >= 1, "model.hidden_size: must be >= 1 (got %d)", c->hidden_size);
    REQUIRE(c->num_hidden_layers >= 1 && c->num_hidden_layers <= BERT_MAX_LAYERS,
            "model.num_hidden_layers: must be in [1, %d] (got %d)", BERT_MAX_LAYERS,
            c->num_hidden_layers);
    REQUIRE(c->num_attention_heads >= 1 && c->hidden_size % c->num_attention_heads == 0,
            "model.num_attention_heads: must divide hidden_size %d (got %d)", c->hidden_size,
            c->num_attention_heads);
    REQUIRE(c->intermediate_size >= 1, "model.intermediate_size: must be >= 1 (got %d)",
            c->intermediate_size);
    REQUIRE(c->max_position_embeddings >= 2,
            "model.max_position_embeddings: must be >= 2 (got %d)", c->max_position_embeddings);
    REQUIRE(c->type_vocab_size >= 1, "model.type_vocab_size: must be >= 1 (got %d)",
            c->type_vocab_size);
    REQUIRE(c->layer_norm_eps > 0 && c->layer_norm_eps < 1,
            "model.layer_norm_eps: must be in (0, 1) (got %g)", c->layer_norm_eps);
    REQUIRE(c->hidden_dropout_prob >= 0 && c->hidden_dropout_prob <= 0.9f,
            "model.hidden_dropout_prob: must be in [0, 0.9] (got %g)", c->hidden_dropout_prob);
    REQUIRE(c->attention_probs_dropout_prob >= 0 && c->attention_probs_dropout_prob <= 0.9f,
            "model.attention_probs_dropout_prob: must be in [0, 0.9] (got %g)",
            c->attention_probs_dropout_prob);
    REQUIRE(c->attention_kernel != BERT_ATTN_FUSED || c->attention_logit_penalty == 0.0f,
            "model.attention_kernel: fused does not compute model.attention_logit_penalty "
            "(use auto or unfused)");
    REQUIRE(c->attention_kernel != BERT_ATTN_FUSED || c->num_attention_heads < 1 ||
                c->hidden_size / c->num_attention_heads <= BT_ATTENTION_MAX_HEAD,
            "model.attention_kernel: fused takes heads of at most %d values (hidden_size / "
            "num_attention_heads is %d; use auto or unfused)",
            BT_ATTENTION_MAX_HEAD, c->hidden_size / c->num_attention_heads);
    REQUIRE(c->norm == BERT_NORM_POST || c->norm == BERT_NORM_PRE || c->norm == BERT_NORM_ADMIN,
            "model.norm: must be post, pre or admin (got %d)", c->norm);
    for (int i = 0; i < 2 * c->num_hidden_layers; i++)
        REQUIRE(c->admin_omega[i] > 0 && c->admin_omega[i] < 1e6f,
                "admin_omega[%d]: must be in (0, 1e6) (got %g)", i, c->admin_omega[i]);
    REQUIRE(c->layerdrop >= 0 && c->layerdrop <= (float)BERT_MAX_LAYERDROP,
            "model.layerdrop: must be in [0, %g] (got %g)", BERT_MAX_LAYERDROP, c->layerdrop);
    REQUIRE(c->initializer_range > 0 && c->initializer_range < 1,
            "model.initializer_range: must be in (0, 1) (got %g)", c->initializer_range);
#undef REQUIRE
    return true;
}

/* ---- the tensor table ---- */

typedef struct {
    bert_tensor *t;
    int n, cap;
    size_t total;
    int layer; /* encoder layer of the tensors being added, or -1 */
} table_builder;

static size_t add_tensor(table_builder *tb, const char *name, int rows, int cols, bool decay) {
    if (tb->n == tb->cap) {
        tb->cap = tb->cap ? tb->cap * 2 : 64;
        tb->t = realloc(tb->t, (size_t)tb->cap * sizeof *tb->t);
        if (!tb->t) return (size_t)-1;
    }
    bert_tensor *t = &tb->t[tb->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = tb->total;
    t->ndim = cols > 0 ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols > 0 ? cols : 0;
    t->numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    t->decay = decay;
    t->layer = tb->layer;
    tb->total += (t->numel + 15) / 16 * 16; /* 64-byte aligned tensors */
    return t->offset;
}

static bool build_table(bert_model *m) {
    const bert_config *c = &m->cfg;
    const int H = c->hidden_size, I = c->intermediate_size;
    table_builder tb = {.layer = -1};
    char name[96];
    bert_views *v = &m->v;
    v->layer = calloc((size_t)c->num_hidden_layers, sizeof *v->layer);
    if (!v->layer) return false;
    v->wte = add_tensor(&tb, "bert.embeddings.word_embeddings.weight", c->vocab_size, H, true);
    v->wpe = add_tensor(&tb, "bert.embeddings.position_embeddings.weight",
                        c->max_position_embeddings, H, true);
    v->wtt = add_tensor(&tb, "bert.embeddings.token_type_embeddings.weight", c->type_vocab_size,
                        H, true);
    v->emb_ln_w = add_tensor(&tb, "bert.embeddings.LayerNorm.weight", H, 0, false);
    v->emb_ln_b = add_tensor(&tb, "bert.embeddings.LayerNorm.bias", H, 0, false);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        bert_layer_views *lv = &v->layer[l];
        tb.layer = l;
#define LAYER_TENSOR(suffix, rows, cols, decay)                                              \
    (snprintf(name, sizeof name, "bert.encoder.layer.%d.%s", l, suffix),                     \
     add_tensor(&tb, name, rows, cols, decay))
        /* q, k, v weights adjacent (no padding: H*H is not always a multiple of
         * 16, so they are laid out as one (3H, H) block and named inside it) */
        lv->qkv_w = LAYER_TENSOR("attention.self.query.weight", 3 * H, H, true);
        lv->qkv_b = LAYER_TENSOR("attention.self.query.bias", 3 * H, 0, false);
        lv->ao_w = LAYER_TENSOR("attention.output.dense.weight", H, H, true);
        lv->ao_b = LAYER_TENSOR("attention.output.dense.bias", H, 0, false);
        lv->ln1_w = LAYER_TENSOR("attention.output.LayerNorm.weight", H, 0, false);
        lv->ln1_b = LAYER_TENSOR("attention.output.LayerNorm.bias", H, 0, false);
        lv->fc1_w = LAYER_TENSOR("intermediate.dense.weight", I, H, true);
        lv->fc1_b = LAYER_TENSOR("intermediate.dense.bias", I, 0, false);
        lv->fc2_w = LAYER_TENSOR("output.dense.weight", H, I, true);
        lv->fc2_b = LAYER_TENSOR("output.dense.bias", H, 0, false);
        lv->ln2_w = LAYER_TENSOR("output.LayerNorm.weight", H, 0, false);
        lv->ln2_b = LAYER_TENSOR("output.LayerNorm.bias", H, 0, false);
#undef LAYER_TENSOR
    }
    tb.layer = -1;
    if (c->norm == BERT_NORM_PRE) { /* between the layers and the heads: see bert_backward */
        v->final_ln_w = add_tensor(&tb, "bert.encoder.LayerNorm.weight", H, 0, false);
        v->final_ln_b = add_tensor(&tb, "bert.encoder.LayerNorm.bias", H, 0, false);
    }
    v->head_w = add_tensor(&tb, "cls.predictions.transform.dense.weight", H, H, true);
    v->head_b = add_tensor(&tb, "cls.predictions.transform.dense.bias", H, 0, false);
    v->head_ln_w = add_tensor(&tb, "cls.predictions.transform.LayerNorm.weight", H, 0, false);
    v->head_ln_b = add_tensor(&tb, "cls.predictions.transform.LayerNorm.bias", H, 0, false);
    v->dec_b = add_tensor(&tb, "cls.predictions.bias", c->vocab_size, 0, false);
    if (c->nsp) {
        v->pool_w = add_tensor(&tb, "bert.pooler.dense.weight", H, H, true);
        v->pool_b = add_tensor(&tb, "bert.pooler.dense.bias", H, 0, false);
        v->nsp_w = add_tensor(&tb, "cls.seq_relationship.weight", 2, H, true);
        v->nsp_b = add_tensor(&tb, "cls.seq_relationship.bias", 2, 0, false);
    }
    if (!tb.t) return false;
    /* split the fused q/k/v entries into their three HF names */
    size_t n_split = 0;
    for (int i = 0; i < tb.n; i++)
        if (strstr(tb.t[i].name, "attention.self.query.")) n_split++;
    bert_tensor *all = calloc((size_t)tb.n + 2 * n_split, sizeof *all);
    if (!all) return false;
    int k = 0;
    for (int i = 0; i < tb.n; i++) {
        bert_tensor t = tb.t[i];
        char *q = strstr(t.name, "attention.self.query.");
        if (!q) {
            all[k++] = t;
            continue;
        }
        static const char *parts[3] = {"query", "key", "value"};
        size_t third = t.numel / 3;
        for (int p = 0; p < 3; p++) {
            bert_tensor s = t;
            char prefix[48];
            snprintf(prefix, sizeof prefix, "%.*s", (int)(q - t.name) < 47 ? (int)(q - t.name) : 47, t.name);
            snprintf(s.name, sizeof s.name, "%sattention.self.%s.%s", prefix, parts[p],
                     strstr(q, ".weight") ? "weight" : "bias");
            s.offset = t.offset + (size_t)p * third;
            s.numel = third;
            s.shape[0] = t.shape[0] / 3;
            all[k++] = s;
        }
    }
    free(tb.t);
    m->tensors = all;
    m->n_tensors = k;
    m->n_params = tb.total;
    return true;
}

const bert_tensor *bert_find_tensor(const bert_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}

/* ---- allocation ---- */

bool bert_memory_needed(const bert_config *cfg, long long max_batch, long long max_seq,
                        long long max_masked, size_t max_buffer, bert_memory *out, char *err,
                        size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!bert_config_valid(cfg, err, errlen)) return false;
    /* the largest counts the layout multiplies, in doubles first: each must stay far below
     * 2^64 so that the size_t sums after them are exact */
    const double B = (double)max_batch, T = (double)max_seq, M = (double)max_masked,
                 N = B * T, H = cfg->hidden_size, I = cfg->intermediate_size;
    const double counts[] = {N * 3 * H, N * I, B * cfg->num_attention_heads * T * T,
                             M * cfg->vocab_size};
    if (max_batch < 1 || max_seq < 1 || max_masked < 0 || N > INT32_MAX || M > INT32_MAX) {
        snprintf(err, errlen, "a micro-batch of %lld x %lld tokens with %lld masked rows: the "
                 "model addresses rows with int32 indices, at most 2147483647 of each",
                 max_batch, max_seq, max_masked);
        return false;
    }
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i] > 0x1p50) {
            snprintf(err, errlen, "a micro-batch of %lld x %lld tokens (%lld masked rows) needs "
                     "%.3g activation values in one tensor, beyond any device's memory",
                     max_batch, max_seq, max_masked, counts[i]);
            return false;
        }
    bert_model *m = calloc(1, sizeof *m);
    /* "auto" is sized as unfused: the most it can need on any backend; the
     * 16-bit gradients where 16-bit GEMMs may run, as params16 below */
    struct bert_act_layout *a = bert_act_layout_new(cfg, (int)max_batch, (int)max_seq,
                                                     (int)max_masked,
                                                     cfg->attention_kernel == BERT_ATTN_FUSED,
                                                     cfg->storage != BT_F32 && cfg->gemm16 >= 0,
                                                     max_buffer);
    bool ok = m && a;
    if (ok) {
        m->cfg = *cfg;
        ok = build_table(m);
    }
    if (ok) {
        out->params = (double)m->n_params * sizeof(float);
        out->acts = (double)a->total * sizeof(float);
        out->ints = (double)a->ints_total * sizeof(int32_t);
        out->stash = (double)cfg->num_hidden_layers * (double)a->stash_slot * 2;
        out->largest_act = (double)a->largest * sizeof(float);
        out->stash_layer = (double)a->stash_slot * 2;
        out->act_buffers = a->n_buffers;
        out->params16 = cfg->storage != BT_F32 && cfg->gemm16 >= 0 ? m->n_params * 2.0 : 0.0;
        out->operand16 = cfg->storage != BT_F32 && cfg->gemm16 >= 0 ? a->operand16 * 2.0 : 0.0;
    } else {
        snprintf(err, errlen, "out of host memory sizing the model");
    }
    if (m) {
        free(m->tensors);
        free(m->v.layer);
    }
    free(m);
    free(a);
    return ok;
}

/* The 16-bit stash: whole layers a buffer, as many layers as a buffer of at
 * most max_buffer bytes holds (0: every layer in one). false when out of
 * device memory. */
static bool alloc_stash(bert_model *m, size_t max_buffer) {
    const int L = m->cfg.num_hidden_layers;
    const size_t slot = m->act->stash_slot * 2;
    size_t per = max_buffer ? max_buffer / slot : (size_t)L;
    m->stash_layers = per < 1 ? 1 : per > (size_t)L ? L : (int)per;
    m->n_stash = (L + m->stash_layers - 1) / m->stash_layers;
    if (!(m->stash = calloc((size_t)m->n_stash, sizeof *m->stash))) return false;
    for (int i = 0; i < m->n_stash; i++) {
        const int layers = L - i * m->stash_layers < m->stash_layers ? L - i * m->stash_layers
                                                                      : m->stash_layers;
        if (!(m->stash[i] = m->be->alloc(m->be, (size_t)layers * slot))) return false;
    }
    return true;
}

bert_model *bert_create(bt_backend *be, const bert_config *cfg, int max_batch, int max_seq,
                        int max_masked, char *err, size_t errlen) {
    bert_memory need;
    bt_device_info info;
    be->info(be, &info);
    if (!bert_memory_needed(cfg, max_batch, max_seq, max_masked, info.max_alloc, &need, err,
                            errlen))
        return NULL;
    if (max_seq > cfg->max_position_embeddings) {
        snprintf(err, errlen, "data.seq_len %d exceeds model.max_position_embeddings %d",
                 max_seq, cfg->max_position_embeddings);
        return NULL;
    }
    bert_model *m = calloc(1, sizeof *m);
    if (!m) goto oom;
    m->cfg = *cfg;
    m->be = be;
    m->max_batch = max_batch;
    m->max_seq = max_seq;
    m->max_masked = max_masked;
    m->unfused = info.fused_ops_pay ? 0 : BERT_FUSE_ALL;
    m->top_rows_multiple = info.gemm_rows_multiple < 1                            ? 1
                           : info.gemm_rows_multiple > BERT_TOP_ROWS_MULTIPLE_MAX ? BERT_TOP_ROWS_MULTIPLE_MAX
                                                                                 : info.gemm_rows_multiple;
    m->rows_to_capacity = info.replays_graphs;
    m->replays_graphs = info.replays_graphs;
    if (cfg->storage != BT_F32 && cfg->gemm16 >= 0) {
        m->gemm16 = cfg->gemm16 > 0 || (cfg->storage == BT_F16 ? info.tensor_f16
                                                                : info.tensor_bf16);
    }
    const int head = cfg->hidden_size / cfg->num_attention_heads;
    m->fused_attention = cfg->attention_kernel == BERT_ATTN_FUSED ||
                         (cfg->attention_kernel == BERT_ATTN_AUTO && info.fused_attention_pays &&
                          cfg->attention_logit_penalty == 0.0f && head <= BT_ATTENTION_MAX_HEAD);
    if (!build_table(m)) goto oom;
    /* the staged gemm16 of a device without 16-bit GEMM hardware converts
     * every operand anyway: a copy made once would only add a pass there */
    const bool hw16 = cfg->storage == BT_F16 ? info.tensor_f16 : info.tensor_bf16;
    m->act = bert_act_layout_new(cfg, max_batch, max_seq, max_masked, m->fused_attention,
                                 m->gemm16 && hw16, info.max_alloc);
    if (!m->act || !(m->acts = calloc((size_t)m->act->n_buffers, sizeof *m->acts))) goto oom;
    size_t pbytes = m->n_params * sizeof(float);
    m->params = be->alloc(be, pbytes);
    m->grads = be->alloc(be, pbytes);
    bool acts_ok = true;
    for (int i = 0; i < m->act->n_buffers && acts_ok; i++) {
        const size_t from = (size_t)i * m->act->buffer_elems, left = m->act->total - from;
        acts_ok = (m->acts[i] = be->alloc(be, (left < m->act->buffer_elems
                                                   ? left : m->act->buffer_elems) * 4)) != NULL;
    }
    m->ints = be->alloc(be, m->act->ints_total * sizeof(int32_t));
    m->ints_host = malloc(m->act->ints_batch * sizeof(int32_t));
    if (!m->ints_host) {
        snprintf(err, errlen, "out of host memory staging the batch's %zu ints",
                 m->act->ints_batch);
        bert_free(m);
        return NULL;
    }
    if (!m->params || !m->grads || !acts_ok || !m->ints) {
        snprintf(err, errlen,
                 "out of device memory on %s: parameters need %.1f MB, activations %.1f MB "
                 "for micro-batch %d x %d (reduce train_micro_batch_size_per_gpu)",
                 be->name, 2.0 * pbytes / 1e6, m->act->total * 4.0 / 1e6, max_batch, max_seq);
        bert_free(m);
        return NULL;
    }
    const size_t stash_bytes = (size_t)cfg->num_hidden_layers * m->act->stash_slot * 2;
    if (stash_bytes && !alloc_stash(m, info.max_alloc)) {
        snprintf(err, errlen, "out of device memory on %s for the 16-bit activations "
                 "(%.1f MB; reduce train_micro_batch_size_per_gpu)", be->name, stash_bytes / 1e6);
        bert_free(m);
        return NULL;
    }
    if (m->gemm16 && !(m->params16 = be->alloc(be, m->n_params * 2))) {
        snprintf(err, errlen, "out of device memory on %s for the 16-bit weights (%.1f MB)",
                 be->name, m->n_params * 2 / 1e6);
        bert_free(m);
        return NULL;
    }
    if (m->gemm16 && hw16 && m->act->operand16 &&
        !(m->operand16 = be->alloc(be, m->act->operand16 * 2))) {
        snprintf(err, errlen, "out of device memory on %s for the 16-bit GEMM operand "
                 "(%.1f MB; reduce train_micro_batch_size_per_gpu)", be->name,
                 m->act->operand16 * 2 / 1e6);
        bert_free(m);
        return NULL;
    }
    be->fill(be, (bt_ptr){m->params, 0}, 0.0f, m->n_params);
    be->fill(be, (bt_ptr){m->grads, 0}, 0.0f, m->n_params);
    /* int32 zeros: fp32 +0 has the same bits */
    be->fill(be, (bt_ptr){m->ints, m->act->zero_rows * 4}, 0.0f, (size_t)max_batch * max_seq);
    return m;
oom:
    snprintf(err, errlen, "out of host memory building the model");
    bert_free(m);
    return NULL;
}

void bert_free(bert_model *m) {
    if (!m) return;
    bt_backend *be = m->be;
    if (m->params) be->free(be, m->params);
    if (m->grads) be->free(be, m->grads);
    for (int i = 0; m->acts && i < m->act->n_buffers; i++)
        if (m->acts[i]) be->free(be, m->acts[i]);
    free(m->acts);
    if (m->ints) be->free(be, m->ints);
    free(m->ints_host);
    bt_row_links_free(&m->links_work);
    for (int i = 0; i < m->n_stash; i++)
        if (m->stash[i]) be->free(be, m->stash[i]);
    free(m->stash);
    if (m->params16) be->free(be, m->params16);
    if (m->operand16) be->free(be, m->operand16);
    free(m->act);
    free(m->tensors);
    free(m->v.layer);
    free(m);
}

bt_ptr bert_params_at(bert_model *m, size_t off) {
    m->params16_fresh = false; /* the caller may write them */
    return (bt_ptr){m->params, off * 4};
}

void bert_params16_refresh(bert_model *m) {
    if (!m->params16 || m->params16_fresh) return;
    m->be->cast(m->be, (bt_ptr){m->params16, 0}, (bt_dtype)m->cfg.storage,
                (bt_ptr){m->params, 0}, BT_F32, m->n_params);
    m->params16_fresh = true;
}

bt_ptr bert_grads_at(const bert_model *m, size_t off) { return (bt_ptr){m->grads, off * 4}; }

size_t bert_n_params(const bert_model *m) { return m->n_params; }

void bert_zero_grads(bert_model *m) {
    m->be->fill(m->be, (bt_ptr){m->grads, 0}, 0.0f, m->n_params);
}

void bert_init_params(bert_model *m, uint64_t seed) {
    float *host = calloc(m->n_params, sizeof *host);
    if (!host) {
        fprintf(stderr, "bertrain: out of host memory initializing parameters\n");
        exit(1);
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const bert_tensor *t = &m->tensors[i];
        float *w = host + t->offset;
        if (strstr(t->name, "LayerNorm.weight")) {
            for (size_t j = 0; j < t->numel; j++) w[j] = 1.0f;
        } else if (t->ndim == 2) {
            uint64_t stream = ((uint64_t)i << 8) | RNG_STREAM_INIT;
            for (size_t j = 0; j < t->numel; j++)
                w[j] = (float)(m->cfg.initializer_range *
                               rng_trunc_normal(seed, stream, (uint32_t)j));
            if (t->offset == m->v.wte && m->cfg.pad_id >= 0)
                memset(w + (size_t)m->cfg.pad_id * t->shape[1], 0,
                       (size_t)t->shape[1] * sizeof *w);
        } /* biases and LayerNorm biases stay 0 */
    }
    m->be->upload(m->be, (bt_ptr){m->params, 0}, host, m->n_params * sizeof *host);
    m->params16_fresh = false;
    free(host);
}

double bert_train_flops_per_sample(const bert_config *c, int T, double masked_per_seq,
                                   double top_rows_per_seq) {
    const double H = c->hidden_size, I = c->intermediate_size, L = c->num_hidden_layers;
    /* per row: the QKV projection and attention (every row of every layer),
     * then the output projection and the feed-forward block */
    const double qkv_attention = 2.0 * 3.0 * H * H + 2.0 * 2.0 * T * H,
                 after = 2.0 * (H * H + 2.0 * H * I);
    const double layers = L * qkv_attention * T + (L - 1.0) * after * T + after * top_rows_per_seq;
    const double head = masked_per_seq * 2.0 * (H * H + H * c->vocab_size);
    return 3.0 * (layers + head); /* backward = 2x forward */
}
