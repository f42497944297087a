/* WordPiece vocabulary learning: count the basic tokenizer's words in one
 * streaming pass, then merge the most frequent adjacent piece pairs (BPE
 * style, "##" continuations) with every tie broken by the pieces' strings. */
#include "vocab_train.h"

#include "basic_tokenize.h"
#include "util/paths.h"
#include "util/strmap.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const SPECIAL_TOKENS[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

/* A pair of adjacent pieces (symbols) and where it occurs. */
typedef struct {
    int32_t left, right;
    int64_t count;    /* occurrences, weighted by word counts */
    int32_t *words;   /* indices of words that contain it (may repeat; stale ones are skipped) */
    size_t n_words, cap_words;
    uint32_t touched; /* merge number that last touched it */
} pair_info;

/* A heap entry: the pair's count when pushed (stale if it changed since). */
typedef struct {
    int64_t count;
    int32_t left, right;
    int32_t pair;
} heap_entry;

typedef struct {
    const bt_vocab_train_options *o;
    bt_strmap word_counts; /* word -> occurrences */
    size_t n_invalid_utf8, bytes_read;
    /* symbols (pieces), interned: id -> bytes at syms.arena + sym_off[id] */
    bt_strmap syms;
    size_t *sym_off, *sym_len;
    size_t n_syms, cap_syms;
    /* the words used for merging, as symbol sequences */
    int32_t *word_syms;   /* all words' symbols, word i at word_start[i], word_len[i] long */
    size_t *word_start;
    uint32_t *word_len;
    int64_t *word_count;
    size_t n_words;
    /* pairs */
    bt_strmap pair_ids; /* (left, right) as 8 bytes -> index into pairs */
    pair_info *pairs;
    size_t n_pairs, cap_pairs;
    heap_entry *heap;
    size_t n_heap, cap_heap;
    /* the vocab being built: tokens by id, membership in vocab_set */
    bt_strmap vocab_set;
    size_t *vocab_off; /* offsets into vocab_set.arena */
    size_t n_vocab, cap_vocab;
} trainer;

#define OOM_EXIT(what)                                                                  \
    do {                                                                                \
        fprintf(stderr, "bertrain vocab: out of memory (%s)\n", what);                  \
        exit(1);                                                                        \
    } while (0)

/* Grow a buffer to hold at least need elements of size elem. */
static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(p, c * elem);
    if (!q) OOM_EXIT("growing a table");
    *cap = c;
    return q;
}

/* ---- pass 1: word counts ---- */

static bool count_word(void *ctx, const char *word, size_t n_bytes, size_t n_chars) {
    trainer *t = ctx;
    if (n_chars > BT_WORD_MAX_CHARS) return true; /* encodes to [UNK] whatever the vocab */
    int64_t *count = strmap_upsert(&t->word_counts, word, n_bytes, NULL);
    if (!count) OOM_EXIT("word counts");
    (*count)++;
    return true;
}

static bool count_file(trainer *t, const char *path) {
    char err[1200];
    FILE *f = paths_open_input(path, err, sizeof err);
    if (!f) {
        fprintf(stderr, "%s\n", err);
        return false;
    }
    bt_basic_tokenizer basic;
    if (!basic_tokenizer_init(&basic, t->o->lowercase)) OOM_EXIT("tokenizer");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        t->bytes_read += (size_t)n;
        basic_tokenize(&basic, line, (size_t)n, count_word, t, &t->n_invalid_utf8);
    }
    bool ok = !ferror(f);
    if (!ok) fprintf(stderr, "%s: read error: %s\n", path, strerror(errno));
    free(line);
    fclose(f);
    basic_tokenizer_free(&basic);
    return ok;
}

/* ---- symbols and the vocab list ---- */

static const char *sym_str(const trainer *t, int32_t s) { return t->syms.arena + t->sym_off[s]; }

/* The id of piece bytes[0..n), interned on first use. */
static int32_t intern(trainer *t, const char *bytes, size_t n) {
    bool inserted;
    int64_t *id = strmap_upsert(&t->syms, bytes, n, &inserted);
    if (!id) OOM_EXIT("pieces");
    if (inserted) {
        size_t old_cap = t->cap_syms;
        t->sym_off = grow(t->sym_off, &t->cap_syms, t->n_syms + 1, sizeof *t->sym_off);
        if (t->cap_syms != old_cap) { /* sym_len grows in step with sym_off */
            t->sym_len = realloc(t->sym_len, t->cap_syms * sizeof *t->sym_len);
            if (!t->sym_len) OOM_EXIT("pieces");
        }
        t->sym_off[t->n_syms] = t->syms.arena_len - n - 1; /* the key just added */
        t->sym_len[t->n_syms] = n;
        *id = (int64_t)t->n_syms++;
    }
    return (int32_t)*id;
}

