/* Resume: choose and verify a checkpoint, compare configs key by key, load
 * weights and moments on rank 0 and copy them to every rank, and keep
 * metrics.jsonl continuous. */
#define _XOPEN_SOURCE 700
#include "resume.h"

#include "mpi/dist.h"
#include "store/ckpt.h"
#include "config/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Keys whose change would change the parameters' shapes (or how the heads
 * split them): a checkpoint cannot continue under a different value. */
static const char *const SHAPE_KEYS[] = {
    "model.vocab_size",        "model.hidden_size",       "model.num_hidden_layers",
    "model.num_attention_heads", "model.intermediate_size", "model.max_position_embeddings",
    "model.type_vocab_size",   "model.nsp",               "model.norm"};

static bool is_shape_key(const char *path) {
    for (size_t i = 0; i < sizeof SHAPE_KEYS / sizeof SHAPE_KEYS[0]; i++)
        if (strcmp(path, SHAPE_KEYS[i]) == 0) return true;
    return false;
}

/* Keys that fix which samples each step of an epoch trains on: changed in
 * the middle of an epoch, its samples would repeat or be skipped. */
static bool is_data_order_key(const char *path) {
    return !strcmp(path, "seed") || !strcmp(path, "data.train");
}

/* Compare every leaf of the checkpoint's config `old` with `cur`: false after
 * printing the first shape change, or the first change of the data order
 * without allow_data; logs every other change. */
static bool compare(const cJSON *old, const cJSON *cur, const char *prefix, const char *dir,
                    bool allow_data) {
    for (const cJSON *it = old ? old->child : NULL; it; it = it->next) {
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", it->string);
        if (cJSON_IsObject(it)) {
            if (!compare(it, cur, path, dir, allow_data)) return false;
            continue;
        }
        const cJSON *now = ckpt_json_at(cur, path);
        if (!now) continue; /* a key this version no longer has */
        char *a = cJSON_PrintUnformatted(it), *b = cJSON_PrintUnformatted(now);
        bool same = a && b && strcmp(a, b) == 0;
        bool ok = true;
        if (!same && is_shape_key(path)) {
            fprintf(stderr, "bertrain: resume: %s: %s is %s in the checkpoint and %s in the "
                            "config; the model's shape cannot change on resume\n",
                    dir, path, a ? a : "?", b ? b : "?");
            ok = false;
        } else if (!same && is_data_order_key(path) && !allow_data) {
            fprintf(stderr, "bertrain: resume: %s: %s is %s in the checkpoint and %s in the "
                            "config; the samples of the current epoch would repeat or be "
                            "skipped: pass --allow-data-change to change it anyway\n",
                    dir, path, a ? a : "?", b ? b : "?");
            ok = false;
        } else if (!same) {
            printf("resume: %s %s -> %s\n", path, a ? a : "?", b ? b : "?");
        }
        free(a);
        free(b);
        if (!ok) return false;
    }
    return true;
}

