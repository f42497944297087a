/* Hugging Face interchange. `export` writes a checkpoint as a directory that
 * transformers' BertForPreTraining.from_pretrained loads (model.safetensors
 * with the tied decoder tensors, config.json, vocab.txt, tokenizer files);
 * `import` reads an HF BERT directory (BertForPreTraining, BertForMaskedLM or
 * BertModel keys, old LayerNorm gamma/beta names, F32/F16/BF16) into a
 * checkpoint at step 0 that `train --resume` continues (--no-nsp drops a
 * trained NSP head, for MLM-only training). */
#define _XOPEN_SOURCE 700
#include "ckpt.h"
#include "cli/cli.h"
#include "hf_files.h"
#include "util/parse_num.h"
#include "util/paths.h"
#include "run_dir.h"
#include "safetensors.h"
#include "train/train.h"
#include "data/vocab.h"
#include "backends/common/half.h"
#include "backends/registry.h"
#include "util/file.h"
#include "util/json_num.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "dev"
#endif

/* The pooler and NSP head: absent from a model trained without model.nsp. */
static const char *const NSP_TENSORS[] = {"bert.pooler.dense.weight", "bert.pooler.dense.bias",
                                          "cls.seq_relationship.weight",
                                          "cls.seq_relationship.bias"};

/* A CPU model of shape mc with its parameters initialized from seed, on the
 * host in *host; NULL after printing why. */
static bert_model *host_model(const bert_config *mc, uint64_t seed, bt_backend **be,
                              float **host) {
    char err[512];
    const bt_backend_options one_thread = {.cpu_threads = 1};
    *be = bt_backend_create("cpu", &one_thread, err, sizeof err, NULL);
    bert_model *m = *be ? bert_create(*be, mc, 1, 2, 1, err, sizeof err) : NULL;
    if (!m) {
        fprintf(stderr, "bertrain: %s\n", err);
        return NULL;
    }
    bert_init_params(m, seed);
    *host = malloc(m->n_params * sizeof(float));
    if (!*host) {
        fprintf(stderr, "bertrain: out of host memory\n");
        return m;
    }
    m->be->download(m->be, *host, (bt_ptr){m->params, 0}, m->n_params * sizeof(float));
    return m;
}

/* ---- export ---- */

/* Parses --keep-layers "0,2,4" against a model of n_layers: new_index[l] is the
 * layer's index in the pruned model or -1 (dropped); returns how many are kept,
 * or 0 after printing why (out of range, repeated, not ascending, empty). */
static int parse_keep_layers(const char *list, int n_layers, int *new_index) {
    for (int l = 0; l < n_layers; l++) new_index[l] = -1;
    int kept = 0, prev = -1;
    const char *s = list;
    while (*s) {
        char *end;
        long l = strtol(s, &end, 10);
        if (end == s || (*end && *end != ',') || l < 0 || l >= n_layers || l <= prev) {
            fprintf(stderr, "bertrain: export: --keep-layers \"%s\": expected ascending layer "
                            "indices in 0..%d separated by commas\n", list, n_layers - 1);
            return 0;
        }
        new_index[l] = kept++;
        prev = (int)l;
        s = *end ? end + 1 : end;
    }
    if (!kept) fprintf(stderr, "bertrain: export: --keep-layers is empty\n");
    return kept;
}

/* The encoder layer a tensor name belongs to ("bert.encoder.layer.L.<rest>"),
 * with *rest after "L.", or -1 for a tensor outside the layers. */
static int layer_of(const char *name, const char **rest) {
    static const char prefix[] = "bert.encoder.layer.";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0) return -1;
    char *end;
    long l = strtol(name + sizeof prefix - 1, &end, 10);
    if (end == name + sizeof prefix - 1 || *end != '.' || l < 0 || l >= BERT_MAX_LAYERS) return -1;
    *rest = end + 1;
    return (int)l;
}

/* The exported name of a checkpoint tensor after pruning into *out: the encoder
 * layer renumbered (allocated into *owned), NULL for a dropped layer's tensor.
 * false when out of memory. */
static bool pruned_name(const char *name, const int *new_index, int n_layers, const char **out,
                        char **owned) {
    const char *rest;
    int l = layer_of(name, &rest);
    *owned = NULL;
    *out = name;
    if (!new_index || l < 0 || l >= n_layers) return true;
    if (new_index[l] < 0) {
        *out = NULL;
        return true;
    }
    size_t n = strlen(name) + 16;
    if (!(*owned = malloc(n))) return false;
    snprintf(*owned, n, "bert.encoder.layer.%d.%s", new_index[l], rest);
    *out = *owned;
    return true;
}

