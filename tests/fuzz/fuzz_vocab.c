/* Vocab loading: load a vocab.txt, then what training asks of it. */
#include "data/vocab.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("vocab.txt", data, size);
    bt_vocab v;
    char err[512];
    if (!vocab_load(&v, path, err, sizeof err)) return 0;
    (void)vocab_casing(&v);
    vocab_free(&v);
    return 0;
}
