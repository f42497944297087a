/* `bertrain predict CKPT [--top K] [--json] [TEXT...]`: fill-mask with a
 * checkpoint (a training run's, or an imported Hugging Face model), using the
 * checkpoint's vocab and lowercasing. The numbers agree with transformers'
 * fill-mask pipeline on the exported model (tests/predict.sh). */
#include "store/ckpt.h"
#include "cli.h"
#include "cli_args.h"
#include "train/fill_mask.h"
#include "train/train.h"
#include "train/device.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREDICT_USAGE                                                                       \
    "usage: bertrain predict CKPT [--top K] [--json] [--device SPEC] [TEXT...]\n"         \
    "\n"                                                                                    \
    "The most probable tokens for each [MASK] in each TEXT (none: one text per line on\n"  \
    "standard input), with their probabilities. CKPT is a checkpoint directory, a run's\n" \
    "output_dir (its latest checkpoint) or an imported Hugging Face model.\n"              \
    "  --top K          tokens per [MASK] (default 5)\n"                                    \
    "  --json           one JSON object per text: {\"text\", \"masks\": [[{\"token\", \"id\",\n" \
    "                   \"prob\"}, ...], ...]}\n"                                              \
    "  --device SPEC    backend (default cpu)\n"

/* The texts: the arguments, or the lines of stdin (without their newline). */
static char **read_texts(int n_args, char **args, int *n) {
    if (n_args > 0) {
        *n = n_args;
        return args;
    }
    char **lines = NULL, *line = NULL;
    size_t cap = 0;
    *n = 0;
    for (ssize_t len; (len = getline(&line, &cap, stdin)) >= 0;) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        char **grown = realloc(lines, (size_t)(*n + 1) * sizeof *lines);
        if (!grown || !(grown[*n] = strdup(line))) {
            lines = grown ? grown : lines;
            break;
        }
        lines = grown;
        (*n)++;
    }
    free(line);
    return lines;
}

static void print_text(const bt_vocab *v, const char *text, const fill_mask_input *in,
                       const fill_mask_guess *g, int top_k) {
    printf("%s\n", text);
    for (int k = 0; k < in->n_masks; k++) {
        printf("  [MASK] %d:", k + 1);
        for (int j = 0; j < top_k; j++) {
            const fill_mask_guess *x = &g[k * top_k + j];
            printf("%s %s %.4f", j ? "," : "", x->id < v->size ? v->tokens[x->id] : "[?]",
                   x->prob);
        }
        printf("\n");
    }
}

static void print_json(const bt_vocab *v, const char *text, const fill_mask_input *in,
                       const fill_mask_guess *g, int top_k) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "text", text);
    cJSON *masks = cJSON_AddArrayToObject(o, "masks");
    for (int k = 0; k < in->n_masks; k++) {
        cJSON *list = cJSON_CreateArray();
        for (int j = 0; j < top_k; j++) {
            const fill_mask_guess *x = &g[k * top_k + j];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "token", x->id < v->size ? v->tokens[x->id] : "[?]");
            cJSON_AddNumberToObject(e, "id", x->id);
            cJSON_AddNumberToObject(e, "prob", x->prob);
            cJSON_AddItemToArray(list, e);
        }
        cJSON_AddItemToArray(masks, list);
    }
    char *s = cJSON_PrintUnformatted(o);
    if (s) printf("%s\n", s);
    free(s);
    cJSON_Delete(o);
}

/* Tokenize texts[0..n) into in; the exit code (2 naming the text at fault). */
static int encode_all(const bt_vocab *v, bool lower, char **texts, int n, int max_len,
                      fill_mask_input *in, int *max_T, int *max_masks) {
    char err[512];
    bt_tokenizer *tok = tokenizer_new(v, lower, err, sizeof err);
    if (!tok) {
        fprintf(stderr, "bertrain predict: %s\n", err);
        return 1;
    }
    int rc = 0;
    *max_T = *max_masks = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!fill_mask_encode(tok, v, texts[i], max_len, &in[i], err, sizeof err)) {
            fprintf(stderr, "bertrain predict: text %d: %s\n", i + 1, err);
            rc = 2;
            break;
        }
        if ((int)in[i].ids.n > *max_T) *max_T = (int)in[i].ids.n;
        if (in[i].n_masks > *max_masks) *max_masks = in[i].n_masks;
    }
    tokenizer_free(tok);
    return rc;
}

