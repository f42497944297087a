/* Evaluation inside a training run: the held-out metrics and the fill-mask
 * predictions that show a person what the model has learned. */
#include "mpi/dist.h"
#include "eval.h"
#include "train_internal.h"
#include "util/clock.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FILL_MASK_TOP 3

bool run_fill_mask_prepare(run_state *s, const bt_config *cfg) {
    if (dist_rank() != 0 || !cfg->eval_fill_mask_json[0]) return true;
    char err[512];
    cJSON *list = cJSON_Parse(cfg->eval_fill_mask_json);
    int n = cJSON_GetArraySize(list);
    bt_tokenizer *tok = tokenizer_new(&s->vocab, dataset_lowercase(s->ds), err, sizeof err);
    s->fill_mask = calloc((size_t)n, sizeof *s->fill_mask);
    s->fill_mask_texts = calloc((size_t)n, sizeof *s->fill_mask_texts);
    bool ok = tok && s->fill_mask && s->fill_mask_texts;
    if (!ok) fprintf(stderr, "bertrain: eval.fill_mask: %s\n", tok ? "out of memory" : err);
    for (int i = 0; ok && i < n; i++) {
        const char *text = cJSON_GetArrayItem(list, i)->valuestring;
        ok = fill_mask_encode(tok, &s->vocab, text, cfg->data.seq_len, &s->fill_mask[i], err,
                              sizeof err);
        if (!ok)
            fprintf(stderr, "bertrain: %s: eval.fill_mask entry %d: %s (data.seq_len %d)\n",
                    cfg->path, i, err, cfg->data.seq_len);
        else if (!(s->fill_mask_texts[i] = strdup(text)))
            ok = false;
        else
            s->n_fill_mask = i + 1;
    }
    tokenizer_free(tok);
    cJSON_Delete(list);
    return ok;
}

void run_fill_mask_free(run_state *s) {
    for (int i = 0; i < s->n_fill_mask; i++) {
        fill_mask_input_free(&s->fill_mask[i]);
        free(s->fill_mask_texts[i]);
    }
    free(s->fill_mask);
    free(s->fill_mask_texts);
    s->fill_mask = NULL;
    s->fill_mask_texts = NULL;
    s->n_fill_mask = 0;
}

/* The eval.fill_mask predictions of the model as it is after `step`. */
static void log_fill_mask(run_state *s, long step) {
    fill_mask_guess **out = calloc((size_t)s->n_fill_mask, sizeof *out);
    int *n_masks = calloc((size_t)s->n_fill_mask, sizeof *n_masks);
    char err[512];
    if (!out || !n_masks ||
        !fill_mask_predict(s->m, &s->vocab, s->fill_mask, s->n_fill_mask, FILL_MASK_TOP, out, err,
                           sizeof err)) {
        fprintf(stderr, "bertrain: eval.fill_mask: %s\n", out && n_masks ? err : "out of memory");
        free(out);
        free(n_masks);
        return;
    }
    for (int i = 0; i < s->n_fill_mask; i++) n_masks[i] = s->fill_mask[i].n_masks;
    metrics_fill_mask(&s->metrics, step, s->n_fill_mask, s->fill_mask_texts, n_masks, out,
                      FILL_MASK_TOP, &s->vocab);
    for (int i = 0; i < s->n_fill_mask; i++) free(out[i]);
    free(out);
    free(n_masks);
}

void run_evaluate(run_state *s, const bt_config *cfg, long step) {
    const double te = now_s();
    if (s->valid) {
        eval_result ev;
        eval_run(s->m, s->valid, s->eval_batch, cfg->eval_max_samples, s->most_common, &ev);
        s->last_eval = ev;
        s->last_eval_step = step;
        if (dist_rank() == 0) metrics_eval(&s->metrics, step, &ev, s->m->cfg.nsp, now_s() - te);
    }
    if (dist_rank() == 0 && s->n_fill_mask > 0) log_fill_mask(s, step);
    if (dist_rank() == 0) {
        fflush(stdout);
    }
}
