/* The files of a Hugging Face model directory besides the weights. */
#define _XOPEN_SOURCE 700
#include "hf_files.h"

#include "backends/registry.h"
#include "ckpt.h"
#include "util/file.h"
#include "util/json_num.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "dev"
#endif

const char *const HF_NSP_TENSORS[4] = {"bert.pooler.dense.weight", "bert.pooler.dense.bias",
                                       "cls.seq_relationship.weight",
                                       "cls.seq_relationship.bias"};

bert_model *hf_host_model(const bert_config *mc, uint64_t seed, bt_backend **be,
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
    *host = malloc(bert_n_params(m) * sizeof(float));
    if (!*host) {
        fprintf(stderr, "bertrain: out of host memory\n");
        return m;
    }
    m->be->download(m->be, *host, bert_params_at(m, 0), bert_n_params(m) * sizeof(float));
    return m;
}

bool hf_write_atomic(const char *dir, const char *name, const char *data, size_t n) {
    char tmp[1400], path[1400];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(data, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f) != 0) ok = false;
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) {
        fprintf(stderr, "bertrain: %s: cannot write: %s\n", path, strerror(errno));
        remove(tmp);
    }
    return ok;
}

bool hf_write_json(const char *dir, const char *name, const cJSON *obj) {
    char *text = cJSON_Print(obj);
    bool ok = text && hf_write_atomic(dir, name, text, strlen(text));
    free(text);
    return ok;
}

cJSON *hf_config_json(const bert_config *mc, int pad_id) {
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("BertForPreTraining"));
    cJSON_AddStringToObject(c, "model_type", "bert");
    cJSON_AddNumberToObject(c, "vocab_size", mc->vocab_size);
    cJSON_AddNumberToObject(c, "hidden_size", mc->hidden_size);
    cJSON_AddNumberToObject(c, "num_hidden_layers", mc->num_hidden_layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", mc->num_attention_heads);
    cJSON_AddNumberToObject(c, "intermediate_size", mc->intermediate_size);
    cJSON_AddStringToObject(c, "hidden_act", "gelu");
    cJSON_AddNumberToObject(c, "hidden_dropout_prob", json_short_float(mc->hidden_dropout_prob));
    cJSON_AddNumberToObject(c, "attention_probs_dropout_prob",
                            json_short_float(mc->attention_probs_dropout_prob));
    cJSON_AddNumberToObject(c, "max_position_embeddings", mc->max_position_embeddings);
    cJSON_AddNumberToObject(c, "type_vocab_size", mc->type_vocab_size);
    cJSON_AddNumberToObject(c, "initializer_range", json_short_float(mc->initializer_range));
    cJSON_AddNumberToObject(c, "layer_norm_eps", json_short_float(mc->layer_norm_eps));
    cJSON_AddNumberToObject(c, "pad_token_id", pad_id);
    cJSON_AddStringToObject(c, "position_embedding_type", "absolute");
    cJSON_AddBoolToObject(c, "use_cache", true);
    cJSON_AddNullToObject(c, "classifier_dropout");
    cJSON_AddBoolToObject(c, "tie_word_embeddings", true);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

static bool write_tokenizer_config(const char *out, bool lower, int max_len) {
    static const char *const special[][2] = {{"unk_token", "[UNK]"}, {"sep_token", "[SEP]"},
                                             {"pad_token", "[PAD]"}, {"cls_token", "[CLS]"},
                                             {"mask_token", "[MASK]"}};
    cJSON *tc = cJSON_CreateObject(), *sm = cJSON_CreateObject();
    cJSON_AddStringToObject(tc, "tokenizer_class", "BertTokenizer");
    cJSON_AddBoolToObject(tc, "do_lower_case", lower);
    cJSON_AddBoolToObject(tc, "tokenize_chinese_chars", true);
    cJSON_AddNullToObject(tc, "strip_accents");
    cJSON_AddNumberToObject(tc, "model_max_length", max_len);
    for (int i = 0; i < 5; i++) {
        cJSON_AddStringToObject(tc, special[i][0], special[i][1]);
        cJSON_AddStringToObject(sm, special[i][0], special[i][1]);
    }
    bool ok = hf_write_json(out, "tokenizer_config.json", tc) &&
              hf_write_json(out, "special_tokens_map.json", sm);
    cJSON_Delete(tc);
    cJSON_Delete(sm);
    return ok;
}

/* One entry of tokenizer.json's added_tokens: a special token, matched in raw text. */
static cJSON *added_token(int id, const char *content) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "id", id);
    cJSON_AddStringToObject(t, "content", content);
    cJSON_AddBoolToObject(t, "single_word", false);
    cJSON_AddBoolToObject(t, "lstrip", false);
    cJSON_AddBoolToObject(t, "rstrip", false);
    cJSON_AddBoolToObject(t, "normalized", false);
    cJSON_AddBoolToObject(t, "special", true);
    return t;
}

