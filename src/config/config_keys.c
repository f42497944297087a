/* The config's keys (config_keys.h): the table, and applying a JSON object
 * through it with type and range checks and "did you mean" suggestions. */
#include "config_keys.h"

#include "mpi/dist.h"
#include "util/parse_num.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define STR(field) OFF(field), 0, 0, NULL, sizeof(((bt_config *)0)->field)
const key_spec CONFIG_KEYS[] = {
    {"train_batch_size", K_LONG, OFF(train_batch_size), 1, 1e9, NULL, 0},
    {"train_micro_batch_size_per_gpu", K_LONG, OFF(micro_batch), 1, 1e7, NULL, 0},
    {"gradient_accumulation_steps", K_LONG, OFF(grad_accum), 1, 1e7, NULL, 0},
    {"train_steps", K_LONG, OFF(train_steps), 1, 1e12, NULL, 0},
    {"seed", K_SEED, OFF(seed), 0, 9007199254740991.0, NULL, 0}, /* a number < 2^53, or a string */
    {"output_dir", K_STRING, STR(output_dir)},
    {"steps_per_print", K_INT, OFF(steps_per_print), 1, 1e9, NULL, 0},
    {"gradient_clipping", K_FLOAT, OFF(gradient_clipping), 0, 1e9, NULL, 0},
    {"device", K_STRING, STR(device)},
    {"cpu_threads", K_INT, OFF(cpu_threads), 0, 4096, NULL, 0},
    {"tf32", K_BOOL, OFF(tf32), 0, 0, NULL, 0},
    {"optimizer", K_OBJECT, 0, 0, 0, NULL, 0},
    {"optimizer.type", K_CHOICE, OFF(optim.type), 0, 0, "AdamW|Lamb|OneBitAdam|OneBitLamb", 0},
    {"optimizer.params", K_OBJECT, 0, 0, 0, NULL, 0},
    {"optimizer.params.lr", K_FLOAT, OFF(optim.lr), 0, 10, NULL, 0},
    {"optimizer.params.betas", K_BETAS, OFF(optim.beta1), 0, 0, NULL, 0},
    {"optimizer.params.eps", K_FLOAT, OFF(optim.eps), 1e-30, 1, NULL, 0},
    {"optimizer.params.weight_decay", K_FLOAT, OFF(optim.weight_decay), 0, 10, NULL, 0},
    {"optimizer.params.bias_correction", K_BOOL, OFF(optim.bias_correction), 0, 0, NULL, 0},
    {"optimizer.params.min_coeff", K_FLOAT, OFF(optim.min_coeff), 0, 1e9, NULL, 0},
    {"optimizer.params.max_coeff", K_FLOAT, OFF(optim.max_coeff), 0, 1e9, NULL, 0},
    {"optimizer.params.freeze_step", K_LONG, OFF(optim.freeze_step), 1, 1e12, NULL, 0},
    {"optimizer.params.coeff_beta", K_FLOAT, OFF(optim.coeff_beta), 0, 0.999999, NULL, 0},
    {"optimizer.params.factor_max", K_FLOAT, OFF(optim.factor_max), 1, 1e6, NULL, 0},
    {"optimizer.params.factor_min", K_FLOAT, OFF(optim.factor_min), 1e-6, 1, NULL, 0},
    {"optimizer.params.factor_threshold", K_FLOAT, OFF(optim.factor_threshold), 0, 0.999999, NULL, 0},
    {"scheduler", K_OBJECT, 0, 0, 0, NULL, 0},
    {"scheduler.type", K_CHOICE, OFF(sched.type), 0, 0,
     "constant|WarmupLR|WarmupDecayLR|warmup_linear_decay_exp|inverse_sqrt|WarmupCosineLR", 0},
    {"scheduler.params", K_OBJECT, 0, 0, 0, NULL, 0},
    {"scheduler.params.warmup_min_lr", K_DOUBLE, OFF(sched.warmup_min_lr), 0, 10, NULL, 0},
    {"scheduler.params.warmup_max_lr", K_DOUBLE, OFF(sched.warmup_max_lr), 0, 10, NULL, 0},
    {"scheduler.params.warmup_num_steps", K_LONG, OFF(sched.warmup_num_steps), 0, 1e12, NULL, 0},
    {"scheduler.params.total_num_steps", K_LONG, OFF(sched.total_num_steps), 1, 1e12, NULL, 0},
    {"scheduler.params.warmup_type", K_CHOICE, OFF(sched.warmup_log), 0, 0, "linear|log", 0},
    {"scheduler.params.decay_rate", K_DOUBLE, OFF(sched.decay_rate), 1e-9, 1, NULL, 0},
    {"scheduler.params.decay_step", K_LONG, OFF(sched.decay_step), 1, 1e12, NULL, 0},
    {"scheduler.params.cos_min_ratio", K_DOUBLE, OFF(sched.cos_min_ratio), 0, 1, NULL, 0},
    {"scheduler.params.warmup_min_ratio", K_DOUBLE, OFF(sched.warmup_min_ratio), 0, 1, NULL, 0},
    {"scheduler.unit", K_CHOICE, OFF(sched.unit), 0, 0, "steps|samples", 0},
    {"scheduler.start", K_LONG, OFF(sched.start), 0, 1e12, NULL, 0},
    {"batch_rampup", K_OBJECT, 0, 0, 0, NULL, 0},
    {"batch_rampup.start_batch_size", K_LONG, OFF(rampup_start), 0, 1e9, NULL, 0},
    {"batch_rampup.samples", K_LONG, OFF(rampup_samples), 1, 1e15, NULL, 0},
    {"batch_rampup.type", K_CHOICE, OFF(rampup_type), 0, 0, "linear|stepwise", 0},
    {"batch_rampup.stages", K_INT, OFF(rampup_stages), 1, 1000000, NULL, 0},
    {"model", K_OBJECT, 0, 0, 0, NULL, 0},
    {"model.preset", K_STRING, STR(preset)},
    {"model.vocab_size", K_INT, OFF(model.vocab_size), 8, 1 << 24, NULL, 0},
    {"model.hidden_size", K_INT, OFF(model.hidden_size), 1, 65536, NULL, 0},
    {"model.num_hidden_layers", K_INT, OFF(model.num_hidden_layers), 1, BERT_MAX_LAYERS, NULL, 0},
    {"model.num_attention_heads", K_INT, OFF(model.num_attention_heads), 1, 4096, NULL, 0},
    {"model.intermediate_size", K_INT, OFF(model.intermediate_size), 1, 1 << 20, NULL, 0},
    {"model.max_position_embeddings", K_INT, OFF(model.max_position_embeddings), 2, 1 << 16,
     NULL, 0},
    {"model.type_vocab_size", K_INT, OFF(model.type_vocab_size), 1, 1024, NULL, 0},
    {"model.layer_norm_eps", K_FLOAT, OFF(model.layer_norm_eps), 1e-30, 0.5, NULL, 0},
    {"model.hidden_dropout_prob", K_FLOAT, OFF(model.hidden_dropout_prob), 0, 0.9, NULL, 0},
    {"model.attention_probs_dropout_prob", K_FLOAT, OFF(model.attention_probs_dropout_prob), 0,
     0.9, NULL, 0},
    {"model.initializer_range", K_FLOAT, OFF(model.initializer_range), 1e-9, 1, NULL, 0},
    {"model.nsp", K_BOOL, OFF(model.nsp), 0, 0, NULL, 0},
    {"model.norm", K_CHOICE, OFF(model.norm), 0, 0, "post|pre|admin", 0},
    {"model.z_loss", K_FLOAT, OFF(model.z_loss), 0, 1, NULL, 0},
    {"model.attention_logit_penalty", K_FLOAT, OFF(model.attention_logit_penalty), 0, 1, NULL, 0},
    {"model.attention_kernel", K_CHOICE, OFF(model.attention_kernel), 0, 0, "auto|fused|unfused", 0},
    {"model.recompute", K_CHOICE, OFF(model.recompute), 0, 0, "none|attention|layer", 0},
    {"model.admin_init", K_CHOICE, OFF(model.admin_init), 0, 0, "closed_form|profile", 0},
    {"model.layerdrop", K_FLOAT, OFF(model.layerdrop), 0, BERT_MAX_LAYERDROP, NULL, 0},
    {"data", K_OBJECT, 0, 0, 0, NULL, 0},
    {"data.train", K_STRING, STR(data.train)},
    {"data.valid", K_OPT_STRING, STR(data.valid)},
    {"data.vocab", K_STRING, STR(data.vocab)},
    {"data.seq_len", K_INT, OFF(data.seq_len), 8, 1 << 16, NULL, 0},
    {"data.mask_prob", K_FLOAT, OFF(data.mask_prob), 0.001, 0.9, NULL, 0},
    {"data.max_predictions", K_INT, OFF(data.max_predictions), 0, 1 << 16, NULL, 0},
    {"data.limit_samples", K_LONG, OFF(data.limit_samples), 0, 1e15, NULL, 0},
    {"checkpoint", K_OBJECT, 0, 0, 0, NULL, 0},
    {"checkpoint.interval", K_LONG, OFF(ckpt_interval), 0, 1e12, NULL, 0},
    {"checkpoint.keep", K_INT, OFF(ckpt_keep), 1, 1e6, NULL, 0},
    {"checkpoint.max_runtime", K_DOUBLE, OFF(max_runtime), 0, 1e9, NULL, 0},
    {"metrics", K_OBJECT, 0, 0, 0, NULL, 0},
    {"metrics.on_error", K_CHOICE, OFF(metrics_on_error), 0, 0, "stop|warn", 0},
    {"metrics.tensorboard", K_BOOL, OFF(metrics_tensorboard), 0, 0, NULL, 0},
    {"eval", K_OBJECT, 0, 0, 0, NULL, 0},
    {"eval.interval", K_LONG, OFF(eval_interval), 0, 1e12, NULL, 0},
    {"eval.max_samples", K_LONG, OFF(eval_max_samples), 0, 1e15, NULL, 0},
    {"eval.batch_size", K_INT, OFF(eval_batch), 0, 1e6, NULL, 0},
    {"eval.fill_mask", K_MASK_TEXTS, STR(eval_fill_mask_json)},
    {"guard", K_OBJECT, 0, 0, 0, NULL, 0},
    {"guard.loss_spike_factor", K_DOUBLE, OFF(guard_spike_factor), 0, 1e9, NULL, 0},
    {"guard.median_window", K_INT, OFF(guard_median_window), 1, 10000, NULL, 0},
    {"guard.max_bad_steps", K_INT, OFF(guard_max_bad), 1, 1000000, NULL, 0},
    {"guard.window", K_INT, OFF(guard_window), 1, 1000000000, NULL, 0},
    {"guard.max_rollbacks", K_INT, OFF(guard_max_rollbacks), 0, 1000000, NULL, 0},
    {"fp16", K_OBJECT, 0, 0, 0, NULL, 0},
    {"fp16.enabled", K_BOOL, OFF(fp16), 0, 0, NULL, 0},
    {"fp16.loss_scale", K_DOUBLE, OFF(fp16_loss_scale), 0, 1e30, NULL, 0},
    {"fp16.initial_scale_power", K_INT, OFF(fp16_initial_scale_power), 0, 100, NULL, 0},
    {"fp16.loss_scale_window", K_LONG, OFF(fp16_loss_scale_window), 1, 1e12, NULL, 0},
    {"fp16.hysteresis", K_INT, OFF(fp16_hysteresis), 1, 1000000, NULL, 0},
    {"fp16.consecutive_hysteresis", K_BOOL, OFF(fp16_consecutive_hysteresis), 0, 0, NULL, 0},
    {"fp16.min_loss_scale", K_DOUBLE, OFF(fp16_min_loss_scale), 1e-30, 1e30, NULL, 0},
    {"bf16", K_OBJECT, 0, 0, 0, NULL, 0},
    {"bf16.enabled", K_BOOL, OFF(bf16), 0, 0, NULL, 0},
    {"devices", K_DEVICES, STR(devices_json)},
    {"distributed", K_OBJECT, 0, 0, 0, NULL, 0},
    {"distributed.shares", K_SHARES, OFF(shares), 0, 0, NULL, 0},
    {"distributed.rebalance_interval", K_LONG, OFF(rebalance_interval), 0, 1e12, NULL, 0},
    {"distributed.sync_check_interval", K_LONG, OFF(sync_check_interval), 0, 1e12, NULL, 0},
    {"distributed.drift_tolerance", K_DOUBLE, OFF(drift_tolerance), 0, 1, NULL, 0},
    {"distributed.bucket_mb", K_DOUBLE, OFF(bucket_mb), 0.001, 1e5, NULL, 0},
    {"distributed.grad_dtype", K_CHOICE, OFF(grad_bf16), 0, 0, "fp32|bf16", 0},
    {"distributed.timeout_s", K_DOUBLE, OFF(dist_timeout_s), 0, 1e7, NULL, 0},
    {"data.mode", K_CHOICE, OFF(data.sentence_pairs), 0, 0, "full_sentences|sentence_pairs", 0},
};
const size_t CONFIG_N_KEYS = sizeof CONFIG_KEYS / sizeof CONFIG_KEYS[0];