static double num(const cJSON *obj, const char *path, double dflt) {
    const cJSON *v = ckpt_json_at(obj, path);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* Rank 0's half of resume_prepare. */
static int prepare_rank0(const bt_config *cfg, resume_info *ri, bool rollback) {
    cJSON *state = NULL;
    char err[1024];
    if (strcmp(cfg->resume, "auto") == 0) {
        if (!ckpt_find_auto(cfg->output_dir, ri->dir, sizeof ri->dir, &state)) {
            if (!rollback) /* a rollback says itself what it does instead */
                printf("resume: no usable checkpoint in %s; starting from step 0\n",
                       cfg->output_dir);
            char id[RUN_ID_LEN + 1]; /* damaged ones of this directory's run: continue it */
            run_dir_newest_id(cfg->output_dir, id);
            if (id[0]) memcpy(ri->run_id, id, sizeof id);
            return 0;
        }
    } else {
        snprintf(ri->dir, sizeof ri->dir, "%s", cfg->resume);
        struct stat sb;
        if (stat(ri->dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "bertrain: resume: %s: %s\n", ri->dir,
                    stat(ri->dir, &sb) != 0 ? "no such checkpoint directory"
                                            : "not a directory (a checkpoint is a directory)");
            return 2;
        }
        if (!ckpt_verify(ri->dir, &state, err, sizeof err)) {
            fprintf(stderr, "bertrain: resume: %s\n", err);
            return 2;
        }
    }
    run_dir_ckpt_id(ri->dir, ri->run_id);
    if (!ri->run_id[0]) { /* a checkpoint of an older version: its resumptions start a lineage */
        run_dir_new_id(ri->run_id);
        printf("resume: %s records no run id: this run's checkpoints are %s\n", ri->dir,
               ri->run_id);
    }
    ri->step = (long)num(state, "step", 0);
    const cJSON *lower = ckpt_json_at(state, "data.lowercase");
    ri->lowercase = cJSON_IsBool(lower) ? cJSON_IsTrue(lower) : -1;
    ri->imported = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(state, "imported_from"));
    long old_batch = (long)num(state, "data.global_batch", (double)cfg->train_batch_size);
    ri->position = (long long)num(state, "data.position", (double)ri->step * old_batch);
    const long updates = (long)num(state, "optimizer.step", (double)ri->step); /* the schedule's step */
    ri->opt_step = updates; /* what optim.bin must say */
    ri->exact_opt_step = ckpt_json_at(state, "optimizer.step") != NULL;
    double old_lr = num(state, "schedule.next_lr", NAN),
           new_lr = sched_lr(cfg, sched_position(cfg, updates, ri->position));
    printf("resume: from %s (step %ld, sample %lld, epoch %.0f)\n", ri->dir, ri->step,
           ri->position, num(state, "data.epoch", 0));
    cJSON *cur = cJSON_Parse(cfg->resolved_json ? cfg->resolved_json : "{}");
    bool ok = compare(cJSON_GetObjectItemCaseSensitive(state, "config"), cur, "", ri->dir,
                      cfg->allow_data_change);
    cJSON_Delete(cur);
    if (!ok) {
        cJSON_Delete(state);
        return 2;
    }
    ri->active = true;
    if (old_batch != cfg->train_batch_size)
        printf("resume: the global batch changes from %ld to %ld samples; the data continues "
               "at sample %lld\n", old_batch, cfg->train_batch_size, ri->position);
    if (isfinite(old_lr) && fabs(old_lr - new_lr) > 1e-9 * fabs(old_lr))
        printf("resume: the learning rate of step %ld is %.6g under this config (the "
               "checkpoint's schedule gave %.6g)\n", ri->step + 1, new_lr, old_lr);
    if (ri->step >= cfg->train_steps)
        printf("resume: the checkpoint's step %ld already reaches train_steps %ld\n", ri->step,
               cfg->train_steps);
    fflush(stdout);
    cJSON_Delete(state);
    return 0;
}

int resume_prepare(const bt_config *cfg, resume_info *ri, bool rollback) {
    memset(ri, 0, sizeof *ri);
    ri->lowercase = -1;
    struct {
        int rc, active, lowercase, imported;
        long step;
        long long position;
        char dir[1024];
        char run_id[RUN_ID_LEN + 1];
    } msg = {0, 0, -1, 0, 0, 0, "", ""};
    if (dist_rank() == 0) run_dir_new_id(ri->run_id); /* a fresh run's, unless resuming */
    if (!cfg->resume[0]) return 0;
    if (dist_rank() == 0) {
        msg.rc = prepare_rank0(cfg, ri, rollback);
        msg.active = ri->active;
        msg.lowercase = ri->lowercase;
        msg.imported = ri->imported;
        msg.step = ri->step;
        msg.position = ri->position;
        memcpy(msg.dir, ri->dir, sizeof msg.dir);
        memcpy(msg.run_id, ri->run_id, sizeof msg.run_id);
    }
    dist_broadcast(&msg, sizeof msg);
    ri->active = msg.active;
    ri->lowercase = msg.lowercase;
    ri->imported = msg.imported;
    ri->step = msg.step;
    ri->position = msg.position;
    memcpy(ri->dir, msg.dir, sizeof ri->dir);
    memcpy(ri->run_id, msg.run_id, sizeof ri->run_id);
    return msg.rc;
}

