/* `bertrain export`: a checkpoint as a Hugging Face BertForPreTraining
 * directory (hf.h). */
#define _XOPEN_SOURCE 700
#include "hf.h"

#include "ckpt.h"
#include "hf_files.h"
#include "run_dir.h"
#include "safetensors.h"
#include "util/file.h"
#include "util/paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "dev"
#endif

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
    *nsp_model = hf_host_model(&with_nsp, cJSON_IsString(seed) ? strtoull(seed->valuestring, NULL, 10)
                                                           : 42, be, init);
    if (!*nsp_model || !*init) return false;
    int n_carried[2] = {0, 0}; /* pooler, NSP head */
    for (int i = 0; i < 4; i++) {
        const bert_tensor *t = bert_find_tensor(*nsp_model, HF_NSP_TENSORS[i]);
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

/* Everything an export holds while it runs, freed in one place. */
typedef struct {
    char ckpt[1200];            /* the checkpoint directory */
    const char *out, *keep;     /* the output directory; --keep-layers or NULL */
    cJSON *state;               /* its state.json */
    bert_config mc;             /* the exported shape (after --keep-layers) */
    bert_config mc_ckpt;        /* the checkpoint's: Admin's omegas by checkpoint layer */
    int *new_index;             /* --keep-layers: each checkpoint layer's new index, or -1 */
    bt_vocab vocab;
    char *vocab_text;
    size_t vocab_len;
    st_file f, carried;         /* model.safetensors; an import's carried heads */
    bt_backend *be;             /* initialized heads: their model and values */
    bert_model *nsp_model;
    float *init;
    st_tensor *ts;              /* the exported tensors (n) */
    int n;
    char **names;               /* renumbered names (per checkpoint tensor) */
    float **folded;             /* Admin: scaled copies (per checkpoint tensor) */
    const char *meta[10];       /* safetensors metadata: format, producer, the heads
                                   (values at 5 and 7), bertrain_export: its mark's name */
} export_job;

/* The checkpoint verified, its shape (pruned by --keep-layers), its vocab and
 * its weights opened. 0, or 2 after one line why. */
static int export_open(export_job *e) {
    char err[1024], path[1400];
    if (!ckpt_verify(e->ckpt, &e->state, err, sizeof err) ||
        !ckpt_model_config(e->state, &e->mc, err, sizeof err)) {
        fprintf(stderr, "bertrain: export: %s\n", err);
        return 2;
    }
    if (e->mc.norm == BERT_NORM_PRE) {
        fprintf(stderr, "bertrain: export: %s is a Pre-LN model (model.norm \"pre\"); Hugging "
                        "Face BertForPreTraining is Post-LN and cannot hold it\n", e->ckpt);
        return 2;
    }
    e->mc_ckpt = e->mc;
    const int n_layers = e->mc.num_hidden_layers;
    if (e->keep) {
        if (!(e->new_index = malloc((size_t)n_layers * sizeof *e->new_index))) return 2;
        if (!(e->mc.num_hidden_layers = parse_keep_layers(e->keep, n_layers, e->new_index)))
            return 2;
    }
    ckpt_vocab_path(e->ckpt, e->state, path, sizeof path);
    if (!vocab_load(&e->vocab, path, err, sizeof err) ||
        !(e->vocab_text = file_read_all(path, &e->vocab_len))) {
        fprintf(stderr, "bertrain: export: %s has no vocab.txt: %s\n", e->ckpt, err);
        return 2;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", e->ckpt);
    if (!st_open(&e->f, path, err, sizeof err)) {
        fprintf(stderr, "bertrain: export: %s\n", err);
        return 2;
    }
    return 0;
}

/* The exported tensors: every checkpoint tensor of a kept layer under its
 * (renumbered) name, Admin's omegas folded in, and the decoder tensors
 * transformers ties to the word embeddings and cls.predictions.bias. 0, or 2
 * after one line why. */
static int export_tensors(export_job *e) {
    const st_file *f = &e->f;
    const char *path = "model.safetensors";
    const st_entry *wte = st_find(f, "bert.embeddings.word_embeddings.weight");
    const st_entry *dec_b = st_find(f, "cls.predictions.bias");
    if (!wte || !dec_b) {
        fprintf(stderr, "bertrain: export: %s/%s: no word embeddings or cls.predictions.bias\n",
                e->ckpt, path);
        return 2;
    }
    e->ts = calloc((size_t)f->n + 6, sizeof *e->ts);
    e->names = calloc((size_t)f->n, sizeof *e->names);
    e->folded = calloc((size_t)f->n, sizeof *e->folded);
    if (!e->ts || !e->names || !e->folded) return 2;
    for (int i = 0; i < f->n; i++) {
        const st_entry *t = &f->entries[i];
        if (strcmp(t->dtype, "F32") != 0) {
            fprintf(stderr, "bertrain: export: %s/%s: tensor %s is %s, not F32\n", e->ckpt, path,
                    t->name, t->dtype);
            return 2;
        }
        const char *name;
        if (!pruned_name(t->name, e->new_index, e->mc_ckpt.num_hidden_layers, &name,
                         &e->names[i])) {
            fprintf(stderr, "bertrain: export: out of host memory\n");
            return 2;
        }
        if (!name) continue; /* a layer --keep-layers leaves out */
        const void *data = st_data(f, t);
        const double factor = admin_fold_factor(&e->mc_ckpt, e->new_index, t->name);
        if (factor != 1.0) {
            const size_t count = (t->end - t->begin) / sizeof(float);
            if (!(e->folded[i] = malloc(t->end - t->begin))) return 2;
            memcpy(e->folded[i], data, t->end - t->begin);
            for (size_t j = 0; j < count; j++) e->folded[i][j] = (float)(e->folded[i][j] * factor);
            data = e->folded[i];
        }
        e->ts[e->n++] = (st_tensor){name, "F32", t->ndim, {t->shape[0], t->shape[1]}, data,
                                    t->end - t->begin};
    }
    e->ts[e->n++] = (st_tensor){"cls.predictions.decoder.weight", "F32", 2,
                                {wte->shape[0], wte->shape[1]}, st_data(f, wte),
                                wte->end - wte->begin};
    e->ts[e->n++] = (st_tensor){"cls.predictions.decoder.bias", "F32", 1, {dec_b->shape[0], 0},
                                st_data(f, dec_b), dec_b->end - dec_b->begin};
    return 0;
}

/* Everything checked: the directory and its files, the mark of a complete
 * export last. 0; 2 after one line when the directory cannot be made (a bad
 * path, before any write); 1 after one line when a write failed. */
static int export_write(export_job *e) {
    char err[3000], tmp[1400], final[1400];
    if (!paths_prepare_dir(e->out, err, sizeof err)) {
        fprintf(stderr, "bertrain: export: %s\n", err);
        return 2;
    }
    snprintf(tmp, sizeof tmp, "%s/.model.safetensors.tmp", e->out);
    snprintf(final, sizeof final, "%s/model.safetensors", e->out);
    bool ok = st_write(tmp, e->ts, e->n, e->meta, 5, err, sizeof err);
    if (ok && rename(tmp, final) != 0) {
        snprintf(err, sizeof err, "%s: cannot rename %s to it: %s", final, tmp, strerror(errno));
        ok = false;
    }
    if (!ok) {
        fprintf(stderr, "bertrain: export: %s\n", err);
        remove(tmp);
        return 1;
    }
    const hf_card card = {e->ckpt, e->state, &e->mc, e->vocab.size, e->keep, e->meta[5],
                          e->meta[7]};
    cJSON *hc = hf_config_json(&e->mc, e->vocab.pad_id);
    ok = hf_write_json(e->out, "config.json", hc) &&
                    hf_write_atomic(e->out, "vocab.txt", e->vocab_text, e->vocab_len) &&
                    hf_write_tokenizer_files(e->out, &e->vocab, ckpt_lowercase(e->state),
                                             e->mc.max_position_embeddings) &&
                    hf_write_model_card(e->out, &card) &&
                    hf_write_export_mark(e->out, e->ckpt); /* last: the export is complete */
    cJSON_Delete(hc);
    return ok ? 0 : 1;
}

/* One line: what was exported, and how the heads were filled. */
static void export_report(const export_job *e) {
    const bert_config *mc = &e->mc;
    printf("export: %s -> %s: BertForPreTraining (%d layers%s%s, hidden %d, vocab %d), "
           "model.safetensors with %d tensors, config.json, vocab.txt, tokenizer.json, "
           "tokenizer_config.json, README.md, " HF_EXPORT_MARK "%s%s\n",
           e->ckpt, e->out, mc->num_hidden_layers, e->keep ? " kept: " : "",
           e->keep ? e->keep : "", mc->hidden_size, mc->vocab_size, e->n,
           mc->nsp                           ? ""
           : !strcmp(e->meta[5], "carried") ? "; the pooler (and the NSP head where the import "
                                              "had one) carried unchanged from the imported "
                                              "model, the rest freshly initialized"
                                            : "; the pooler and NSP head were not trained "
                                              "(model.nsp false): they are freshly initialized",
           mc->norm == BERT_NORM_ADMIN ? "; Admin's omegas folded into the LayerNorms and the "
                                         "linear layers after them (a plain Post-LN model)"
                                       : "");
}

static void export_free(export_job *e) {
    for (int i = 0; i < e->f.n; i++) {
        if (e->names) free(e->names[i]);
        if (e->folded) free(e->folded[i]);
    }
    free(e->names);
    free(e->folded);
    free(e->new_index);
    free(e->ts);
    free(e->init);
    free(e->vocab_text);
    st_close(&e->f);
    st_close(&e->carried);
    vocab_free(&e->vocab);
    bert_free(e->nsp_model);
    if (e->be) e->be->destroy(e->be);
    cJSON_Delete(e->state);
}

int hf_export(const char *ckpt, const char *out, const char *keep_layers) {
    export_job *e = calloc(1, sizeof *e);
    char err[1024];
    if (!e) return 2;
    ckpt_resolve(ckpt, e->ckpt, sizeof e->ckpt);
    e->out = out;
    e->keep = keep_layers;
    const char *meta[10] = {"format", "pt", "producer", ("bertrain " PACKAGE_VERSION),
                            "bertrain_pooler", "trained", "bertrain_nsp_head", "trained",
                            "bertrain_export", HF_EXPORT_MARK};
    memcpy(e->meta, meta, sizeof meta);
    int rc = 0;
    if (!paths_check_own_dir(out, "OUT_DIR", err, sizeof err) ||
        !run_dir_check_new_output(out, "export", err, sizeof err) ||
        !run_dir_check_outside_ckpt(out, "export", err, sizeof err)) {
        fprintf(stderr, "bertrain: export: %s\n", err);
        rc = 2;
    }
    if (!rc) rc = export_open(e);
    if (!rc) rc = export_tensors(e);
    if (!rc && !e->mc.nsp &&
        !untrained_heads(e->ckpt, e->state, &e->mc, e->ts, &e->n, &e->carried, &e->be,
                         &e->nsp_model, &e->init, &e->meta[5], &e->meta[7]))
        rc = 2;
    if (!rc) rc = export_write(e);
    if (!rc) export_report(e);
    export_free(e);
    free(e);
    return rc;
}
