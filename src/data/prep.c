/* `bertrain prep`: text files -> train/valid token shards, in two passes (the
 * first only counts documents, so the held-out split is known up front). */
#include "prep.h"
#include "util/paths.h"

#include "shard.h"
#include "shard_write.h"
#include "vocab.h"
#include "wordpiece.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_PATH 4096

/* splitmix64 finalizer: a well-mixed 64-bit hash of x. */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Uniform in [0, 1) from (seed, document index). */
static double doc_draw(uint64_t seed, uint64_t doc_index) {
    return (double)(mix64(mix64(seed) ^ doc_index) >> 11) * 0x1.0p-53;
}

bool prep_doc_is_valid(uint64_t seed, uint64_t doc_index, double fraction) {
    return doc_draw(seed, doc_index) < fraction;
}

/* A blank line (only ASCII spaces, tabs, \r, \n, \v, \f) ends a document. */
static bool is_blank(const char *line, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = line[i];
        if (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '\v' && c != '\f')
            return false;
    }
    return true;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* Pass 1: count the documents of all files (and their bytes). */
static bool count_documents(const bt_prep_options *o, uint64_t *n_docs, uint64_t *n_bytes) {
    *n_docs = *n_bytes = 0;
    char *line = NULL;
    size_t cap = 0;
    for (int i = 0; i < o->n_files; i++) {
        char err[1200];
        FILE *f = paths_open_input(o->files[i], err, sizeof err);
        if (!f) {
            fprintf(stderr, "%s\n", err);
            free(line);
            return false;
        }
        bool in_doc = false;
        ssize_t n;
        while ((n = getline(&line, &cap, f)) >= 0) {
            *n_bytes += (uint64_t)n;
            bool blank = is_blank(line, (size_t)n);
            if (blank && in_doc) (*n_docs)++;
            in_doc = !blank;
        }
        if (in_doc) (*n_docs)++;
        bool bad = ferror(f);
        fclose(f);
        if (bad) {
            fprintf(stderr, "%s: read error: %s\n", o->files[i], strerror(errno));
            free(line);
            return false;
        }
    }
    free(line);
    return true;
}

/* The state of pass 2. */
typedef struct {
    const bt_prep_options *o;
    const bt_vocab *vocab;
    bt_tokenizer *tok;
    uint32_t flags;
    int64_t forced_valid, forced_train; /* documents moved by the at-least-one rule, or -1 */
    bt_shard_writer *valid;
    bt_shard_writer **train; /* finished shards, then the open one */
    int n_train;
    bool train_open;
    uint64_t train_docs, train_sents, train_tokens; /* of the finished train shards */
    uint64_t doc_index, unk, invalid_utf8, empty_sentences, bytes;
    char err[MAX_PATH + 512];
} prep_state;

static bool doc_goes_valid(const prep_state *s, uint64_t d, uint64_t n_docs) {
    if ((int64_t)d == s->forced_valid) return true;
    if ((int64_t)d == s->forced_train || n_docs < 2) return false;
    return prep_doc_is_valid(s->o->seed, d, s->o->valid_fraction);
}

/* The writer for the current document, opening a train shard if needed. */
static bt_shard_writer *writer_for(prep_state *s, bool valid) {
    if (valid) return s->valid;
    if (!s->train_open) {
        char path[MAX_PATH];
        snprintf(path, sizeof path, "%s/train-%05d.shard", s->o->out_dir, s->n_train);
        bt_shard_writer **grown = realloc(s->train, (size_t)(s->n_train + 1) * sizeof *grown);
        if (!grown) {
            snprintf(s->err, sizeof s->err, "bertrain prep: out of memory");
            return NULL;
        }
        s->train = grown;
        s->train[s->n_train] = shard_writer_open(path, (uint32_t)s->vocab->size, s->vocab->hash,
                                                 s->flags, s->err, sizeof s->err);
        if (!s->train[s->n_train]) return NULL;
        s->n_train++;
        s->train_open = true;
    }
    return s->train[s->n_train - 1];
}

/* End the current document; a train shard that reached its size is finished. */
static bool end_document(prep_state *s, bt_shard_writer *w) {
    if (!shard_writer_end_document(w, s->err, sizeof s->err)) return false;
    if (w != s->valid && shard_writer_tokens(w) >= s->o->shard_tokens) {
        s->train_docs += shard_writer_docs(w);
        s->train_sents += shard_writer_sentences(w);
        s->train_tokens += shard_writer_tokens(w);
        if (!shard_writer_finish(w, s->err, sizeof s->err)) return false;
        s->train_open = false;
    }
    return true;
}

