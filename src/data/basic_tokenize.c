/* BERT basic tokenization (clean, CJK, lowercase + strip accents, split on
 * whitespace and punctuation), with a byte-table fast path for ASCII. */
#include "basic_tokenize.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* What an ASCII byte does (identical to the general path, precomputed). */
enum { ASCII_WORD, ASCII_SPACE, ASCII_PUNCT, ASCII_DROP };

#define ASCII_IS_PUNCT(c) \
    (((c) >= 33 && (c) <= 47) || ((c) >= 58 && (c) <= 64) || ((c) >= 91 && (c) <= 96) || \
     ((c) >= 123 && (c) <= 126))
#define ASCII_CLASS_OF(c)                                                               \
    ((c) == '\t' || (c) == '\n' || (c) == '\r' || (c) == ' ' ? ASCII_SPACE              \
     : (c) < 32 || (c) == 127                              ? ASCII_DROP /* Cc */      \
     : ASCII_IS_PUNCT(c)                                   ? ASCII_PUNCT              \
                                                           : ASCII_WORD)
#define ASCII_ROW4(c) ASCII_CLASS_OF(c), ASCII_CLASS_OF(c + 1), ASCII_CLASS_OF(c + 2), \
                      ASCII_CLASS_OF(c + 3)
#define ASCII_ROW16(c) ASCII_ROW4(c), ASCII_ROW4(c + 4), ASCII_ROW4(c + 8), ASCII_ROW4(c + 12)
static const unsigned char ascii_class[128] = {
    ASCII_ROW16(0),  ASCII_ROW16(16), ASCII_ROW16(32), ASCII_ROW16(48),
    ASCII_ROW16(64), ASCII_ROW16(80), ASCII_ROW16(96), ASCII_ROW16(112)};

static bool is_ascii_punct(uint32_t c) { return ASCII_IS_PUNCT(c); }

bool basic_is_cjk(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

size_t utf8_decode(const unsigned char *p, const unsigned char *end, uint32_t *cp,
                   bool *invalid) {
    unsigned c = p[0];
    *invalid = false;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    /* expected length and the allowed range of the second byte */
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c == 0xE0) need = 3, lo = 0xA0;
    else if (c == 0xED) need = 3, hi = 0x9F; /* no surrogates */
    else if (c >= 0xE1 && c <= 0xEF) need = 3;
    else if (c == 0xF0) need = 4, lo = 0x90;
    else if (c == 0xF4) need = 4, hi = 0x8F; /* <= U+10FFFF */
    else if (c >= 0xF1 && c <= 0xF3) need = 4;
    else need = 0; /* 0x80..0xC1, 0xF5..0xFF: never valid */
    uint32_t v = need == 2 ? (c & 0x1F) : need == 3 ? (c & 0x0F) : (c & 0x07);
    size_t k = 1;
    for (; need && k < need; k++) {
        if (p + k >= end) break;
        unsigned b = p[k];
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) break;
        v = (v << 6) | (b & 0x3F);
    }
    if (!need || k < need) {
        *cp = 0xFFFD;
        *invalid = true;
        return k; /* the maximal subpart: lead plus the continuation bytes that fit */
    }
    *cp = v;
    return need;
}

size_t utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

bool basic_tokenizer_init(bt_basic_tokenizer *b, bool lowercase) {
    memset(b, 0, sizeof *b);
    b->lowercase = lowercase;
    b->word_cap = 4 * (BT_WORD_MAX_CHARS + 2);
    b->word = malloc(b->word_cap);
    return b->word != NULL;
}

void basic_tokenizer_free(bt_basic_tokenizer *b) {
    free(b->word);
    memset(b, 0, sizeof *b);
}

/* State of one basic_tokenize call. */
typedef struct {
    bt_basic_tokenizer *b;
    bt_word_fn on_word;
    void *ctx;
    size_t run_start; /* byte offset in the word where the current run of
                       * combining marks (ccc > 0) starts; SIZE_MAX: none */
    bool stopped;
} scan_state;

/* Hand the current word (if any) to the callback and start a new one. */
static void flush_word(scan_state *s) {
    bt_basic_tokenizer *b = s->b;
    if (b->word_chars && !s->stopped && !s->on_word(s->ctx, b->word, b->word_len, b->word_chars))
        s->stopped = true;
    b->word_len = 0;
    b->word_chars = 0;
    s->run_start = SIZE_MAX;
}

/* A one-character word (punctuation, CJK). */
static void emit_single(scan_state *s, uint32_t cp) {
    flush_word(s);
    char buf[4];
    size_t n = utf8_encode(cp, buf);
    if (!s->stopped && !s->on_word(s->ctx, buf, n, 1)) s->stopped = true;
}

/* Append cp (combining class ccc) to the word, keeping NFD's canonical order:
 * a mark moves before earlier marks of its run with a larger class. */