/* {"SpecialToken": {"id": name, "type_id": type}} or {"Sequence": ...} of a template. */
static cJSON *template_piece(const char *kind, const char *id, int type_id) {
    cJSON *o = cJSON_CreateObject(), *in = cJSON_AddObjectToObject(o, kind);
    cJSON_AddStringToObject(in, "id", id);
    cJSON_AddNumberToObject(in, "type_id", type_id);
    return o;
}

/* TemplateProcessing: [CLS] A [SEP] for one sequence, [CLS] A [SEP] B [SEP] (B
 * with token type 1) for a pair, as BERT's tokenizer adds them. */
static cJSON *post_processor(const bt_vocab *v) {
    cJSON *pp = cJSON_CreateObject();
    cJSON_AddStringToObject(pp, "type", "TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(pp, "single"), *pair = cJSON_AddArrayToObject(pp, "pair");
    cJSON_AddItemToArray(single, template_piece("SpecialToken", "[CLS]", 0));
    cJSON_AddItemToArray(single, template_piece("Sequence", "A", 0));
    cJSON_AddItemToArray(single, template_piece("SpecialToken", "[SEP]", 0));
    cJSON_AddItemToArray(pair, template_piece("SpecialToken", "[CLS]", 0));
    cJSON_AddItemToArray(pair, template_piece("Sequence", "A", 0));
    cJSON_AddItemToArray(pair, template_piece("SpecialToken", "[SEP]", 0));
    cJSON_AddItemToArray(pair, template_piece("Sequence", "B", 1));
    cJSON_AddItemToArray(pair, template_piece("SpecialToken", "[SEP]", 1));
    cJSON *specials = cJSON_AddObjectToObject(pp, "special_tokens");
    const struct {
        const char *name;
        int id;
    } sp[] = {{"[CLS]", v->cls_id}, {"[SEP]", v->sep_id}};
    for (int i = 0; i < 2; i++) {
        cJSON *e = cJSON_AddObjectToObject(specials, sp[i].name);
        cJSON_AddStringToObject(e, "id", sp[i].name);
        cJSON_AddItemToObject(e, "ids", cJSON_CreateIntArray(&sp[i].id, 1));
        cJSON_AddItemToObject(e, "tokens", cJSON_CreateStringArray(&sp[i].name, 1));
    }
    return pp;
}

/* tokenizer.json: the fast tokenizer that BertTokenizerFast builds from
 * vocab.txt, written out so that nothing has to be converted on load. */
static cJSON *tokenizer_json(const bt_vocab *v, bool lower) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "version", "1.0");
    cJSON_AddNullToObject(t, "truncation");
    cJSON_AddNullToObject(t, "padding");
    cJSON *added = cJSON_AddArrayToObject(t, "added_tokens");
    const int special_ids[] = {v->pad_id, v->unk_id, v->cls_id, v->sep_id, v->mask_id};
    for (int id = 0; id < v->size; id++) /* in id order, as transformers writes them */
        for (int k = 0; k < 5; k++)
            if (special_ids[k] == id) cJSON_AddItemToArray(added, added_token(id, v->tokens[id]));
    cJSON *norm = cJSON_AddObjectToObject(t, "normalizer");
    cJSON_AddStringToObject(norm, "type", "BertNormalizer");
    cJSON_AddBoolToObject(norm, "clean_text", true);
    cJSON_AddBoolToObject(norm, "handle_chinese_chars", true);
    cJSON_AddNullToObject(norm, "strip_accents"); /* null: strip exactly when lowercasing */
    cJSON_AddBoolToObject(norm, "lowercase", lower);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(t, "pre_tokenizer"), "type", "BertPreTokenizer");
    cJSON_AddItemToObject(t, "post_processor", post_processor(v));
    cJSON *dec = cJSON_AddObjectToObject(t, "decoder");
    cJSON_AddStringToObject(dec, "type", "WordPiece");
    cJSON_AddStringToObject(dec, "prefix", "##");
    cJSON_AddBoolToObject(dec, "cleanup", true);
    cJSON *model = cJSON_AddObjectToObject(t, "model");
    cJSON_AddStringToObject(model, "type", "WordPiece");
    cJSON_AddStringToObject(model, "unk_token", v->tokens[v->unk_id]);
    cJSON_AddStringToObject(model, "continuing_subword_prefix", "##");
    cJSON_AddNumberToObject(model, "max_input_chars_per_word", 100);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int id = 0; id < v->size; id++) cJSON_AddNumberToObject(vocab, v->tokens[id], id);
    return t;
}

