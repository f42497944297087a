/* bertrain's MLM (and NSP) logits on a fixed batch, for comparison with
 * transformers: loads a checkpoint on the CPU backend, runs the eval forward
 * pass on 2 sequences of 16 tokens (the second padded after 11) with every
 * real token as an MLM row, and writes a safetensors file with input_ids,
 * token_type_ids, attention_mask (I32, (2, 16)), positions (I32, flat rows),
 * mlm_logits (F32, (rows, V)) and, with the NSP head, nsp_logits (F32, (2, 2)).
 * With --skip-layers 1,3 those encoder layers are skipped (as LayerDrop does),
 * to compare with an export pruned by --keep-layers.
 * usage: hf_logits CKPT_DIR OUT.safetensors [--skip-layers L,L,...] */
#include "store/ckpt.h"
#include "store/safetensors.h"
#include "backends/cpu/cpu_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 16, REAL1 = 11 };

int main(int argc, char **argv) {
    if (argc != 3 && !(argc == 5 && !strcmp(argv[3], "--skip-layers"))) {
        fprintf(stderr, "usage: hf_logits CKPT_DIR OUT.safetensors [--skip-layers L,L,...]\n");
        return 2;
    }
    char err[1024];
    cJSON *state = NULL;
    bert_config mc;
    if (!ckpt_verify(argv[1], &state, err, sizeof err) ||
        !ckpt_model_config(state, &mc, err, sizeof err)) {
        fprintf(stderr, "hf_logits: %s\n", err);
        return 1;
    }
    cJSON_Delete(state);
    bt_backend *be = bt_cpu_backend_create(1, 1);
    bert_model *m = be ? bert_create(be, &mc, B, T, B * T, err, sizeof err) : NULL;
    if (!m || !ckpt_load_weights(argv[1], m, err, sizeof err)) {
        fprintf(stderr, "hf_logits: %s\n", m ? err : "cannot create the model");
        return 1;
    }
    int32_t ids[B * T], types[B * T], mask[B * T], pos[B * T], labels[B * T], nsp[B] = {0, 1};
    uint32_t x = 12345;
    int n = 0;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int i = b * T + t;
            bool real = b == 0 || t < REAL1;
            x = x * 1664525u + 1013904223u;
            ids[i] = !real ? 0 : t == 0 ? 2 : 5 + (int)((x >> 8) % (uint32_t)(mc.vocab_size - 5));
            types[i] = real && t >= T / 2 ? 1 : 0;
            mask[i] = real;
            if (real) {
                pos[n] = i;
                labels[n++] = ids[i];
            }
        }
    }
    float *logits = malloc((size_t)n * mc.vocab_size * sizeof *logits), nsp_logits[B * 2];
    if (!logits) return 1;
    bert_batch batch = {B, T, ids, types, mask, n, pos, labels, mc.nsp ? nsp : NULL, 0, 0};
    bert_pass pass = {.train = false, .mlm_logits_out = logits,
                      .nsp_logits_out = mc.nsp ? nsp_logits : NULL};
    unsigned char *skip = calloc((size_t)mc.num_hidden_layers, 1);
    if (!skip) return 1;
    for (char *s = argc == 5 ? argv[4] : NULL; s && *s; s += *s == ',') {
        long l = strtol(s, &s, 10);
        if (l < 0 || l >= mc.num_hidden_layers || (*s && *s != ',')) {
            fprintf(stderr, "hf_logits: bad --skip-layers %s\n", argv[4]);
            return 2;
        }
        skip[l] = 1;
    }
    pass.layer_skip = skip;
    bert_tape tape;
    bert_stats st;
    bert_forward(m, &batch, &pass, &tape, &st);
    st_tensor out[6] = {
        {"input_ids", "I32", 2, {B, T}, ids, sizeof ids},
        {"token_type_ids", "I32", 2, {B, T}, types, sizeof types},
        {"attention_mask", "I32", 2, {B, T}, mask, sizeof mask},
        {"positions", "I32", 1, {n}, pos, (size_t)n * 4},
        {"mlm_logits", "F32", 2, {n, mc.vocab_size}, logits, (size_t)n * mc.vocab_size * 4},
        {"nsp_logits", "F32", 2, {B, 2}, nsp_logits, sizeof nsp_logits},
    };
    if (!st_write(argv[2], out, mc.nsp ? 6 : 5, NULL, 0, err, sizeof err)) {
        fprintf(stderr, "hf_logits: %s\n", err);
        return 1;
    }
    printf("hf_logits: %d MLM rows x %d logits%s -> %s\n", n, mc.vocab_size,
           mc.nsp ? " and NSP logits" : "", argv[2]);
    free(logits);
    free(skip);
    bert_free(m);
    be->destroy(be);
    return 0;
}
