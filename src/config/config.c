/* JSON config -> bt_config. A table of keys drives parsing, type and range
 * checks and "did you mean" suggestions; every error is one line that names
 * the file and the key, and the caller exits 2 before any work starts. */
#include "config.h"

#include "util/parse_num.h"

#include "mpi/dist.h"
#include "util/file.h"
#include "util/json_num.h"
#include "sched.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <strings.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { K_OBJECT, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_BOOL, K_STRING, K_SEED, K_BETAS,
               K_CHOICE, K_SHARES, K_DEVICES, K_MASK_TEXTS } key_kind;

typedef struct {
    const char *path;
    key_kind kind;
    size_t offset;      /* into bt_config */
    double min, max;    /* numeric range, inclusive */
    const char *choices; /* K_CHOICE: "a|b|c", stored as the index (int) */
    size_t size;        /* K_STRING: buffer size */
} key_spec;

#define OFF(field) offsetof(bt_config, field)
#define STR(field) OFF(field), 0, 0, NULL, sizeof(((bt_config *)0)->field)
static const key_spec KEYS[] = {
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
    {"optimizer.type", K_CHOICE, OFF(optim.type), 0, 0, "AdamW|Lamb", 0},
    {"optimizer.params", K_OBJECT, 0, 0, 0, NULL, 0},
    {"optimizer.params.lr", K_FLOAT, OFF(optim.lr), 0, 10, NULL, 0},
    {"optimizer.params.betas", K_BETAS, OFF(optim.beta1), 0, 0, NULL, 0},
    {"optimizer.params.eps", K_FLOAT, OFF(optim.eps), 1e-30, 1, NULL, 0},
    {"optimizer.params.weight_decay", K_FLOAT, OFF(optim.weight_decay), 0, 10, NULL, 0},
    {"optimizer.params.bias_correction", K_BOOL, OFF(optim.bias_correction), 0, 0, NULL, 0},
    {"optimizer.params.min_coeff", K_FLOAT, OFF(optim.min_coeff), 0, 1e9, NULL, 0},
    {"optimizer.params.max_coeff", K_FLOAT, OFF(optim.max_coeff), 0, 1e9, NULL, 0},
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
    {"model.admin_init", K_CHOICE, OFF(model.admin_init), 0, 0, "closed_form|profile", 0},
    {"model.layerdrop", K_FLOAT, OFF(model.layerdrop), 0, 0.95, NULL, 0},
    {"data", K_OBJECT, 0, 0, 0, NULL, 0},
    {"data.train", K_STRING, STR(data.train)},
    {"data.valid", K_STRING, STR(data.valid)},
    {"data.vocab", K_STRING, STR(data.vocab)},
    {"data.seq_len", K_INT, OFF(data.seq_len), 8, 1 << 16, NULL, 0},
    {"data.mask_prob", K_FLOAT, OFF(data.mask_prob), 0.001, 0.9, NULL, 0},
    {"data.max_predictions", K_INT, OFF(data.max_predictions), 0, 1 << 16, NULL, 0},
    {"data.limit_samples", K_LONG, OFF(data.limit_samples), 0, 1e15, NULL, 0},
    {"checkpoint", K_OBJECT, 0, 0, 0, NULL, 0},
    {"checkpoint.interval", K_LONG, OFF(ckpt_interval), 0, 1e12, NULL, 0},
    {"checkpoint.keep", K_INT, OFF(ckpt_keep), 1, 1e6, NULL, 0},
    {"checkpoint.max_runtime", K_DOUBLE, OFF(max_runtime), 0, 1e9, NULL, 0},
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
    {"distributed.timeout_s", K_DOUBLE, OFF(dist_timeout_s), 0, 1e7, NULL, 0},
    {"data.mode", K_CHOICE, OFF(data.sentence_pairs), 0, 0, "full_sentences|sentence_pairs", 0},
};
#define N_KEYS (sizeof KEYS / sizeof KEYS[0])

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

static const key_spec *find_key(const char *path) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(KEYS[i].path, path) == 0) return &KEYS[i];
    return NULL;
}

