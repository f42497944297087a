/* `bertrain import`: a Hugging Face BERT directory as a checkpoint at step
 * 0 (hf.h). */
#define _XOPEN_SOURCE 700
#include "hf.h"

#include "backends/common/half.h"
#include "ckpt.h"
#include "data/vocab.h"
#include "hf_files.h"
#include "run_dir.h"
#include "safetensors.h"
#include "util/file.h"
#include "util/json_dups.h"
#include "util/json_num.h"
#include "util/paths.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "dev"
#endif

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
    char *text = file_read_all(path, &len), dup[512] = "";
    cJSON *c = text ? cJSON_Parse(text) : NULL;
    const char *why = !text ? strerror(errno) : "not a JSON object";
    if (cJSON_IsObject(c) && json_find_duplicate(text, len, dup, sizeof dup)) why = dup;
    free(text);
    if (!cJSON_IsObject(c) || dup[0]) {
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
static cJSON *import_state(const bert_config *mc, uint64_t seed, const char *from, bool lower,
                           cJSON *base_model) {
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
    cJSON_AddStringToObject(st, "imported_from", from); /* only an import's: never trained */
    cJSON_AddItemToObject(st, "base_model", base_model);
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

/* Whether the HF tokenizer lowercases (tokenizer_config.json's
 * do_lower_case; BERT's default, and without the file or the key: yes) into
 * *lower, and whether the file says so into *stated; false after one line
 * when the file is there but names do_lower_case twice. */
static bool hf_lowercase(const char *dir, bool *lower, bool *stated) {
    char path[1400], dup[512];
    size_t len;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    char *text = file_read_all(path, &len);
    cJSON *c = text ? cJSON_Parse(text) : NULL;
    const bool twice = c && json_find_duplicate(text, len, dup, sizeof dup);
    free(text);
    if (twice) fprintf(stderr, "bertrain: import: %s: %s\n", path, dup);
    const cJSON *dlc = cJSON_GetObjectItemCaseSensitive(c, "do_lower_case");
    *stated = cJSON_IsBool(dlc);
    *lower = !cJSON_IsFalse(dlc);
    cJSON_Delete(c);
    return !twice;
}

/* Append the YAML scalar v (spaces, quotes and a trailing comment removed)
 * to the comma list out. */
static void append_scalar(char *out, size_t outlen, char *v) {
    v += strspn(v, " \t\"'");
    v[strcspn(v, "\"'#")] = 0;
    for (size_t n = strlen(v); n && (v[n - 1] == ' ' || v[n - 1] == '\t'); n--) v[n - 1] = 0;
    if (!*v) return;
    const size_t used = strlen(out);
    snprintf(out + used, outlen - used, "%s%s", used ? ", " : "", v);
}

/* The licence that the HF directory's model card (README.md) names in its
 * front matter: a top-level `license:` key between the opening `---` lines,
 * a plain value or a list of `- ID` lines (joined with ", "). Into out; ""
 * when there is no card or it names none. */
static void hf_card_license(const char *dir, char *out, size_t outlen) {
    char path[1400];
    size_t len;
    snprintf(path, sizeof path, "%s/README.md", dir);
    char *text = file_read_all(path, &len);
    out[0] = 0;
    if (!text || strncmp(text, "---", 3) != 0 || (text[3] != '\n' && text[3] != '\r')) {
        free(text);
        return;
    }
    bool in_list = false; /* the lines after `license:` may list its values */
    for (char *line = strchr(text, '\n') + 1, *next; *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line[strcspn(line, "\r")] = 0;
        if (!strcmp(line, "---")) break; /* the end of the front matter */
        char *item = line + strspn(line, " ");
        if (!strncmp(line, "license:", 8)) {
            append_scalar(out, outlen, line + 8);
            in_list = true;
        } else if (in_list && item[0] == '-') {
            append_scalar(out, outlen, item + 1);
        } else {
            in_list = false;
        }
        if (!next) break;
    }
    free(text);
}

/* state.json's "base_model": the directory imported, the licence its card
 * names, and the tensors this import initialized. Every later checkpoint
 * carries it (ckpt_writer_carry), so that every model card names them. */
static cJSON *base_model_json(const char *in, cJSON *initialized) {
    char license[256];
    hf_card_license(in, license, sizeof license);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "imported_from", in);
    if (license[0]) cJSON_AddStringToObject(b, "license", license);
    cJSON_AddItemToObject(b, "initialized", initialized);
    return b;
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
        const st_entry *e = find_hf(f, HF_NSP_TENSORS[i]);
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
        c->t[c->n++] = (st_tensor){HF_NSP_TENSORS[i], "F32", shapes[i][1] ? 2 : 1,
                                   {shapes[i][0], shapes[i][1]}, data, numel * sizeof *data};
    }
    if (c->n)
        printf("import: %d tensor%s of the pooler and NSP head kept unchanged for the export "
               "(not trained without model.nsp)\n", c->n, c->n == 1 ? "" : "s");
    return true;
}

