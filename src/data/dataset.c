/* Shards -> samples -> masked micro-batches. */
#include "dataset.h"
#include "dataset_internal.h"

#include "util/rng.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Paths of the shards: the file itself, or a directory's *.shard sorted. */
static char **list_shards(const char *path, int *n, char *err, size_t errlen) {
    struct stat st;
    *n = 0;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: no such shard file or directory", path);
        return NULL;
    }
    char **names = NULL;
    if (!S_ISDIR(st.st_mode)) {
        names = malloc(sizeof *names);
        if (!names || !(names[0] = strdup(path))) {
            free(names);
            snprintf(err, errlen, "%s: out of memory", path);
            return NULL;
        }
        *n = 1;
        return names;
    }
    DIR *d = opendir(path);
    if (!d) {
        snprintf(err, errlen, "%s: cannot list directory", path);
        return NULL;
    }
    int cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 7 || strcmp(e->d_name + len - 6, ".shard") != 0) continue;
        if (*n == cap) {
            char **bigger = realloc(names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *names);
            if (!bigger) break;
            names = bigger;
        }
        size_t full = strlen(path) + len + 2;
        if (!(names[*n] = malloc(full))) break;
        snprintf(names[*n], full, "%s/%s", path, e->d_name);
        (*n)++;
    }
    closedir(d);
    if (*n == 0) {
        snprintf(err, errlen, "%s: directory holds no *.shard files", path);
        free(names);
        return NULL;
    }
    qsort(names, (size_t)*n, sizeof *names, cmp_str);
    return names;
}

