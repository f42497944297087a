/* WordPiece: greedy longest-match-first over hash maps built from the vocab. */
#include "wordpiece.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A direct-mapped cache of recent words and their pieces: running text
 * repeats a few thousand words, so most words skip the vocab lookups. One
 * 64-byte line per entry; longer words or ones of more pieces are not cached. */
#define WORD_CACHE_SLOTS 4096
#define WORD_CACHE_BYTES 26
#define WORD_CACHE_IDS 8
typedef struct {
    uint32_t tag;  /* high bits of the word's hash */
    uint8_t len;   /* word bytes; 0: empty entry */
    uint8_t n_ids;
    char word[WORD_CACHE_BYTES];
    int32_t ids[WORD_CACHE_IDS];
} cached_word;

struct bt_tokenizer {
    cached_word *cache; /* WORD_CACHE_SLOTS */
    const bt_vocab *vocab;
    bt_basic_tokenizer basic;
    bt_strmap initial;    /* every token -> id (word-initial pieces) */
    bt_strmap continued;  /* "##x" tokens keyed by "x" -> id (continuation pieces) */
    size_t longest_initial, longest_continued; /* longest key of each map, bytes */
    int32_t unk_id;
    bt_ids *out; /* of the encode call in progress */
    bool out_of_memory;
};

bool ids_reserve(bt_ids *a, size_t n) {
    if (a->cap - a->n >= n) return true;
    size_t cap = a->cap ? a->cap : 256;
    while (cap - a->n < n) cap *= 2;
    int32_t *ids = realloc(a->ids, cap * sizeof *ids);
    if (!ids) return false;
    a->ids = ids;
    a->cap = cap;
    return true;
}

void ids_free(bt_ids *a) {
    free(a->ids);
    memset(a, 0, sizeof *a);
}

bt_tokenizer *tokenizer_new(const bt_vocab *v, bool lowercase, char *err, size_t errlen) {
    bt_tokenizer *t = calloc(1, sizeof *t);
    if (!t || !(t->cache = calloc(WORD_CACHE_SLOTS, sizeof *t->cache)) ||
        !basic_tokenizer_init(&t->basic, lowercase) ||
        !strmap_init(&t->initial, (size_t)v->size) ||
        !strmap_init(&t->continued, (size_t)v->size)) {
        snprintf(err, errlen, "tokenizer: out of memory for a vocab of %d tokens", v->size);
        tokenizer_free(t);
        return NULL;
    }
    t->vocab = v;
    t->unk_id = v->unk_id;
    for (int id = 0; id < v->size; id++) {
        const char *tok = v->tokens[id];
        size_t n = strlen(tok);
        /* as the reference reads vocab.txt: trailing whitespace trimmed, and a
         * token listed twice keeps its last id */
        while (n && (tok[n - 1] == ' ' || tok[n - 1] == '\t' || tok[n - 1] == '\r')) n--;
        int64_t *slot = strmap_upsert(&t->initial, tok, n, NULL);
        int64_t *cont = n >= 2 && tok[0] == '#' && tok[1] == '#'
                            ? strmap_upsert(&t->continued, tok + 2, n - 2, NULL)
                            : &(int64_t){0};
        if (!slot || !cont) {
            snprintf(err, errlen, "tokenizer: out of memory for a vocab of %d tokens", v->size);
            tokenizer_free(t);
            return NULL;
        }
        *slot = id;
        *cont = id;
        if (n > t->longest_initial) t->longest_initial = n;
        if (n >= 2 && tok[0] == '#' && tok[1] == '#' && n - 2 > t->longest_continued)
            t->longest_continued = n - 2;
    }
    return t;
}

void tokenizer_free(bt_tokenizer *t) {
    if (!t) return;
    free(t->cache);
    basic_tokenizer_free(&t->basic);
    strmap_free(&t->initial);
    strmap_free(&t->continued);
    free(t);
}

static bool is_utf8_continuation(char c) { return ((unsigned char)c & 0xC0) == 0x80; }