/* Pass 2 over one file: tokenize every line into the current document. */
static bool prep_file(prep_state *s, const char *path, uint64_t n_docs, bt_ids *ids) {
    FILE *f = paths_open_input(path, s->err, sizeof s->err);
    if (!f) return false;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    bt_shard_writer *w = NULL; /* of the document in progress, NULL between documents */
    bool ok = true;
    while (ok && (n = getline(&line, &cap, f)) >= 0) {
        s->bytes += (uint64_t)n;
        if (is_blank(line, (size_t)n)) {
            if (w) {
                ok = end_document(s, w);
                s->doc_index++;
                w = NULL;
            }
            continue;
        }
        if (!w) {
            w = writer_for(s, doc_goes_valid(s, s->doc_index, n_docs));
            if (!w) {
                ok = false;
                break;
            }
        }
        ids->n = 0;
        size_t invalid = 0;
        if (!tokenizer_encode(s->tok, line, (size_t)n, ids, &invalid)) {
            snprintf(s->err, sizeof s->err, "%s: out of memory tokenizing a line of %zd bytes",
                     path, n);
            ok = false;
            break;
        }
        s->invalid_utf8 += invalid;
        if (ids->n == 0) s->empty_sentences++;
        for (size_t i = 0; i < ids->n; i++) s->unk += ids->ids[i] == s->vocab->unk_id;
        ok = shard_writer_add_sentence(w, ids->ids, ids->n, s->err, sizeof s->err);
    }
    if (ok && w) {
        ok = end_document(s, w);
        s->doc_index++;
    }
    if (ok && ferror(f)) {
        snprintf(s->err, sizeof s->err, "%s: read error", path);
        ok = false;
    }
    free(line);
    fclose(f);
    return ok;
}

/* Whether path is a regular file that starts as a bertrain shard: what an
 * earlier prep wrote, the only kind of file prep replaces or removes. */
static bool is_bertrain_shard(const char *path) {
    struct stat st;
    char magic[8];
    FILE *f = lstat(path, &st) == 0 && S_ISREG(st.st_mode) ? fopen(path, "rb") : NULL;
    const bool yes = f && fread(magic, 1, 8, f) == 8 && memcmp(magic, SHARD_MAGIC, 8) == 0;
    if (f) fclose(f);
    return yes;
}

/* Remove path when it is an earlier prep's shard (said on stdout). */
static void remove_old_shard(const char *path) {
    if (is_bertrain_shard(path) && remove(path) == 0)
        printf("prep: removed %s from an earlier run\n", path);
}

/* A file prep would replace is absent or an earlier prep's shard; false with
 * "PATH exists and is not a bertrain shard ..." in err. */
static bool replaceable(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (lstat(path, &st) != 0 || is_bertrain_shard(path)) return true;
    snprintf(err, errlen, "bertrain prep: %.4000s exists and is not a bertrain shard: prep never "
             "replaces a file it did not write; move it, or choose another --out", path);
    return false;
}

/* Every file prep may replace or remove in `dir` (train.shard, valid.shard,
 * train/train-NNNNN.shard) is absent or a bertrain shard, and `train` is
 * absent or a directory: checked before any work. false with "PATH ..." in
 * err. */
static bool check_outputs(const char *dir, char *err, size_t errlen) {
    char path[MAX_PATH], shard[MAX_PATH + 512];
    snprintf(path, sizeof path, "%s/train.shard", dir);
    if (!replaceable(path, err, errlen)) return false;
    snprintf(path, sizeof path, "%s/valid.shard", dir);
    if (!replaceable(path, err, errlen)) return false;
    snprintf(path, sizeof path, "%s/train", dir);
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "bertrain prep: %s exists and is not a directory (prep writes its "
                 "train shards there): move it, or choose another --out", path);
        return false;
    }
    DIR *d = opendir(path);
    bool ok = true;
    for (struct dirent *e; ok && d && (e = readdir(d));) {
        int index, used = 0;
        if (sscanf(e->d_name, "train-%5d.shard%n", &index, &used) != 1 ||
            used != (int)strlen(e->d_name))
            continue;
        snprintf(shard, sizeof shard, "%s/%s", path, e->d_name);
        ok = replaceable(shard, err, errlen);
    }
    if (d) closedir(d);
    return ok;
}

/* Remove train shards of an earlier run that this run's layout does not
 * overwrite: OUT/train.shard, or OUT/train/train-NNNNN.shard from index keep_from. */