/* Everything an import holds while it runs, freed in one place. */
typedef struct {
    const char *in, *out;      /* the HF directory; the new checkpoint */
    uint64_t seed;             /* initializes what the file lacks */
    char path[1400];           /* in/model.safetensors, for messages */
    bert_config mc;            /* from in/config.json */
    st_file f;                 /* the weights */
    bool *used;                /* per file tensor: taken into the model */
    bt_backend *be;            /* the model on the host, initialized from seed */
    bert_model *m;
    float *host;
    carried_heads carry;       /* without model.nsp: the heads kept for the export */
    char missing[4096];        /* heads the file lacks (initialized) */
    int n_missing;
    cJSON *initialized;        /* their names (state.json's base_model.initialized) */
    int vocab_casing;          /* VOCAB_CASED, VOCAB_UNCASED or VOCAB_CASE_UNKNOWN */
    char *vocab_text;
    size_t vocab_len;
    cJSON *state;
} import_job;

/* The output checked, the weights opened (and an export's mark checked),
 * config.json read, whether the model keeps an NSP head, and the host model.
 * 0, or 2 after one line why. */
static int import_open(import_job *j, bool no_nsp) {
    char err[1024], path[1400];
    if (!paths_check_own_dir(j->out, "OUT_CKPT", err, sizeof err) ||
        !run_dir_check_new_output(j->out, "import", err, sizeof err) ||
        !run_dir_check_outside_ckpt(j->out, "import", err, sizeof err) ||
        !paths_prepare_parent(j->out, err, sizeof err)) {
        fprintf(stderr, "bertrain: import: %s\n", err);
        return 2;
    }
    snprintf(j->path, sizeof j->path, "%s/model.safetensors", j->in);
    if (!st_open(&j->f, j->path, err, sizeof err)) {
        snprintf(path, sizeof path, "%s/pytorch_model.bin", j->in);
        fprintf(stderr, "bertrain: import: %s%s\n", err,
                access(path, R_OK) == 0
                    ? " (the directory has pytorch_model.bin only: save it as safetensors with "
                      "transformers: model.save_pretrained(dir, safe_serialization=True))"
                    : "");
        return 2;
    }
    /* before config.json: an interrupted export may have written the weights only */
    if (!hf_check_export(j->in, st_meta(&j->f, "bertrain_export"), err, sizeof err)) {
        fprintf(stderr, "bertrain: import: %s\n", err);
        return 2;
    }
    snprintf(path, sizeof path, "%s/config.json", j->in);
    if (!read_hf_config(path, &j->mc)) return 2;
    const char *head = st_meta(&j->f, "bertrain_nsp_head");
    j->mc.nsp = !no_nsp && st_find(&j->f, "cls.seq_relationship.weight") &&
                !(head && (!strcmp(head, "initialized") || !strcmp(head, "carried")));
    j->used = calloc((size_t)j->f.n + 1, sizeof *j->used);
    if (!j->used) return 2;
    j->m = hf_host_model(&j->mc, j->seed, &j->be, &j->host);
    return j->m && j->host ? 0 : 2;
}

