/* `bertrain prep` writes shards that shard_open reads back to the tokenizer's
 * ids, document by document and sentence by sentence (2- and 4-byte token
 * widths, one shard and several, train/valid split); and shard_open catches
 * truncation, a flipped header byte, a flipped payload byte, a wrong vocab and
 * an out-of-range id with the expected message. Usage: test_shards [VOCAB]
 * (default $top_srcdir/data/demo/vocab.txt). Exit 0 when all checks pass. */
#include "cli/cli.h"
#include "data/shard.h"
#include "data/vocab.h"
#include "data/wordpiece.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static int n_checks, n_failed;

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        n_checks++;                                                                          \
        if (!(cond)) {                                                                       \
            n_failed++;                                                                      \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                      \
            printf(__VA_ARGS__);                                                             \
            printf("\n");                                                                    \
        }                                                                                    \
    } while (0)

static char tmpdir[512];

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        printf("FAIL: cannot write %s\n", path);
        exit(1);
    }
}

static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

/* Run `bertrain prep ARGS...` in-process; its exit code. */
static int run_prep(int argc, const char **argv) {
    fflush(stdout);
    return cli_prep(argc, (char **)argv);
}

/* The corpus: documents of sentences, with the awkward bits prep must handle. */
static const char CORPUS_A[] =
    "The first document. It has two lines.\n"
    "Second sentence, with caf\xc3\xa9 and na\xc3\xafve and \xe4\xb8\xad\xe6\x96\x87.\n"
    "  \t \r\n" /* whitespace-only: a document break */
    "Second document\r\n"
    "\x01\x02\x7f\n" /* only control characters: no tokens, skipped */
    "bad bytes \xff\xfe here \xc3 and there\n"
    "\n\n\n"
    "Third document: one line, no newline at the end";
static const char CORPUS_B[] =
    "\n"
    "Fourth document (another file).\n"
    "\n"
    "Fifth document. [MASK] is just text here.\n"
    "It ends with the file.\n";

/* Expected documents: lists of non-blank lines of the corpus, tokenized; the
 * sentences with no tokens dropped, documents with no sentences dropped. */
typedef struct {
    bt_ids ids;         /* all tokens in order */
    size_t sents[64];   /* sentence end offsets into ids */
    size_t n_sents;
    size_t docs[16];    /* document end offsets into sents */
    size_t n_docs;
} expected_corpus;

static void expect_text(expected_corpus *e, bt_tokenizer *tok, const char *text) {
    const char *p = text, *end = text + strlen(text);
    bool in_doc = false;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl ? nl + 1 : end;
        bool blank = true;
        for (const char *q = p; q < line_end; q++)
            if (!strchr(" \t\r\n\v\f", *q)) blank = false;
        if (blank) {
            if (in_doc && e->n_sents > (e->n_docs ? e->docs[e->n_docs - 1] : 0))
                e->docs[e->n_docs++] = e->n_sents;
            in_doc = false;
        } else {
            in_doc = true;
            size_t before = e->ids.n;
            tokenizer_encode(tok, p, (size_t)(line_end - p), &e->ids, NULL);
            if (e->ids.n > before) e->sents[e->n_sents++] = e->ids.n;
        }
        p = line_end;
    }
    if (in_doc && e->n_sents > (e->n_docs ? e->docs[e->n_docs - 1] : 0))
        e->docs[e->n_docs++] = e->n_sents;
}

/* Append the documents of shard s (opened) to got, in the same layout. */
static void collect_shard(expected_corpus *got, const bt_shard *s) {
    for (uint64_t d = 0; d < s->n_docs; d++) {
        for (uint64_t k = s->doc_offsets[d]; k < s->doc_offsets[d + 1]; k++) {
            for (uint64_t i = s->sent_offsets[k]; i < s->sent_offsets[k + 1]; i++) {
                ids_reserve(&got->ids, 1);
                got->ids.ids[got->ids.n++] = (int32_t)shard_token(s, i);
            }
            got->sents[got->n_sents++] = got->ids.n;
        }
        got->docs[got->n_docs++] = got->n_sents;
    }
}

static bool same_corpus(const expected_corpus *a, const expected_corpus *b) {
    return a->ids.n == b->ids.n && !memcmp(a->ids.ids, b->ids.ids, a->ids.n * 4) &&
           a->n_sents == b->n_sents && !memcmp(a->sents, b->sents, a->n_sents * sizeof *a->sents) &&
           a->n_docs == b->n_docs && !memcmp(a->docs, b->docs, a->n_docs * sizeof *a->docs);
}