int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    int *row = malloc((lb + 1) * sizeof *row);
    if (!row) return 1 << 20;
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    int d = row[lb];
    free(row);
    return d;
}

const key_spec *config_find_key(const char *path) {
    for (size_t i = 0; i < CONFIG_N_KEYS; i++)
        if (strcmp(CONFIG_KEYS[i].path, path) == 0) return &CONFIG_KEYS[i];
    return NULL;
}

/* The valid key closest to path, or NULL if nothing is close. */
static const char *closest_key(const char *path) {
    const char *best = NULL;
    int best_d = 1 << 20;
    for (size_t i = 0; i < CONFIG_N_KEYS; i++) {
        int d = edit_distance(path, CONFIG_KEYS[i].path);
        if (d < best_d) {
            best_d = d;
            best = CONFIG_KEYS[i].path;
        }
    }
    int len = (int)strlen(path);
    return best_d <= (len < 8 ? 2 : len / 3) ? best : NULL;
}

void config_fail(const bt_config *cfg, const char *fmt, ...) {
    if (dist_rank() != 0) return; /* every rank reads the same config: one report */
    va_list ap;
    fprintf(stderr, "bertrain: %s: ", cfg->path);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static const char *json_type_name(const cJSON *v) {
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "null";
}

/* x as a reader should see it: whole numbers in digits (1000000000000, not
 * 1e+12), others in the fewest digits that read back as x (1.0000000000000002,
 * not 1). */
static const char *shown(double x, char *buf, size_t n) {
    if (x == floor(x) && fabs(x) < 1e21) {
        snprintf(buf, n, "%.0f", x);
        return buf;
    }
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) break;
    }
    return buf;
}