/* One model tensor from the file: its shape checked, converted to fp32 and
 * finite. false after one line why. */
static bool import_tensor(import_job *j, const bert_tensor *t, const st_entry *e) {
    char err[1024];
    j->used[e - j->f.entries] = true;
    if (st_numel(e) != t->numel || e->shape[0] != t->shape[0]) {
        fprintf(stderr, "bertrain: import: %s: %s has shape [%ld, %ld]; config.json makes it "
                        "[%d, %d]\n", j->path, e->name, e->shape[0], e->ndim > 1 ? e->shape[1] : 0,
                t->shape[0], t->shape[1]);
        return false;
    }
    if (!to_f32(&j->f, e, j->host + t->offset)) {
        fprintf(stderr, "bertrain: import: %s: %s has dtype %s (F32, F16, BF16 or F64 needed)\n",
                j->path, e->name, e->dtype);
        return false;
    }
    if (!ckpt_check_finite(j->path, e->name, j->host + t->offset, t->numel, err, sizeof err)) {
        fprintf(stderr, "bertrain: import: %s\n", err);
        return false;
    }
    return true;
}

/* Every model tensor the file has, into the host model; a missing head stays
 * initialized (listed in j->missing), a missing encoder tensor is an error.
 * 0, or 2 after one line why. */
static int import_weights(import_job *j) {
    int n_encoder_missing = 0;
    const char *first_encoder_missing = NULL;
    for (int i = 0; i < j->m->n_tensors; i++) {
        const bert_tensor *t = &j->m->tensors[i];
        const st_entry *e = find_hf(&j->f, t->name);
        if (!e && strncmp(t->name, "bert.", 5) == 0) { /* only heads may be initialized */
            if (!n_encoder_missing++) first_encoder_missing = t->name;
        } else if (!e) {
            size_t l = strlen(j->missing);
            snprintf(j->missing + l, sizeof j->missing - l, "%s%s", j->n_missing++ ? ", " : "",
                     t->name);
            cJSON_AddItemToArray(j->initialized, cJSON_CreateString(t->name));
        } else if (!import_tensor(j, t, e)) {
            return 2;
        }
    }
    if (n_encoder_missing) {
        fprintf(stderr, "bertrain: import: %s: %d tensor%s of the encoder that config.json "
                        "describes %s missing (the first: %s): config.json and the weights "
                        "disagree (num_hidden_layers %d?)\n", j->path, n_encoder_missing,
                n_encoder_missing == 1 ? "" : "s", n_encoder_missing == 1 ? "is" : "are",
                first_encoder_missing, j->mc.num_hidden_layers);
        return 2;
    }
    return 0;
}

/* transformers' tied copies (the decoder weight and bias): used, and a copy
 * that differs from the tensor bertrain keeps is said. */
static void import_tied(import_job *j) {
    const st_file *f = &j->f;
    const st_entry *dec = st_find(f, "cls.predictions.decoder.weight");
    const bert_tensor *wte = bert_find_tensor(j->m, "bert.embeddings.word_embeddings.weight");
    const st_entry *dec_b = st_find(f, "cls.predictions.decoder.bias");
    const bert_tensor *bias = bert_find_tensor(j->m, "cls.predictions.bias");
    if (dec_b && st_find(f, "cls.predictions.bias")) { /* the tied copy of the bias */
        j->used[dec_b - f->entries] = true;
        if (strcmp(dec_b->dtype, "F32") == 0 && st_numel(dec_b) == bias->numel &&
            memcmp(st_data(f, dec_b), j->host + bias->offset, bias->numel * 4) != 0)
            printf("import: cls.predictions.decoder.bias differs from cls.predictions.bias; "
                   "bertrain keeps cls.predictions.bias\n");
    }
    if (dec) {
        j->used[dec - f->entries] = true;
        if (strcmp(dec->dtype, "F32") == 0 && st_numel(dec) == wte->numel &&
            memcmp(st_data(f, dec), j->host + wte->offset, wte->numel * 4) != 0)
            printf("import: cls.predictions.decoder.weight differs from the word embeddings; "
                   "bertrain ties them and keeps the word embeddings\n");
    }
}

