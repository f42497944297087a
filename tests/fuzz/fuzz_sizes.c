/* Config to sizes: the input is a config as fuzz_config takes it (up to 8
 * "key.path=value" lines, a NUL byte, then the JSON). A config that loads
 * goes through what training's set-up computes before it allocates
 * (plan_sizes: the model's capacity and memory in 64 bits) against an
 * 80 GB device that allows 4 GB per buffer. When that accepts a model of at
 * most 16 MB, the model is built on the CPU backend and its activation bytes
 * must be the ones plan_sizes said: a size computed one way and allocated
 * another aborts, as a crash would. */
#include "backends/registry.h"
#include "config/config.h"
#include "data/dataset.h"
#include "fuzz_util.h"
#include "train/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The masked rows per sequence a dataset of this config caps (dataset_open). */
static int mask_cap(const bt_config *cfg) {
    return cfg->data.max_predictions > 0
               ? cfg->data.max_predictions
               : mask_cap_default(cfg->data.seq_len - 2, cfg->data.mask_prob);
}

/* Build the model plan_sizes accepted and compare its bytes with the plan. */
static void build_and_compare(const bt_config *cfg, const run_sizes *sz) {
    static bt_backend *be;
    char err[512];
    const bt_backend_options one_thread = {.cpu_threads = 1};
    if (!be && !(be = bt_backend_create("cpu", &one_thread, err, sizeof err, NULL))) abort();
    bert_model *m = bert_create(be, &cfg->model, sz->max_batch, cfg->data.seq_len,
                                sz->max_masked, err, sizeof err);
    if (!m) return; /* the host's memory: not what is checked here */
    const double planned = sz->model.acts + sz->model.ints + sz->model.stash;
    if ((double)bert_activation_bytes(m) != planned ||
        (double)m->n_params * 4 != sz->model.params) {
        fprintf(stderr, "fuzz_sizes: planned %.0f activation and %.0f parameter bytes, built "
                        "%zu and %zu\n", planned, sz->model.params, bert_activation_bytes(m),
                m->n_params * 4);
        abort();
    }
    bert_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_config_input in;
    if (!fuzz_config_split(data, size, &in)) return 0;
    bt_config cfg;
    if (config_load(&cfg, in.path, in.sets, in.n_sets, 1)) {
        const long micro = cfg.micro_batch;
        const size_request req = {micro, (cfg.train_batch_size + micro - 1) / micro,
                                  mask_cap(&cfg), cfg.eval_batch > 0 ? cfg.eval_batch : micro,
                                  mask_cap(&cfg)};
        const bt_device_info dev = {.name = "fuzz device", .total_mem = (size_t)80e9,
                                    .max_alloc = (size_t)4e9};
        run_sizes sz;
        char err[1400];
        if (plan_sizes(&cfg, &req, &dev, &sz, err, sizeof err) && sz.device_bytes <= 16e6)
            build_and_compare(&cfg, &sz);
        config_free(&cfg);
    }
    fuzz_config_free(&in);
    return 0;
}