bool hf_write_tokenizer_files(const char *dir, const bt_vocab *v, bool lower, int max_len) {
    if (!write_tokenizer_config(dir, lower, max_len)) return false;
    cJSON *t = tokenizer_json(v, lower);
    char *text = t ? cJSON_PrintUnformatted(t) : NULL;
    bool ok = text && hf_write_atomic(dir, "tokenizer.json", text, strlen(text));
    if (!text) fprintf(stderr, "bertrain: %s/tokenizer.json: out of memory\n", dir);
    free(text);
    cJSON_Delete(t);
    return ok;
}

/* The number at dotted path in obj, or NAN. */
static double num_at(const cJSON *obj, const char *path) {
    const cJSON *v = ckpt_json_at(obj, path);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* The string at key of obj, or dflt. */
static const char *str_at(const cJSON *obj, const char *key, const char *dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

/* The tensors an import initialized (its base model lacked them): which,
 * and whether bertrain has trained them since. */
static void card_initialized(FILE *f, const cJSON *state) {
    const cJSON *init = ckpt_json_at(state, "base_model.initialized"), *it;
    const int n = cJSON_GetArraySize(init);
    if (n == 0) return;
    fprintf(f, "The base model `%s` lacks %d tensor%s, freshly initialized by `bertrain "
               "import`:", str_at(cJSON_GetObjectItemCaseSensitive(state, "base_model"),
                                  "imported_from", "?"), n, n == 1 ? "" : "s");
    cJSON_ArrayForEach(it, init) fprintf(f, " `%s`%s", cJSON_IsString(it) ? it->valuestring : "?",
                                         it->next ? "," : "");
    const double step = num_at(state, "step");
    if (step > 0)
        fprintf(f, ". bertrain has trained them since, with the rest of the model, for %.0f "
                   "steps.\n\n", step);
    else
        fprintf(f, ". They are untrained.\n\n");
}

/* The card's "Training" section: where the weights come from. */
static void card_training(FILE *f, const hf_card *c) {
    const cJSON *conf = cJSON_GetObjectItemCaseSensitive(c->state, "config");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(conf, "data");
    const char *imported = str_at(c->state, "imported_from", NULL);
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(c->state, "base_model");
    const char *license = str_at(base, "license", NULL);
    fprintf(f, "## Training\n\n");
    if (imported) {
        fprintf(f, "Imported from the Hugging Face model `%s` by `bertrain import`%s%s%s; "
                   "bertrain has not trained it (step 0).\n\n", imported,
                license ? " (its licence: " : "", license ? license : "", license ? ")" : "");
        return;
    }
    const char *base_dir = str_at(base, "imported_from", NULL);
    if (base_dir)
        fprintf(f, "Continued from the Hugging Face model `%s`%s%s%s, imported by `bertrain "
                   "import`: the steps below count from the import.\n\n",
                base_dir, license ? " (its licence: " : "",
                license ? license : "", license ? ")" : "");
    fprintf(f, "| | |\n|---|---|\n");
    fprintf(f, "| optimizer steps | %.0f of `train_steps` %.0f |\n", num_at(c->state, "step"),
            num_at(conf, "train_steps"));
    fprintf(f, "| samples seen | %.0f sequences of up to %.0f tokens (%.2f epochs) |\n",
            num_at(c->state, "samples"), num_at(conf, "data.seq_len"),
            num_at(c->state, "samples") / num_at(c->state, "data.samples_per_epoch"));
    fprintf(f, "| global batch | %.0f sequences |\n", num_at(c->state, "data.global_batch"));
    fprintf(f, "| optimizer | %s, peak learning rate %g |\n",
            str_at(cJSON_GetObjectItemCaseSensitive(conf, "optimizer"), "type", "?"),
            num_at(conf, "optimizer.params.lr"));
    fprintf(f, "| training data | `%s` |\n", str_at(data, "train", "?"));
    fprintf(f, "| seed | %s |\n\n", str_at(c->state, "seed", "?"));
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(c->state, "eval");
    if (cJSON_IsObject(ev)) {
        double acc = num_at(ev, "mlm_acc"), base = num_at(ev, "baseline_acc");
        fprintf(f, "Held-out evaluation at step %.0f on `%s` (%.0f masked tokens in %.0f "
                   "sequences, fixed masks): **MLM accuracy %.4f**, perplexity %.2f; always "
                   "predicting the most common training token scores %.4f", num_at(c->state, "step"),
                str_at(data, "valid", "?"), num_at(ev, "masked_tokens"), num_at(ev, "sequences"),
                acc, num_at(ev, "perplexity"), base);
        if (base > 0) fprintf(f, " (the model: %.2fx that)", acc / base);
        fprintf(f, ".\n\n");
    } else {
        fprintf(f, "No held-out evaluation was recorded at this step (`bertrain eval` measures "
                   "one).\n\n");
    }
    char *text = cJSON_Print(conf);
    if (text) fprintf(f, "The training configuration, every key resolved:\n\n```json\n%s\n```\n\n", text);
    free(text);
}

bool hf_write_model_card(const char *dir, const hf_card *c) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        fprintf(stderr, "bertrain: %s/README.md: out of memory\n", dir);
        return false;
    }
    const bert_config *mc = c->mc;
    const bool lower = ckpt_lowercase(c->state);
    const char *license = str_at(cJSON_GetObjectItemCaseSensitive(c->state, "base_model"),
                                 "license", NULL);
    fprintf(f, "---\nlibrary_name: transformers\npipeline_tag: fill-mask\n");
    if (license && !strchr(license, ',')) fprintf(f, "license: %s\n", license);
    fprintf(f, "tags:\n- bert\n- bertrain\n---\n\n");
    fprintf(f, "# BERT pretrained with bertrain\n\n");
    fprintf(f, "A `BertForPreTraining` exported by `bertrain export` (bertrain %s) from the "
               "checkpoint `%s`.\n\n", PACKAGE_VERSION, c->ckpt);
    fprintf(f, "## Model\n\n| | |\n|---|---|\n");
    fprintf(f, "| layers, hidden size, heads, intermediate size | %d, %d, %d, %d |\n",
            mc->num_hidden_layers, mc->hidden_size, mc->num_attention_heads, mc->intermediate_size);
    fprintf(f, "| vocabulary | %d tokens (`vocab.txt`, %d in the embeddings), %s |\n",
            c->vocab_tokens, mc->vocab_size, lower ? "lowercased (uncased)" : "cased");
    fprintf(f, "| positions | %d |\n", mc->max_position_embeddings);
    fprintf(f, "| pooler, NSP head | %s, %s |\n", c->pooler, c->nsp_head);
    if (c->keep_layers)
        fprintf(f, "| layers kept | %s of the checkpoint's (`--keep-layers`), renumbered from 0 |\n",
                c->keep_layers);
    fprintf(f, "\n");
    if (strcmp(c->nsp_head, "trained") != 0)
        fprintf(f, "The NSP head is %s: its next-sentence predictions mean nothing.\n\n",
                strcmp(c->nsp_head, "carried") == 0
                    ? "the imported model's, carried unchanged (not trained by bertrain)"
                    : "freshly initialized (the model was trained without `model.nsp`)");
    card_initialized(f, c->state);
    card_training(f, c);
    if (ckpt_mlm_head_untrained(c->state))
        fprintf(f, "## Use\n\n**The MLM head is untrained**: its predictions are random. "
                   "Train the model (`bertrain train CONFIG --resume CHECKPOINT`) before "
                   "filling masks; the encoder alone is usable as the base model's.\n\n");
    fprintf(f, "%s```python\nfrom transformers import pipeline\n"
               "fill = pipeline(\"fill-mask\", model=\"%s\")\n"
               "print(fill(\"The weather is [MASK] today.\"))\n```\n\n"
               "or with bertrain: `bertrain predict %s \"The weather is [MASK] today.\"`\n",
            ckpt_mlm_head_untrained(c->state) ? "" : "## Use\n\n", dir, c->ckpt);
    bool ok = fclose(f) == 0 && text;
    ok = ok && hf_write_atomic(dir, "README.md", text, len);
    free(text);
    return ok;
}