bt_dataset *dataset_open(const char *path, const bt_data_config *cfg, const bt_vocab *vocab,
                         int model_vocab, uint64_t seed, char *err, size_t errlen) {
    int n = 0;
    char **names = list_shards(path, &n, err, errlen);
    if (!names) return NULL;
    bt_dataset *ds = calloc(1, sizeof *ds);
    ds->shards = calloc((size_t)n, sizeof *ds->shards);
    ds->stream_start = calloc((size_t)n + 1, sizeof *ds->stream_start);
    bool ok = ds->shards && ds->stream_start;
    for (int i = 0; ok && i < n; i++) {
        ok = shard_open_recorded(&ds->shards[i], names[i], vocab->hash, (uint32_t)model_vocab,
                                 err, errlen);
        if (ok) {
            ds->n_shards++;
            ds->stream_start[i + 1] =
                ds->stream_start[i] + ds->shards[i].n_tokens + ds->shards[i].n_docs;
            ds->n_tokens += ds->shards[i].n_tokens;
        }
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (!ok) {
        dataset_close(ds);
        return NULL;
    }
    ds->stream_len = ds->stream_start[n];
    ds->T = cfg->seq_len;
    ds->W = cfg->seq_len - 2;
    ds->n_samples = (ds->stream_len + (uint64_t)ds->W - 1) / (uint64_t)ds->W;
    ds->seed = seed;
    ds->pairs = cfg->sentence_pairs;
    if (ds->pairs && !pairs_build(ds, err, errlen)) {
        dataset_close(ds);
        return NULL;
    }
    if (cfg->limit_samples > 0 && (uint64_t)cfg->limit_samples < ds->n_samples)
        ds->n_samples = (uint64_t)cfg->limit_samples;
    if (ds->n_samples == 0) {
        snprintf(err, errlen, "%s: holds no tokens", path);
        dataset_close(ds);
        return NULL;
    }
    ds->vocab = vocab;
    ds->model_vocab = model_vocab;
    ds->mask_prob = cfg->mask_prob;
    ds->max_pred = cfg->max_predictions;
    if (ds->max_pred <= 0) ds->max_pred = mask_cap_default(ds->W, cfg->mask_prob);
    ds->perm_epoch = UINT64_MAX;
    return ds;
}

int mask_cap_default(int n_tokens, float mask_prob) {
    const double n = n_tokens, p = mask_prob; /* mean + 4 standard deviations */
    const int cap = (int)ceil(n * p + 4.0 * sqrt(n * p * (1 - p))) + 1;
    return cap < n_tokens ? cap : n_tokens;
}

int mask_total_bound(int n_seqs, int n_tokens, float mask_prob, int max_pred) {
    const double n = (double)n_seqs * n_tokens, p = mask_prob;
    const double bound = ceil(n * p + 4.0 * sqrt(n * p * (1 - p))) + 1;
    const double most = (double)n_seqs * (max_pred < n_tokens ? max_pred : n_tokens);
    return (int)(bound < most ? bound : most);
}

void dataset_close(bt_dataset *ds) {
    if (!ds) return;
    for (int i = 0; i < ds->n_shards; i++) shard_close(&ds->shards[i]);
    free(ds->shards);
    free(ds->stream_start);
    free(ds->perm);
    free(ds->chunks);
    free(ds->doc_first);
    free(ds);
}

uint64_t dataset_num_samples(const bt_dataset *ds) { return ds->n_samples; }
uint64_t dataset_num_tokens(const bt_dataset *ds) { return ds->n_tokens; }
uint64_t dataset_fingerprint(const bt_dataset *ds) {
    uint64_t h = FNV1A64_INIT; /* the headers hold each shard's content CRCs */
    for (int i = 0; ds && i < ds->n_shards; i++)
        h = fnv1a64(h, ds->shards[i].data, SHARD_HEADER_BYTES);
    return h;
}
int dataset_max_predictions(const bt_dataset *ds) { return ds->max_pred; }
bool dataset_lowercase(const bt_dataset *ds) {
    return ds->n_shards > 0 && (ds->shards[0].flags & 1u); /* SHARD_FLAG_LOWERCASE */
}

/* How the checkpoint got its casing, for dataset_check_casing's lines. */
static void ckpt_casing_origin(const dataset_ckpt_casing *c, char *out, size_t outlen) {
    snprintf(out, outlen, c->imported ? "the checkpoint %s was imported with do_lower_case %s"
                                      : "the checkpoint %s was trained on shards made %s",
             c->dir, c->imported ? (c->lower ? "true" : "false")
                                 : (c->lower ? "with --lowercase" : "without --lowercase"));
}

bool dataset_check_casing(const bt_data_config *dc, const bt_vocab *v, const bt_dataset *train,
                          const bt_dataset *valid, const dataset_ckpt_casing *ckpt, char *err,
                          size_t errlen) {
    const bool lower = dataset_lowercase(train);
    const char *made = lower ? "with --lowercase" : "without --lowercase";
    const int casing = vocab_casing(v);
    const char *vocab_is = casing == VOCAB_UNCASED ? "uncased (no token has a capital letter)"
                                                   : "cased (its tokens have capital letters)";
    char origin[1400];
    if (ckpt->lower >= 0) ckpt_casing_origin(ckpt, origin, sizeof origin);
    if (ckpt->lower >= 0 && casing != VOCAB_CASE_UNKNOWN &&
        ckpt->lower != (casing == VOCAB_UNCASED))
        snprintf(err, errlen, "%s, but the vocab %s is %s: no shards fit both; %s", origin,
                 dc->vocab, vocab_is,
                 ckpt->imported ? (casing == VOCAB_UNCASED
                                       ? "import the model again with `bertrain import --lowercase`"
                                       : "import the model again with `bertrain import "
                                         "--no-lowercase`")
                                : "continue it with the vocab and shards it was trained with");
    else if ((casing == VOCAB_UNCASED && !lower) || (casing == VOCAB_CASED && lower))
        snprintf(err, errlen, "data.train %s was made %s, but the vocab %s is %s; make the "
                 "shards again with `bertrain prep %s--vocab %s`", dc->train, made, dc->vocab,
                 vocab_is, lower ? "" : "--lowercase ", dc->vocab);
    else if (valid && dataset_lowercase(valid) != lower)
        snprintf(err, errlen, "data.valid %s was made %s and data.train %s %s; make both the "
                 "same way", dc->valid, dataset_lowercase(valid) ? "with --lowercase"
                 : "without --lowercase", dc->train, made);
    else if (ckpt->lower >= 0 && ckpt->lower != lower)
        snprintf(err, errlen, "data.train %s was made %s, but %s; continue it on shards made %s",
                 dc->train, made, origin, ckpt->lower ? "with --lowercase" : "without --lowercase");
    else
        return true;
    return false;
}

/* Copy stream positions [p, p + n) into out; positions past the end are not
 * read (the caller pads). Returns the count copied. */
static int read_stream(const bt_dataset *ds, uint64_t p, int n, int32_t *out) {
    int got = 0;
    int s = 0;
    while (s + 1 < ds->n_shards && ds->stream_start[s + 1] <= p) s++;
    while (got < n && s < ds->n_shards) {
        const bt_shard *sh = &ds->shards[s];
        uint64_t local = p - ds->stream_start[s];
        /* document containing local: doc d starts at doc_start(d) + d */
        uint64_t lo = 0, hi = sh->n_docs; /* invariant: start(lo) <= local < start(hi) */
        while (hi - lo > 1) {
            uint64_t mid = (lo + hi) / 2;
            if (shard_doc_start(sh, mid) + mid <= local) lo = mid;
            else hi = mid;
        }
        for (uint64_t d = lo; d < sh->n_docs && got < n; d++) {
            uint64_t start = shard_doc_start(sh, d) + d, end = shard_doc_start(sh, d + 1) + d;
            for (uint64_t q = local > start ? local : start; q < end && got < n; q++)
                out[got++] = (int32_t)shard_token(sh, q - d);
            if (got < n && local <= end) out[got++] = ds->vocab->sep_id; /* between documents */
            local = end + 1;
        }
        p = ds->stream_start[++s];
    }
    return got;
}

/* The permutation of epoch e (Fisher-Yates from the counter-based RNG). */
static void ensure_perm(bt_dataset *ds, uint64_t epoch) {
    if (ds->perm_epoch == epoch) return;
    uint64_t n = ds->n_samples;
    if (!ds->perm) ds->perm = malloc(n * sizeof *ds->perm);
    if (!ds->perm) {
        fprintf(stderr, "bertrain: out of memory for the sample order\n");
        exit(1);
    }
    for (uint64_t i = 0; i < n; i++) ds->perm[i] = (uint32_t)i;
    uint64_t stream = (epoch << 8) | RNG_STREAM_ORDER;
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = rng_below(ds->seed, stream, (uint32_t)i, (uint32_t)(i >> 32),
                               (uint32_t)(i + 1));
        uint32_t t = ds->perm[i];
        ds->perm[i] = ds->perm[j];
        ds->perm[j] = t;
    }
    ds->perm_epoch = epoch;
}