/* Open path expecting failure whose message contains want. */
static void expect_open_error(const char *path, uint64_t hash, uint32_t model_vocab,
                              const char *want, const char *what) {
    bt_shard s;
    char err[1024] = "";
    bool ok = shard_open(&s, path, hash, model_vocab, err, sizeof err);
    if (ok) shard_close(&s);
    CHECK(!ok && strstr(err, want) && strstr(err, path),
          "%s: expected an error containing \"%s\" naming the file, got %s \"%s\"", what, want,
          ok ? "success" : "error", err);
    if (!ok) printf("  %-28s -> %s\n", what, err);
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Rewrite both CRCs of a shard image after a deliberate edit. */
static void refresh_crcs(unsigned char *b, size_t n) {
    put32(b + 56, (uint32_t)crc32(crc32(0L, Z_NULL, 0), b + 64, (uInt)(n - 64)));
    put32(b + 60, (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, 60));
}

static bool no_tmp_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return true;
    bool clean = true;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp")) clean = false;
    closedir(d);
    return clean;
}

/* Round trip through prep for one vocab (width 2 or 4). */
static void round_trip(const char *vocab_path, const char *tag, uint32_t want_width) {
    char a[600], b[600], out[600], train[700], valid[700];
    snprintf(a, sizeof a, "%s/a.txt", tmpdir);
    snprintf(b, sizeof b, "%s/b.txt", tmpdir);
    snprintf(out, sizeof out, "%s/out-%s", tmpdir, tag);
    bt_vocab v;
    char err[1024];
    if (!vocab_load(&v, vocab_path, err, sizeof err)) {
        printf("FAIL: %s\n", err);
        exit(1);
    }
    bt_tokenizer *tok = tokenizer_new(&v, true, err, sizeof err);
    expected_corpus want = {0};
    expect_text(&want, tok, CORPUS_A);
    expect_text(&want, tok, CORPUS_B);

    /* everything in one train shard */
    const char *args1[] = {"--vocab", vocab_path, "--lowercase", "--out", out,
                           "--valid-fraction", "0", a, b};
    CHECK(run_prep(9, args1) == 0, "%s: prep --valid-fraction 0 failed", tag);
    snprintf(train, sizeof train, "%s/train.shard", out);
    bt_shard s;
    bool ok = shard_open(&s, train, v.hash, (uint32_t)v.size, err, sizeof err);
    CHECK(ok, "%s: %s", tag, err);
    if (ok) {
        expected_corpus got = {0};
        collect_shard(&got, &s);
        CHECK(same_corpus(&want, &got),
              "%s: shard ids/sentences/documents differ from the tokenizer's (%zu/%zu/%zu vs "
              "%zu/%zu/%zu)", tag, got.ids.n, got.n_sents, got.n_docs, want.ids.n, want.n_sents,
              want.n_docs);
        CHECK(s.token_width == want_width, "%s: token width %u, expected %u", tag, s.token_width,
              want_width);
        CHECK(s.flags == 1 && s.vocab_size == (uint32_t)v.size, "%s: flags %u vocab_size %u", tag,
              s.flags, s.vocab_size);
        printf("  %s: round trip of %zu documents, %zu sentences, %zu tokens, width %u: %s\n", tag,
               got.n_docs, got.n_sents, got.ids.n, s.token_width,
               same_corpus(&want, &got) ? "identical" : "DIFFERENT");
        ids_free(&got.ids);
        shard_close(&s);
    }

    /* a train/valid split and 1-token train shards: the union is the same corpus */
    const char *args2[] = {"--vocab", vocab_path, "--lowercase", "--out", out,
                           "--valid-fraction", "0.4", "--shard-tokens", "1", a, b};
    CHECK(run_prep(11, args2) == 0, "%s: prep with a split failed", tag);
    CHECK(access(train, F_OK) != 0, "%s: stale %s left behind by the multi-shard run", tag, train);
    size_t total_docs = 0, total_tokens = 0;
    int n_shards = 0;
    for (int i = 0;; i++) {
        snprintf(train, sizeof train, "%s/train/train-%05d.shard", out, i);
        if (access(train, F_OK) != 0) break;
        ok = shard_open(&s, train, v.hash, (uint32_t)v.size, err, sizeof err);
        CHECK(ok, "%s: %s", tag, err);
        if (!ok) break;
        n_shards++;
        total_docs += s.n_docs;
        total_tokens += s.n_tokens;
        shard_close(&s);
    }
    snprintf(valid, sizeof valid, "%s/valid.shard", out);
    ok = shard_open(&s, valid, v.hash, (uint32_t)v.size, err, sizeof err);
    CHECK(ok, "%s: %s", tag, err);
    if (ok) {
        CHECK(s.n_docs >= 1, "%s: the valid split is empty", tag);
        total_docs += s.n_docs;
        total_tokens += s.n_tokens;
        shard_close(&s);
    }
    CHECK(n_shards >= 2 && total_docs == want.n_docs && total_tokens == want.ids.n,
          "%s: split run: %d train shards, %zu docs, %zu tokens (want >= 2, %zu, %zu)", tag,
          n_shards, total_docs, total_tokens, want.n_docs, want.ids.n);
    CHECK(no_tmp_files(out), "%s: temp files left in %s", tag, out);
    printf("  %s: split run: %d train shards + valid, %zu documents, %zu tokens in all\n", tag,
           n_shards, total_docs, total_tokens);
    ids_free(&want.ids);
    tokenizer_free(tok);
    vocab_free(&v);
}