/* WordPiece of a word, uncached; hash is strmap_hash of the whole word. */
static bool encode_word_uncached(bt_tokenizer *t, const char *word, size_t n_bytes,
                                 size_t n_chars, uint64_t hash, bt_ids *out) {
    /* a word yields at most one piece per code point */
    size_t most = n_chars <= BT_WORD_MAX_CHARS ? n_chars : 1;
    if (!ids_reserve(out, most ? most : 1)) return false;
    if (n_chars > BT_WORD_MAX_CHARS) {
        out->ids[out->n++] = t->unk_id;
        return true;
    }
    size_t first = out->n, start = 0;
    while (start < n_bytes) {
        const bt_strmap *map = start == 0 ? &t->initial : &t->continued;
        size_t longest = start == 0 ? t->longest_initial : t->longest_continued;
        size_t end = n_bytes - start > longest ? start + longest : n_bytes;
        while (end < n_bytes && end > start && is_utf8_continuation(word[end])) end--;
        int64_t *id = NULL;
        while (end > start) { /* longest match first, one code point shorter each time */
            id = start == 0 && end == n_bytes ? strmap_find_hashed(map, word, n_bytes, hash)
                                              : strmap_find(map, word + start, end - start);
            if (id) break;
            do end--;
            while (end > start && is_utf8_continuation(word[end]));
        }
        if (!id) { /* no piece fits: the whole word is [UNK] */
            out->n = first;
            out->ids[out->n++] = t->unk_id;
            return true;
        }
        out->ids[out->n++] = (int32_t)*id;
        start = end;
    }
    return true;
}

bool tokenizer_encode_word(bt_tokenizer *t, const char *word, size_t n_bytes, size_t n_chars,
                           bt_ids *out) {
    if (n_bytes == 0) return true;
    uint64_t hash = strmap_hash(word, n_bytes);
    if (n_bytes > WORD_CACHE_BYTES || n_chars > BT_WORD_MAX_CHARS)
        return encode_word_uncached(t, word, n_bytes, n_chars, hash, out);
    cached_word *c = &t->cache[hash & (WORD_CACHE_SLOTS - 1)];
    uint32_t tag = (uint32_t)(hash >> 32);
    if (c->len == n_bytes && c->tag == tag && memcmp(c->word, word, n_bytes) == 0) {
        if (!ids_reserve(out, c->n_ids)) return false;
        memcpy(out->ids + out->n, c->ids, c->n_ids * sizeof *c->ids);
        out->n += c->n_ids;
        return true;
    }
    size_t first = out->n;
    if (!encode_word_uncached(t, word, n_bytes, n_chars, hash, out)) return false;
    size_t n_ids = out->n - first;
    if (n_ids <= WORD_CACHE_IDS) {
        c->tag = tag;
        c->len = (uint8_t)n_bytes;
        c->n_ids = (uint8_t)n_ids;
        memcpy(c->word, word, n_bytes);
        memcpy(c->ids, out->ids + first, n_ids * sizeof *c->ids);
    }
    return true;
}

/* basic_tokenize callback: WordPiece each word into t->out. */
static bool on_word(void *ctx, const char *word, size_t n_bytes, size_t n_chars) {
    bt_tokenizer *t = ctx;
    if (!tokenizer_encode_word(t, word, n_bytes, n_chars, t->out)) {
        t->out_of_memory = true;
        return false;
    }
    return true;
}

bool tokenizer_encode(bt_tokenizer *t, const char *text, size_t len, bt_ids *out,
                      size_t *n_invalid_utf8) {
    t->out = out;
    t->out_of_memory = false;
    basic_tokenize(&t->basic, text, len, on_word, t, n_invalid_utf8);
    t->out = NULL;
    return !t->out_of_memory;
}

char *tokenizer_decode(const bt_vocab *v, const int32_t *ids, size_t n) {
    size_t cap = 64, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[0] = 0;
    for (size_t i = 0; i < n; i++) {
        char unknown[32];
        const char *tok = unknown;
        if (ids[i] >= 0 && ids[i] < v->size) tok = v->tokens[ids[i]];
        else snprintf(unknown, sizeof unknown, "[%ld?]", (long)ids[i]);
        bool glue = tok[0] == '#' && tok[1] == '#' && tok[2] && i > 0;
        if (glue) tok += 2;
        size_t need = len + strlen(tok) + 2;
        if (need > cap) {
            while (need > cap) cap *= 2;
            char *bigger = realloc(s, cap);
            if (!bigger) {
                free(s);
                return NULL;
            }
            s = bigger;
        }
        if (i > 0 && !glue) s[len++] = ' ';
        memcpy(s + len, tok, strlen(tok) + 1);
        len += strlen(tok);
    }
    return s;
}
