/* Streaming BRTSHARD v1 writer. */
#include "shard_write.h"

#include "shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

struct bt_shard_writer {
    char *path, *tmp_path;
    FILE *f;
    uint32_t vocab_size, token_width, flags;
    uint64_t vocab_hash;
    uint64_t *sent_offsets; /* sentences + 1 token indices, first 0 */
    size_t n_sent_offsets, sent_cap;
    uint64_t *doc_offsets; /* documents + 1 sentence indices, first 0 */
    size_t n_doc_offsets, doc_cap;
    uint64_t n_tokens;
    uLong payload_crc; /* running CRC-32 of every byte after the header */
    bool finished;
};

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Write n bytes of the payload, folding them into the running CRC. */
static bool write_payload(bt_shard_writer *w, const unsigned char *p, size_t n) {
    w->payload_crc = crc32(w->payload_crc, p, (uInt)n); /* callers pass < 4 GiB */
    return fwrite(p, 1, n, w->f) == n;
}

/* Append v to a growable u64 array. */
static bool push_u64(uint64_t **a, size_t *n, size_t *cap, uint64_t v) {
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 1024;
        uint64_t *b = realloc(*a, c * sizeof *b);
        if (!b) return false;
        *a = b;
        *cap = c;
    }
    (*a)[(*n)++] = v;
    return true;
}

bt_shard_writer *shard_writer_open(const char *path, uint32_t vocab_size, uint64_t vocab_hash,
                                   uint32_t flags, char *err, size_t errlen) {
    bt_shard_writer *w = calloc(1, sizeof *w);
    size_t n = strlen(path);
    if (w) {
        w->path = strdup(path);
        w->tmp_path = malloc(n + 32);
    }
    if (!w || !w->path || !w->tmp_path ||
        !push_u64(&w->sent_offsets, &w->n_sent_offsets, &w->sent_cap, 0) ||
        !push_u64(&w->doc_offsets, &w->n_doc_offsets, &w->doc_cap, 0)) {
        snprintf(err, errlen, "%s: out of memory", path);
        shard_writer_abort(w);
        return NULL;
    }
    snprintf(w->tmp_path, n + 32, "%s.tmp-%ld", path, (long)getpid());
    w->vocab_size = vocab_size;
    w->token_width = vocab_size <= 65536 ? 2 : 4;
    w->flags = flags;
    w->vocab_hash = vocab_hash;
    w->payload_crc = crc32(0L, Z_NULL, 0);
    /* a new file only: a file of that name, whoever wrote it, is never truncated */
    const int fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    w->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!w->f) {
        const int e = errno;
        if (fd >= 0) close(fd);
        snprintf(err, errlen, "%s: cannot create: %s", w->tmp_path, strerror(e));
        free(w->tmp_path);
        w->tmp_path = NULL; /* nothing to remove */
        shard_writer_abort(w);
        return NULL;
    }
    static char header_placeholder[SHARD_HEADER_BYTES];
    if (fwrite(header_placeholder, 1, SHARD_HEADER_BYTES, w->f) != SHARD_HEADER_BYTES) {
        snprintf(err, errlen, "%s: write error: %s", w->tmp_path, strerror(errno));
        shard_writer_abort(w);
        return NULL;
    }
    return w;
}

bool shard_writer_add_sentence(bt_shard_writer *w, const int32_t *ids, size_t n, char *err,
                               size_t errlen) {
    if (n == 0) return true;
    unsigned char buf[4096];
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= w->vocab_size) {
            snprintf(err, errlen, "%s: token id %ld is outside the vocab (size %u)", w->tmp_path,
                     (long)ids[i], w->vocab_size);
            return false;
        }
        uint32_t id = (uint32_t)ids[i];
        for (uint32_t b = 0; b < w->token_width; b++) buf[used++] = (unsigned char)(id >> (8 * b));
        if (used == sizeof buf || i + 1 == n) {
            if (!write_payload(w, buf, used)) {
                snprintf(err, errlen, "%s: write error: %s", w->tmp_path, strerror(errno));
                return false;
            }
            used = 0;
        }
    }
    w->n_tokens += n;
    if (!push_u64(&w->sent_offsets, &w->n_sent_offsets, &w->sent_cap, w->n_tokens)) {
        snprintf(err, errlen, "%s: out of memory for sentence offsets", w->tmp_path);
        return false;
    }
    return true;
}