/* The first layer at or after l that the export keeps (all without
 * --keep-layers), or -1. */
static int next_kept(const int *new_index, int n_layers, int l) {
    for (; l < n_layers; l++)
        if (!new_index || new_index[l] >= 0) return l;
    return -1;
}

/* Admin folded into Post-LN: the factor export multiplies checkpoint tensor
 * `name` by. Sublayer i computes LN(omega_i x + f(x)); scaling the LayerNorm
 * that produces x by omega_i, and dividing the linear weights that read x by
 * it, gives LN(x' + f(x')) with the same outputs, a plain BertForPreTraining.
 * 1 for every other tensor (and for any tensor of a non-Admin model). */
static double admin_fold_factor(const bert_config *mc, const int *new_index, const char *name) {
    if (mc->norm != BERT_NORM_ADMIN) return 1.0;
    const int L = mc->num_hidden_layers;
    const float *omega = mc->admin_omega;
    if (!strncmp(name, "bert.embeddings.LayerNorm.", 26)) /* feeds the first kept layer */
        return omega[2 * next_kept(new_index, L, 0)];
    const char *rest;
    const int l = layer_of(name, &rest);
    if (l < 0 || l >= L) return 1.0;
    if (!strcmp(rest, "attention.self.query.weight") || !strcmp(rest, "attention.self.key.weight") ||
        !strcmp(rest, "attention.self.value.weight"))
        return 1.0 / omega[2 * l];
    if (!strncmp(rest, "attention.output.LayerNorm.", 27)) return omega[2 * l + 1];
    if (!strcmp(rest, "intermediate.dense.weight")) return 1.0 / omega[2 * l + 1];
    if (!strncmp(rest, "output.LayerNorm.", 17)) { /* feeds the next kept layer, or the heads */
        int next = next_kept(new_index, L, l + 1);
        return next < 0 ? 1.0 : omega[2 * next];
    }
    return 1.0;
}

/* The pooler and NSP head of an export whose model has none (model.nsp
 * false), appended to ts[*n]: the import's tensors where the checkpoint
 * carries them (CKPT_CARRIED_FILE, opened into *carried), else initialized as
 * a run with model.nsp and the run's seed would have (*nsp_model, *init).
 * *pooler and *nsp_head say which: "carried" or "initialized". false after a
 * one-line error. */
static bool untrained_heads(const char *ckpt, const cJSON *state, const bert_config *mc,
                            st_tensor *ts, int *n, st_file *carried, bt_backend **be,
                            bert_model **nsp_model, float **init, const char **pooler,
                            const char **nsp_head) {
    char path[1400], err[1024];
    snprintf(path, sizeof path, "%s/" CKPT_CARRIED_FILE, ckpt);
    if (access(path, F_OK) == 0 && !st_open(carried, path, err, sizeof err)) {
        fprintf(stderr, "bertrain: export: %s\n", err);
        return false;
    }
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(state, "seed");
    bert_config with_nsp = *mc;
    with_nsp.nsp = true;
    *nsp_model = host_model(&with_nsp, cJSON_IsString(seed) ? strtoull(seed->valuestring, NULL, 10)
                                                           : 42, be, init);
    if (!*nsp_model || !*init) return false;
    int n_carried[2] = {0, 0}; /* pooler, NSP head */
    for (int i = 0; i < 4; i++) {
        const bert_tensor *t = bert_find_tensor(*nsp_model, NSP_TENSORS[i]);
        const st_entry *e = carried->file ? st_find(carried, t->name) : NULL;
        if (e && !strcmp(e->dtype, "F32") && st_numel(e) == t->numel) {
            ts[(*n)++] = (st_tensor){t->name, "F32", t->ndim, {t->shape[0], t->shape[1]},
                                     st_data(carried, e), t->numel * sizeof(float)};
            n_carried[i / 2]++;
        } else {
            ts[(*n)++] = (st_tensor){t->name, "F32", t->ndim, {t->shape[0], t->shape[1]},
                                     *init + t->offset, t->numel * sizeof(float)};
        }
    }
    *pooler = n_carried[0] == 2 ? "carried" : "initialized";
    *nsp_head = n_carried[1] == 2 ? "carried" : "initialized";
    return true;
}