static void remove_stale_train(const char *dir, bool single, int keep_from) {
    char path[MAX_PATH];
    if (!single) {
        snprintf(path, sizeof path, "%s/train.shard", dir);
        remove_old_shard(path);
    }
    snprintf(path, sizeof path, "%s/train", dir);
    DIR *d = opendir(path);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        int index, used = 0;
        if (sscanf(e->d_name, "train-%5d.shard%n", &index, &used) == 1 &&
            used == (int)strlen(e->d_name) && strlen(e->d_name) == 17 &&
            (single || index >= keep_from)) {
            char stale[MAX_PATH + 512];
            snprintf(stale, sizeof stale, "%s/%s", path, e->d_name);
            remove_old_shard(stale);
        }
    }
    closedir(d);
    if (single) rmdir(path); /* only succeeds when empty */
}

/* Move the finished shards to their final names. */
static bool commit_all(prep_state *s, char *train_path, size_t train_path_len) {
    const char *dir = s->o->out_dir;
    bool single = s->n_train == 1;
    char path[MAX_PATH];
    if (single) {
        snprintf(train_path, train_path_len, "%s/train.shard", dir);
    } else {
        snprintf(train_path, train_path_len, "%s/train", dir);
        if (mkdir(train_path, 0777) != 0 && errno != EEXIST) {
            snprintf(s->err, sizeof s->err, "%s: cannot create directory: %s", train_path,
                     strerror(errno));
            return false;
        }
    }
    remove_stale_train(dir, single, s->n_train);
    for (int i = 0; i < s->n_train; i++) {
        if (single) snprintf(path, sizeof path, "%s/train.shard", dir);
        else snprintf(path, sizeof path, "%s/train/train-%05d.shard", dir, i);
        bt_shard_writer *w = s->train[i];
        s->train[i] = NULL;
        if (!shard_writer_commit(w, path, s->err, sizeof s->err)) return false;
    }
    snprintf(path, sizeof path, "%s/valid.shard", dir);
    if (s->valid && shard_writer_docs(s->valid) > 0) {
        bt_shard_writer *w = s->valid;
        s->valid = NULL;
        return shard_writer_commit(w, NULL, s->err, sizeof s->err);
    }
    remove_old_shard(path);
    return true;
}

/* Warn (stderr) when more than 1% of the tokens are [UNK], and when the
 * lowercasing disagrees with the vocab's casing, which `train` refuses. */
static void warn_tokenization(const bt_prep_options *o, int casing, uint64_t unk,
                              uint64_t tokens) {
    const bool mismatch = (casing == VOCAB_UNCASED && !o->lowercase) ||
                          (casing == VOCAB_CASED && o->lowercase);
    const char *hint = !mismatch ? ""
                       : o->lowercase ? "; the vocab is cased (its tokens have capital letters), so "
                                        "the text wants no --lowercase"
                                      : "; the vocab is uncased (no token has a capital letter), "
                                        "so the text wants --lowercase";
    if (tokens > 0 && (double)unk > 0.01 * (double)tokens)
        fprintf(stderr, "bertrain prep: warning: %llu of %llu tokens (%.1f%%) are [UNK]: the vocab "
                        "%s does not cover this text%s\n", (unsigned long long)unk,
                (unsigned long long)tokens, 100.0 * (double)unk / (double)tokens, o->vocab_path,
                hint);
    if (mismatch)
        fprintf(stderr, "bertrain prep: warning: shards made %s --lowercase with %s vocab %s: "
                        "`bertrain train` refuses them; run prep again %s --lowercase\n",
                o->lowercase ? "with" : "without", o->lowercase ? "the cased" : "the uncased",
                o->vocab_path, o->lowercase ? "without" : "with");
}

/* At least one document in each split when there are two or more and a
 * held-out fraction: the lowest draw goes to valid, the highest to train,
 * when the fraction alone would leave a split empty. */
static void force_both_splits(prep_state *s, uint64_t n_docs) {
    const bt_prep_options *o = s->o;
    s->forced_valid = s->forced_train = -1;
    if (n_docs < 2 || o->valid_fraction <= 0) return;
    uint64_t n_valid = 0, lowest = 0, highest = 0;
    for (uint64_t d = 0; d < n_docs; d++) {
        n_valid += prep_doc_is_valid(o->seed, d, o->valid_fraction);
        if (doc_draw(o->seed, d) < doc_draw(o->seed, lowest)) lowest = d;
        if (doc_draw(o->seed, d) > doc_draw(o->seed, highest)) highest = d;
    }
    if (n_valid == 0) s->forced_valid = (int64_t)lowest;
    if (n_valid == n_docs) s->forced_train = (int64_t)highest;
}

