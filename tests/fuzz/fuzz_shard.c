/* The shard reader: open and verify a shard, then read every token. */
#include "../../src/shard.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("x.shard", data, size);
    bt_shard s;
    char err[512];
    if (!shard_open(&s, path, 0, 1u << 24, err, sizeof err)) return 0;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < s.n_tokens; i++) sum += shard_token(&s, i);
    for (uint64_t d = 0; d <= s.n_docs; d++) sum += shard_doc_start(&s, d);
    shard_close(&s);
    return (int)(sum & 0); /* the reads are the point */
}