/* The heads the file lacked (initialized) and its tensors not used. */
static void import_report_unused(const import_job *j) {
    if (j->n_missing)
        printf("import: %d tensor%s not in %s, initialized (seed %llu): %s\n", j->n_missing,
               j->n_missing == 1 ? "" : "s", j->path, (unsigned long long)j->seed, j->missing);
    for (int i = 0; i < j->f.n; i++)
        if (!j->used[i] && !strstr(j->f.entries[i].name, "position_ids"))
            printf("import: not used: %s%s\n", j->f.entries[i].name,
                   strstr(j->f.entries[i].name, "pooler") || strstr(j->f.entries[i].name, "seq_rel")
                       ? " (the pooler and NSP head are kept only with model.nsp)"
                       : "");
}

/* in/vocab.txt, which export, predict and train need: loaded, no larger
 * than the model's vocabulary, kept for the checkpoint. 0, or 2 after one
 * line why. */
static int import_vocab(import_job *j) {
    char path[1400], err[1024];
    snprintf(path, sizeof path, "%s/vocab.txt", j->in);
    bt_vocab vocab;
    if (!vocab_load(&vocab, path, err, sizeof err)) {
        fprintf(stderr, "bertrain: import: %s (bertrain needs the model's WordPiece vocab.txt "
                        "beside config.json)\n", err);
        return 2;
    }
    j->vocab_text = file_read_all(path, &j->vocab_len);
    const int size = vocab.size;
    j->vocab_casing = vocab_casing(&vocab);
    vocab_free(&vocab);
    if (size > j->mc.vocab_size) {
        fprintf(stderr, "bertrain: import: %s has %d tokens, more than the model's vocab_size "
                        "%d\n", path, size, j->mc.vocab_size);
        return 2;
    }
    if (size != j->mc.vocab_size)
        printf("import: %s has %d tokens; the model's vocab_size is %d\n", path, size,
               j->mc.vocab_size);
    return 0;
}

/* Whether the checkpoint's tokenizer lowercases: as --lowercase or
 * --no-lowercase say, else as tokenizer_config.json says. A choice that
 * contradicts vocab.txt's casing is said: train would refuse every shard
 * (lowercased ones for the checkpoint, the others for the vocab). false after
 * one line on bad input. */
static bool import_casing(const import_job *j, int flag, bool *lower) {
    bool stated;
    if (!hf_lowercase(j->in, lower, &stated)) return false;
    const bool file_lower = *lower;
    if (flag >= 0) {
        *lower = flag;
        if (*lower != file_lower)
            printf("import: %s: the tokenizer %s, although %s/tokenizer_config.json %s\n",
                   flag ? "--lowercase" : "--no-lowercase", flag ? "lowercases" : "keeps case",
                   j->in, stated ? (file_lower ? "says do_lower_case true"
                                               : "says do_lower_case false")
                                 : "has no do_lower_case (true, BERT's default)");
    }
    const bool vocab_lower = j->vocab_casing == VOCAB_UNCASED;
    if (j->vocab_casing == VOCAB_CASE_UNKNOWN || *lower == vocab_lower) return true;
    char why[1600];
    if (flag >= 0)
        snprintf(why, sizeof why, "%s", flag ? "--lowercase" : "--no-lowercase");
    else
        snprintf(why, sizeof why, "%s/tokenizer_config.json %s", j->in,
                 stated ? (file_lower ? "says do_lower_case true" : "says do_lower_case false")
                        : "has no do_lower_case, which means true");
    fprintf(stderr, "bertrain: import: warning: %s, but %s/vocab.txt is %s: `bertrain train` "
                    "refuses every shard for this checkpoint (%s shards contradict the vocab, "
                    "the others the checkpoint); %s\n", why, j->in,
            vocab_lower ? "uncased (no token has a capital letter)"
                        : "cased (its tokens have capital letters)",
            vocab_lower ? "cased" : "lowercased",
            flag >= 0 ? "import again without it if the vocab is right"
                      : vocab_lower ? "import again with --lowercase if the vocab is right (or "
                                      "--no-lowercase to keep what the file says)"
                                    : "import again with --no-lowercase if the vocab is right "
                                      "(or --lowercase to keep what the file says)");
    return true;
}