/* Tokenize every input into the shards, then commit them under their final
 * names (train_path: what to report; valid: the held-out split's documents,
 * sentences and tokens). false with the reason in s->err. */
static bool write_shards(prep_state *s, uint64_t n_docs, const char *valid_path,
                         char *train_path, size_t train_path_len, uint64_t valid[3],
                         double *tokenize_secs) {
    const bt_prep_options *o = s->o;
    s->tok = tokenizer_new(s->vocab, o->lowercase, s->err, sizeof s->err);
    bool ok = s->tok != NULL;
    if (ok) {
        s->valid = shard_writer_open(valid_path, (uint32_t)s->vocab->size, s->vocab->hash,
                                     s->flags, s->err, sizeof s->err);
        ok = s->valid != NULL;
    }
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    bt_ids ids = {0};
    for (int i = 0; ok && i < o->n_files; i++) ok = prep_file(s, o->files[i], n_docs, &ids);
    *tokenize_secs = seconds_since(&t1);
    ids_free(&ids);
    if (ok && s->train_open) {
        bt_shard_writer *w = s->train[s->n_train - 1];
        s->train_docs += shard_writer_docs(w);
        s->train_sents += shard_writer_sentences(w);
        s->train_tokens += shard_writer_tokens(w);
        ok = shard_writer_finish(w, s->err, sizeof s->err);
    }
    if (s->valid) { /* counted before finishing, which closes the writer's books */
        valid[0] = shard_writer_docs(s->valid);
        valid[1] = shard_writer_sentences(s->valid);
        valid[2] = shard_writer_tokens(s->valid);
    }
    if (ok && s->train_tokens == 0) {
        snprintf(s->err, sizeof s->err, "%s%s: no tokens for the training split (%llu documents)",
                 o->files[0], o->n_files > 1 ? " and the other inputs" : "",
                 (unsigned long long)n_docs);
        ok = false;
    }
    if (ok && s->valid) ok = shard_writer_finish(s->valid, s->err, sizeof s->err);
    if (ok) ok = commit_all(s, train_path, train_path_len);
    return ok;
}

/* What prep did: documents, the splits, [UNK]s and speed. */
static void report(const prep_state *s, uint64_t n_docs, const char *train_path,
                   const char *valid_path, uint64_t valid[3], double tokenize_secs,
                   double total_secs) {
    const bt_prep_options *o = s->o;
    printf("prep: %llu documents, %llu bytes read; %llu invalid UTF-8 sequences replaced; "
           "%llu lines without tokens skipped\n",
           (unsigned long long)n_docs, (unsigned long long)s->bytes,
           (unsigned long long)s->invalid_utf8, (unsigned long long)s->empty_sentences);
    printf("prep: train %llu docs, %llu sentences, %llu tokens -> %s (%d shard%s)\n",
           (unsigned long long)s->train_docs, (unsigned long long)s->train_sents,
           (unsigned long long)s->train_tokens, train_path, s->n_train, s->n_train == 1 ? "" : "s");
    if (valid[0])
        printf("prep: valid %llu docs, %llu sentences, %llu tokens -> %s\n",
               (unsigned long long)valid[0], (unsigned long long)valid[1],
               (unsigned long long)valid[2], valid_path);
    else
        printf("prep: no validation split (--valid-fraction %g, %llu documents)\n",
               o->valid_fraction, (unsigned long long)n_docs);
    printf("prep: %llu [UNK] of %llu tokens; tokenized at %.1f MB/s, %.2f s in all\n",
           (unsigned long long)s->unk, (unsigned long long)(s->train_tokens + valid[2]),
           tokenize_secs > 0 ? (double)s->bytes / tokenize_secs / 1e6 : 0.0, total_secs);
}

/* The vocab, the output directory and a count of the input's documents;
 * 0, or 2 (bad input) after one line why. */
static int prep_open(const bt_prep_options *o, bt_vocab *vocab, prep_state *s, uint64_t *n_docs) {
    if (!(o->valid_fraction >= 0 && o->valid_fraction < 1)) {
        fprintf(stderr, "bertrain prep: --valid-fraction %g is outside [0, 1)\n",
                o->valid_fraction);
        return 2;
    }
    if (!vocab_load(vocab, o->vocab_path, s->err, sizeof s->err)) {
        fprintf(stderr, "bertrain prep: %s\n", s->err);
        return 2;
    }
    uint64_t n_bytes;
    if (!paths_prepare_dir(o->out_dir, s->err, sizeof s->err)) {
        fprintf(stderr, "bertrain prep: --out %s\n", s->err);
    } else if (!check_outputs(o->out_dir, s->err, sizeof s->err)) {
        fprintf(stderr, "%s\n", s->err);
    } else if (!count_documents(o, n_docs, &n_bytes)) { /* an input that cannot be read */
    } else if (*n_docs == 0) {
        fprintf(stderr, "%s%s: no text (%llu bytes, every line blank)\n", o->files[0],
                o->n_files > 1 ? " and the other inputs" : "", (unsigned long long)n_bytes);
    } else {
        return 0;
    }
    vocab_free(vocab);
    return 2;
}