/* Append token to the vocab unless it is there already. */
static void vocab_add(trainer *t, const char *tok, size_t n) {
    bool inserted;
    int64_t *slot = strmap_upsert(&t->vocab_set, tok, n, &inserted);
    if (!slot) OOM_EXIT("vocab");
    if (!inserted) return;
    t->vocab_off = grow(t->vocab_off, &t->cap_vocab, t->n_vocab + 1, sizeof *t->vocab_off);
    t->vocab_off[t->n_vocab] = t->vocab_set.arena_len - n - 1;
    *slot = (int64_t)t->n_vocab++;
}

/* Byte order of UTF-8 strings = code point order (Python's str order). */
static int cmp_bytes(const char *a, size_t na, const char *b, size_t nb) {
    int c = memcmp(a, b, na < nb ? na : nb);
    return c ? c : (na > nb) - (na < nb);
}

/* ---- pass 2: alphabet and words ---- */

typedef struct {
    const char *bytes; /* into a strmap arena (stable while that map does not grow) */
    size_t len;
    int64_t count;
} keyed_count;

static int cmp_by_count_then_bytes(const void *x, const void *y) {
    const keyed_count *a = x, *b = y;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    return cmp_bytes(a->bytes, a->len, b->bytes, b->len);
}

static int cmp_by_bytes(const void *x, const void *y) {
    const keyed_count *a = x, *b = y;
    return cmp_bytes(a->bytes, a->len, b->bytes, b->len);
}

/* Entries of a map as (bytes, len, value), unsorted. */
static keyed_count *map_entries(const bt_strmap *m, size_t *n) {
    keyed_count *e = malloc((m->n_used ? m->n_used : 1) * sizeof *e);
    if (!e) OOM_EXIT("sorting");
    *n = 0;
    for (size_t i = 0; i < m->n_slots; i++)
        if (m->slots[i].hash)
            e[(*n)++] = (keyed_count){strmap_key(m, &m->slots[i]), m->slots[i].key_len,
                                      m->slots[i].value};
    return e;
}

static size_t utf8_char_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; /* words hold valid UTF-8 */
}

/* The alphabet (chars of the words, weighted by word counts; the most
 * frequent limit_alphabet of them if set) in vocab order, then the words made
 * only of alphabet chars as symbol sequences, in sorted order. */
