/* Our WordPiece ids == Hugging Face tokenizers' ids for every case of a
 * fixture written by tests/python/tokenizer_cases.py (and the same count of invalid
 * UTF-8 sequences). Usage: test_tokenizer [VOCAB [CASES]]; the defaults are
 * the committed fixtures under $top_srcdir (or .). Exit 0 when all match. */
#include "data/vocab.h"
#include "data/wordpiece.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hex_value(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Print ids with their tokens, e.g. "7592(hello) 1010(,)". */
static void print_ids(const bt_vocab *v, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        printf(" %d(%s)", ids[i], ids[i] >= 0 && ids[i] < v->size ? v->tokens[ids[i]] : "?");
    printf("\n");
}

/* Print bytes as a C-like string with non-printables escaped. */
static void print_bytes(const unsigned char *p, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7F && p[i] != '"' && p[i] != '\\') putchar(p[i]);
        else printf("\\x%02x", p[i]);
    }
    printf("\" (%zu bytes)\n", n);
}

int main(int argc, char **argv) {
    const char *top = getenv("top_srcdir");
    char vocab_default[4096], cases_default[4096];
    snprintf(vocab_default, sizeof vocab_default, "%s/tests/fixtures/bert-uncased-vocab.txt",
             top ? top : ".");
    snprintf(cases_default, sizeof cases_default, "%s/tests/fixtures/tokenizer_cases.txt",
             top ? top : ".");
    const char *vocab_path = argc > 1 ? argv[1] : vocab_default;
    const char *cases_path = argc > 2 ? argv[2] : cases_default;

    char err[512];
    bt_vocab vocab;
    if (!vocab_load(&vocab, vocab_path, err, sizeof err)) {
        printf("FAIL: %s\n", err);
        return 1;
    }
    bt_tokenizer *tok[2] = {tokenizer_new(&vocab, true, err, sizeof err),
                            tokenizer_new(&vocab, false, err, sizeof err)};
    FILE *f = fopen(cases_path, "r");
    if (!tok[0] || !tok[1] || !f) {
        printf("FAIL: %s\n", f ? err : cases_path);
        return 1;
    }
    char *line = NULL;
    size_t line_cap = 0;
    long line_no = 0, n_cases = 0, n_mode[2] = {0, 0}, n_fail = 0, n_invalid_total = 0;
    unsigned char *input = NULL;
    bt_ids got = {0}, want = {0};
    while (getline(&line, &line_cap, f) >= 0) {
        line_no++;
        if (line[0] == '#' || line[0] == '\n') continue;
        char *fields[4] = {line, NULL, NULL, NULL};
        for (int k = 1; k < 4; k++) {
            char *tab = strchr(fields[k - 1], '\t');
            if (!tab) {
                printf("FAIL: %s:%ld: expected 4 tab-separated fields\n", cases_path, line_no);
                return 1;
            }
            *tab = 0;
            fields[k] = tab + 1;
        }
        bool lower = fields[0][0] == 'L';
        size_t hex_len = strlen(fields[1]), n = hex_len / 2;
        input = realloc(input, n + 1);
        for (size_t i = 0; i < n; i++)
            input[i] = (unsigned char)(hex_value(fields[1][2 * i]) * 16 +
                                       hex_value(fields[1][2 * i + 1]));
        long want_invalid = strtol(fields[2], NULL, 10);
        want.n = 0;
        for (char *p = fields[3], *e; ; p = e) {
            long id = strtol(p, &e, 10);
            if (e == p) break;
            ids_reserve(&want, 1);
            want.ids[want.n++] = (int32_t)id;
        }
        got.n = 0;
        size_t got_invalid = 0;
        tokenizer_encode(tok[lower ? 0 : 1], (const char *)input, n, &got, &got_invalid);
        n_cases++;
        n_mode[lower ? 0 : 1]++;
        n_invalid_total += want_invalid;
        bool same = got.n == want.n && (got.n == 0 || !memcmp(got.ids, want.ids, got.n * 4)) &&
                    (long)got_invalid == want_invalid;
        if (!same && n_fail++ == 0) {
            size_t at = 0;
            while (at < got.n && at < want.n && got.ids[at] == want.ids[at]) at++;
            printf("FAIL: %s:%ld (%s mode): input ", cases_path, line_no,
                   lower ? "lowercase" : "cased");
            print_bytes(input, n);
            printf("  first difference at id index %zu; invalid UTF-8 expected %ld, got %zu\n",
                   at, want_invalid, got_invalid);
            printf("  expected:");
            print_ids(&vocab, want.ids, want.n);
            printf("  got:     ");
            print_ids(&vocab, got.ids, got.n);
        }
    }
    printf("tokenizer: %ld cases from %s (%ld lowercase, %ld cased, %ld invalid UTF-8 "
           "sequences) against vocab %s: %ld mismatched\n",
           n_cases, cases_path, n_mode[0], n_mode[1], n_invalid_total, vocab_path, n_fail);
    free(line);
    free(input);
    ids_free(&got);
    ids_free(&want);
    fclose(f);
    tokenizer_free(tok[0]);
    tokenizer_free(tok[1]);
    vocab_free(&vocab);
    if (n_cases < 200) {
        printf("FAIL: only %ld cases (expected at least 200)\n", n_cases);
        return 1;
    }
    return n_fail ? 1 : 0;
}