int cli_export(int argc, char **argv) {
    const char *keep = NULL, *pos[2] = {NULL, NULL};
    int n_pos = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--keep-layers") && i + 1 < argc)
            keep = argv[++i];
        else if (argv[i][0] != '-' && n_pos < 2)
            pos[n_pos++] = argv[i];
        else
            n_pos = 3;
    }
    if (n_pos != 2) {
        fprintf(stderr, "usage: bertrain export CKPT_DIR OUT_DIR [--keep-layers 0,2,4,...]\n");
        return 2;
    }
    char ckpt[1200], err[1024], path[1400];
    size_t len = 0;
    ckpt_resolve(pos[0], ckpt, sizeof ckpt);
    const char *out = pos[1];
    if (!run_dir_check_new_output(out, "export", err, sizeof err)) {
        fprintf(stderr, "bertrain: export: %s\n", err);
        return 2;
    }
    cJSON *state = NULL;
    bert_config mc;
    st_file f = {0}, carried = {0};
    bt_vocab vocab = {0};
    bt_backend *be = NULL;
    bert_model *nsp_model = NULL;
    float *init = NULL;
    st_tensor *ts = NULL;
    char *vocab_text = NULL, **names = NULL;
    float **folded = NULL; /* Admin: scaled copies of tensors */
    int *new_index = NULL;
    int rc = 2;
    if (!ckpt_verify(ckpt, &state, err, sizeof err) ||
        !ckpt_model_config(state, &mc, err, sizeof err)) {
        fprintf(stderr, "bertrain: export: %s\n", err);
        goto out;
    }
    if (mc.norm == BERT_NORM_PRE) {
        fprintf(stderr, "bertrain: export: %s is a Pre-LN model (model.norm \"pre\"); Hugging "
                        "Face BertForPreTraining is Post-LN and cannot hold it\n", ckpt);
        goto out;
    }
    const int n_layers_ckpt = mc.num_hidden_layers;
    const bert_config mc_ckpt = mc; /* before pruning: Admin's omegas by checkpoint layer */
    if (keep) {
        if (!(new_index = malloc((size_t)n_layers_ckpt * sizeof *new_index))) goto out;
        if (!(mc.num_hidden_layers = parse_keep_layers(keep, n_layers_ckpt, new_index))) goto out;
    }
    ckpt_vocab_path(ckpt, state, path, sizeof path);
    if (!vocab_load(&vocab, path, err, sizeof err) ||
        !(vocab_text = file_read_all(path, &len))) {
        fprintf(stderr, "bertrain: export: %s has no vocab.txt: %s\n", ckpt, err);
        goto out;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", ckpt);
    if (!st_open(&f, path, err, sizeof err)) {
        fprintf(stderr, "bertrain: export: %s\n", err);
        goto out;
    }
    const st_entry *wte = st_find(&f, "bert.embeddings.word_embeddings.weight");
    const st_entry *dec_b = st_find(&f, "cls.predictions.bias");
    if (!wte || !dec_b) {
        fprintf(stderr, "bertrain: export: %s: no word embeddings or cls.predictions.bias\n", path);
        goto out;
    }
    ts = calloc((size_t)f.n + 6, sizeof *ts);
    names = calloc((size_t)f.n, sizeof *names);
    folded = calloc((size_t)f.n, sizeof *folded);
    if (!ts || !names || !folded) goto out;
    int n = 0;
    for (int i = 0; i < f.n; i++) {
        const st_entry *e = &f.entries[i];
        if (strcmp(e->dtype, "F32") != 0) {
            fprintf(stderr, "bertrain: export: %s: tensor %s is %s, not F32\n", path, e->name,
                    e->dtype);
            goto out;
        }
        const char *name;
        if (!pruned_name(e->name, new_index, n_layers_ckpt, &name, &names[i])) {
            fprintf(stderr, "bertrain: export: out of host memory\n");
            goto out;
        }
        if (!name) continue; /* a layer --keep-layers leaves out */
        const void *data = st_data(&f, e);
        const double factor = admin_fold_factor(&mc_ckpt, new_index, e->name);
        if (factor != 1.0) {
            size_t count = (e->end - e->begin) / sizeof(float);
            if (!(folded[i] = malloc(e->end - e->begin))) goto out;
            memcpy(folded[i], data, e->end - e->begin);
            for (size_t j = 0; j < count; j++) folded[i][j] = (float)(folded[i][j] * factor);
            data = folded[i];
        }
        ts[n++] = (st_tensor){name, "F32", e->ndim, {e->shape[0], e->shape[1]}, data,
                              e->end - e->begin};
    }
    /* transformers ties these to the word embeddings and cls.predictions.bias */
    ts[n++] = (st_tensor){"cls.predictions.decoder.weight", "F32", 2,
                          {wte->shape[0], wte->shape[1]}, st_data(&f, wte), wte->end - wte->begin};
    ts[n++] = (st_tensor){"cls.predictions.decoder.bias", "F32", 1, {dec_b->shape[0], 0},
                          st_data(&f, dec_b), dec_b->end - dec_b->begin};
    const char *meta[] = {"format", "pt", "producer", "bertrain " PACKAGE_VERSION,
                          "bertrain_pooler", "trained", "bertrain_nsp_head", "trained"};
    if (!mc.nsp && !untrained_heads(ckpt, state, &mc, ts, &n, &carried, &be, &nsp_model, &init,
                                    &meta[5], &meta[7]))
        goto out;
    if (!paths_prepare_dir(out, err, sizeof err)) { /* everything checked: now write */
        fprintf(stderr, "bertrain: export: %s\n", err);
        goto out;
    }
    char tmp[1400], final[1400];
    snprintf(tmp, sizeof tmp, "%s/.model.safetensors.tmp", out);
    snprintf(final, sizeof final, "%s/model.safetensors", out);
    if (!st_write(tmp, ts, n, meta, 4, err, sizeof err) || rename(tmp, final) != 0) {
        fprintf(stderr, "bertrain: export: %s\n", err);
        remove(tmp);
        goto out;
    }
    const hf_card card = {ckpt, state, &mc, vocab.size, keep, meta[5], meta[7]};
    cJSON *hc = hf_config_json(&mc, vocab.pad_id);
    bool ok = hf_write_json(out, "config.json", hc) &&
              hf_write_atomic(out, "vocab.txt", vocab_text, len) &&
              hf_write_tokenizer_files(out, &vocab, ckpt_lowercase(state),
                                       mc.max_position_embeddings) &&
              hf_write_model_card(out, &card);
    cJSON_Delete(hc);
    if (!ok) goto out;
    printf("export: %s -> %s: BertForPreTraining (%d layers%s%s, hidden %d, vocab %d), "
           "model.safetensors with %d tensors, config.json, vocab.txt, tokenizer.json, "
           "tokenizer_config.json, README.md%s%s\n",
           ckpt, out, mc.num_hidden_layers, keep ? " kept: " : "", keep ? keep : "",
           mc.hidden_size, mc.vocab_size, n,
           mc.nsp                          ? ""
           : !strcmp(meta[5], "carried")   ? "; the pooler (and the NSP head where the import "
                                             "had one) carried unchanged from the imported "
                                             "model, the rest freshly initialized"
                                           : "; the pooler and NSP head were not trained "
                                             "(model.nsp false): they are freshly initialized",
           mc.norm == BERT_NORM_ADMIN ? "; Admin's omegas folded into the LayerNorms and the "
                                        "linear layers after them (a plain Post-LN model)" : "");
    rc = 0;
out:
    for (int i = 0; i < f.n; i++) {
        if (names) free(names[i]);
        if (folded) free(folded[i]);
    }
    free(names);
    free(folded);
    free(new_index);
    free(ts);
    free(init);
    free(vocab_text);
    st_close(&f);
    st_close(&carried);
    vocab_free(&vocab);
    bert_free(nsp_model);
    if (be) be->destroy(be);
    cJSON_Delete(state);
    return rc;
}