/* The valid key closest to path, or NULL if nothing is close. */
static const char *closest_key(const char *path) {
    const char *best = NULL;
    int best_d = 1 << 20;
    for (size_t i = 0; i < N_KEYS; i++) {
        int d = edit_distance(path, KEYS[i].path);
        if (d < best_d) {
            best_d = d;
            best = KEYS[i].path;
        }
    }
    int len = (int)strlen(path);
    return best_d <= (len < 8 ? 2 : len / 3) ? best : NULL;
}

static void fail(const bt_config *cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(const bt_config *cfg, const char *fmt, ...) {
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

static bool set_number(bt_config *cfg, const key_spec *k, const cJSON *v, double *out) {
    if (!cJSON_IsNumber(v)) {
        fail(cfg, "%s: expected a number, got %s", k->path, json_type_name(v));
        return false;
    }
    double x = v->valuedouble;
    if (!(x >= k->min && x <= k->max)) {
        fail(cfg, "%s: %g is out of range [%g, %g]", k->path, x, k->min, k->max);
        return false;
    }
    if ((k->kind == K_INT || k->kind == K_LONG || k->kind == K_SEED) && x != floor(x)) {
        fail(cfg, "%s: expected an integer, got %g", k->path, x);
        return false;
    }
    *out = x;
    return true;
}

static bool apply_key(bt_config *cfg, const key_spec *k, const cJSON *v) {
    char *base = (char *)cfg + k->offset;
    double x;
    switch (k->kind) {
    case K_OBJECT:
        return true;
    case K_INT:
        if (!set_number(cfg, k, v, &x)) return false;
        *(int *)base = (int)x;
        return true;
    case K_LONG:
        if (!set_number(cfg, k, v, &x)) return false;
        *(long *)base = (long)x;
        return true;
    case K_SEED: /* exact: a JSON number only below 2^53, any uint64 as a string */
        if (cJSON_IsString(v)) {
            if (parse_u64(v->valuestring, (uint64_t *)base)) return true;
            fail(cfg, "%s: \"%s\" is not an integer in [0, 18446744073709551615]", k->path,
                 v->valuestring);
            return false;
        }
        if (cJSON_IsNumber(v) && v->valuedouble >= 0x1p53) {
            fail(cfg, "%s: %.17g is 2^53 or more, where a JSON number is not exact; write the "
                      "digits as a string (\"%s\": \"12345678901234567890\")", k->path,
                 v->valuedouble, k->path);
            return false;
        }
        if (!set_number(cfg, k, v, &x)) return false;
        *(uint64_t *)base = (uint64_t)x;
        return true;
    case K_FLOAT:
        if (!set_number(cfg, k, v, &x)) return false;
        *(float *)base = (float)x;
        return true;
    case K_DOUBLE:
        if (!set_number(cfg, k, v, &x)) return false;
        *(double *)base = x;
        return true;
    case K_BOOL:
        if (!cJSON_IsBool(v)) {
            fail(cfg, "%s: expected true or false, got %s", k->path, json_type_name(v));
            return false;
        }
        *(bool *)base = cJSON_IsTrue(v);
        return true;
    case K_STRING:
        if (!cJSON_IsString(v)) {
            fail(cfg, "%s: expected a string, got %s", k->path, json_type_name(v));
            return false;
        }
        if (strlen(v->valuestring) >= k->size) {
            fail(cfg, "%s: longer than %zu characters", k->path, k->size - 1);
            return false;
        }
        strcpy(base, v->valuestring);
        return true;
    case K_BETAS: {
        float *b = (float *)base; /* beta1, beta2 adjacent */
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 ||
            !cJSON_IsNumber(cJSON_GetArrayItem(v, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(v, 1))) {
            fail(cfg, "%s: expected [beta1, beta2], got %s", k->path, json_type_name(v));
            return false;
        }
        for (int i = 0; i < 2; i++) {
            double bi = cJSON_GetArrayItem(v, i)->valuedouble;
            if (!(bi >= 0 && bi < 1)) {
                fail(cfg, "%s: beta%d = %g is out of range [0, 1)", k->path, i + 1, bi);
                return false;
            }
            b[i] = (float)bi;
        }
        return true;
    }
    case K_SHARES: {
        if (cJSON_IsString(v) && strcmp(v->valuestring, "auto") == 0) {
            cfg->shares_auto = true;
            cfg->n_shares = 0;
            return true;
        }
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        if (n < 1 || n > BT_MAX_RANKS) {
            fail(cfg, "%s: expected \"auto\" or a list of per-rank sample counts", k->path);
            return false;
        }
        for (int i = 0; i < n; i++) {
            cJSON *x = cJSON_GetArrayItem(v, i);
            if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble != floor(x->valuedouble)) {
                fail(cfg, "%s: entry %d must be an integer >= 1", k->path, i);
                return false;
            }
            cfg->shares[i] = (long)x->valuedouble;
        }
        cfg->n_shares = n;
        cfg->shares_auto = false;
        return true;
    }
    case K_DEVICES: {
        bool ok = cJSON_IsArray(v) || cJSON_IsObject(v);
        for (cJSON *x = ok ? v->child : NULL; x; x = x->next) ok = ok && cJSON_IsString(x);
        char *text = ok ? cJSON_PrintUnformatted(v) : NULL;
        if (!text || strlen(text) >= k->size) {
            fail(cfg, "%s: expected a list of device specs by rank, or an object of "
                      "\"host:local_rank\" -> device spec", k->path);
            free(text);
            return false;
        }
        strcpy(base, text);
        free(text);
        return true;
    }
    case K_MASK_TEXTS: { /* stored as the JSON text of the list */
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        if (n < 0 || n > BT_MAX_FILL_MASK) {
            fail(cfg, "%s: expected a list of at most %d sentences with [MASK]", k->path,
                 BT_MAX_FILL_MASK);
            return false;
        }
        for (int i = 0; i < n; i++) {
            const cJSON *x = cJSON_GetArrayItem(v, i);
            if (!cJSON_IsString(x) || !strstr(x->valuestring, "[MASK]")) {
                fail(cfg, "%s: entry %d is not a string with [MASK] in it", k->path, i);
                return false;
            }
        }
        char *text = n ? cJSON_PrintUnformatted(v) : NULL;
        if (n && (!text || strlen(text) >= k->size)) {
            fail(cfg, "%s: longer than %zu characters in all", k->path, k->size - 1);
            free(text);
            return false;
        }
        snprintf(base, k->size, "%s", text ? text : "");
        free(text);
        return true;
    }
    case K_CHOICE: {
        if (!cJSON_IsString(v)) {
            fail(cfg, "%s: expected one of %s, got %s", k->path, k->choices, json_type_name(v));
            return false;
        }
        const char *c = k->choices;
        for (int idx = 0; *c; idx++) {
            size_t len = strcspn(c, "|");
            if (strlen(v->valuestring) == len && strncasecmp(c, v->valuestring, len) == 0) {
                if (k->offset == OFF(sched.warmup_log) || k->offset == OFF(data.sentence_pairs))
                    *(bool *)base = idx != 0;
                else
                    *(int *)base = idx;
                return true;
            }
            c += len + (c[len] == '|');
        }
        fail(cfg, "%s: '%s' is not one of %s", k->path, v->valuestring, k->choices);
        return false;
    }
    }
    return false;
}

static bool walk(bt_config *cfg, const cJSON *obj, const char *prefix) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", it->string);
        const key_spec *k = find_key(path);
        if (!k) {
            const char *near = closest_key(path);
            if (near)
                fail(cfg, "%s: unknown key (did you mean '%s'?)", path, near);
            else
                fail(cfg, "%s: unknown key", path);
            return false;
        }
        if (k->kind == K_OBJECT) {
            if (!cJSON_IsObject(it)) {
                fail(cfg, "%s: expected an object, got %s", path, json_type_name(it));
                return false;
            }
            if (!walk(cfg, it, path)) return false;
        } else if (!apply_key(cfg, k, it)) {
            return false;
        }
    }
    return true;
}

