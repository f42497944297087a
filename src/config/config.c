/* JSON config -> bt_config. A table of keys drives parsing, type and range
 * checks and "did you mean" suggestions; every error is one line that names
 * the file and the key, and the caller exits 2 before any work starts. */
#include "config.h"

#include "config_keys.h"

#include "util/parse_num.h"

#include "mpi/dist.h"
#include "util/file.h"
#include "util/json_dups.h"
#include "util/json_num.h"
#include "util/utf8_check.h"
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

void config_defaults(bt_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    bert_preset("tiny", &cfg->model);
    strcpy(cfg->preset, "tiny");
    cfg->train_batch_size = cfg->micro_batch = cfg->grad_accum = -1;
    cfg->train_steps = 100;
    cfg->seed = 42;
    strcpy(cfg->output_dir, "runs/demo");
    cfg->steps_per_print = 10;
    cfg->tf32 = true; /* where the device has TF32 tensor cores (CUDA, sm_80 on) */
    cfg->gradient_clipping = 1.0f;
    cfg->optim = (bt_optim_config){OPT_ADAMW, 1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, true, 0.01f,
                                   10.0f, 100000, 0.9f, 4.0f, 0.5f, 0.1f};
    cfg->sched = (bt_sched_config){SCHED_CONSTANT, 0.0, NAN, 0, -1, false, 0.5, 1000, 1e-4, 0.0,
                                   SCHED_UNIT_STEPS, 0};
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
        config_fail(cfg, "--set %s: expected key.path=value", assign);
        return false;
    }
    char path[256];
    snprintf(path, sizeof path, "%.*s", (int)(eq - assign), assign);
    cJSON *val = cJSON_Parse(eq + 1);
    uint64_t exact;
    const key_spec *k = config_find_key(path);
    const bool digits = eq[1] && strspn(eq + 1, "0123456789") == strlen(eq + 1);
    if (!val || (k && k->kind == K_SEED && cJSON_IsNumber(val) && digits &&
                 !(parse_u64(eq + 1, &exact) && exact < (1ull << 53)))) {
        cJSON_Delete(val); /* a bare string, or a seed's digits that a JSON number would round:
                              the text, exact (and said exactly when out of range) */
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
            config_fail(cfg, "--set %s: '%s' is not an object", assign, tok);
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
            config_fail(cfg, "distributed.shares: %d entries for %ld ranks", cfg->n_shares, W);
            return false;
        }
        if (G > 0 && G != sum) {
            config_fail(cfg, "train_batch_size: %ld != the sum %ld of distributed.shares", G, sum);
            return false;
        }
        if (ga > 0) {
            config_fail(cfg, "gradient_accumulation_steps: not with distributed.shares (each rank "
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
        config_fail(cfg, "train_batch_size: %ld != train_micro_batch_size_per_gpu %ld x "
                  "gradient_accumulation_steps %ld x %ld ranks", G, mb, ga, W);
        return false;
    }
    if (G > 0 && mb > 0 && ga <= 0) {
        if (G % (mb * W)) {
            config_fail(cfg, "train_batch_size: %ld is not divisible by "
                      "train_micro_batch_size_per_gpu %ld x %ld ranks", G, mb, W);
            return false;
        }
        ga = G / (mb * W);
    } else if (G > 0 && ga > 0 && mb <= 0) {
        if (G % (ga * W)) {
            config_fail(cfg, "train_batch_size: %ld is not divisible by gradient_accumulation_steps "
                      "%ld x %ld ranks", G, ga, W);
            return false;
        }
        mb = G / (ga * W);
    } else if (G <= 0 && mb > 0) {
        if (ga <= 0) ga = 1;
        G = mb * ga * W;
    } else if (G > 0 && given == 1) {
        if (G % W) {
            config_fail(cfg, "train_batch_size: %ld is not divisible by %ld ranks", G, W);
            return false;
        }
        ga = 1;
        mb = G / W;
    } else if (given == 0) {
        mb = 16;
        ga = 1;
        G = mb * W;
    } else if (G <= 0 && ga > 0) {
        config_fail(cfg, "gradient_accumulation_steps: also give train_batch_size or "
                  "train_micro_batch_size_per_gpu");
        return false;
    }
    cfg->train_batch_size = G;
    cfg->micro_batch = mb;
    cfg->grad_accum = ga;
    return true;
}