/* From state.json: the per-layer update counts of optimizer.layer_steps (they
 * differ from the step under LayerDrop; older checkpoints lack them and keep
 * the optimizer step for every layer), and an Admin model's omegas. false
 * with a reason when the omegas are missing or bad. */
static bool read_state_arrays(const char *dir, bt_optimizer *o, bert_model *m, char *err,
                              size_t errlen) {
    cJSON *state = run_dir_read_state(dir);
    const cJSON *arr = state ? ckpt_json_at(state, "optimizer.layer_steps") : NULL;
    bool ok = true;
    if (cJSON_IsArray(arr) && cJSON_GetArraySize(arr) == o->n_layers)
        for (int l = 0; ok && l < o->n_layers; l++) {
            o->layer_steps[l] = (long)cJSON_GetNumberValue(cJSON_GetArrayItem(arr, l));
            if (o->layer_steps[l] > o->step) { /* a layer is updated at most every step */
                snprintf(err, errlen, "state.json: optimizer.layer_steps[%d] is %ld, more than "
                         "the optimizer step %ld", l, o->layer_steps[l], o->step);
                ok = false;
            }
        }
    if (ok && m->cfg.norm == BERT_NORM_ADMIN) {
        bert_config saved;
        ok = state && ckpt_model_config(state, &saved, err, errlen);
        if (!state) snprintf(err, errlen, "state.json is unreadable");
        if (ok) memcpy(m->cfg.admin_omega, saved.admin_omega, sizeof saved.admin_omega);
    }
    cJSON_Delete(state);
    return ok;
}

void resume_scaler(const resume_info *ri, loss_scaler *s) {
    if (dist_rank() == 0) {
        cJSON *state = run_dir_read_state(ri->dir);
        const cJSON *scale = state ? ckpt_json_at(state, "loss_scaler.scale") : NULL,
                    *hyst = state ? ckpt_json_at(state, "loss_scaler.cur_hysteresis") : NULL,
                    *iter = state ? ckpt_json_at(state, "loss_scaler.iter") : NULL,
                    *last = state ? ckpt_json_at(state, "loss_scaler.last_overflow") : NULL,
                    *skipped = state ? ckpt_json_at(state, "loss_scaler.skipped") : NULL;
        if (cJSON_IsNumber(hyst) && cJSON_IsNumber(iter) && cJSON_IsNumber(last)) {
            if (s->dynamic && cJSON_IsNumber(scale)) s->scale = scale->valuedouble;
            s->cur_hysteresis = (int)hyst->valuedouble;
            s->iter = (long)iter->valuedouble;
            s->last_overflow = (long)last->valuedouble;
            s->skipped = cJSON_IsNumber(skipped) ? (long)skipped->valuedouble : 0;
            printf("resume: fp16 loss scale %g (%ld overflow steps so far)\n", s->scale, s->skipped);
        } else {
            printf("resume: the checkpoint was not trained with fp16: the loss scale starts "
                   "at %g\n", s->scale);
        }
        cJSON_Delete(state);
    }
    dist_broadcast(s, sizeof *s);
}

bool resume_skips(const resume_info *ri, sample_skips *s) {
    int ok = 1;
    if (dist_rank() == 0) {
        cJSON *state = run_dir_read_state(ri->dir);
        ok = state && skips_from_json(s, ckpt_json_at(state, "data.skipped_samples"));
        if (!ok)
            fprintf(stderr, "bertrain: resume: %s/state.json: data.skipped_samples is not a "
                            "list of [from, to] sample ranges\n", ri->dir);
        else if (s->n > 0)
            printf("resume: %d sample ranges skipped after earlier rollbacks stay skipped\n",
                   s->n);
        cJSON_Delete(state);
    }
    dist_broadcast(&ok, sizeof ok);
    if (ok) skips_broadcast(s);
    return ok;
}