void config_defaults(bt_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    bert_preset("tiny", &cfg->model);
    strcpy(cfg->preset, "tiny");
    cfg->train_batch_size = cfg->micro_batch = cfg->grad_accum = -1;
    cfg->train_steps = 100;
    cfg->seed = 42;
    strcpy(cfg->output_dir, "runs/demo");
    cfg->steps_per_print = 10;
    cfg->gradient_clipping = 1.0f;
    cfg->optim = (bt_optim_config){OPT_ADAMW, 1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, true, 0.01f,
                                   10.0f};
    cfg->sched = (bt_sched_config){SCHED_CONSTANT, 0.0, NAN, 0, -1, false, 0.5, 1000, 1e-4, 0.0,
                                   SCHED_UNIT_STEPS};
    cfg->data.seq_len = 128;
    cfg->data.mask_prob = 0.15f;
    strcpy(cfg->device, "cpu");
    cfg->ckpt_keep = 3;
    cfg->fp16_initial_scale_power = 16; /* DeepSpeed's defaults */
    cfg->fp16_loss_scale_window = 1000;
    cfg->fp16_hysteresis = 2;
    cfg->fp16_min_loss_scale = 1.0;
    cfg->guard_spike_factor = 10.0;
    cfg->guard_median_window = 100;
    cfg->guard_max_bad = 10;
    cfg->guard_window = 100;
    cfg->guard_max_rollbacks = 3;
    cfg->rampup_samples = 1;
    cfg->rampup_stages = 4;
    cfg->sync_check_interval = 100;
    cfg->drift_tolerance = 1e-6;
    cfg->bucket_mb = 25.0;
    cfg->dist_timeout_s = 600;
}