static bool is_special(const bt_vocab *v, int id) {
    return id == v->pad_id || id == v->cls_id || id == v->sep_id || id == v->mask_id ||
           id == v->unk_id;
}

int mask_sequence(int32_t *ids, int T, const bt_vocab *vocab, int vocab_size, float mask_prob,
                  int max_pred, uint64_t seed, uint64_t epoch, uint64_t sample, int row_base,
                  int32_t *positions, int32_t *labels) {
    const uint64_t stream = (epoch << 8) | RNG_STREAM_MASK;
    const uint32_t thr = philox_drop_threshold(mask_prob);
    int n = 0;
    uint32_t draw_of[T > 0 ? T : 1];
    int cand[T > 0 ? T : 1];
    for (int t = 0; t < T; t++) {
        if (ids[t] == vocab->pad_id || ids[t] == vocab->cls_id || ids[t] == vocab->sep_id)
            continue;
        uint32_t r[4];
        rng_block(seed, stream, (uint32_t)t, (uint32_t)sample, r);
        if (r[0] < thr) {
            draw_of[n] = r[0];
            cand[n++] = t;
        }
    }
    /* over the cap: keep the max_pred smallest draws, a uniform subset */
    while (n > max_pred) {
        int worst = 0;
        for (int i = 1; i < n; i++)
            if (draw_of[i] > draw_of[worst]) worst = i;
        for (int i = worst; i + 1 < n; i++) {
            draw_of[i] = draw_of[i + 1];
            cand[i] = cand[i + 1];
        }
        n--;
    }
    for (int i = 0; i < n; i++) {
        int t = cand[i];
        uint32_t r[4];
        rng_block(seed, stream, (uint32_t)t, (uint32_t)sample, r);
        positions[i] = row_base + t;
        labels[i] = ids[t];
        double u = r[1] / 4294967296.0;
        if (u < 0.8) {
            ids[t] = vocab->mask_id;
        } else if (u < 0.9) { /* a random non-special token */
            uint32_t pick = (uint32_t)(((uint64_t)r[2] * (uint32_t)vocab_size) >> 32);
            for (uint32_t attempt = 1; is_special(vocab, (int)pick); attempt++) {
                uint32_t q[4];
                rng_block(seed, stream ^ ((uint64_t)attempt << 40), (uint32_t)t,
                          (uint32_t)sample, q);
                pick = (uint32_t)(((uint64_t)q[2] * (uint32_t)vocab_size) >> 32);
            }
            ids[t] = (int32_t)pick;
        } /* else: kept as is, still predicted */
    }
    return n;
}