/* The checkpoint at step 0, then what to put in a config to continue it. 0;
 * 2 after one line on bad input; 1 after one line when the write failed. */
static int import_write(import_job *j, int lowercase) {
    char err[1024];
    const bert_config *mc = &j->mc;
    bool lower;
    if (!import_casing(j, lowercase, &lower)) return 2;
    j->state = import_state(mc, j->seed, j->in, lower, base_model_json(j->in, j->initialized));
    j->initialized = NULL; /* the state holds it */
    ckpt_contents c = {j->m, j->host, NULL, NULL, 0, OPT_ADAMW, j->vocab_text, j->vocab_len,
                       j->state, NULL, 0, j->carry.t, j->carry.n, NULL, 0, NULL, 0};
    ckpt_clean_leftovers(j->out); /* of an import that was killed */
    /* a stop signal waits for the write to end (complete, or cleaned up): never half of one */
    sigset_t stops, old;
    sigemptyset(&stops);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGHUP);
    sigprocmask(SIG_BLOCK, &stops, &old);
    const bool written = ckpt_write_dir(j->out, &c, NULL, 0, err, sizeof err);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (!written) {
        fprintf(stderr, "bertrain: import: %s\n", err);
        return 1; /* a failed write */
    }
    printf("import: %s -> %s: %d layers, hidden %d, heads %d, intermediate %d, vocab %d, "
           "positions %d, NSP head %s; step 0, zero optimizer moments\n", j->in, j->out,
           mc->num_hidden_layers, mc->hidden_size, mc->num_attention_heads, mc->intermediate_size,
           mc->vocab_size, mc->max_position_embeddings, mc->nsp ? "yes" : "no");
    printf("import: continue with `bertrain train CONFIG.json --resume %s`; CONFIG.json needs\n"
           "  \"model\": {\"vocab_size\": %d, \"hidden_size\": %d, \"num_hidden_layers\": %d, "
           "\"num_attention_heads\": %d, \"intermediate_size\": %d, \"max_position_embeddings\": %d, "
           "\"type_vocab_size\": %d, \"nsp\": %s}%s%s%s\n", j->out, mc->vocab_size,
           mc->hidden_size, mc->num_hidden_layers, mc->num_attention_heads, mc->intermediate_size,
           mc->max_position_embeddings, mc->type_vocab_size, mc->nsp ? "true" : "false",
           j->vocab_text ? " and \"data\": {\"vocab\": \"" : "", j->vocab_text ? j->out : "",
           j->vocab_text ? "/vocab.txt\", ...} with shards made from that vocab" : "");
    return 0;
}

static void import_free(import_job *j) {
    for (int i = 0; i < j->carry.n; i++) free((void *)j->carry.t[i].data);
    free(j->used);
    free(j->host);
    free(j->vocab_text);
    cJSON_Delete(j->state);
    cJSON_Delete(j->initialized);
    bert_free(j->m);
    if (j->be) j->be->destroy(j->be);
    st_close(&j->f);
}

int hf_import(const char *in, const char *out, const hf_import_opts *opts) {
    import_job *j = calloc(1, sizeof *j);
    if (!j) return 2;
    j->in = in;
    j->out = out;
    j->seed = opts->seed;
    j->initialized = cJSON_CreateArray();
    int rc = j->initialized ? import_open(j, opts->no_nsp) : 2;
    if (!rc) rc = import_weights(j);
    if (!rc) import_tied(j);
    if (!rc && !j->mc.nsp && !carry_heads(&j->f, &j->mc, j->used, &j->carry)) rc = 2;
    if (!rc) import_report_unused(j);
    if (!rc) rc = import_vocab(j);
    if (!rc) rc = import_write(j, opts->lowercase);
    import_free(j);
    free(j);
    return rc;
}