/* Set key.path = value (JSON, or a bare string) in the tree, creating objects. */
static bool apply_override(bt_config *cfg, cJSON *root, const char *assign) {
    const char *eq = strchr(assign, '=');
    if (!eq || eq == assign) {
        fail(cfg, "--set %s: expected key.path=value", assign);
        return false;
    }
    char path[256];
    snprintf(path, sizeof path, "%.*s", (int)(eq - assign), assign);
    cJSON *val = cJSON_Parse(eq + 1);
    uint64_t exact;
    if (!val || (cJSON_IsNumber(val) && parse_u64(eq + 1, &exact) && exact >= (1ull << 53))) {
        cJSON_Delete(val); /* a bare string, or digits a JSON number would round: the text */
        val = cJSON_CreateString(eq + 1);
    }
    cJSON *node = root;
    char *save = NULL, *tok = strtok_r(path, ".", &save);
    while (tok) {
        char *next = strtok_r(NULL, ".", &save);
        if (!next) {
            cJSON_DeleteItemFromObjectCaseSensitive(node, tok);
            cJSON_AddItemToObject(node, tok, val);
            return true;
        }
        cJSON *child = cJSON_GetObjectItemCaseSensitive(node, tok);
        if (!child) child = cJSON_AddObjectToObject(node, tok);
        if (!cJSON_IsObject(child)) {
            fail(cfg, "--set %s: '%s' is not an object", assign, tok);
            cJSON_Delete(val);
            return false;
        }
        node = child;
        tok = next;
    }
    cJSON_Delete(val);
    return false;
}