static bool set_number(bt_config *cfg, const key_spec *k, const cJSON *v, double *out) {
    if (!cJSON_IsNumber(v)) {
        config_fail(cfg, "%s: expected a number, got %s", k->path, json_type_name(v));
        return false;
    }
    double x = v->valuedouble;
    char a[40], b[40], c[40];
    if (!(x >= k->min && x <= k->max)) {
        config_fail(cfg, "%s: %s is out of range [%s, %s]", k->path, shown(x, a, sizeof a),
                    shown(k->min, b, sizeof b), shown(k->max, c, sizeof c));
        return false;
    }
    if ((k->kind == K_INT || k->kind == K_LONG || k->kind == K_SEED) && x != floor(x)) {
        config_fail(cfg, "%s: expected an integer, got %s", k->path, shown(x, a, sizeof a));
        return false;
    }
    *out = x;
    return true;
}

/* K_SEED: exact; a JSON number only below 2^53, any uint64 as a string. */
static bool set_seed(bt_config *cfg, const key_spec *k, const cJSON *v, uint64_t *out) {
    double x;
    if (cJSON_IsString(v)) {
        if (parse_u64(v->valuestring, out)) return true;
        config_fail(cfg, "%s: \"%s\" is not an integer in [0, 18446744073709551615]", k->path,
                    v->valuestring);
        return false;
    }
    if (cJSON_IsNumber(v) && v->valuedouble >= 0x1p53) { /* which integer was meant is lost */
        config_fail(cfg, "%s: %.17g is 2^53 or more, where a JSON number is not exact; write the "
                         "digits as a string (\"%s\": \"12345678901234567890\", at most "
                         "\"18446744073709551615\")", k->path, v->valuedouble, k->path);
        return false;
    }
    if (!set_number(cfg, k, v, &x)) return false;
    *out = (uint64_t)x;
    return true;
}