/* The first string of the resolved config (obj, under prefix) that is not
 * valid UTF-8: its key into key; false when there is none. */
static bool find_non_utf8(const cJSON *obj, const char *prefix, char *key, size_t len,
                          const char **value) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", it->string ? it->string : "[]");
        if ((cJSON_IsObject(it) || cJSON_IsArray(it)) && find_non_utf8(it, path, key, len, value))
            return true;
        if (cJSON_IsString(it) && !utf8_valid(it->valuestring)) {
            snprintf(key, len, "%s", path);
            *value = it->valuestring;
            return true;
        }
    }
    return false;
}

/* Every path and text the config holds is UTF-8, which state.json and
 * metrics.jsonl (JSON) must be; false after one line naming the key. */
static bool check_utf8(bt_config *cfg, const cJSON *resolved) {
    char key[256], shown[512];
    const char *value = cfg->path;
    if (utf8_valid(cfg->path) && !find_non_utf8(resolved, "", key, sizeof key, &value)) return true;
    utf8_shown(value, shown, sizeof shown);
    if (value == cfg->path)
        config_fail(cfg, "the config file's path is not valid UTF-8 (\"%s\"): bertrain records it "
                    "in state.json, whose JSON must be UTF-8; rename it", shown);
    else
        config_fail(cfg, "%s: \"%s\" is not valid UTF-8: bertrain records it in state.json, "
                    "whose JSON must be UTF-8; rename the path or fix the text", key, shown);
    return false;
}

/* config_load and config_load_named: the file at path (none: NULL), its
 * messages naming `name`. */