static bool resolve_batch(bt_config *cfg) {
    long G = cfg->train_batch_size, mb = cfg->micro_batch, ga = cfg->grad_accum;
    long W = cfg->world_size;
    if (cfg->n_shares > 0) { /* explicit per-rank shares fix the global batch */
        long sum = 0, most = 0;
        for (int r = 0; r < cfg->n_shares; r++) {
            sum += cfg->shares[r];
            if (cfg->shares[r] > most) most = cfg->shares[r];
        }
        if (cfg->n_shares != W) {
            fail(cfg, "distributed.shares: %d entries for %ld ranks", cfg->n_shares, W);
            return false;
        }
        if (G > 0 && G != sum) {
            fail(cfg, "train_batch_size: %ld != the sum %ld of distributed.shares", G, sum);
            return false;
        }
        if (ga > 0) {
            fail(cfg, "gradient_accumulation_steps: not with distributed.shares (each rank "
                      "accumulates ceil(share / micro-batch) micro-batches)");
            return false;
        }
        cfg->train_batch_size = sum;
        cfg->micro_batch = mb > 0 ? mb : most;
        cfg->grad_accum = (most + cfg->micro_batch - 1) / cfg->micro_batch;
        return true;
    }
    int given = (G > 0) + (mb > 0) + (ga > 0);
    if (given == 3 && G != mb * ga * W) {
        fail(cfg, "train_batch_size: %ld != train_micro_batch_size_per_gpu %ld x "
                  "gradient_accumulation_steps %ld x %ld ranks", G, mb, ga, W);
        return false;
    }
    if (G > 0 && mb > 0 && ga <= 0) {
        if (G % (mb * W)) {
            fail(cfg, "train_batch_size: %ld is not divisible by "
                      "train_micro_batch_size_per_gpu %ld x %ld ranks", G, mb, W);
            return false;
        }
        ga = G / (mb * W);
    } else if (G > 0 && ga > 0 && mb <= 0) {
        if (G % (ga * W)) {
            fail(cfg, "train_batch_size: %ld is not divisible by gradient_accumulation_steps "
                      "%ld x %ld ranks", G, ga, W);
            return false;
        }
        mb = G / (ga * W);
    } else if (G <= 0 && mb > 0) {
        if (ga <= 0) ga = 1;
        G = mb * ga * W;
    } else if (G > 0 && given == 1) {
        if (G % W) {
            fail(cfg, "train_batch_size: %ld is not divisible by %ld ranks", G, W);
            return false;
        }
        ga = 1;
        mb = G / W;
    } else if (given == 0) {
        mb = 16;
        ga = 1;
        G = mb * W;
    } else if (G <= 0 && ga > 0) {
        fail(cfg, "gradient_accumulation_steps: also give train_batch_size or "
                  "train_micro_batch_size_per_gpu");
        return false;
    }
    cfg->train_batch_size = G;
    cfg->micro_batch = mb;
    cfg->grad_accum = ga;
    return true;
}

