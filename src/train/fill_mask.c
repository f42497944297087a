/* Fill-mask predictions: tokenize around literal [MASK]s (and the other
 * special tokens), batch the inputs into forward passes, softmax and top-k
 * on the host. */
#include "fill_mask.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool push_id(bt_ids *a, int32_t id) {
    if (!ids_reserve(a, 1)) return false;
    a->ids[a->n++] = id;
    return true;
}

/* The first of BERT's five special tokens written literally in text, as
 * transformers' tokenizers match them (case and all, before normalizing):
 * its place (NULL: none), with its length and id. */
static const char *next_special(const bt_vocab *v, const char *text, size_t *len, int32_t *id) {
    const struct { const char *s; int32_t id; } specials[] = {
        {"[MASK]", v->mask_id}, {"[UNK]", v->unk_id}, {"[CLS]", v->cls_id},
        {"[SEP]", v->sep_id},   {"[PAD]", v->pad_id}};
    const char *best = NULL;
    for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) {
        const char *at = strstr(text, specials[i].s);
        if (at && (!best || at < best)) {
            best = at;
            *len = strlen(specials[i].s);
            *id = specials[i].id;
        }
    }
    return best;
}

bool fill_mask_encode(bt_tokenizer *tok, const bt_vocab *v, const char *text, int max_len,
                      fill_mask_input *in, char *err, size_t errlen) {
    memset(in, 0, sizeof *in);
    bool ok = push_id(&in->ids, v->cls_id);
    for (const char *p = text; ok;) {
        size_t special_len = 0;
        int32_t special = -1;
        const char *at = next_special(v, p, &special_len, &special);
        size_t len = at ? (size_t)(at - p) : strlen(p);
        ok = tokenizer_encode(tok, p, len, &in->ids, NULL);
        if (!ok || !at) break;
        if (special == v->mask_id) {
            int *pos = realloc(in->mask_pos, (size_t)(in->n_masks + 1) * sizeof *pos);
            ok = pos != NULL;
            if (!ok) break;
            in->mask_pos = pos;
            pos[in->n_masks++] = (int)in->ids.n;
        }
        ok = push_id(&in->ids, special);
        p = at + special_len;
    }
    ok = ok && push_id(&in->ids, v->sep_id);
    if (!ok)
        snprintf(err, errlen, "out of memory tokenizing \"%.60s\"", text);
    else if (in->n_masks == 0)
        snprintf(err, errlen, "\"%.60s\" has no [MASK] to fill", text);
    else if (in->ids.n > (size_t)max_len)
        snprintf(err, errlen, "\"%.60s\" is %zu tokens with [CLS] and [SEP]; the most is %d",
                 text, in->ids.n, max_len);
    else
        return true;
    fill_mask_input_free(in);
    return false;
}

void fill_mask_input_free(fill_mask_input *in) {
    ids_free(&in->ids);
    free(in->mask_pos);
    memset(in, 0, sizeof *in);
}

/* The top_k of softmax(logits[0..V)) into out, best first (ties: lower id). */
static void top_k_softmax(const float *logits, int V, int top_k, fill_mask_guess *out) {
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < V; j++) mx = fmax(mx, logits[j]);
    for (int j = 0; j < V; j++) sum += exp(logits[j] - mx);
    int have = 0;
    for (int j = 0; j < V; j++) {
        if (have == top_k && logits[j] <= logits[out[have - 1].id]) continue;
        int at = have < top_k ? have++ : have - 1; /* insertion into the sorted list */
        while (at > 0 && logits[j] > logits[out[at - 1].id]) {
            out[at] = out[at - 1];
            at--;
        }
        out[at].id = j;
    }
    for (int i = 0; i < have; i++) out[i].prob = exp(logits[out[i].id] - mx) / sum;
}

/* The inputs from `first` that one forward of m's capacity holds: their count,
 * with the padded length in *T and the [MASK] count in *M (0 when even the
 * first does not fit). */
static int batch_extent(const bert_model *m, const fill_mask_input *in, int n, int first,
                        int *T, int *M) {
    int B = 0;
    *T = *M = 0;
    while (first + B < n && B < m->max_batch) {
        const fill_mask_input *x = &in[first + B];
        int t = (int)x->ids.n > *T ? (int)x->ids.n : *T;
        if (t > m->max_seq || *M + x->n_masks > m->max_masked) break;
        *T = t;
        *M += x->n_masks;
        B++;
    }
    return B;
}

/* One forward over inputs [first, first + B), padded to T: the top_k of each
 * of their M masks into out. */
static bool predict_batch(bert_model *m, const bt_vocab *v, const fill_mask_input *in,
                          int first, int B, int T, int M, int top_k, fill_mask_guess **out) {
    const int V = m->cfg.vocab_size;
    int32_t *ints = calloc((size_t)3 * B * T + 2 * (size_t)M, sizeof *ints);
    float *logits = malloc((size_t)M * V * sizeof *logits);
    if (!ints || !logits) {
        free(ints);
        free(logits);
        return false;
    }
    int32_t *ids = ints, *types = ids + B * T, *attn = types + B * T, *pos = attn + B * T,
            *labels = pos + M;
    int row = 0;
    for (int b = 0; b < B; b++) {
        const fill_mask_input *x = &in[first + b];
        for (int t = 0; t < T; t++) {
            ids[b * T + t] = t < (int)x->ids.n ? x->ids.ids[t] : v->pad_id;
            attn[b * T + t] = t < (int)x->ids.n;
        }
        for (int k = 0; k < x->n_masks; k++, row++) {
            pos[row] = b * T + x->mask_pos[k];
            labels[row] = v->mask_id; /* the loss is not used */
        }
    }
    bert_batch batch = {B, T, ids, types, attn, M, pos, labels, NULL, 0, 0};
    bert_pass pass = {.train = false, .mlm_logits_out = logits};
    bert_tape tape;
    bert_stats st;
    bert_forward(m, &batch, &pass, &tape, &st);
    row = 0;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < in[first + b].n_masks; k++, row++)
            top_k_softmax(logits + (size_t)row * V, V, top_k, out[first + b] + (size_t)k * top_k);
    free(ints);
    free(logits);
    return true;
}

bool fill_mask_predict(bert_model *m, const bt_vocab *v, const fill_mask_input *in, int n,
                       int top_k, fill_mask_guess **out, char *err, size_t errlen) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    for (int i = 0; i < n; i++)
        if (!(out[i] = calloc((size_t)in[i].n_masks * top_k, sizeof **out))) goto oom;
    for (int first = 0; first < n;) {
        int T, M, B = batch_extent(m, in, n, first, &T, &M);
        if (B == 0) {
            snprintf(err, errlen, "input %d: %zu tokens and %d [MASK]s exceed the model's "
                     "capacity (%d tokens, %d masks)", first + 1, in[first].ids.n,
                     in[first].n_masks, m->max_seq, m->max_masked);
            goto fail;
        }
        if (!predict_batch(m, v, in, first, B, T, M, top_k, out)) goto oom;
        first += B;
    }
    return true;
oom:
    snprintf(err, errlen, "out of host memory for fill-mask predictions");
fail:
    for (int i = 0; i < n; i++) {
        free(out[i]);
        out[i] = NULL;
    }
    return false;
}