/* Model, predictions and output for texts already read; the exit code. */
static int predict_texts(const char *ckpt, const cJSON *state, const char *device, int top_k,
                         bool json, char **texts, int n) {
    char err[1400], vocab_path[1400];
    bert_config mc;
    bt_vocab v = {0};
    if (!ckpt_model_config(state, &mc, err, sizeof err)) {
        fprintf(stderr, "bertrain predict: %s: %s\n", ckpt, err);
        return 2;
    }
    ckpt_vocab_path(ckpt, state, vocab_path, sizeof vocab_path);
    if (!vocab_load(&v, vocab_path, err, sizeof err)) {
        fprintf(stderr, "bertrain predict: %s: no usable vocab: %s\n", ckpt, err);
        return 2;
    }
    if (top_k > mc.vocab_size) top_k = mc.vocab_size;
    mc.pad_id = v.pad_id;
    const char *base = cJSON_GetStringValue(ckpt_json_at(state, "base_model.imported_from"));
    if (ckpt_mlm_head_untrained(state))
        fprintf(stderr, "bertrain predict: warning: %s: the MLM head is untrained (freshly "
                        "initialized by `bertrain import`: the base model %s has none), so "
                        "these predictions are random; train the checkpoint first\n", ckpt,
                base ? base : "?");
    fill_mask_input *in = calloc((size_t)n, sizeof *in);
    fill_mask_guess **out = calloc((size_t)n, sizeof *out);
    bt_backend *be = NULL;
    bert_model *m = NULL;
    int T = 0, M = 0, B = n < 16 ? n : 16;
    int rc = in && out ? encode_all(&v, ckpt_lowercase(state), texts, n,
                                    mc.max_position_embeddings, in, &T, &M)
                       : 1;
    if (rc == 0 && !(be = open_backend(device, 0, false, false))) rc = 2;
    if (rc == 0 && (!(m = bert_create(be, &mc, B, T, B * M, err, sizeof err)) ||
                    !ckpt_load_weights(ckpt, m, err, sizeof err) ||
                    !fill_mask_predict(m, &v, in, n, top_k, out, err, sizeof err))) {
        fprintf(stderr, "bertrain predict: %s: %s\n", ckpt, err);
        rc = 1;
    }
    for (int i = 0; rc == 0 && i < n; i++)
        (json ? print_json : print_text)(&v, texts[i], &in[i], out[i], top_k);
    for (int i = 0; in && out && i < n; i++) {
        fill_mask_input_free(&in[i]);
        free(out[i]);
    }
    free(in);
    free(out);
    bert_free(m);
    if (be) be->destroy(be);
    vocab_free(&v);
    return rc;
}

int cli_predict(int argc, char **argv) {
    const char *ckpt_arg = NULL, *device = "cpu";
    char **args = calloc((size_t)argc + 1, sizeof *args);
    int n_args = 0, top_k = 5, rc = 2;
    bool json = false;
    const cli_opt opts[] = {
        {"--top", ARG_INT, &top_k, "K", 1, 1000, false, NULL},
        {"--json", ARG_FLAG, &json, NULL, 0, 0, false, NULL},
        {"--device", ARG_STRING, &device, "SPEC", 0, 0, false, NULL},
    };
    const cli_spec spec = {"predict", opts, sizeof opts / sizeof *opts, -1, "CKPT TEXT...",
                           PREDICT_USAGE};
    const int parsed = args ? cli_parse(&spec, argc, argv, (const char **)args, &n_args) : CLI_ERROR;
    if (parsed != CLI_OK) {
        free(args);
        return parsed == CLI_HELP ? 0 : 2;
    }
    if (n_args > 0) { /* the checkpoint, then the texts */
        ckpt_arg = args[0];
        memmove(args, args + 1, (size_t)--n_args * sizeof *args);
    }
    if (!ckpt_arg) {
        fprintf(stderr, "%s", PREDICT_USAGE);
        goto done;
    }
    char ckpt[1200], err[1400];
    cJSON *state = NULL;
    ckpt_resolve(ckpt_arg, ckpt, sizeof ckpt);
    if (!ckpt_verify(ckpt, &state, err, sizeof err)) {
        fprintf(stderr, "bertrain predict: %s\n", err);
        goto done;
    }
    int n = 0;
    char **texts = read_texts(n_args, args, &n);
    if (n == 0)
        fprintf(stderr, "bertrain predict: no text with [MASK] given (arguments, or lines on "
                        "standard input)\n");
    else
        rc = predict_texts(ckpt, state, device, top_k, json, texts, n);
    if (texts != args) {
        for (int i = 0; i < n; i++) free(texts[i]);
        free(texts);
    }
    cJSON_Delete(state);
done:
    free(args);
    return rc;
}