bool config_load(bt_config *cfg, const char *path, const char *const *overrides, int n_over,
                 int world_size) {
    config_defaults(cfg);
    snprintf(cfg->path, sizeof cfg->path, "%s", path ? path : "(built-in demo)");
    cfg->world_size = world_size > 0 ? world_size : 1;
    cJSON *root = NULL;
    if (path) {
        size_t len = 0;
        char *text = file_read_all(path, &len);
        if (!text) {
            fail(cfg, "cannot read: %s", strerror(errno));
            return false;
        }
        const char *end = NULL;
        root = cJSON_ParseWithOpts(text, &end, 1);
        if (!root) {
            const char *at = cJSON_GetErrorPtr();
            if (!at || at < text || at > text + len) at = end ? end : text;
            int line = 1, col = 1;
            for (const char *p = text; p < at; p++) {
                if (*p == '\n') {
                    line++;
                    col = 1;
                } else {
                    col++;
                }
            }
            fail(cfg, "JSON syntax error at line %d, column %d", line, col);
            free(text);
            return false;
        }
        free(text);
        if (!cJSON_IsObject(root)) {
            fail(cfg, "the top level must be a JSON object");
            cJSON_Delete(root);
            return false;
        }
    } else {
        root = cJSON_CreateObject();
    }
    bool ok = true;
    for (int i = 0; ok && i < n_over; i++) ok = apply_override(cfg, root, overrides[i]);
    /* the preset first, so that explicit model keys override it */
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *preset = model ? cJSON_GetObjectItemCaseSensitive(model, "preset") : NULL;
    if (ok && preset) {
        if (!cJSON_IsString(preset) || !bert_preset(preset->valuestring, &cfg->model)) {
            fail(cfg, "model.preset: expected one of tiny|mini|small|medium|base|large");
            ok = false;
        }
    }
    if (ok) ok = walk(cfg, root, "");
    cJSON_Delete(root);
    if (!ok) return false;

    if (cfg->fp16 && cfg->bf16) {
        fail(cfg, "fp16.enabled and bf16.enabled are both true: choose one");
        return false;
    }
    if (cfg->fp16 && cfg->fp16_loss_scale == 0 &&
        cfg->fp16_min_loss_scale > ldexp(1.0, cfg->fp16_initial_scale_power)) {
        fail(cfg, "fp16.min_loss_scale: %g exceeds the initial scale 2^%d", cfg->fp16_min_loss_scale,
             cfg->fp16_initial_scale_power);
        return false;
    }
    cfg->model.storage = cfg->fp16 ? BT_F16 : cfg->bf16 ? BT_BF16 : BT_F32;
    char err[256];
    if (!bert_config_valid(&cfg->model, err, sizeof err)) {
        fail(cfg, "%s", err);
        return false;
    }
    if (cfg->data.seq_len > cfg->model.max_position_embeddings) {
        fail(cfg, "data.seq_len: %d exceeds model.max_position_embeddings %d", cfg->data.seq_len,
             cfg->model.max_position_embeddings);
        return false;
    }
    if (cfg->optim.min_coeff > cfg->optim.max_coeff) {
        fail(cfg, "optimizer.params.min_coeff: %g exceeds max_coeff %g", cfg->optim.min_coeff,
             cfg->optim.max_coeff);
        return false;
    }
    if (isnan(cfg->sched.warmup_max_lr)) cfg->sched.warmup_max_lr = cfg->optim.lr;
    if (cfg->sched.total_num_steps < 0 && cfg->sched.unit == SCHED_UNIT_STEPS)
        cfg->sched.total_num_steps = cfg->train_steps;
    if ((cfg->sched.type == SCHED_WARMUP_DECAY || cfg->sched.type == SCHED_COSINE) &&
        cfg->sched.total_num_steps <= cfg->sched.warmup_num_steps) {
        fail(cfg, "scheduler.params.total_num_steps: %ld must exceed warmup_num_steps %ld",
             cfg->sched.total_num_steps, cfg->sched.warmup_num_steps);
        return false;
    }
    if (cfg->model.nsp != cfg->data.sentence_pairs) {
        fail(cfg, "model.nsp: the NSP head needs data.mode \"sentence_pairs\" and "
                  "sentence pairs need model.nsp true");
        return false;
    }
    if (!resolve_batch(cfg)) return false;
    if (cfg->rampup_start > 0) {
        const long unit = cfg->micro_batch * cfg->world_size;
        if (cfg->n_shares > 0 || cfg->shares_auto) {
            fail(cfg, "batch_rampup: needs the equal split of the batch (no distributed.shares): "
                      "the rampup grows every rank's accumulation count alike");
            return false;
        }
        if (cfg->rampup_start % unit != 0 || cfg->rampup_start >= cfg->train_batch_size) {
            fail(cfg, "batch_rampup.start_batch_size: %ld must be a multiple of "
                      "train_micro_batch_size_per_gpu x ranks = %ld and below train_batch_size %ld",
                 cfg->rampup_start, unit, cfg->train_batch_size);
            return false;
        }
    }
    if (cfg->sched.total_num_steps < 0) { /* in samples: what the whole run trains on */
        long long total = 0;
        for (long step = 0; step < cfg->train_steps; step++) {
            long acc = rampup_accum(cfg, total);
            if (acc == cfg->grad_accum) { /* the rampup is over: full batches from here */
                total += (long long)(cfg->train_steps - step) * cfg->train_batch_size;
                break;
            }
            total += (long long)acc * cfg->micro_batch * cfg->world_size;
        }
        cfg->sched.total_num_steps = (long)total;
        if ((cfg->sched.type == SCHED_WARMUP_DECAY || cfg->sched.type == SCHED_COSINE) &&
            cfg->sched.total_num_steps <= cfg->sched.warmup_num_steps) {
            fail(cfg, "scheduler.params.total_num_steps: the run's %ld samples must exceed "
                      "warmup_num_steps %ld (scheduler.unit samples)",
                 cfg->sched.total_num_steps, cfg->sched.warmup_num_steps);
            return false;
        }
    }
    cJSON *resolved = config_to_cjson(cfg);
    cfg->resolved_json = resolved ? cJSON_PrintUnformatted(resolved) : NULL;
    cJSON_Delete(resolved);
    if (!cfg->resolved_json) {
        fail(cfg, "out of memory");
        return false;
    }
    return true;
}