static void build_words(trainer *t, bt_strmap *alphabet) {
    bt_strmap chars;
    if (!strmap_init(&chars, 1024)) OOM_EXIT("characters");
    for (size_t i = 0; i < t->word_counts.n_slots; i++) {
        const bt_strmap_slot *s = &t->word_counts.slots[i];
        if (!s->hash) continue;
        const char *w = strmap_key(&t->word_counts, s);
        for (size_t k = 0; k < s->key_len; k += utf8_char_len((unsigned char)w[k])) {
            int64_t *c = strmap_upsert(&chars, w + k, utf8_char_len((unsigned char)w[k]), NULL);
            if (!c) OOM_EXIT("characters");
            *c += s->value;
        }
    }
    size_t n_chars;
    keyed_count *by_count = map_entries(&chars, &n_chars);
    qsort(by_count, n_chars, sizeof *by_count, cmp_by_count_then_bytes);
    if (t->o->limit_alphabet > 0 && n_chars > (size_t)t->o->limit_alphabet)
        n_chars = (size_t)t->o->limit_alphabet;
    qsort(by_count, n_chars, sizeof *by_count, cmp_by_bytes);
    if (!strmap_init(alphabet, n_chars)) OOM_EXIT("alphabet");
    for (size_t i = 0; i < n_chars; i++) {
        if (!strmap_upsert(alphabet, by_count[i].bytes, by_count[i].len, NULL))
            OOM_EXIT("alphabet");
        vocab_add(t, by_count[i].bytes, by_count[i].len);
    }
    free(by_count);
    strmap_free(&chars);

    size_t n_all;
    keyed_count *words = map_entries(&t->word_counts, &n_all);
    qsort(words, n_all, sizeof *words, cmp_by_bytes);
    size_t cap_syms = 0, cap_words = 0, used = 0;
    char piece[2 + 4];
    for (size_t i = 0; i < n_all; i++) {
        const char *w = words[i].bytes;
        bool usable = true;
        for (size_t k = 0; k < words[i].len && usable; k += utf8_char_len((unsigned char)w[k]))
            usable = strmap_find(alphabet, w + k, utf8_char_len((unsigned char)w[k])) != NULL;
        if (!usable) continue; /* would encode to [UNK]; not used for merges */
        size_t old_cap = cap_words;
        t->word_start = grow(t->word_start, &cap_words, t->n_words + 1, sizeof *t->word_start);
        if (cap_words != old_cap) { /* word_len and word_count grow in step */
            t->word_len = realloc(t->word_len, cap_words * sizeof *t->word_len);
            t->word_count = realloc(t->word_count, cap_words * sizeof *t->word_count);
            if (!t->word_len || !t->word_count) OOM_EXIT("words");
        }
        t->word_start[t->n_words] = used;
        t->word_count[t->n_words] = words[i].count;
        uint32_t len = 0;
        for (size_t k = 0; k < words[i].len; k += utf8_char_len((unsigned char)w[k]), len++) {
            size_t cl = utf8_char_len((unsigned char)w[k]), pl = 0;
            if (k > 0) piece[pl++] = '#', piece[pl++] = '#';
            memcpy(piece + pl, w + k, cl);
            t->word_syms = grow(t->word_syms, &cap_syms, used + 1, sizeof *t->word_syms);
            t->word_syms[used++] = intern(t, piece, pl + cl);
        }
        t->word_len[t->n_words++] = len;
    }
    free(words);
    /* "##" forms of the chars seen inside words, in sorted order */
    size_t n_syms_now = t->n_syms;
    keyed_count *conts = malloc((n_syms_now ? n_syms_now : 1) * sizeof *conts);
    if (!conts) OOM_EXIT("pieces");
    size_t n_conts = 0;
    for (size_t s = 0; s < n_syms_now; s++) {
        const char *piece = sym_str(t, (int32_t)s);
        if (t->sym_len[s] > 2 && piece[0] == '#' && piece[1] == '#')
            conts[n_conts++] = (keyed_count){piece, t->sym_len[s], 0};
    }
    qsort(conts, n_conts, sizeof *conts, cmp_by_bytes);
    for (size_t i = 0; i < n_conts; i++) vocab_add(t, conts[i].bytes, conts[i].len);
    free(conts);
}

/* ---- pairs and the heap ---- */

static int32_t pair_index(trainer *t, int32_t left, int32_t right) {
    int32_t key[2] = {left, right};
    bool inserted;
    int64_t *slot = strmap_upsert(&t->pair_ids, key, sizeof key, &inserted);
    if (!slot) OOM_EXIT("pairs");
    if (inserted) {
        t->pairs = grow(t->pairs, &t->cap_pairs, t->n_pairs + 1, sizeof *t->pairs);
        t->pairs[t->n_pairs] = (pair_info){.left = left, .right = right};
        *slot = (int64_t)t->n_pairs++;
    }
    return (int32_t)*slot;
}

static void pair_add_word(trainer *t, int32_t p, int32_t word) {
    pair_info *q = &t->pairs[p];
    q->words = grow(q->words, &q->cap_words, q->n_words + 1, sizeof *q->words);
    q->words[q->n_words++] = word;
}

/* Whether heap entry a comes out before b: larger count, then smaller left
 * piece, then smaller right piece. */
static bool heap_before(const trainer *t, const heap_entry *a, const heap_entry *b) {
    if (a->count != b->count) return a->count > b->count;
    int c = cmp_bytes(sym_str(t, a->left), t->sym_len[a->left], sym_str(t, b->left),
                      t->sym_len[b->left]);
    if (c) return c < 0;
    return cmp_bytes(sym_str(t, a->right), t->sym_len[a->right], sym_str(t, b->right),
                     t->sym_len[b->right]) < 0;
}