/* ---- import ---- */


/* Copy an HF tensor of dtype F32/F16/BF16/F64 into dst as fp32. */
static bool to_f32(const st_file *f, const st_entry *e, float *dst) {
    const unsigned char *p = st_data(f, e);
    size_t n = st_numel(e);
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(e->dtype, "F32")) {
            memcpy(&dst[i], p + 4 * i, 4);
        } else if (!strcmp(e->dtype, "F16") || !strcmp(e->dtype, "BF16")) {
            uint16_t h = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
            if (e->dtype[0] == 'B') {
                uint32_t u = (uint32_t)h << 16;
                memcpy(&dst[i], &u, 4);
            } else {
                dst[i] = bt_f32_from_bits(f16_to_f32(h));
            }
        } else if (!strcmp(e->dtype, "F64")) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            dst[i] = (float)d;
        } else {
            return false;
        }
    }
    return true;
}

/* The HF entry for bertrain tensor `name`: the same name, without "bert."
 * (BertModel), with old LayerNorm gamma/beta names, or the decoder bias. */
static const st_entry *find_hf(const st_file *f, const char *name) {
    char alt[2][200];
    const char *bare = strncmp(name, "bert.", 5) == 0 ? name + 5 : NULL;
    const char *cands[6] = {name, bare, NULL, NULL, NULL, NULL};
    const char *ln = strstr(name, "LayerNorm.");
    if (ln) {
        bool w = strcmp(ln, "LayerNorm.weight") == 0;
        snprintf(alt[0], sizeof alt[0], "%.*sLayerNorm.%s", (int)(ln - name), name,
                 w ? "gamma" : "beta");
        cands[2] = alt[0];
        if (bare) {
            memcpy(alt[1], alt[0] + 5, strlen(alt[0] + 5) + 1);
            cands[3] = alt[1];
        }
    }
    if (strcmp(name, "cls.predictions.bias") == 0) cands[4] = "cls.predictions.decoder.bias";
    for (int i = 0; i < 6; i++) {
        const st_entry *e = cands[i] ? st_find(f, cands[i]) : NULL;
        if (e) return e;
    }
    return NULL;
}

