/* Scratch files for the fuzz targets. */
#define _XOPEN_SOURCE 700
#include "fuzz_util.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char scratch[256];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* At exit: the scratch directory and everything the target wrote into it. */
static void remove_scratch(void) { nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

const char *fuzz_dir(void) {
    if (!scratch[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(scratch, sizeof scratch, "%s/bertrain-fuzz.XXXXXX", base);
        if (!mkdtemp(scratch)) abort();
        atexit(remove_scratch);
    }
    return scratch;
}

const char *fuzz_file(const char *name, const uint8_t *data, size_t size) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    return path;
}

bool fuzz_config_split(const uint8_t *data, size_t size, fuzz_config_input *in) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t head = nul ? (size_t)(nul - data) : 0;
    const uint8_t *json = nul ? nul + 1 : data;
    in->path = fuzz_file("config.json", json, size - (size_t)(json - data));
    in->n_sets = 0;
    if (!(in->text = malloc(head + 1))) return false;
    memcpy(in->text, data, head);
    in->text[head] = 0;
    for (char *line = in->text, *next; line && *line && in->n_sets < 8; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        in->sets[in->n_sets++] = line;
    }
    return true;
}

void fuzz_config_free(fuzz_config_input *in) { free(in->text); }

void fuzz_small_model(bert_config *mc) {
    bert_preset("tiny", mc);
    mc->vocab_size = 16;
    mc->hidden_size = 8;
    mc->num_attention_heads = 2;
    mc->intermediate_size = 8;
    mc->num_hidden_layers = 1;
    mc->max_position_embeddings = 8;
    mc->type_vocab_size = 2;
}