static void heap_push(trainer *t, int32_t p) {
    t->heap = grow(t->heap, &t->cap_heap, t->n_heap + 1, sizeof *t->heap);
    heap_entry e = {t->pairs[p].count, t->pairs[p].left, t->pairs[p].right, p};
    size_t i = t->n_heap++;
    while (i > 0 && heap_before(t, &e, &t->heap[(i - 1) / 2])) {
        t->heap[i] = t->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    t->heap[i] = e;
}

static heap_entry heap_pop(trainer *t) {
    heap_entry top = t->heap[0], last = t->heap[--t->n_heap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= t->n_heap) break;
        if (c + 1 < t->n_heap && heap_before(t, &t->heap[c + 1], &t->heap[c])) c++;
        if (!heap_before(t, &t->heap[c], &last)) break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (t->n_heap) t->heap[i] = last;
    return top;
}

static int cmp_int32(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* Count every adjacent pair of every word and fill the heap. */
static void build_pairs(trainer *t) {
    if (!strmap_init(&t->pair_ids, t->n_words * 4)) OOM_EXIT("pairs");
    for (size_t w = 0; w < t->n_words; w++) {
        const int32_t *s = t->word_syms + t->word_start[w];
        for (uint32_t k = 0; k + 1 < t->word_len[w]; k++) {
            int32_t p = pair_index(t, s[k], s[k + 1]);
            t->pairs[p].count += t->word_count[w];
            pair_add_word(t, p, (int32_t)w);
        }
    }
    for (size_t p = 0; p < t->n_pairs; p++) heap_push(t, (int32_t)p);
}

/* Touch pair p in merge number stamp: remember it once in the touched list. */
static void touch(trainer *t, int32_t p, uint32_t stamp, int32_t **list, size_t *n, size_t *cap) {
    if (t->pairs[p].touched == stamp) return;
    t->pairs[p].touched = stamp;
    *list = grow(*list, cap, *n + 1, sizeof **list);
    (*list)[(*n)++] = p;
}

/* Merge pairs until the vocab is full or no pair is frequent enough. */
static void learn_merges(trainer *t) {
    int32_t *touched = NULL, *todo = NULL;
    size_t n_touched = 0, cap_touched = 0, cap_todo = 0;
    char *joined = NULL;
    size_t cap_joined = 0;
    uint32_t stamp = 0;
    while (t->n_vocab < (size_t)t->o->vocab_size && t->n_heap > 0) {
        heap_entry e = heap_pop(t);
        pair_info *pi = &t->pairs[e.pair];
        if (pi->count != e.count) continue; /* stale entry */
        if (e.count < t->o->min_frequency) break;
        int32_t a = e.left, b = e.right;
        /* the new piece: left + right without its "##" */
        size_t la = t->sym_len[a], lb = t->sym_len[b] - 2;
        joined = grow(joined, &cap_joined, la + lb + 1, 1);
        memcpy(joined, sym_str(t, a), la);
        memcpy(joined + la, sym_str(t, b) + 2, lb);
        int32_t merged = intern(t, joined, la + lb);
        vocab_add(t, joined, la + lb);
        /* the words that contain the pair, each once */
        size_t n_todo = pi->n_words;
        todo = grow(todo, &cap_todo, n_todo + 1, sizeof *todo);
        memcpy(todo, pi->words, n_todo * sizeof *todo);
        free(pi->words);
        pi->words = NULL;
        pi->n_words = pi->cap_words = 0;
        qsort(todo, n_todo, sizeof *todo, cmp_int32);
        stamp++;
        n_touched = 0;
        for (size_t k = 0; k < n_todo; k++) {
            if (k > 0 && todo[k] == todo[k - 1]) continue;
            int32_t w = todo[k];
            int32_t *s = t->word_syms + t->word_start[w];
            uint32_t len = t->word_len[w];
            bool has = false;
            for (uint32_t j = 0; j + 1 < len && !has; j++) has = s[j] == a && s[j + 1] == b;
            if (!has) continue; /* stale: merged away earlier */
            int64_t c = t->word_count[w];
            for (uint32_t j = 0; j + 1 < len; j++) {
                int32_t p = pair_index(t, s[j], s[j + 1]);
                t->pairs[p].count -= c;
                touch(t, p, stamp, &touched, &n_touched, &cap_touched);
            }
            uint32_t out = 0;
            for (uint32_t j = 0; j < len; out++) {
                if (j + 1 < len && s[j] == a && s[j + 1] == b) {
                    s[out] = merged;
                    j += 2;
                } else {
                    s[out] = s[j++];
                }
            }
            t->word_len[w] = len = out;
            for (uint32_t j = 0; j + 1 < len; j++) {
                int32_t p = pair_index(t, s[j], s[j + 1]);
                t->pairs[p].count += c;
                touch(t, p, stamp, &touched, &n_touched, &cap_touched);
                if (s[j] == merged || s[j + 1] == merged) pair_add_word(t, p, w); /* a new pair */
            }
        }
        for (size_t k = 0; k < n_touched; k++)
            if (t->pairs[touched[k]].count > 0) heap_push(t, touched[k]);
    }
    free(touched);
    free(todo);
    free(joined);
}

/* ---- output ---- */

static bool write_vocab(const trainer *t, const char *path) {
    size_t n = strlen(path);
    char *tmp = malloc(n + 5);
    if (!tmp) OOM_EXIT("path");
    snprintf(tmp, n + 5, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "%s: cannot create: %s\n", tmp, strerror(errno));
        free(tmp);
        return false;
    }
    bool ok = true;
    for (size_t i = 0; i < t->n_vocab && ok; i++)
        ok = fprintf(f, "%s\n", t->vocab_set.arena + t->vocab_off[i]) > 0;
    ok = fflush(f) == 0 && ok;
    if (fclose(f) != 0) ok = false;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "%s: cannot write: %s\n", path, strerror(errno));
        remove(tmp);
        free(tmp);
        return false;
    }
    free(tmp);
    return true;
}

