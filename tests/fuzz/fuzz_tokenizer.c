/* The tokenizer: the input as text, through BERT's basic tokenizer and
 * WordPiece with the demo vocab, lowercased and cased, then decoded. The
 * vocab is $BERTRAIN_FUZZ_VOCAB, else data/demo/vocab.txt under the source
 * directory this was built from. */
#include "data/vocab.h"
#include "data/wordpiece.h"
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>

#ifndef FUZZ_SRCDIR
#define FUZZ_SRCDIR "."
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bt_vocab vocab;
    static bt_tokenizer *tok[2];
    char err[512];
    if (!tok[0]) {
        const char *path = getenv("BERTRAIN_FUZZ_VOCAB");
        if (!path) path = FUZZ_SRCDIR "/data/demo/vocab.txt";
        if (!vocab_load(&vocab, path, err, sizeof err) ||
            !(tok[0] = tokenizer_new(&vocab, true, err, sizeof err)) ||
            !(tok[1] = tokenizer_new(&vocab, false, err, sizeof err))) {
            fprintf(stderr, "fuzz_tokenizer: %s\n", err);
            abort();
        }
    }
    for (int k = 0; k < 2; k++) {
        bt_ids ids = {0};
        size_t invalid = 0;
        if (tokenizer_encode(tok[k], (const char *)data, size, &ids, &invalid)) {
            char *text = tokenizer_decode(&vocab, ids.ids, ids.n);
            free(text);
        }
        ids_free(&ids);
    }
    return 0;
}
