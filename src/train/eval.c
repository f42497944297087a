/* Held-out evaluation. */
#include "eval.h"

#include "store/ckpt.h"
#include "train.h"
#include "device.h"
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void eval_run(bert_model *m, bt_dataset *valid, int batch, long max_samples, int most_common,
              eval_result *out) {
    uint64_t n = dataset_num_samples(valid);
    if (max_samples > 0 && (uint64_t)max_samples < n) n = (uint64_t)max_samples;
    bt_batch_buf mb;
    if (!batch_buf_alloc(&mb, batch, m->max_seq, batch * dataset_max_predictions(valid))) {
        fprintf(stderr, "bertrain: out of host memory for evaluation\n");
        exit(1);
    }
    double loss = 0, correct = 0, nsp_correct = 0, baseline = 0;
    long masked = 0, nsp = 0;
    bert_pass pass = {.train = false};
    for (uint64_t g = 0; g < n; g += (uint64_t)batch) {
        int B = (int)(n - g < (uint64_t)batch ? n - g : (uint64_t)batch);
        dataset_fill(valid, g, B, true, &mb);
        bert_batch b = {B, mb.T, mb.input_ids, mb.token_type_ids, mb.attention_mask, mb.n_masked,
                        mb.mlm_positions, mb.mlm_labels, m->cfg.nsp ? mb.nsp_labels : NULL, 0,
                        mb.masked_bound};
        bert_tape tape;
        bert_stats st;
        bert_forward(m, &b, &pass, &tape, &st);
        loss += st.mlm_loss_sum;
        correct += st.mlm_correct;
        masked += st.n_masked;
        nsp_correct += st.nsp_correct;
        nsp += st.n_nsp;
        for (int i = 0; i < mb.n_masked; i++) baseline += mb.mlm_labels[i] == most_common;
    }
    batch_buf_free(&mb);
    out->n_masked = masked;
    out->n_samples = (long)n;
    out->mlm_loss = masked ? loss / masked : 0.0;
    out->mlm_acc = masked ? correct / masked : 0.0;
    out->perplexity = exp(out->mlm_loss);
    out->nsp_acc = nsp ? nsp_correct / nsp : 0.0;
    out->baseline_acc = masked && most_common >= 0 ? baseline / masked : 0.0;
}

int eval_main(const bt_config *cfg, const char *checkpoint) {
    char err[512];
    int rc = 1;
    bt_vocab vocab;
    bt_dataset *valid = NULL, *train = NULL;
    bert_model *m = NULL;
    bt_backend *be = NULL;
    if (!cfg->data.valid[0] || !cfg->data.vocab[0]) {
        fprintf(stderr, "bertrain: %s: eval needs data.valid and data.vocab\n", cfg->path);
        return 2;
    }
    if (!vocab_load(&vocab, cfg->data.vocab, err, sizeof err)) {
        fprintf(stderr, "bertrain: %s\n", err);
        return 2;
    }
    bt_data_config valid_cfg = cfg->data;
    valid_cfg.limit_samples = 0; /* data.limit_samples limits training data only */
    valid = dataset_open(cfg->data.valid, &valid_cfg, &vocab, cfg->model.vocab_size, cfg->seed,
                         err, sizeof err);
    if (!valid) {
        fprintf(stderr, "bertrain: %s\n", err);
        rc = 2;
        goto out;
    }
    int most_common = -1;
    if (cfg->data.train[0]) {
        train = dataset_open(cfg->data.train, &cfg->data, &vocab, cfg->model.vocab_size,
                             cfg->seed, err, sizeof err);
        if (train) most_common = dataset_most_common_token(train);
    }
    be = open_backend(cfg->device, cfg->cpu_threads, cfg->tf32, false);
    if (!be) { /* a device that cannot be opened: the config's spec, exit 2 */
        rc = 2;
        goto out;
    }
    int batch = cfg->eval_batch > 0 ? cfg->eval_batch : (int)cfg->micro_batch;
    const size_request req = {0, 0, 0, batch, dataset_max_predictions(valid)};
    bt_device_info info;
    be->info(be, &info);
    run_sizes sz;
    if (!plan_sizes(cfg, &req, &info, &sz, err, sizeof err)) { /* in 64 bits, before allocating */
        fprintf(stderr, "bertrain: %s: %s\n", cfg->path, err);
        rc = 2;
        goto out;
    }
    bert_config mc = cfg->model;
    mc.pad_id = vocab.pad_id;
    m = bert_create(be, &mc, batch, cfg->data.seq_len, sz.max_masked, err, sizeof err);
    if (!m) {
        fprintf(stderr, "bertrain: %s\n", err);
        goto out;
    }
    char ckpt[1200]; /* a run's output_dir: its latest checkpoint, as predict and export take it */
    ckpt_resolve(checkpoint, ckpt, sizeof ckpt);
    if (!ckpt_load_weights(ckpt, m, err, sizeof err)) { /* bad checkpoint input: exit 2 */
        fprintf(stderr, "bertrain: %s\n", err);
        rc = 2;
        goto out;
    }
    eval_result r;
    eval_run(m, valid, batch, cfg->eval_max_samples, most_common, &r);
    printf("eval %s on %s: %ld sequences, %ld masked tokens\n", ckpt, cfg->data.valid,
           r.n_samples, r.n_masked);
    printf("mlm_acc %.4f | perplexity %.3f | mlm_loss %.4f | baseline_acc %.4f",
           r.mlm_acc, r.perplexity, r.mlm_loss, r.baseline_acc);
    if (mc.nsp) printf(" | nsp_acc %.4f", r.nsp_acc);
    printf("\n");
    rc = 0;
out:
    bert_free(m);
    if (be) be->destroy(be);
    dataset_close(valid);
    dataset_close(train);
    vocab_free(&vocab);
    return rc;
}

cJSON *eval_result_json(const eval_result *r) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddNumberToObject(ev, "mlm_acc", r->mlm_acc);
    cJSON_AddNumberToObject(ev, "perplexity", r->perplexity);
    cJSON_AddNumberToObject(ev, "mlm_loss", r->mlm_loss);
    cJSON_AddNumberToObject(ev, "baseline_acc", r->baseline_acc);
    cJSON_AddNumberToObject(ev, "masked_tokens", (double)r->n_masked);
    cJSON_AddNumberToObject(ev, "sequences", (double)r->n_samples);
    return ev;
}