/* K_BOOL */
static bool set_bool(bt_config *cfg, const key_spec *k, const cJSON *v, bool *out) {
    if (!cJSON_IsBool(v)) {
        config_fail(cfg, "%s: expected true or false, got %s", k->path, json_type_name(v));
        return false;
    }
    *out = cJSON_IsTrue(v);
    return true;
}

/* K_STRING: into a buffer of k->size bytes; K_OPT_STRING: also null, as "". */
static bool set_string(bt_config *cfg, const key_spec *k, const cJSON *v, char *out) {
    if (k->kind == K_OPT_STRING && cJSON_IsNull(v)) {
        out[0] = 0;
        return true;
    }
    if (!cJSON_IsString(v)) {
        config_fail(cfg, "%s: expected a string, got %s", k->path, json_type_name(v));
        return false;
    }
    if (strlen(v->valuestring) >= k->size) {
        config_fail(cfg, "%s: longer than %zu characters", k->path, k->size - 1);
        return false;
    }
    strcpy(out, v->valuestring);
    return true;
}

/* K_BETAS: [beta1, beta2], each in [0, 1), into two adjacent floats. */
static bool set_betas(bt_config *cfg, const key_spec *k, const cJSON *v, float *b) {
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 ||
        !cJSON_IsNumber(cJSON_GetArrayItem(v, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(v, 1))) {
        config_fail(cfg, "%s: expected [beta1, beta2], got %s", k->path, json_type_name(v));
        return false;
    }
    for (int i = 0; i < 2; i++) {
        double bi = cJSON_GetArrayItem(v, i)->valuedouble;
        if (!(bi >= 0 && bi < 1)) {
            config_fail(cfg, "%s: beta%d = %g is out of range [0, 1)", k->path, i + 1, bi);
            return false;
        }
        b[i] = (float)bi;
    }
    return true;
}