/* The files an export writes before its mark, in the order it writes them. */
static const char *const EXPORT_FILES[] = {"model.safetensors", "config.json", "vocab.txt",
                                           "tokenizer_config.json", "special_tokens_map.json",
                                           "tokenizer.json", "README.md"};
/* Of those, the ones import reads as data: they must be as the export wrote them. */
static const char *const EXPORT_DATA[] = {"model.safetensors", "vocab.txt"};

bool hf_write_export_mark(const char *dir, const char *ckpt) {
    cJSON *mark = cJSON_CreateObject(), *files = cJSON_CreateObject();
    cJSON_AddStringToObject(mark, "format", "bertrain export");
    cJSON_AddNumberToObject(mark, "format_version", 1);
    cJSON_AddStringToObject(mark, "bertrain_version", PACKAGE_VERSION);
    cJSON_AddStringToObject(mark, "checkpoint", ckpt);
    cJSON_AddItemToObject(mark, "files", files);
    bool ok = true;
    for (size_t i = 0; ok && i < sizeof EXPORT_FILES / sizeof *EXPORT_FILES; i++) {
        char path[1400], hex[16];
        snprintf(path, sizeof path, "%s/%s", dir, EXPORT_FILES[i]);
        uint32_t crc;
        long long size;
        if (!(ok = ckpt_file_crc(path, &crc, &size))) {
            fprintf(stderr, "bertrain: %s: cannot read back: %s\n", path, strerror(errno));
            break;
        }
        snprintf(hex, sizeof hex, "%08x", crc);
        cJSON *f = cJSON_AddObjectToObject(files, EXPORT_FILES[i]);
        cJSON_AddNumberToObject(f, "bytes", (double)size);
        cJSON_AddStringToObject(f, "crc32", hex);
    }
    ok = ok && hf_write_json(dir, HF_EXPORT_MARK, mark);
    cJSON_Delete(mark);
    return ok;
}

