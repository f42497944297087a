/* optim.bin: the input is a checkpoint's optim.bin, loaded as resume loads
 * it (ckpt_load_optim) into the AdamW state of a small model (1 layer,
 * hidden 8, vocab 16) whose checkpoint says step 1000: header, tensor table,
 * sizes, the step and every moment's value are checked.
 *
 * The seed corpus (tests/fuzz/corpus/optim/valid) is a valid file for that
 * model, written by bertrain's own checkpoint writer: run any build of this
 * target with BERTRAIN_FUZZ_WRITE_SEED=DIR and it writes DIR/optim.bin (with
 * moments that are not all zero) before replaying its inputs. */
#include "backends/registry.h"
#include "fuzz_util.h"
#include "store/ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { STATE_STEP = 1000 };

typedef struct {
    bt_backend *be;
    bert_model *m;
    bt_optimizer *o;
} small_model;

/* The model and optimizer every input loads into, made once. */
static small_model *model(void) {
    static small_model s;
    if (s.o) return &s;
    char err[512];
    const bt_backend_options one_thread = {.cpu_threads = 1};
    bert_config mc;
    fuzz_small_model(&mc);
    const bt_optim_config adamw = {OPT_ADAMW, 1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, true, 0.01f,
                                   10.0f, 100000, 0.9f, 4.0f, 0.5f, 0.1f};
    if (!(s.be = bt_backend_create("cpu", &one_thread, err, sizeof err, NULL)) ||
        !(s.m = bert_create(s.be, &mc, 1, 2, 1, err, sizeof err)) ||
        !(s.o = optim_create(s.m, &adamw, err, sizeof err))) {
        fprintf(stderr, "fuzz_optim: %s\n", err);
        abort();
    }
    return &s;
}

/* BERTRAIN_FUZZ_WRITE_SEED=DIR: a valid checkpoint of the model in DIR/ckpt
 * whose optim.bin is the seed; moments i * 1e-3 and (i mod 7) * 1e-6. */
static void write_seed(const char *dir) {
    small_model *s = model();
    const size_t n = s->m->n_params;
    float *host = calloc(3 * n, sizeof *host);
    if (!host) abort();
    for (size_t i = 0; i < n; i++) {
        host[n + i] = (float)i * 1e-3f;
        host[2 * n + i] = (float)(i % 7) * 1e-6f;
    }
    cJSON *state = cJSON_CreateObject();
    ckpt_contents c = {s->m, host, host + n, host + 2 * n, STATE_STEP, OPT_ADAMW, NULL, 0,
                       state, NULL, 0, NULL, 0, NULL, 0, NULL, 0};
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/ckpt", dir);
    if (!ckpt_write_dir(path, &c, NULL, 0, err, sizeof err)) {
        fprintf(stderr, "fuzz_optim: %s\n", err);
        abort();
    }
    printf("fuzz_optim: seed written: %s/optim.bin\n", path);
    cJSON_Delete(state);
    free(host);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int seeded;
    if (!seeded++ && getenv("BERTRAIN_FUZZ_WRITE_SEED"))
        write_seed(getenv("BERTRAIN_FUZZ_WRITE_SEED"));
    small_model *s = model();
    char dir[512], err[1024];
    snprintf(dir, sizeof dir, "%s/ckpt", fuzz_dir());
    mkdir(dir, 0777); /* once; it exists afterwards */
    fuzz_file("ckpt/optim.bin", data, size);
    (void)ckpt_load_optim(dir, s->m, s->o, STATE_STEP, false, err, sizeof err);
    return 0;
}
