/* state.json: the input is written as a checkpoint's state.json with its
 * state_crc32 recomputed (so the fuzzer gets past the checksum), verified,
 * and what resume reads from it is read. */
#include "store/ckpt.h"
#include "data/sample_skips.h"
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char *key = strstr(text, "\"state_crc32\"");
    char *digits = key ? strchr(key + 13, '"') : NULL;
    if (digits && strlen(digits) >= 10 && digits[9] == '"') {
        memset(digits + 1, '0', 8);
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", (unsigned)crc32(0L, (const Bytef *)text, (uInt)size));
        memcpy(digits + 1, hex, 8);
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s/ckpt", fuzz_dir());
    mkdir(dir, 0777); /* once; it exists afterwards */
    fuzz_file("ckpt/state.json", (const uint8_t *)text, size);
    cJSON *state = NULL;
    char err[1024];
    if (ckpt_verify(dir, &state, err, sizeof err)) {
        bert_config mc;
        (void)ckpt_model_config(state, &mc, err, sizeof err);
        sample_skips s = {0};
        (void)skips_from_json(&s, ckpt_json_at(state, "data.skipped_samples"));
        skips_free(&s);
        (void)ckpt_lowercase(state);
        char vocab[1024];
        ckpt_vocab_path(dir, state, vocab, sizeof vocab);
        cJSON_Delete(state);
    }
    free(text);
    return 0;
}