static bool load(bt_config *cfg, const char *path, const char *name,
                 const char *const *overrides, int n_over, int world_size) {
    config_defaults(cfg);
    snprintf(cfg->path, sizeof cfg->path, "%s", name);
    cfg->world_size = world_size > 0 ? world_size : 1;
    cJSON *root = NULL;
    if (path) {
        size_t len = 0;
        char *text = file_read_all(path, &len);
        if (!text) {
            config_fail(cfg, "cannot read: %s", strerror(errno));
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
            config_fail(cfg, "JSON syntax error at line %d, column %d", line, col);
            free(text);
            return false;
        }
        char dup[512];
        if (json_find_duplicate(text, len, dup, sizeof dup)) {
            config_fail(cfg, "%s", dup);
            free(text);
            cJSON_Delete(root);
            return false;
        }
        free(text);
        if (!cJSON_IsObject(root)) {
            config_fail(cfg, "the top level must be a JSON object");
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
            config_fail(cfg, "model.preset: expected one of tiny|mini|small|medium|base|large");
            ok = false;
        }
    }
    if (ok) ok = config_walk(cfg, root, "");
    cJSON_Delete(root);
    if (!ok) return false;

    if (cfg->fp16 && cfg->bf16) {
        config_fail(cfg, "fp16.enabled and bf16.enabled are both true: choose one");
        return false;
    }
    if (cfg->fp16 && cfg->fp16_loss_scale == 0 &&
        cfg->fp16_min_loss_scale > ldexp(1.0, cfg->fp16_initial_scale_power)) {
        config_fail(cfg, "fp16.min_loss_scale: %g exceeds the initial scale 2^%d", cfg->fp16_min_loss_scale,
             cfg->fp16_initial_scale_power);
        return false;
    }
    cfg->model.storage = cfg->fp16 ? BT_F16 : cfg->bf16 ? BT_BF16 : BT_F32;
    char err[256];
    if (!bert_config_valid(&cfg->model, err, sizeof err)) {
        config_fail(cfg, "%s", err);
        return false;
    }
    if (cfg->data.seq_len > cfg->model.max_position_embeddings) {
        config_fail(cfg, "data.seq_len: %d exceeds model.max_position_embeddings %d", cfg->data.seq_len,
             cfg->model.max_position_embeddings);
        return false;
    }
    if ((cfg->optim.type == OPT_ONEBIT_ADAM || cfg->optim.type == OPT_ONEBIT_LAMB) &&
        cfg->model.layerdrop > 0.0f) {
        config_fail(cfg, "model.layerdrop: %g with optimizer.type %s: the exchanged momentum "
                    "moves every layer at every step; use AdamW or Lamb with LayerDrop",
                    cfg->model.layerdrop, optim_type_name(cfg->optim.type));
        return false;
    }
    if (cfg->optim.min_coeff > cfg->optim.max_coeff) {
        config_fail(cfg, "optimizer.params.min_coeff: %g exceeds max_coeff %g", cfg->optim.min_coeff,
             cfg->optim.max_coeff);
        return false;
    }
    if (isnan(cfg->sched.warmup_max_lr)) cfg->sched.warmup_max_lr = cfg->optim.lr;
    if (cfg->sched.unit == SCHED_UNIT_STEPS && cfg->sched.start >= cfg->train_steps) {
        config_fail(cfg, "scheduler.start: %ld must be below train_steps %ld (the schedule "
                    "starts over at that update)", cfg->sched.start, cfg->train_steps);
        return false;
    }
    if (cfg->sched.total_num_steps < 0 && cfg->sched.unit == SCHED_UNIT_STEPS)
        cfg->sched.total_num_steps = cfg->train_steps - cfg->sched.start;
    if ((cfg->sched.type == SCHED_WARMUP_DECAY || cfg->sched.type == SCHED_COSINE) &&
        cfg->sched.total_num_steps <= cfg->sched.warmup_num_steps) {
        config_fail(cfg, "scheduler.params.total_num_steps: %ld must exceed warmup_num_steps %ld",
             cfg->sched.total_num_steps, cfg->sched.warmup_num_steps);
        return false;
    }
    if (cfg->model.nsp != cfg->data.sentence_pairs) {
        config_fail(cfg, "model.nsp: the NSP head needs data.mode \"sentence_pairs\" and "
                  "sentence pairs need model.nsp true");
        return false;
    }
#ifndef BT_HAVE_TENSORBOARD
    if (cfg->metrics_tensorboard) {
        config_fail(cfg, "metrics.tensorboard: this bertrain was built without the TensorBoard "
                         "event writer (%s); or set metrics.tensorboard false",
                    BT_TENSORBOARD_WHY_NOT);
        return false;
    }
#endif
    if (!resolve_batch(cfg)) return false;
    if (cfg->rampup_start > 0) {
        const long unit = cfg->micro_batch * cfg->world_size;
        if (cfg->n_shares > 0 || cfg->shares_auto) {
            config_fail(cfg, "batch_rampup: needs the equal split of the batch (no distributed.shares): "
                      "the rampup grows every rank's accumulation count alike");
            return false;
        }
        if (cfg->rampup_start % unit != 0 || cfg->rampup_start >= cfg->train_batch_size) {
            config_fail(cfg, "batch_rampup.start_batch_size: %ld must be a multiple of "
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
        if (total <= cfg->sched.start) {
            config_fail(cfg, "scheduler.start: %ld must be below the run's %lld samples "
                        "(scheduler.unit samples)", cfg->sched.start, total);
            return false;
        }
        cfg->sched.total_num_steps = (long)(total - cfg->sched.start);
        if ((cfg->sched.type == SCHED_WARMUP_DECAY || cfg->sched.type == SCHED_COSINE) &&
            cfg->sched.total_num_steps <= cfg->sched.warmup_num_steps) {
            config_fail(cfg, "scheduler.params.total_num_steps: the run's %ld samples must exceed "
                      "warmup_num_steps %ld (scheduler.unit samples)",
                 cfg->sched.total_num_steps, cfg->sched.warmup_num_steps);
            return false;
        }
    }
    cJSON *resolved = config_to_cjson(cfg);
    if (resolved && !check_utf8(cfg, resolved)) {
        cJSON_Delete(resolved);
        return false;
    }
    cfg->resolved_json = resolved ? cJSON_PrintUnformatted(resolved) : NULL;
    cJSON_Delete(resolved);
    if (!cfg->resolved_json) {
        config_fail(cfg, "out of memory");
        return false;
    }
    return true;
}

bool config_load(bt_config *cfg, const char *path, const char *const *overrides, int n_over,
                 int world_size) {
    return load(cfg, path, path ? path : "(built-in demo)", overrides, n_over, world_size);
}

bool config_load_named(bt_config *cfg, const char *name, const char *const *overrides, int n_over,
                       int world_size) {
    return load(cfg, NULL, name, overrides, n_over, world_size);
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
    for (size_t i = 0; root && i < CONFIG_N_KEYS; i++) {
        const key_spec *k = &CONFIG_KEYS[i];
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
        case K_OPT_STRING:
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
            int idx = config_choice_is_bool(k)
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