/* Release everything a trainer holds (tables never made are empty). */
static void trainer_free(trainer *t) {
    for (size_t p = 0; p < t->n_pairs; p++) free(t->pairs[p].words);
    free(t->pairs);
    free(t->heap);
    free(t->word_syms);
    free(t->word_start);
    free(t->word_len);
    free(t->word_count);
    free(t->sym_off);
    free(t->sym_len);
    free(t->vocab_off);
    strmap_free(&t->pair_ids);
    strmap_free(&t->syms);
    strmap_free(&t->word_counts);
    strmap_free(&t->vocab_set);
}

int vocab_train(const bt_vocab_train_options *o) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    trainer t;
    memset(&t, 0, sizeof t);
    t.o = o;
    if (!strmap_init(&t.word_counts, 1 << 16) || !strmap_init(&t.syms, 1 << 12) ||
        !strmap_init(&t.vocab_set, (size_t)o->vocab_size))
        OOM_EXIT("tables");
    for (size_t i = 0; i < sizeof SPECIAL_TOKENS / sizeof *SPECIAL_TOKENS; i++)
        vocab_add(&t, SPECIAL_TOKENS[i], strlen(SPECIAL_TOKENS[i]));
    for (int i = 0; i < o->n_files; i++)
        if (!count_file(&t, o->files[i])) {
            trainer_free(&t);
            return 2; /* bad input */
        }
    if (t.word_counts.n_used == 0) {
        fprintf(stderr,
                "bertrain vocab: the input holds no words (%zu bytes read from %d file%s)\n",
                t.bytes_read, o->n_files, o->n_files == 1 ? "" : "s");
        trainer_free(&t);
        return 2;
    }
    bt_strmap alphabet;
    build_words(&t, &alphabet);
    size_t n_alphabet = alphabet.n_used, base = t.n_vocab;
    strmap_free(&alphabet);
    build_pairs(&t);
    learn_merges(&t);
    if (!write_vocab(&t, o->out_path)) {
        trainer_free(&t);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("vocab: %zu bytes, %zu distinct words (%zu usable), %zu characters, "
           "%zu invalid UTF-8 sequences replaced\n",
           t.bytes_read, t.word_counts.n_used, t.n_words, n_alphabet, t.n_invalid_utf8);
    printf("vocab: %zu tokens (5 special, %zu characters and ## forms, %zu learned) -> %s "
           "in %.1f s\n",
           t.n_vocab, base - 5, t.n_vocab - base, o->out_path, secs);
    if (t.n_vocab > (size_t)o->vocab_size)
        fprintf(stderr, "bertrain vocab: warning: the characters alone need %zu tokens, more than "
                        "--size %d (use --limit-alphabet)\n", t.n_vocab, o->vocab_size);
    else if (t.n_vocab < (size_t)o->vocab_size)
        printf("vocab: stopped before --size %d: no pair occurs %d times any more\n",
               o->vocab_size, o->min_frequency);
    trainer_free(&t);
    return 0;
}
