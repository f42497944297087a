/* The shard reader: open and verify a shard, then read every token. The
 * header's two CRC-32s (of the body at byte 56, of the header's first 60
 * bytes at 60) are recomputed first, so the fuzzer gets past them. */
#include "data/shard.h"
#include "fuzz_util.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static void put32(uint8_t *p, uint32_t x) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(x >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    if (size >= SHARD_HEADER_BYTES) {
        put32(copy + 56, (uint32_t)crc32(0L, copy + SHARD_HEADER_BYTES,
                                         (uInt)(size - SHARD_HEADER_BYTES)));
        put32(copy + 60, (uint32_t)crc32(0L, copy, 60));
    }
    const char *path = fuzz_file("x.shard", copy, size);
    free(copy);
    bt_shard s;
    char err[512];
    if (!shard_open(&s, path, 0, 1u << 24, err, sizeof err)) return 0;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < s.n_tokens; i++) sum += shard_token(&s, i);
    for (uint64_t d = 0; d <= s.n_docs; d++) sum += shard_doc_start(&s, d);
    shard_close(&s);
    return (int)(sum & 0); /* the reads are the point */
}