static void append_char(scan_state *s, uint32_t cp, int ccc) {
    bt_basic_tokenizer *b = s->b;
    b->word_chars++;
    if (b->word_chars > BT_WORD_MAX_CHARS) return; /* [UNK] anyway; bound memory */
    char buf[4];
    size_t n = utf8_encode(cp, buf);
    size_t at = b->word_len;
    if (ccc == 0) {
        s->run_start = SIZE_MAX;
    } else if (s->run_start == SIZE_MAX) {
        s->run_start = at;
    } else {
        /* walk back over marks of the run with a larger combining class */
        while (at > s->run_start) {
            size_t prev = at - 1;
            while (prev > s->run_start && ((unsigned char)b->word[prev] & 0xC0) == 0x80) prev--;
            uint32_t pcp;
            bool bad;
            utf8_decode((const unsigned char *)b->word + prev,
                        (const unsigned char *)b->word + at, &pcp, &bad);
            if (utf8proc_get_property((utf8proc_int32_t)pcp)->combining_class <= ccc) break;
            at = prev;
        }
    }
    memmove(b->word + at + n, b->word + at, b->word_len - at);
    memcpy(b->word + at, buf, n);
    b->word_len += n;
}

static bool is_space_category(int cat) {
    return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL ||
           cat == UTF8PROC_CATEGORY_ZP;
}

static bool is_punct_category(int cat) {
    return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

/* Place one normalized code point: split, isolate, or append. */
static void place_char(scan_state *s, uint32_t cp, const utf8proc_property_t *prop,
                       bool isolate) {
    if (cp < 128 ? ascii_class[cp] == ASCII_SPACE : is_space_category(prop->category)) {
        flush_word(s);
        s->run_start = SIZE_MAX;
    } else if (isolate || is_ascii_punct(cp) || is_punct_category(prop->category)) {
        emit_single(s, cp);
    } else {
        append_char(s, cp, prop->combining_class);
    }
}

/* One non-ASCII code point of the input (valid, not U+FFFD). */
static void scan_codepoint(scan_state *s, uint32_t cp) {
    const utf8proc_property_t *prop = utf8proc_get_property((utf8proc_int32_t)cp);
    int cat = prop->category;
    if (cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
        cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CS)
        return; /* clean_text drops controls without splitting */
    if (is_space_category(cat)) {
        flush_word(s);
        return;
    }
    bool cjk = basic_is_cjk(cp);
    if (cjk) flush_word(s);
    if (!s->b->lowercase) {
        place_char(s, cp, prop, cjk);
    } else {
        utf8proc_int32_t nfd[32];
        utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)cp, nfd, 32,
                                                     UTF8PROC_DECOMPOSE, NULL);
        if (n < 0 || n > 32) { /* cannot happen for NFD; keep cp as is */
            nfd[0] = (utf8proc_int32_t)cp;
            n = 1;
        }
        for (utf8proc_ssize_t i = 0; i < n; i++) {
            const utf8proc_property_t *p = utf8proc_get_property(nfd[i]);
            if (p->category == UTF8PROC_CATEGORY_MN) { /* strip accents */
                if (p->combining_class == 0) s->run_start = SIZE_MAX; /* still a starter */
                continue;
            }
            uint32_t lower = (uint32_t)utf8proc_tolower(nfd[i]);
            if (lower != (uint32_t)nfd[i]) p = utf8proc_get_property((utf8proc_int32_t)lower);
            place_char(s, lower, p, cjk);
        }
    }
    if (cjk) flush_word(s);
}

bool basic_tokenize(bt_basic_tokenizer *b, const char *text, size_t len, bt_word_fn on_word,
                    void *ctx, size_t *n_invalid_utf8) {
    scan_state s = {b, on_word, ctx, SIZE_MAX, false};
    b->word_len = 0;
    b->word_chars = 0;
    const unsigned char *p = (const unsigned char *)text, *end = p + len;
    const bool lower = b->lowercase;
    size_t invalid = 0;
    while (p < end && !s.stopped) {
        unsigned c = *p;
        if (c < 0x80) {
            /* ASCII fast path: a run of word bytes, then one other byte */
            while (ascii_class[c] == ASCII_WORD) {
                if (++b->word_chars <= BT_WORD_MAX_CHARS)
                    b->word[b->word_len++] =
                        (char)(lower && c >= 'A' && c <= 'Z' ? c + 32 : c);
                if (++p == end || (c = *p) >= 0x80) break;
            }
            s.run_start = SIZE_MAX;
            if (p == end || c >= 0x80) continue;
            switch (ascii_class[c]) {
            case ASCII_SPACE: flush_word(&s); break;
            case ASCII_PUNCT: emit_single(&s, c); break;
            default: break; /* ASCII_DROP */
            }
            p++;
            continue;
        }
        uint32_t cp;
        bool bad;
        p += utf8_decode(p, end, &cp, &bad);
        if (bad) {
            invalid++;
            continue; /* U+FFFD: dropped by clean_text */
        }
        if (cp != 0xFFFD) scan_codepoint(&s, cp);
    }
    flush_word(&s);
    if (n_invalid_utf8) *n_invalid_utf8 += invalid;
    return !s.stopped;
}