int prep_run(const bt_prep_options *o) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bt_vocab vocab;
    prep_state s;
    memset(&s, 0, sizeof s);
    uint64_t n_docs;
    const int rc = prep_open(o, &vocab, &s, &n_docs);
    if (rc) return rc;
    const int casing = vocab_casing(&vocab);
    s.o = o;
    s.vocab = &vocab;
    s.flags = o->lowercase ? SHARD_FLAG_LOWERCASE : 0;
    force_both_splits(&s, n_docs);
    char valid_path[MAX_PATH], train_path[MAX_PATH];
    snprintf(valid_path, sizeof valid_path, "%s/valid.shard", o->out_dir);
    double tokenize_secs = 0;
    uint64_t valid[3] = {0, 0, 0}; /* documents, sentences, tokens */
    const bool ok = write_shards(&s, n_docs, valid_path, train_path, sizeof train_path, valid,
                                 &tokenize_secs);
    for (int i = 0; i < s.n_train; i++) shard_writer_abort(s.train[i]);
    free(s.train);
    shard_writer_abort(s.valid);
    tokenizer_free(s.tok);
    vocab_free(&vocab);
    if (!ok) {
        fprintf(stderr, "%s\n", s.err);
        return 1;
    }
    report(&s, n_docs, train_path, valid_path, valid, tokenize_secs, seconds_since(&t0));
    warn_tokenization(o, casing, s.unk, s.train_tokens + valid[2]);
    return 0;
}

int prep_inspect(const char *shard_path, const char *vocab_path) {
    char err[1024];
    bt_vocab vocab;
    bool have_vocab = vocab_path != NULL;
    if (have_vocab && !vocab_load(&vocab, vocab_path, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    bt_shard s;
    if (!shard_open(&s, shard_path, have_vocab ? vocab.hash : 0,
                    have_vocab ? (uint32_t)vocab.size : UINT32_MAX, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        if (have_vocab) vocab_free(&vocab);
        return 1;
    }
    uint32_t max_id = 0;
    for (uint64_t i = 0; i < s.n_tokens; i++)
        if (shard_token(&s, i) > max_id) max_id = shard_token(&s, i);
    printf("%s: BRTSHARD version %u, %zu bytes, checksums and offsets OK\n", shard_path,
           s.version, s.size);
    printf("  token width  %u bytes\n", s.token_width);
    printf("  vocab size   %u, hash %016llx%s\n", s.vocab_size, (unsigned long long)s.vocab_hash,
           have_vocab ? " (matches the vocab)" : "");
    printf("  flags        0x%x%s\n", s.flags,
           s.flags & SHARD_FLAG_LOWERCASE ? " (lowercased)" : "");
    printf("  documents    %llu\n  sentences    %llu\n  tokens       %llu (largest id %u%s)\n",
           (unsigned long long)s.n_docs, (unsigned long long)s.n_sents,
           (unsigned long long)s.n_tokens, max_id,
           s.n_tokens && max_id >= s.vocab_size ? ", NOT below the vocab size" : "");
    uint64_t show = s.n_tokens < 64 ? s.n_tokens : 64;
    printf("first %llu tokens, one sentence per line:\n", (unsigned long long)show);
    int32_t *ids = malloc((show ? show : 1) * sizeof *ids);
    for (uint64_t sent = 0, start = 0; ids && start < show; sent++) {
        uint64_t end = s.sent_offsets[sent + 1] < show ? s.sent_offsets[sent + 1] : show;
        for (uint64_t i = start; i < end; i++) ids[i - start] = (int32_t)shard_token(&s, i);
        printf("  [%llu]", (unsigned long long)sent);
        for (uint64_t i = start; i < end; i++) printf(" %d", ids[i - start]);
        printf("\n");
        if (have_vocab) {
            char *text = tokenizer_decode(&vocab, ids, end - start);
            printf("       %s\n", text ? text : "(out of memory)");
            free(text);
        }
        start = end;
    }
    free(ids);
    shard_close(&s);
    if (have_vocab) vocab_free(&vocab);
    return 0;
}