static bool json_int(const cJSON *c, const char *key, int *out, bool required, const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    if (v && (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
              fabs(v->valuedouble) > 2147483647.0)) { /* never cast out of int's range */
        char *shown = cJSON_PrintUnformatted(v);
        fprintf(stderr, "bertrain: import: %s: %s is %.60s; it must be an integer in [-2^31, "
                        "2^31)\n", path, key, shown ? shown : "?");
        free(shown);
        return false;
    }
    if (v) {
        *out = (int)v->valuedouble;
        return true;
    }
    if (required) fprintf(stderr, "bertrain: import: %s: %s is missing\n", path, key);
    return !required;
}

static void json_float(const cJSON *c, const char *key, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    if (cJSON_IsNumber(v)) *out = (float)v->valuedouble;
}

/* bert_config from an HF config.json; false after a one-line error. */
static bool read_hf_config(const char *path, bert_config *mc) {
    size_t len;
    char *text = file_read_all(path, &len);
    cJSON *c = text ? cJSON_Parse(text) : NULL;
    const char *why = !text ? strerror(errno) : "not a JSON object";
    free(text);
    if (!cJSON_IsObject(c)) {
        fprintf(stderr, "bertrain: import: %s: %s\n", path, why);
        cJSON_Delete(c);
        return false;
    }
    bert_preset("base", mc);
    bool ok = json_int(c, "vocab_size", &mc->vocab_size, true, path) &&
              json_int(c, "hidden_size", &mc->hidden_size, true, path) &&
              json_int(c, "num_hidden_layers", &mc->num_hidden_layers, true, path) &&
              json_int(c, "num_attention_heads", &mc->num_attention_heads, true, path) &&
              json_int(c, "intermediate_size", &mc->intermediate_size, true, path) &&
              json_int(c, "max_position_embeddings", &mc->max_position_embeddings, true, path) &&
              json_int(c, "type_vocab_size", &mc->type_vocab_size, false, path) &&
              json_int(c, "pad_token_id", &mc->pad_id, false, path);
    json_float(c, "layer_norm_eps", &mc->layer_norm_eps);
    json_float(c, "hidden_dropout_prob", &mc->hidden_dropout_prob);
    json_float(c, "attention_probs_dropout_prob", &mc->attention_probs_dropout_prob);
    json_float(c, "initializer_range", &mc->initializer_range);
    if (mc->pad_id < 0 || mc->pad_id >= mc->vocab_size) mc->pad_id = 0;
    static const char *const must[][2] = {{"model_type", "bert"},
                                          {"hidden_act", "gelu"},
                                          {"position_embedding_type", "absolute"}};
    for (int i = 0; ok && i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, must[i][0]);
        if (v && (!cJSON_IsString(v) || strcmp(v->valuestring, must[i][1]) != 0)) {
            char *shown = cJSON_PrintUnformatted(v);
            fprintf(stderr, "bertrain: import: %s: %s is %s; bertrain implements %s only\n",
                    path, must[i][0], shown ? shown : "?", must[i][1]);
            free(shown);
            ok = false;
        }
    }
    cJSON_Delete(c);
    char err[256];
    if (ok && !bert_config_valid(mc, err, sizeof err)) {
        fprintf(stderr, "bertrain: import: %s: %s\n", path, err);
        ok = false;
    }
    return ok;
}