/* K_SHARES: "auto", or per-rank sample counts. */
static bool set_shares(bt_config *cfg, const key_spec *k, const cJSON *v) {
    if (cJSON_IsString(v) && strcmp(v->valuestring, "auto") == 0) {
        cfg->shares_auto = true;
        cfg->n_shares = 0;
        return true;
    }
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 1 || n > BT_MAX_RANKS) {
        config_fail(cfg, "%s: expected \"auto\" or a list of per-rank sample counts", k->path);
        return false;
    }
    for (int i = 0; i < n; i++) {
        cJSON *x = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble != floor(x->valuedouble)) {
            config_fail(cfg, "%s: entry %d must be an integer >= 1", k->path, i);
            return false;
        }
        cfg->shares[i] = (long)x->valuedouble;
    }
    cfg->n_shares = n;
    cfg->shares_auto = false;
    return true;
}

/* K_DEVICES: a list of specs by rank, or "host:local_rank" -> spec; kept as
 * its JSON text. */
static bool set_devices(bt_config *cfg, const key_spec *k, const cJSON *v, char *out) {
    bool ok = cJSON_IsArray(v) || cJSON_IsObject(v);
    for (cJSON *x = ok ? v->child : NULL; x; x = x->next) ok = ok && cJSON_IsString(x);
    char *text = ok ? cJSON_PrintUnformatted(v) : NULL;
    if (!text || strlen(text) >= k->size) {
        config_fail(cfg, "%s: expected a list of device specs by rank, or an object of "
                         "\"host:local_rank\" -> device spec", k->path);
        free(text);
        return false;
    }
    strcpy(out, text);
    free(text);
    return true;
}