bool resume_load(const resume_info *ri, bert_model *m, bt_optimizer *o) {
    char err[1024];
    double status[2] = {1, 0}; /* ok, optimizer step */
    if (dist_rank() == 0) {
        if (!ckpt_load_weights(ri->dir, m, err, sizeof err) ||
            !ckpt_load_optim(ri->dir, m, o, ri->opt_step, ri->exact_opt_step, err,
                             sizeof err)) {
            fprintf(stderr, "bertrain: resume: %s\n", err);
            status[0] = 0;
        }
        status[1] = (double)o->step;
    }
    dist_broadcast(status, sizeof status);
    if (status[0] == 0) return false;
    o->step = (long)status[1];
    if (dist_rank() == 0 && !read_state_arrays(ri->dir, o, m, err, sizeof err)) {
        fprintf(stderr, "bertrain: resume: %s: %s\n", ri->dir, err);
        status[0] = 0;
    }
    dist_broadcast(status, sizeof status);
    if (status[0] == 0) return false;
    dist_broadcast(o->layer_steps, (size_t)o->n_layers * sizeof *o->layer_steps);
    if (o->lamb1) { /* 1-bit LAMB's host state, rank 0's everywhere */
        const size_t nt = (size_t)m->n_tensors;
        dist_broadcast(o->lamb1->coeff_freeze, nt * sizeof *o->lamb1->coeff_freeze);
        dist_broadcast(o->lamb1->last_factor, nt * sizeof *o->lamb1->last_factor);
        dist_broadcast(o->lamb1->scaling, nt * sizeof *o->lamb1->scaling);
        dist_broadcast(o->lamb1->v_fresh, bert_n_params(m) * sizeof *o->lamb1->v_fresh);
    }
    dist_broadcast(m->cfg.admin_omega, sizeof m->cfg.admin_omega);
    if (dist_world() > 1) broadcast_weights(m, o);
    return true;
}

void broadcast_weights(bert_model *m, bt_optimizer *o) {
    const size_t bytes = bert_n_params(m) * sizeof(float);
    float *host = malloc(bytes);
    if (!host) {
        fprintf(stderr, "bertrain: rank %d: out of host memory\n", dist_rank());
        dist_abort(1);
    }
    const bt_ptr bufs[3] = {bert_params_at(m, 0), optim_moment_at(o, 0, 0),
                            optim_moment_at(o, 1, 0)};
    for (int i = 0; i < 3; i++) {
        m->be->download(m->be, host, bufs[i], bytes);
        dist_broadcast(host, bytes);
        m->be->upload(m->be, bufs[i], host, bytes);
    }
    free(host);
}

FILE *resume_open_metrics(const char *path, const resume_info *ri) {
    if (!ri->active) return fopen(path, "w");
    /* drop lines past the checkpoint (written before a crash), keep the rest */
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *in = fopen(path, "r"), *out = fopen(tmp, "w");
    if (!out) {
        if (in) fclose(in);
        return NULL;
    }
    char *line = NULL;
    size_t cap = 0;
    while (in && getline(&line, &cap, in) > 0) {
        long step;
        if (sscanf(line, "{\"step\": %ld", &step) == 1 && step <= ri->step) fputs(line, out);
    }
    free(line);
    if (in) fclose(in);
    bool ok = fclose(out) == 0 && rename(tmp, path) == 0;
    return ok ? fopen(path, "a") : NULL;
}

bool resume_check_vocab(const resume_info *ri, const bt_vocab *v, const char *vocab_path,
                        char *err, size_t errlen) {
    char path[1200];
    snprintf(path, sizeof path, "%s/vocab.txt", ri->dir);
    bt_vocab saved;
    if (!ri->active || !vocab_load(&saved, path, err, errlen)) return true; /* none kept */
    int line = 0; /* the first line where they differ (1-based) */
    for (int i = 0; i < saved.size || i < v->size; i++)
        if (i >= saved.size || i >= v->size || strcmp(saved.tokens[i], v->tokens[i]) != 0) {
            line = i + 1;
            break;
        }
    if (line)
        snprintf(err, errlen, "data.vocab %s (%d tokens) is not the vocab the checkpoint was "
                 "trained with (%s, %d tokens; they differ from line %d): token ids would change "
                 "meaning", vocab_path, v->size, path, saved.size, line);
    vocab_free(&saved);
    return line == 0;
}