/* state.json of an imported checkpoint: step 0 and the model's shape. */
static cJSON *import_state(const bert_config *mc, uint64_t seed, const char *from, bool lower) {
    cJSON *st = cJSON_CreateObject();
    char s[32];
    snprintf(s, sizeof s, "%llu", (unsigned long long)seed);
    cJSON_AddStringToObject(st, "format", "bertrain checkpoint");
    cJSON_AddNumberToObject(st, "format_version", CKPT_FORMAT_VERSION);
    cJSON_AddNumberToObject(st, "step", 0);
    cJSON_AddNumberToObject(st, "samples", 0);
    cJSON_AddNumberToObject(st, "epoch", 0);
    cJSON *data = cJSON_AddObjectToObject(st, "data");
    cJSON_AddNumberToObject(data, "position", 0);
    cJSON_AddNumberToObject(data, "epoch", 0);
    cJSON_AddBoolToObject(data, "lowercase", lower);
    cJSON_AddStringToObject(st, "seed", s);
    cJSON *opt = cJSON_AddObjectToObject(st, "optimizer");
    cJSON_AddStringToObject(opt, "type", "AdamW");
    cJSON_AddNumberToObject(opt, "step", 0);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(st, "loss_scaler"), "scale", 1.0);
    cJSON_AddStringToObject(st, "bertrain_version", PACKAGE_VERSION);
    cJSON_AddStringToObject(st, "imported_from", from);
    cJSON *model = cJSON_AddObjectToObject(cJSON_AddObjectToObject(st, "config"), "model");
    cJSON_AddNumberToObject(model, "vocab_size", mc->vocab_size);
    cJSON_AddNumberToObject(model, "hidden_size", mc->hidden_size);
    cJSON_AddNumberToObject(model, "num_hidden_layers", mc->num_hidden_layers);
    cJSON_AddNumberToObject(model, "num_attention_heads", mc->num_attention_heads);
    cJSON_AddNumberToObject(model, "intermediate_size", mc->intermediate_size);
    cJSON_AddNumberToObject(model, "max_position_embeddings", mc->max_position_embeddings);
    cJSON_AddNumberToObject(model, "type_vocab_size", mc->type_vocab_size);
    cJSON_AddNumberToObject(model, "layer_norm_eps", json_short_float(mc->layer_norm_eps));
    cJSON_AddNumberToObject(model, "hidden_dropout_prob", json_short_float(mc->hidden_dropout_prob));
    cJSON_AddNumberToObject(model, "attention_probs_dropout_prob",
                            json_short_float(mc->attention_probs_dropout_prob));
    cJSON_AddNumberToObject(model, "initializer_range", json_short_float(mc->initializer_range));
    cJSON_AddBoolToObject(model, "nsp", mc->nsp);
    return st;
}

/* Whether the HF tokenizer lowercases (tokenizer_config.json; BERT's default: yes). */
static bool hf_lowercase(const char *dir) {
    char path[1400];
    size_t len;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    char *text = file_read_all(path, &len);
    cJSON *c = text ? cJSON_Parse(text) : NULL;
    free(text);
    bool lower = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(c, "do_lower_case"));
    cJSON_Delete(c);
    return lower;
}

/* The pooler and NSP head of an HF model imported without model.nsp, carried
 * unchanged in the checkpoint (CKPT_CARRIED_FILE) so that the export keeps
 * them instead of initializing new ones. */
typedef struct {
    st_tensor t[4];
    int n;
} carried_heads;

/* Fill c with the HF file's pooler and NSP head tensors (as fp32), except
 * those a bertrain export marks as freshly initialized; marks them used.
 * false after a one-line error (a shape that does not fit, out of memory). */
static bool carry_heads(const st_file *f, const bert_config *mc, bool *used, carried_heads *c) {
    const long H = mc->hidden_size, shapes[4][2] = {{H, H}, {H, 0}, {2, H}, {2, 0}};
    const char *pooler = st_meta(f, "bertrain_pooler"), *head = st_meta(f, "bertrain_nsp_head");
    if (!pooler) pooler = head; /* exports before bertrain_pooler: one key for both */
    for (int i = 0; i < 4; i++) {
        const char *marked = i < 2 ? pooler : head;
        const st_entry *e = find_hf(f, NSP_TENSORS[i]);
        if (!e || (marked && !strcmp(marked, "initialized"))) continue;
        used[e - f->entries] = true;
        size_t numel = (size_t)shapes[i][0] * (size_t)(shapes[i][1] ? shapes[i][1] : 1);
        float *data = st_numel(e) == numel ? malloc(numel * sizeof *data) : NULL;
        if (!data || !to_f32(f, e, data)) {
            fprintf(stderr, "bertrain: import: %s: %s\n", e->name,
                    st_numel(e) != numel ? "its shape does not fit config.json's hidden_size"
                                         : "out of memory or an unknown dtype");
            free(data);
            return false;
        }
        c->t[c->n++] = (st_tensor){NSP_TENSORS[i], "F32", shapes[i][1] ? 2 : 1,
                                   {shapes[i][0], shapes[i][1]}, data, numel * sizeof *data};
    }
    if (c->n)
        printf("import: %d tensor%s of the pooler and NSP head kept unchanged for the export "
               "(not trained without model.nsp)\n", c->n, c->n == 1 ? "" : "s");
    return true;
}

