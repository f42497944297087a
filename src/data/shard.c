/* Shard reading and verification. */
#include "shard.h"

#include "shard_record.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

/* crc32 over a large buffer (zlib takes uInt lengths) */
static uint32_t crc_of(const unsigned char *p, size_t n) {
    uLong c = crc32(0L, Z_NULL, 0);
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)c;
}

#define BAD(...)                                                                             \
    do {                                                                                     \
        int k_ = snprintf(err, errlen, "%s: ", path);                                        \
        if (k_ > 0 && (size_t)k_ < errlen) snprintf(err + k_, errlen - (size_t)k_, __VA_ARGS__); \
        shard_close(s);                                                                      \
        return false;                                                                        \
    } while (0)

/* The payload's offsets and tokens: both spans, increasing offsets, every
 * id < model_vocab, and the tokens counted into s->count. false after one
 * line in err. */
static bool check_payload(bt_shard *s, const char *path, uint32_t model_vocab, char *err,
                          size_t errlen) {
    if (s->sent_offsets[0] != 0 || s->sent_offsets[s->n_sents] != s->n_tokens)
        BAD("sentence offsets do not span the tokens");
    for (uint64_t i = 0; i < s->n_sents; i++)
        if (s->sent_offsets[i + 1] <= s->sent_offsets[i])
            BAD("sentence offset %llu is not increasing", (unsigned long long)i + 1);
    if (s->doc_offsets[0] != 0 || s->doc_offsets[s->n_docs] != s->n_sents)
        BAD("document offsets do not span the sentences");
    for (uint64_t i = 0; i < s->n_docs; i++)
        if (s->doc_offsets[i + 1] <= s->doc_offsets[i])
            BAD("document offset %llu is not increasing", (unsigned long long)i + 1);
    if (!(s->count = calloc((size_t)model_vocab + 1, sizeof *s->count)))
        BAD("out of host memory counting its tokens");
    for (uint64_t i = 0; i < s->n_tokens; i++) {
        uint32_t t = shard_token(s, i);
        if (t >= model_vocab)
            BAD("token id %u at byte offset %zu is >= vocab_size %u", t,
                SHARD_HEADER_BYTES + (size_t)i * s->token_width, model_vocab);
        s->count[t]++;
        if (t + 1 > s->n_ids) s->n_ids = t + 1;
    }
    return true;
}

/* shard_open and shard_open_recorded: records says whether to use them. */
static bool open_shard(bt_shard *s, const char *path, uint64_t vocab_hash, uint32_t model_vocab,
                       bool records, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) BAD("cannot open shard: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        BAD("not a regular file");
    }
    if (st.st_size < SHARD_HEADER_BYTES) {
        close(fd);
        BAD("truncated: %lld bytes, shorter than the %d-byte header", (long long)st.st_size,
            SHARD_HEADER_BYTES);
    }
    s->size = (size_t)st.st_size;
    /* mapped read-only: memory is the page cache, not a private copy */
    void *map = mmap(NULL, s->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) BAD("cannot map %zu bytes: %s", s->size, strerror(errno));
    s->data = map;
    const unsigned char *h = s->data;
    if (memcmp(h, SHARD_MAGIC, 8) != 0) BAD("not a bertrain shard (bad magic)");
    if (rd32(h + 60) != crc_of(h, 60)) BAD("header checksum mismatch (damaged header)");
    s->version = rd32(h + 8);
    s->token_width = rd32(h + 12);
    s->vocab_size = rd32(h + 16);
    s->flags = rd32(h + 20);
    s->vocab_hash = rd64(h + 24);
    s->n_docs = rd64(h + 32);
    s->n_sents = rd64(h + 40);
    s->n_tokens = rd64(h + 48);
    if (s->version != SHARD_VERSION)
        BAD("format version %u, this bertrain reads version %d", s->version, SHARD_VERSION);
    if (s->token_width != 2 && s->token_width != 4) BAD("token width %u (expected 2 or 4)",
                                                          s->token_width);
    if (s->token_width == 2 && s->vocab_size > 65536)
        BAD("token width 2 cannot hold vocab_size %u (damaged header)", s->vocab_size);
    if (s->n_tokens > s->size || s->n_sents > s->size || s->n_docs > s->size)
        BAD("header counts exceed the file size (damaged header)");
    size_t tok_end = SHARD_HEADER_BYTES + (size_t)s->n_tokens * s->token_width;
    size_t off_start = (tok_end + 7) / 8 * 8;
    size_t expect = off_start + 8 * ((size_t)s->n_sents + 1) + 8 * ((size_t)s->n_docs + 1);
    if (s->size != expect)
        BAD("size %zu bytes, expected %zu from the header (truncated or extended)", s->size,
            expect);
    if (vocab_hash && s->vocab_hash != vocab_hash)
        BAD("made with a different vocab (hash %016llx, configured vocab %016llx)",
            (unsigned long long)s->vocab_hash, (unsigned long long)vocab_hash);
    s->tokens = s->data + SHARD_HEADER_BYTES;
    s->sent_offsets = (const uint64_t *)(s->data + off_start); /* little-endian host */
    s->doc_offsets = s->sent_offsets + s->n_sents + 1;
    shard_facts known;
    if (records && shard_record_load(&st, rd32(h + 60), &known)) {
        s->count = known.count;
        s->n_ids = known.n_ids;
        s->verified_earlier = true;
        if (s->n_ids > model_vocab)
            BAD("holds token id %u, >= vocab_size %u", s->n_ids - 1, model_vocab);
        return true;
    }
    if (rd32(h + 56) != crc_of(h + SHARD_HEADER_BYTES, s->size - SHARD_HEADER_BYTES))
        BAD("payload checksum mismatch (the file is damaged)");
    if (!check_payload(s, path, model_vocab, err, errlen)) return false;
    if (records)
        shard_record_save(&st, rd32(h + 60),
                          &(shard_facts){s->n_ids ? s->n_ids - 1 : 0, s->n_ids, s->count});
    return true;
}

bool shard_open(bt_shard *s, const char *path, uint64_t vocab_hash, uint32_t model_vocab,
                char *err, size_t errlen) {
    return open_shard(s, path, vocab_hash, model_vocab, false, err, errlen);
}

bool shard_open_recorded(bt_shard *s, const char *path, uint64_t vocab_hash,
                         uint32_t model_vocab, char *err, size_t errlen) {
    return open_shard(s, path, vocab_hash, model_vocab, true, err, errlen);
}

void shard_close(bt_shard *s) {
    if (s->data) munmap(s->data, s->size);
    s->data = NULL;
    free(s->count);
    s->count = NULL;
}
