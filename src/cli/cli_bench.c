/* `bertrain bench`: time training steps of a preset on random tokens. */
#include "cli.h"

#include "train/train.h"
#include "util/clock.h"
#include "train/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(void) {
    fprintf(stderr, "usage: bertrain bench --preset P --seq S --batch B [--backend NAME] "
                    "[--steps N] [--warmup N] [--threads N] [--layers L] [--layerdrop P]\n"
                    "       [--precision fp32|bf16|fp16]\n");
}

int cli_bench(int argc, char **argv) {
    const char *preset = "mini", *backend = "cpu", *precision = "fp32";
    int seq = 128, batch = 8, steps = 10, warmup = 2, threads = 0, layers = 0;
    double layerdrop = 0.0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "bertrain bench: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "--seq")) seq = atoi(v);
        else if (!strcmp(a, "--batch")) batch = atoi(v);
        else if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--warmup")) warmup = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--layers")) layers = atoi(v);
        else if (!strcmp(a, "--layerdrop")) layerdrop = atof(v);
        else if (!strcmp(a, "--precision")) precision = v;
        else {
            fprintf(stderr, "bertrain bench: unknown option %s\n", a);
            usage();
            return 2;
        }
        i++;
    }
    bt_config cfg;
    config_defaults(&cfg);
    if (!bert_preset(preset, &cfg.model)) {
        fprintf(stderr, "bertrain bench: --preset %s: expected tiny|mini|small|medium|base|large\n",
                preset);
        return 2;
    }
    if (layers) cfg.model.num_hidden_layers = layers;
    cfg.model.layerdrop = (float)layerdrop;
    if (seq < 8 || seq > cfg.model.max_position_embeddings || batch < 1 || steps < 1 ||
        warmup < 0 || layers < 0 || !(layerdrop >= 0.0 && layerdrop < 1.0)) {
        fprintf(stderr, "bertrain bench: need 8 <= --seq <= %d, --batch >= 1, --steps >= 1, "
                        "--layers >= 1, 0 <= --layerdrop < 1\n",
                cfg.model.max_position_embeddings);
        return 2;
    }
    if (strcmp(precision, "fp32") && strcmp(precision, "bf16") && strcmp(precision, "fp16")) {
        fprintf(stderr, "bertrain bench: --precision %s: expected fp32|bf16|fp16\n", precision);
        return 2;
    }
    /* 16-bit storage as bf16.enabled / fp16.enabled give it (fp16: a fixed loss
     * scale of 1, so no step is skipped and every timed step does the same work) */
    cfg.model.storage = !strcmp(precision, "bf16") ? BT_BF16 : !strcmp(precision, "fp16") ? BT_F16
                                                                                        : BT_F32;
    snprintf(cfg.preset, sizeof cfg.preset, "%s", preset);
    cfg.micro_batch = cfg.train_batch_size = batch;
    cfg.grad_accum = 1;
    bt_backend *be = open_backend(backend, threads, false);
    if (!be) return 2; /* a device that cannot be opened: the user's spec, exit 2 */
    /* random tokens with BERT's special ids at 0..4 */
    bt_vocab vocab = {.size = cfg.model.vocab_size, .pad_id = 0, .unk_id = 1, .cls_id = 2,
                      .sep_id = 3, .mask_id = 4};
    const int max_pred = mask_cap_default(seq - 2, 0.15f); /* as training's default cap */
    char err[256];
    bert_model *m = bert_create(be, &cfg.model, batch, seq, batch * max_pred, err, sizeof err);
    bt_optimizer *opt = m ? optim_create(m, &cfg.optim, err, sizeof err) : NULL;
    bt_batch_buf mb;
    if (!m || !opt || !batch_buf_alloc(&mb, batch, seq, batch * max_pred)) {
        fprintf(stderr, "bertrain bench: %s\n", m && opt ? "out of host memory" : err);
        optim_free(opt, m);
        bert_free(m);
        be->destroy(be);
        return 1;
    }
    bert_init_params(m, cfg.seed);
    uint32_t first = 0;
    double t0 = 0.0;
    long layers_dropped = 0; /* LayerDrop: layers the timed steps skipped */
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            be->sync(be);
            t0 = now_s();
        }
        mb.n_masked = 0;
        for (int b = 0; b < batch; b++) {
            int32_t *ids = mb.input_ids + (size_t)b * seq;
            for (int t = 0; t < seq; t++) {
                uint32_t r[4];
                rng_block(cfg.seed, RNG_STREAM_BENCH, (uint32_t)t, (uint32_t)(s * batch + b), r);
                ids[t] = t == 0 ? 2 : t == seq - 1 ? 3 : 5 + (int32_t)(r[0] % (uint32_t)(vocab.size - 5));
                mb.token_type_ids[(size_t)b * seq + t] = t >= seq / 2;
                mb.attention_mask[(size_t)b * seq + t] = 1;
            }
            mb.n_masked += mask_sequence(ids, seq, &vocab, vocab.size, 0.15f, max_pred, cfg.seed,
                                         (uint64_t)s, (uint64_t)b, b * seq,
                                         mb.mlm_positions + mb.n_masked, mb.mlm_labels + mb.n_masked);
        }
        const step_batch in = {&mb, &first, 1, 0, mb.B};
        step_result r = train_step(m, opt, &cfg, s, &in, 1e-4, NULL, NULL, NULL);
        if (s >= warmup) layers_dropped += r.layers_dropped;
    }
    be->sync(be);
    double dt = now_s() - t0;
    double sps = (double)batch * steps / dt;
    /* FLOPs of the layers that ran: a dropped layer costs one layer's FLOPs less */
    bert_config one_less = cfg.model;
    one_less.num_hidden_layers--;
    double per_sample = bert_train_flops_per_sample(&cfg.model, seq, 0.15 * seq),
           per_layer = per_sample - bert_train_flops_per_sample(&one_less, seq, 0.15 * seq);
    double mean_dropped = (double)layers_dropped / steps;
    double flops = (per_sample - mean_dropped * per_layer) * sps;
    bt_device_info info;
    be->info(be, &info);
    printf("bench: preset %s (%d layers, layerdrop %g), seq %d, batch %d, %d steps after %d "
           "warm-up, backend %s (%s)\n", preset, cfg.model.num_hidden_layers,
           (double)cfg.model.layerdrop, seq, batch, steps, warmup, be->name, info.name);
    printf("ms/step: %.1f\n", 1e3 * dt / steps);
    printf("activations: %.1f MB (%s storage)\n", bert_activation_bytes(m) / 1e6, precision);
    if (cfg.model.layerdrop > 0.0f)
        printf("layers run per step: %.2f of %d (LayerDrop)\n",
               cfg.model.num_hidden_layers - mean_dropped, cfg.model.num_hidden_layers);
    printf("TFLOP/s: %.3f\n", flops / 1e12);
    printf("samples/s: %.2f\n", sps);
    batch_buf_free(&mb);
    optim_free(opt, m);
    bert_free(m);
    be->destroy(be);
    return 0;
}