int cli_import(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    uint64_t seed = 42;
    bool no_nsp = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            if (!parse_u64(argv[++i], &seed)) {
                fprintf(stderr, "bertrain import: --seed %s: not an integer in [0, "
                                "18446744073709551615]\n", argv[i]);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--no-nsp"))
            no_nsp = true;
        else if (!in && argv[i][0] != '-')
            in = argv[i];
        else if (!out && argv[i][0] != '-')
            out = argv[i];
        else
            in = out = NULL, i = argc;
    }
    if (!in || !out) {
        fprintf(stderr, "usage: bertrain import HF_DIR OUT_CKPT [--seed N] [--no-nsp]\n");
        return 2;
    }
    char path[1400], err[1024];
    if (!run_dir_check_new_output(out, "import", err, sizeof err) ||
        !paths_prepare_parent(out, err, sizeof err)) {
        fprintf(stderr, "bertrain: import: %s\n", err);
        return 2;
    }
    bert_config mc;
    snprintf(path, sizeof path, "%s/config.json", in);
    if (!read_hf_config(path, &mc)) return 2;
    snprintf(path, sizeof path, "%s/model.safetensors", in);
    st_file f;
    if (!st_open(&f, path, err, sizeof err)) {
        char other[1400];
        snprintf(other, sizeof other, "%s/pytorch_model.bin", in);
        bool bin = access(other, R_OK) == 0;
        fprintf(stderr, "bertrain: import: %s%s\n", err,
                bin ? " (the directory has pytorch_model.bin only: save it as safetensors with "
                      "transformers: model.save_pretrained(dir, safe_serialization=True))"
                    : "");
        return 2;
    }
    const char *head = st_meta(&f, "bertrain_nsp_head");
    mc.nsp = !no_nsp && st_find(&f, "cls.seq_relationship.weight") &&
             !(head && (!strcmp(head, "initialized") || !strcmp(head, "carried")));
    int rc = 2;
    carried_heads carry = {0};
    bt_backend *be = NULL;
    float *host = NULL;
    char *vocab_text = NULL;
    cJSON *state = NULL;
    bool *used = calloc((size_t)f.n + 1, sizeof *used);
    bert_model *m = used ? host_model(&mc, seed, &be, &host) : NULL;
    if (!m || !host) goto out;
    char missing[4096] = "";
    int n_missing = 0, n_encoder_missing = 0;
    const char *first_encoder_missing = NULL;
    for (int i = 0; i < m->n_tensors; i++) {
        const bert_tensor *t = &m->tensors[i];
        const st_entry *e = find_hf(&f, t->name);
        if (!e && strncmp(t->name, "bert.", 5) == 0) { /* only heads may be initialized */
            if (!n_encoder_missing++) first_encoder_missing = t->name;
            continue;
        }
        if (!e) {
            size_t l = strlen(missing);
            snprintf(missing + l, sizeof missing - l, "%s%s", n_missing++ ? ", " : "", t->name);
            continue;
        }
        used[e - f.entries] = true;
        if (st_numel(e) != t->numel || e->shape[0] != t->shape[0]) {
            fprintf(stderr, "bertrain: import: %s: %s has shape [%ld, %ld]; config.json makes it "
                            "[%d, %d]\n", path, e->name, e->shape[0], e->ndim > 1 ? e->shape[1] : 0,
                    t->shape[0], t->shape[1]);
            goto out;
        }
        if (!to_f32(&f, e, host + t->offset)) {
            fprintf(stderr, "bertrain: import: %s: %s has dtype %s (F32, F16, BF16 or F64 "
                            "needed)\n", path, e->name, e->dtype);
            goto out;
        }
        if (!ckpt_check_finite(path, e->name, host + t->offset, t->numel, err, sizeof err)) {
            fprintf(stderr, "bertrain: import: %s\n", err);
            goto out;
        }
    }
    if (n_encoder_missing) {
        fprintf(stderr, "bertrain: import: %s: %d tensor%s of the encoder that config.json "
                        "describes %s missing (the first: %s): config.json and the weights "
                        "disagree (num_hidden_layers %d?)\n", path, n_encoder_missing,
                n_encoder_missing == 1 ? "" : "s", n_encoder_missing == 1 ? "is" : "are",
                first_encoder_missing, mc.num_hidden_layers);
        goto out;
    }
    const st_entry *dec = st_find(&f, "cls.predictions.decoder.weight");
    const bert_tensor *wte = bert_find_tensor(m, "bert.embeddings.word_embeddings.weight");
    const st_entry *dec_b = st_find(&f, "cls.predictions.decoder.bias");
    const bert_tensor *bias = bert_find_tensor(m, "cls.predictions.bias");
    if (dec_b && st_find(&f, "cls.predictions.bias")) { /* the tied copy of the bias */
        used[dec_b - f.entries] = true;
        if (strcmp(dec_b->dtype, "F32") == 0 && st_numel(dec_b) == bias->numel &&
            memcmp(st_data(&f, dec_b), host + bias->offset, bias->numel * 4) != 0)
            printf("import: cls.predictions.decoder.bias differs from cls.predictions.bias; "
                   "bertrain keeps cls.predictions.bias\n");
    }
    if (dec) {
        used[dec - f.entries] = true;
        if (strcmp(dec->dtype, "F32") == 0 && st_numel(dec) == wte->numel &&
            memcmp(st_data(&f, dec), host + wte->offset, wte->numel * 4) != 0)
            printf("import: cls.predictions.decoder.weight differs from the word embeddings; "
                   "bertrain ties them and keeps the word embeddings\n");
    }
    if (!mc.nsp && !carry_heads(&f, &mc, used, &carry)) goto out;
    if (n_missing)
        printf("import: %d tensor%s not in %s, initialized (seed %llu): %s\n", n_missing,
               n_missing == 1 ? "" : "s", path, (unsigned long long)seed, missing);
    for (int i = 0; i < f.n; i++)
        if (!used[i] && !strstr(f.entries[i].name, "position_ids"))
            printf("import: not used: %s%s\n", f.entries[i].name,
                   strstr(f.entries[i].name, "pooler") || strstr(f.entries[i].name, "seq_rel")
                       ? " (the pooler and NSP head are kept only with model.nsp)"
                       : "");
    snprintf(path, sizeof path, "%s/vocab.txt", in);
    size_t vlen = 0;
    bt_vocab vocab;
    if (!vocab_load(&vocab, path, err, sizeof err)) { /* export, predict and train need it */
        fprintf(stderr, "bertrain: import: %s (bertrain needs the model's WordPiece vocab.txt "
                        "beside config.json)\n", err);
        goto out;
    }
    vocab_text = file_read_all(path, &vlen);
    if (vocab.size > mc.vocab_size) {
        fprintf(stderr, "bertrain: import: %s has %d tokens, more than the model's vocab_size "
                        "%d\n", path, vocab.size, mc.vocab_size);
        vocab_free(&vocab);
        goto out;
    }
    if (vocab.size != mc.vocab_size)
        printf("import: %s has %d tokens; the model's vocab_size is %d\n", path, vocab.size,
               mc.vocab_size);
    vocab_free(&vocab);
    state = import_state(&mc, seed, in, hf_lowercase(in));
    ckpt_contents c = {m, host, NULL, NULL, 0, OPT_ADAMW, vocab_text, vlen, state, NULL, 0,
                       carry.t, carry.n};
    if (!ckpt_write_dir(out, &c, 0, err, sizeof err)) {
        fprintf(stderr, "bertrain: import: %s\n", err);
        goto out;
    }
    printf("import: %s -> %s: %d layers, hidden %d, heads %d, intermediate %d, vocab %d, "
           "positions %d, NSP head %s; step 0, zero optimizer moments\n", in, out,
           mc.num_hidden_layers, mc.hidden_size, mc.num_attention_heads, mc.intermediate_size,
           mc.vocab_size, mc.max_position_embeddings, mc.nsp ? "yes" : "no");
    printf("import: continue with `bertrain train CONFIG.json --resume %s`; CONFIG.json needs\n"
           "  \"model\": {\"vocab_size\": %d, \"hidden_size\": %d, \"num_hidden_layers\": %d, "
           "\"num_attention_heads\": %d, \"intermediate_size\": %d, \"max_position_embeddings\": %d, "
           "\"type_vocab_size\": %d, \"nsp\": %s}%s%s%s\n", out, mc.vocab_size, mc.hidden_size,
           mc.num_hidden_layers, mc.num_attention_heads, mc.intermediate_size,
           mc.max_position_embeddings, mc.type_vocab_size, mc.nsp ? "true" : "false",
           vocab_text ? " and \"data\": {\"vocab\": \"" : "", vocab_text ? out : "",
           vocab_text ? "/vocab.txt\", ...} with shards made from that vocab" : "");
    rc = 0;
out:
    for (int i = 0; i < carry.n; i++) free((void *)carry.t[i].data);
    free(used);
    free(host);
    free(vocab_text);
    cJSON_Delete(state);
    bert_free(m);
    if (be) be->destroy(be);
    st_close(&f);
    return rc;
}