bool shard_writer_end_document(bt_shard_writer *w, char *err, size_t errlen) {
    uint64_t sents = w->n_sent_offsets - 1, last_doc_end = w->doc_offsets[w->n_doc_offsets - 1];
    if (sents == last_doc_end) return true; /* no sentences: skip the empty document */
    if (!push_u64(&w->doc_offsets, &w->n_doc_offsets, &w->doc_cap, sents)) {
        snprintf(err, errlen, "%s: out of memory for document offsets", w->tmp_path);
        return false;
    }
    return true;
}

uint64_t shard_writer_docs(const bt_shard_writer *w) { return w->n_doc_offsets - 1; }
uint64_t shard_writer_sentences(const bt_shard_writer *w) { return w->n_sent_offsets - 1; }
uint64_t shard_writer_tokens(const bt_shard_writer *w) { return w->n_tokens; }

bool shard_writer_finish(bt_shard_writer *w, char *err, size_t errlen) {
    if (!shard_writer_end_document(w, err, errlen)) return false;
    uint64_t n_sents = w->n_sent_offsets - 1, n_docs = w->n_doc_offsets - 1;
    /* zero padding to a multiple of 8 bytes from the file start */
    size_t tok_end = SHARD_HEADER_BYTES + (size_t)(w->n_tokens * w->token_width);
    unsigned char zeros[8] = {0}, buf[8 * 512];
    bool ok = write_payload(w, zeros, (8 - tok_end % 8) % 8);
    const uint64_t *arrays[2] = {w->sent_offsets, w->doc_offsets};
    size_t lens[2] = {(size_t)n_sents + 1, (size_t)n_docs + 1};
    for (int a = 0; a < 2 && ok; a++) {
        for (size_t i = 0; i < lens[a] && ok; i += 512) {
            size_t k = lens[a] - i < 512 ? lens[a] - i : 512;
            for (size_t j = 0; j < k; j++) put64(buf + 8 * j, arrays[a][i + j]);
            ok = write_payload(w, buf, 8 * k);
        }
    }
    unsigned char h[SHARD_HEADER_BYTES];
    memcpy(h, SHARD_MAGIC, 8);
    put32(h + 8, SHARD_VERSION);
    put32(h + 12, w->token_width);
    put32(h + 16, w->vocab_size);
    put32(h + 20, w->flags);
    put64(h + 24, w->vocab_hash);
    put64(h + 32, n_docs);
    put64(h + 40, n_sents);
    put64(h + 48, w->n_tokens);
    put32(h + 56, (uint32_t)w->payload_crc);
    put32(h + 60, (uint32_t)crc32(crc32(0L, Z_NULL, 0), h, 60));
    ok = ok && fflush(w->f) == 0 && fseek(w->f, 0, SEEK_SET) == 0 &&
         fwrite(h, 1, sizeof h, w->f) == sizeof h && fflush(w->f) == 0 &&
         fsync(fileno(w->f)) == 0;
    int saved = errno;
    if (fclose(w->f) != 0) {
        if (ok) saved = errno;
        ok = false;
    }
    w->f = NULL;
    if (!ok) {
        snprintf(err, errlen, "%s: write error: %s", w->tmp_path, strerror(saved));
        return false;
    }
    w->finished = true;
    return true;
}

bool shard_writer_commit(bt_shard_writer *w, const char *final_path, char *err, size_t errlen) {
    const char *to = final_path ? final_path : w->path;
    if (!w->finished && !shard_writer_finish(w, err, errlen)) {
        shard_writer_abort(w);
        return false;
    }
    if (rename(w->tmp_path, to) != 0) {
        snprintf(err, errlen, "%s: cannot rename %s to it: %s", to, w->tmp_path, strerror(errno));
        shard_writer_abort(w);
        return false;
    }
    free(w->tmp_path);
    w->tmp_path = NULL;
    shard_writer_abort(w); /* frees the rest */
    return true;
}

void shard_writer_abort(bt_shard_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    if (w->tmp_path) remove(w->tmp_path);
    free(w->tmp_path);
    free(w->path);
    free(w->sent_offsets);
    free(w->doc_offsets);
    free(w);
}