bool hf_check_export(const char *dir, const char *marked, char *err, size_t errlen) {
    if (!marked) return true; /* not written by bertrain export */
    char path[1400];
    size_t len;
    snprintf(path, sizeof path, "%s/" HF_EXPORT_MARK, dir);
    char *text = file_read_all(path, &len);
    cJSON *mark = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(mark, "files");
    bool ok = cJSON_IsObject(files);
    if (!ok)
        snprintf(err, errlen, "%s is an incomplete bertrain export: it has no readable %s, which "
                 "export writes last (the export was interrupted); export the checkpoint again",
                 dir, HF_EXPORT_MARK);
    for (size_t i = 0; ok && i < sizeof EXPORT_FILES / sizeof *EXPORT_FILES; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, EXPORT_FILES[i]);
        if (access(path, F_OK) != 0) {
            snprintf(err, errlen, "%s: missing from the bertrain export (%s lists it)", path,
                     HF_EXPORT_MARK);
            ok = false;
        }
    }
    for (size_t i = 0; ok && i < sizeof EXPORT_DATA / sizeof *EXPORT_DATA; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(files, EXPORT_DATA[i]);
        const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(f, "bytes");
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(f, "crc32");
        snprintf(path, sizeof path, "%s/%s", dir, EXPORT_DATA[i]);
        uint32_t crc;
        long long size;
        char hex[16] = "";
        if (ckpt_file_crc(path, &crc, &size)) snprintf(hex, sizeof hex, "%08x", crc);
        if (!cJSON_IsNumber(bytes) || !cJSON_IsString(want) || bytes->valuedouble != (double)size ||
            strcmp(want->valuestring, hex) != 0) {
            snprintf(err, errlen, "%s: not the file the export wrote (%s records another size "
                     "or CRC-32): the export is damaged; export the checkpoint again", path,
                     HF_EXPORT_MARK);
            ok = false;
        }
    }
    cJSON_Delete(mark);
    return ok;
}