int main(int argc, char **argv) {
    const char *top = getenv("top_srcdir");
    char vocab_path[4096];
    snprintf(vocab_path, sizeof vocab_path, "%s/data/demo/vocab.txt", top ? top : ".");
    if (argc > 1) snprintf(vocab_path, sizeof vocab_path, "%s", argv[1]);
    snprintf(tmpdir, sizeof tmpdir, "%s/bertrain-shards.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL: cannot create a temp dir\n");
        return 1;
    }
    char path[2048], big_vocab[1024], empty[1024], out[1024];
    snprintf(path, sizeof path, "%s/a.txt", tmpdir);
    write_file(path, CORPUS_A, strlen(CORPUS_A));
    snprintf(path, sizeof path, "%s/b.txt", tmpdir);
    write_file(path, CORPUS_B, strlen(CORPUS_B));

    printf("round trips (prep -> shard_open -> ids):\n");
    round_trip(vocab_path, "demo-vocab", 2);
    /* a vocab over 65536 tokens: 4-byte ids */
    snprintf(big_vocab, sizeof big_vocab, "%s/big-vocab.txt", tmpdir);
    size_t n;
    unsigned char *vocab_text = read_file(vocab_path, &n);
    if (!vocab_text) {
        printf("FAIL: cannot read %s\n", vocab_path);
        return 1;
    }
    FILE *f = fopen(big_vocab, "wb");
    fwrite(vocab_text, 1, n, f);
    for (int i = 0; i < 70000; i++) fprintf(f, "[filler%d]\n", i);
    fclose(f);
    free(vocab_text);
    round_trip(big_vocab, "big-vocab", 4);

    printf("damage detection (shard_open):\n");
    bt_vocab v;
    char err[1024];
    if (!vocab_load(&v, vocab_path, err, sizeof err)) {
        printf("FAIL: %s\n", err);
        return 1;
    }
    char good[1024], bad[1024];
    snprintf(good, sizeof good, "%s/out-demo-vocab/valid.shard", tmpdir);
    snprintf(bad, sizeof bad, "%s/damaged.shard", tmpdir);
    unsigned char *img = read_file(good, &n);
    CHECK(img && n > 80, "cannot read %s", good);
    if (!img || n <= 80) return 1;
    uint32_t model = (uint32_t)v.size;

    write_file(bad, img, n - 1);
    expect_open_error(bad, v.hash, model, "(truncated or extended)", "truncated by 1 byte");
    write_file(bad, img, 40);
    expect_open_error(bad, v.hash, model, "shorter than the 64-byte header",
                      "truncated to 40 bytes");
    img[41] ^= 0x01; /* n_sents */
    write_file(bad, img, n);
    expect_open_error(bad, v.hash, model, "header checksum mismatch", "flipped header byte");
    img[41] ^= 0x01;
    img[64] ^= 0x20; /* first token */
    write_file(bad, img, n);
    expect_open_error(bad, v.hash, model, "payload checksum mismatch", "flipped payload byte");
    img[64] ^= 0x20;
    write_file(bad, img, n);
    expect_open_error(bad, v.hash ^ 1, model, "made with a different vocab", "wrong vocab");
    unsigned char saved[2] = {img[66], img[67]};
    img[66] = 0xFF; /* second token := 65535, CRCs made consistent */
    img[67] = 0xFF;
    refresh_crcs(img, n);
    write_file(bad, img, n);
    expect_open_error(bad, v.hash, model, "token id 65535 at byte offset 66 is >= vocab_size",
                      "out-of-range id");
    img[66] = saved[0];
    img[67] = saved[1];
    refresh_crcs(img, n);
    write_file(bad, img, n);
    bt_shard s;
    bool ok = shard_open(&s, bad, v.hash, model, err, sizeof err);
    CHECK(ok, "restored image does not open: %s", err);
    if (ok) shard_close(&s);
    free(img);

    printf("prep errors:\n");
    snprintf(empty, sizeof empty, "%s/empty.txt", tmpdir);
    write_file(empty, "\n \n\t\n", 5);
    snprintf(out, sizeof out, "%s/out-empty", tmpdir);
    const char *args[] = {"--vocab", vocab_path, "--out", out, empty};
    int rc = run_prep(5, args);
    snprintf(path, sizeof path, "%s/train.shard", out);
    CHECK(rc == 2 && access(path, F_OK) != 0, "empty input: rc %d (want 2: bad input), train.shard %s", rc,
          access(path, F_OK) == 0 ? "written" : "absent");
    const char *args_missing[] = {"--vocab", vocab_path, "--out", out, "/nonexistent/corpus.txt"};
    rc = run_prep(5, args_missing);
    CHECK(rc == 2, "missing input file: rc %d (want 2: bad input)", rc);
    const char *args_inspect[] = {"--inspect", good, "--vocab", vocab_path};
    rc = run_prep(4, args_inspect);
    CHECK(rc == 0, "prep --inspect: rc %d", rc);
    vocab_free(&v);

    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
    printf("shards: %d checks, %d failed\n", n_checks, n_failed);
    return n_failed ? 1 : 0;
}