/* K_MASK_TEXTS: sentences with [MASK], kept as the JSON text of the list. */
static bool set_mask_texts(bt_config *cfg, const key_spec *k, const cJSON *v, char *out) {
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0 || n > BT_MAX_FILL_MASK) {
        config_fail(cfg, "%s: expected a list of at most %d sentences with [MASK]", k->path,
                    BT_MAX_FILL_MASK);
        return false;
    }
    for (int i = 0; i < n; i++) {
        const cJSON *x = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(x) || !strstr(x->valuestring, "[MASK]")) {
            config_fail(cfg, "%s: entry %d is not a string with [MASK] in it", k->path, i);
            return false;
        }
    }
    char *text = n ? cJSON_PrintUnformatted(v) : NULL;
    if (n && (!text || strlen(text) >= k->size)) {
        config_fail(cfg, "%s: longer than %zu characters in all", k->path, k->size - 1);
        free(text);
        return false;
    }
    snprintf(out, k->size, "%s", text ? text : "");
    free(text);
    return true;
}

bool config_choice_is_bool(const key_spec *k) {
    return k->offset == OFF(sched.warmup_log) || k->offset == OFF(data.sentence_pairs);
}

/* K_CHOICE: one of "a|b|c" (any case), stored as its index. */
static bool set_choice(bt_config *cfg, const key_spec *k, const cJSON *v, char *base) {
    if (!cJSON_IsString(v)) {
        config_fail(cfg, "%s: expected one of %s, got %s", k->path, k->choices,
                    json_type_name(v));
        return false;
    }
    const char *c = k->choices;
    for (int idx = 0; *c; idx++) {
        size_t len = strcspn(c, "|");
        if (strlen(v->valuestring) == len && strncasecmp(c, v->valuestring, len) == 0) {
            if (config_choice_is_bool(k))
                *(bool *)base = idx != 0;
            else
                *(int *)base = idx;
            return true;
        }
        c += len + (c[len] == '|');
    }
    config_fail(cfg, "%s: '%s' is not one of %s", k->path, v->valuestring, k->choices);
    return false;
}

/* Key k's value v into cfg, checked as its kind says. */
static bool apply_key(bt_config *cfg, const key_spec *k, const cJSON *v) {
    char *base = (char *)cfg + k->offset;
    double x;
    switch (k->kind) {
    case K_OBJECT: return true;
    case K_INT: return set_number(cfg, k, v, &x) && (*(int *)base = (int)x, true);
    case K_LONG: return set_number(cfg, k, v, &x) && (*(long *)base = (long)x, true);
    case K_FLOAT: return set_number(cfg, k, v, &x) && (*(float *)base = (float)x, true);
    case K_DOUBLE: return set_number(cfg, k, v, &x) && (*(double *)base = x, true);
    case K_SEED: return set_seed(cfg, k, v, (uint64_t *)base);
    case K_BOOL: return set_bool(cfg, k, v, (bool *)base);
    case K_STRING:
    case K_OPT_STRING: return set_string(cfg, k, v, base);
    case K_BETAS: return set_betas(cfg, k, v, (float *)base);
    case K_SHARES: return set_shares(cfg, k, v);
    case K_DEVICES: return set_devices(cfg, k, v, base);
    case K_MASK_TEXTS: return set_mask_texts(cfg, k, v, base);
    case K_CHOICE: return set_choice(cfg, k, v, base);
    }
    return false;
}

bool config_walk(bt_config *cfg, const cJSON *obj, const char *prefix) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", it->string);
        const key_spec *k = config_find_key(path);
        if (!k) {
            const char *near = closest_key(path);
            if (near)
                config_fail(cfg, "%s: unknown key (did you mean '%s'?)", path, near);
            else
                config_fail(cfg, "%s: unknown key", path);
            return false;
        }
        if (k->kind == K_OBJECT) {
            if (!cJSON_IsObject(it)) {
                config_fail(cfg, "%s: expected an object, got %s", path, json_type_name(it));
                return false;
            }
            if (!config_walk(cfg, it, path)) return false;
        } else if (!apply_key(cfg, k, it)) {
            return false;
        }
    }
    return true;
}

