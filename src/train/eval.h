/* Evaluation on held-out data: MLM accuracy and perplexity with fixed masking,
 * so numbers are comparable across runs, plus a frequency baseline. */
#ifndef BT_EVAL_H
#define BT_EVAL_H

#include "model/bert.h"
#include "config/config.h"
#include "data/dataset.h"

#include <cjson/cJSON.h>

typedef struct {
    double mlm_loss;     /* mean masked-token cross-entropy */
    double mlm_acc;
    double perplexity;   /* exp(mlm_loss) */
    double nsp_acc;      /* with the NSP head */
    double baseline_acc; /* always predicting the most common training token */
    long n_masked, n_samples;
} eval_result;

/* Evaluate m on valid (in file order, fixed masks) in batches of `batch`,
 * over at most max_samples sequences (0: all). most_common is the token the
 * baseline always predicts (-1: no baseline). */
void eval_run(bert_model *m, bt_dataset *valid, int batch, long max_samples, int most_common,
              eval_result *out);

/* r as the "eval" object of a checkpoint's state.json (the export's model
 * card reads it): mlm_acc, perplexity, mlm_loss, baseline_acc,
 * masked_tokens, sequences. */
cJSON *eval_result_json(const eval_result *r);

/* `bertrain eval CONFIG.json --checkpoint DIR [--set k=v]...`; exit code. */
int eval_main(const bt_config *cfg, const char *checkpoint);

#endif