void config_free(bt_config *cfg) {
    free(cfg->resolved_json);
    cfg->resolved_json = NULL;
}

/* The object at the parent path of key (creating objects), and the last name. */
static cJSON *parent_of(cJSON *root, const char *path, const char **leaf) {
    char part[256];
    cJSON *node = root;
    for (const char *dot; (dot = strchr(path, '.'));) {
        snprintf(part, sizeof part, "%.*s", (int)(dot - path), path);
        cJSON *child = cJSON_GetObjectItemCaseSensitive(node, part);
        node = child ? child : cJSON_AddObjectToObject(node, part);
        path = dot + 1;
    }
    *leaf = path;
    return node;
}

void *config_to_cjson(const bt_config *cfg) {
    cJSON *root = cJSON_CreateObject();
    for (size_t i = 0; root && i < N_KEYS; i++) {
        const key_spec *k = &KEYS[i];
        const char *base = (const char *)cfg + k->offset, *leaf;
        if (k->kind == K_OBJECT) continue;
        if (k->kind == K_SHARES && cfg->n_shares == 0 && !cfg->shares_auto) continue;
        if (k->kind == K_DEVICES && !cfg->devices_json[0]) continue;
        if (k->kind == K_MASK_TEXTS && !cfg->eval_fill_mask_json[0]) continue;
        cJSON *parent = parent_of(root, k->path, &leaf), *v = NULL;
        switch (k->kind) {
        case K_OBJECT:
            break;
        case K_INT:
            v = cJSON_CreateNumber(*(const int *)base);
            break;
        case K_LONG:
            v = cJSON_CreateNumber((double)*(const long *)base);
            break;
        case K_SEED: { /* a string where a JSON number would not be exact */
            uint64_t seed = *(const uint64_t *)base;
            char text[32];
            snprintf(text, sizeof text, "%llu", (unsigned long long)seed);
            v = seed < (1ull << 53) ? cJSON_CreateNumber((double)seed) : cJSON_CreateString(text);
            break;
        }
        case K_FLOAT:
            v = cJSON_CreateNumber(json_short_float(*(const float *)base));
            break;
        case K_DOUBLE: { /* a float stored as double (warmup_max_lr = lr) prints as the float */
            double d = *(const double *)base;
            v = cJSON_CreateNumber((double)(float)d == d ? json_short_float((float)d) : d);
            break;
        }
        case K_BOOL:
            v = cJSON_CreateBool(*(const bool *)base);
            break;
        case K_STRING:
            v = cJSON_CreateString(base);
            break;
        case K_BETAS:
            v = cJSON_CreateArray();
            cJSON_AddItemToArray(v, cJSON_CreateNumber(json_short_float(cfg->optim.beta1)));
            cJSON_AddItemToArray(v, cJSON_CreateNumber(json_short_float(cfg->optim.beta2)));
            break;
        case K_SHARES:
            if (cfg->shares_auto) {
                v = cJSON_CreateString("auto");
            } else {
                v = cJSON_CreateArray();
                for (int r = 0; r < cfg->n_shares; r++)
                    cJSON_AddItemToArray(v, cJSON_CreateNumber((double)cfg->shares[r]));
            }
            break;
        case K_DEVICES:
        case K_MASK_TEXTS:
            v = cJSON_Parse(base);
            break;
        case K_CHOICE: {
            int idx = (k->offset == OFF(sched.warmup_log) || k->offset == OFF(data.sentence_pairs))
                          ? *(const bool *)base
                          : *(const int *)base;
            const char *c = k->choices;
            for (int j = 0; j < idx && strchr(c, '|'); j++) c = strchr(c, '|') + 1;
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(c, "|"), c);
            v = cJSON_CreateString(name);
            break;
        }
        }
        if (v) cJSON_AddItemToObject(parent, leaf, v);
    }
    return root;
}
