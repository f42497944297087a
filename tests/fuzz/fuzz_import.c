/* The import directory reader: the input is a Hugging Face model directory
 * packed as three little-endian u32 lengths, then config.json,
 * model.safetensors and vocab.txt of those lengths, and the rest as
 * tokenizer_config.json (absent when empty). `bertrain import` reads it into
 * a new checkpoint, which is removed again.
 *
 * A config.json that describes more than 2^18 parameters is passed over: the
 * import would only spend time initializing a large model; every reader and
 * check before that runs on all inputs.
 *
 * The seed corpus (tests/fuzz/corpus/import/tiny) is a valid directory for a
 * model of 1 layer, hidden 8 and 16 tokens, with its pooler and NSP head: run
 * any build of this target with BERTRAIN_FUZZ_WRITE_SEED=FILE and it writes
 * the packed seed to FILE before replaying its inputs. */
#include "backends/registry.h"
#include "fuzz_util.h"
#include "store/ckpt.h"
#include "store/hf.h"
#include "store/safetensors.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The parameters config.json describes (a rough count, to pass over large
 * models), or -1 when it is not a JSON object of numbers. */
static double described_params(const char *text, size_t len) {
    cJSON *c = cJSON_ParseWithLength(text, len);
    static const char *const keys[] = {"vocab_size", "hidden_size", "num_hidden_layers",
                                       "intermediate_size", "max_position_embeddings",
                                       "type_vocab_size"};
    double v[6];
    for (int i = 0; i < 6; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(c, keys[i]);
        v[i] = cJSON_IsNumber(x) ? x->valuedouble : (i == 5 ? 2 : 0);
    }
    cJSON_Delete(c);
    const double V = v[0], H = v[1], L = v[2], I = v[3], P = v[4], T = v[5];
    return (V + P + T + 4) * H + L * (4 * H * H + 2 * H * I + 10 * H) + 2 * H * H;
}

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_u32(FILE *f, size_t x) {
    const uint8_t b[4] = {(uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24)};
    fwrite(b, 1, 4, f);
}

/* The whole of a small file, or abort. */
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) abort();
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(*len + 1);
    if (!b || fread(b, 1, *len, f) != *len) abort();
    fclose(f);
    return b;
}

/* BERTRAIN_FUZZ_WRITE_SEED=FILE: the packed seed, from a model of the shape
 * the header describes, initialized as a training run initializes it. */
static void write_seed(const char *out) {
    static const char config[] =
        "{\"architectures\": [\"BertForPreTraining\"], \"model_type\": \"bert\", \"vocab_size\": "
        "16, \"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
        "\"intermediate_size\": 8, \"hidden_act\": \"gelu\", \"max_position_embeddings\": 8, "
        "\"type_vocab_size\": 2, \"layer_norm_eps\": 1e-12, \"pad_token_id\": 0}";
    static const char vocab[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nof\nand\na\nto\nin\n"
                                "was\nhe\nshe\n.\n,\n";
    static const char tokenizer[] = "{\"do_lower_case\": true}";
    char err[512], path[600];
    bert_config mc;
    fuzz_small_model(&mc);
    mc.nsp = true;
    const bt_backend_options one_thread = {.cpu_threads = 1};
    bt_backend *be = bt_backend_create("cpu", &one_thread, err, sizeof err, NULL);
    bert_model *m = be ? bert_create(be, &mc, 1, 2, 1, err, sizeof err) : NULL;
    float *host = m ? malloc(m->n_params * sizeof *host) : NULL;
    st_tensor *ts = m ? calloc((size_t)m->n_tensors, sizeof *ts) : NULL;
    if (!host || !ts) abort();
    bert_init_params(m, 7);
    m->be->download(m->be, host, (bt_ptr){m->params, 0}, m->n_params * sizeof *host);
    for (int i = 0; i < m->n_tensors; i++) {
        const bert_tensor *t = &m->tensors[i];
        ts[i] = (st_tensor){t->name, "F32", t->ndim, {t->shape[0], t->shape[1]},
                            host + t->offset, t->numel * sizeof(float)};
    }
    const char *meta[] = {"format", "pt"};
    snprintf(path, sizeof path, "%s/seed.safetensors", fuzz_dir());
    if (!st_write(path, ts, m->n_tensors, meta, 1, err, sizeof err)) abort();
    size_t st_len;
    char *st = slurp(path, &st_len);
    FILE *f = fopen(out, "wb");
    if (!f) abort();
    put_u32(f, sizeof config - 1);
    put_u32(f, st_len);
    put_u32(f, sizeof vocab - 1);
    fwrite(config, 1, sizeof config - 1, f);
    fwrite(st, 1, st_len, f);
    fwrite(vocab, 1, sizeof vocab - 1, f);
    fwrite(tokenizer, 1, sizeof tokenizer - 1, f);
    if (fclose(f) != 0) abort();
    printf("fuzz_import: seed written: %s\n", out);
    free(st);
    free(ts);
    free(host);
    bert_free(m);
    be->destroy(be);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int seeded;
    if (!seeded++ && getenv("BERTRAIN_FUZZ_WRITE_SEED"))
        write_seed(getenv("BERTRAIN_FUZZ_WRITE_SEED"));
    if (size < 12) return 0;
    const size_t n[3] = {get_u32(data), get_u32(data + 4), get_u32(data + 8)};
    if (n[0] > size - 12 || n[1] > size - 12 - n[0] || n[2] > size - 12 - n[0] - n[1]) return 0;
    const char *config = (const char *)data + 12;
    if (described_params(config, n[0]) > 0x1p18) return 0;
    char in[512], out[512], err[1024];
    snprintf(in, sizeof in, "%s/in", fuzz_dir());
    mkdir(in, 0777); /* once; it exists afterwards */
    const uint8_t *p = data + 12;
    static const char *const names[3] = {"in/config.json", "in/model.safetensors", "in/vocab.txt"};
    for (int i = 0; i < 3; p += n[i], i++) fuzz_file(names[i], p, n[i]);
    const size_t rest = size - 12 - n[0] - n[1] - n[2];
    snprintf(out, sizeof out, "%s/in/tokenizer_config.json", fuzz_dir());
    if (rest) fuzz_file("in/tokenizer_config.json", p, rest);
    else remove(out);
    snprintf(out, sizeof out, "%s/out", fuzz_dir());
    const hf_import_opts opts = {42, false, -1};
    if (hf_import(in, out, &opts) == 0 && !ckpt_remove(out, err, sizeof err)) {
        fprintf(stderr, "fuzz_import: %s\n", err);
        abort();
    }
    return 0;
}
