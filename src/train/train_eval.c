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

/* "she was [MASK] to see him." -> "glad 0.213, happy 0.104, sorry 0.083" per
 * [MASK] on the console; the same as a JSON list in metrics.jsonl. */
static void log_fill_mask(run_state *s, long step) {
    fill_mask_guess **out = calloc((size_t)s->n_fill_mask, sizeof *out);
    char err[512];
    if (!out || !fill_mask_predict(s->m, &s->vocab, s->fill_mask, s->n_fill_mask,
                                   FILL_MASK_TOP, out, err, sizeof err)) {
        fprintf(stderr, "bertrain: eval.fill_mask: %s\n", out ? err : "out of memory");
        free(out);
        return;
    }
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddNumberToObject(rec, "step", (double)step);
    cJSON *all = cJSON_AddArrayToObject(rec, "fill_mask");
    for (int i = 0; i < s->n_fill_mask; i++) {
        printf("fill-mask step %ld | %s ->", step, s->fill_mask_texts[i]);
        cJSON *one = cJSON_CreateObject();
        cJSON_AddItemToArray(all, one);
        cJSON_AddStringToObject(one, "text", s->fill_mask_texts[i]);
        cJSON *masks = cJSON_AddArrayToObject(one, "masks");
        for (int k = 0; k < s->fill_mask[i].n_masks; k++) {
            cJSON *guesses = cJSON_CreateArray();
            cJSON_AddItemToArray(masks, guesses);
            printf("%s", s->fill_mask[i].n_masks > 1 ? (k ? " |" : "") : "");
            for (int j = 0; j < FILL_MASK_TOP; j++) {
                const fill_mask_guess *g = &out[i][k * FILL_MASK_TOP + j];
                const char *tok = g->id < s->vocab.size ? s->vocab.tokens[g->id] : "[?]";
                printf("%s %s %.3f", j ? "," : "", tok, g->prob);
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "token", tok);
                char p4[32]; /* 4 significant digits are what a reader needs */
                snprintf(p4, sizeof p4, "%.4g", g->prob);
                cJSON_AddNumberToObject(e, "prob", strtod(p4, NULL));
                cJSON_AddItemToArray(guesses, e);
            }
        }
        printf("\n");
        free(out[i]);
    }
    free(out);
    char *line = cJSON_PrintUnformatted(rec);
    if (line) fprintf(s->metrics, "%s\n", line);
    free(line);
    cJSON_Delete(rec);
}

void run_evaluate(run_state *s, const bt_config *cfg, long step) {
    const double te = now_s();
    if (s->valid) {
        eval_result ev;
        eval_run(s->m, s->valid, s->eval_batch, cfg->eval_max_samples, s->most_common, &ev);
        s->last_eval = ev;
        s->last_eval_step = step;
        if (dist_rank() == 0) {
            printf("eval step %ld | mlm_acc %.4f | perplexity %.3f | mlm_loss %.4f | "
                   "baseline_acc %.4f (most common token) | %ld masked tokens | %.1f s\n", step,
                   ev.mlm_acc, ev.perplexity, ev.mlm_loss, ev.baseline_acc, ev.n_masked,
                   now_s() - te);
            fprintf(s->metrics,
                    "{\"step\": %ld, \"eval_mlm_loss\": %.9g, \"eval_mlm_acc\": %.6g, "
                    "\"eval_perplexity\": %.6g, \"eval_baseline_acc\": %.6g, "
                    "\"eval_masked\": %ld", step, ev.mlm_loss, ev.mlm_acc, ev.perplexity,
                    ev.baseline_acc, ev.n_masked);
            if (s->m->cfg.nsp) fprintf(s->metrics, ", \"eval_nsp_acc\": %.6g", ev.nsp_acc);
            fprintf(s->metrics, "}\n");
        }
    }
    if (dist_rank() == 0 && s->n_fill_mask > 0) log_fill_mask(s, step);
    if (dist_rank() == 0) {
        fflush(s->metrics);
        fflush(stdout);
    }
}