void dataset_fill(bt_dataset *ds, uint64_t g0, int B, bool eval, bt_batch_buf *out) {
    const int T = ds->T;
    out->B = B;
    out->T = T;
    out->n_masked = 0;
    out->masked_bound = mask_total_bound(B, ds->W, ds->mask_prob, ds->max_pred);
    for (int b = 0; b < B; b++) {
        uint64_t g = g0 + (uint64_t)b, epoch, sample;
        if (eval) {
            epoch = EVAL_EPOCH;
            sample = g % ds->n_samples;
        } else {
            epoch = g / ds->n_samples;
            ensure_perm(ds, epoch);
            sample = ds->perm[g % ds->n_samples];
        }
        int32_t *ids = out->input_ids + (size_t)b * T;
        int32_t *types = out->token_type_ids + (size_t)b * T;
        int32_t *att = out->attention_mask + (size_t)b * T;
        if (ds->pairs) {
            pairs_fill(ds, epoch, sample, ids, types, att, &out->nsp_labels[b]);
        } else {
            ids[0] = ds->vocab->cls_id;
            int n = read_stream(ds, sample * (uint64_t)ds->W, ds->W, ids + 1);
            ids[n + 1] = ds->vocab->sep_id;
            for (int t = 0; t < T; t++) {
                types[t] = 0;
                att[t] = t < n + 2;
                if (t >= n + 2) ids[t] = ds->vocab->pad_id;
            }
            out->nsp_labels[b] = -1;
        }
        out->n_masked += mask_sequence(ids, T, ds->vocab, ds->model_vocab, ds->mask_prob,
                                       ds->max_pred, ds->seed, epoch, sample, b * T,
                                       out->mlm_positions + out->n_masked,
                                       out->mlm_labels + out->n_masked);
    }
}

int dataset_most_common_token(const bt_dataset *ds) {
    uint64_t *count = calloc((size_t)ds->model_vocab, sizeof *count);
    if (!count) return -1;
    for (int s = 0; s < ds->n_shards; s++) /* counted when verified, or recorded then */
        for (uint32_t t = 0; t < ds->shards[s].n_ids && t < (uint32_t)ds->model_vocab; t++)
            count[t] += ds->shards[s].count[t];
    int best = -1;
    for (int t = 0; t < ds->model_vocab; t++)
        if (!is_special(ds->vocab, t) && (best < 0 || count[t] > count[best])) best = t;
    free(count);
    return best;
}

int dataset_shards_read(const bt_dataset *ds) {
    int read = 0;
    for (int s = 0; s < ds->n_shards; s++) read += !ds->shards[s].verified_earlier;
    return read;
}

int dataset_num_shards(const bt_dataset *ds) { return ds->n_shards; }

bool batch_buf_alloc(bt_batch_buf *b, int B, int T, int cap_masked) {
    memset(b, 0, sizeof *b);
    b->B = B;
    b->T = T;
    b->cap_masked = cap_masked;
    size_t N = (size_t)B * T;
    b->input_ids = malloc(N * 4);
    b->token_type_ids = malloc(N * 4);
    b->attention_mask = malloc(N * 4);
    b->mlm_positions = malloc((size_t)(cap_masked > 0 ? cap_masked : 1) * 4);
    b->mlm_labels = malloc((size_t)(cap_masked > 0 ? cap_masked : 1) * 4);
    b->nsp_labels = malloc((size_t)B * 4);
    return b->input_ids && b->token_type_ids && b->attention_mask && b->mlm_positions &&
           b->mlm_labels && b->nsp_labels;
}

void batch_buf_free(bt_batch_buf *b) {
    free(b->input_ids);
    free(b->token_type_ids);
    free(b->attention_mask);
    free(b->mlm_positions);
    free(b->mlm_labels);
    free(b->nsp_labels);
    memset(b, 0, sizeof *b);
}
