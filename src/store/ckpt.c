/* Checkpoint writing: the atomic directory (ckpt_write_dir), optim.bin and
 * state.json with checksums (the background writer: ckpt_writer.c). */
#define _XOPEN_SOURCE 700
#include "ckpt.h"
#include "ckpt_internal.h"

#include "util/le.h"
#include "run_dir.h"
#include "safetensors.h"
#include "util/file.h"
#include "config/sched.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "dev"
#endif

bool ckpt_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return false;
    bool ok = fsync(fd) == 0;
    close(fd);
    return ok;
}

/* The names bertrain ever writes into a checkpoint directory. */
static const char *const CKPT_NAMES[] = {"state.json", "model.safetensors", "optim.bin",
                                         "vocab.txt", CKPT_CARRIED_FILE, CKPT_ONEBIT_FILE,
                                         CKPT_LAMB1_FILE};

/* Whether `name` is one that checkpoint dir's own list says bertrain wrote:
 * state.json, or a file its state.json lists under "files" (when state.json
 * does not parse: any of CKPT_NAMES, all a write can have left). */
static bool written_by_bertrain(const cJSON *files, const char *name) {
    bool known = false;
    for (size_t i = 0; i < sizeof CKPT_NAMES / sizeof CKPT_NAMES[0]; i++)
        known = known || strcmp(name, CKPT_NAMES[i]) == 0;
    if (!known || !strcmp(name, "state.json") || !files) return known;
    return cJSON_GetObjectItemCaseSensitive(files, name) != NULL;
}

/* The first entry of checkpoint directory dir that bertrain did not write
 * (not a regular file of its own list), into foreign, and how many there are;
 * -1 when dir cannot be read. */
static int foreign_entries(const char *dir, char *foreign, size_t len) {
    char path[1400];
    cJSON *state = run_dir_read_state(dir);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(state, "files");
    DIR *d = opendir(dir);
    int n = d ? 0 : -1;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (written_by_bertrain(cJSON_IsObject(files) ? files : NULL, e->d_name) &&
            lstat(path, &sb) == 0 && S_ISREG(sb.st_mode))
            continue;
        if (n++ == 0) snprintf(foreign, len, "%s", e->d_name);
    }
    if (d) closedir(d);
    cJSON_Delete(state);
    return n;
}

bool ckpt_removable(const char *dir, char *err, size_t errlen) {
    char foreign[256];
    struct stat sb;
    if (lstat(dir, &sb) != 0 && errno == ENOENT) return true;
    const int n = foreign_entries(dir, foreign, sizeof foreign);
    if (n < 0)
        snprintf(err, errlen, "%s: cannot read: %s", dir, strerror(errno));
    else if (n > 0)
        snprintf(err, errlen, "%s holds %s%s, which bertrain did not write", dir, foreign,
                 n > 1 ? " and more" : "");
    return n == 0;
}

bool ckpt_remove(const char *dir, char *err, size_t errlen) {
    if (!ckpt_removable(dir, err, errlen)) return false;
    char path[1400];
    for (size_t i = 0; i < sizeof CKPT_NAMES / sizeof CKPT_NAMES[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, CKPT_NAMES[i]);
        unlink(path); /* only bertrain's names: a file that appeared since stays, and so does dir */
    }
    if (rmdir(dir) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "%s: cannot remove: %s", dir, strerror(errno));
        return false;
    }
    return true;
}

bool ckpt_write_bytes(const char *path, const void *data, size_t n, char *err, size_t errlen) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return false;
    }
    bool ok = fwrite(data, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0) ok = false;
    if (!ok) snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
    return ok;
}

bool ckpt_file_crc(const char *path, uint32_t *crc, long long *size) {
    enum { CHUNK = 1 << 20 };
    FILE *f = fopen(path, "rb");
    unsigned char *buf = f ? malloc(CHUNK) : NULL;
    if (!buf) {
        if (f) fclose(f);
        return false;
    }
    uLong c = crc32(0L, Z_NULL, 0);
    long long n = 0;
    for (size_t got; (got = fread(buf, 1, CHUNK, f)) > 0; n += (long long)got)
        c = crc32(c, buf, (uInt)got);
    bool ok = !ferror(f);
    fclose(f);
    free(buf);
    *crc = (uint32_t)c;
    *size = n;
    return ok;
}

/* optim.bin: a 32-byte header (magic, version, optimizer type, step, tensor
 * count, table bytes), a table of (u16 name length, name, u64 numel), then
 * per tensor its m and its v as little-endian fp32. */
static bool write_optim(const char *path, const ckpt_contents *c, char *err, size_t errlen) {
    const bert_model *m = c->m;
    size_t table = 0;
    for (int i = 0; i < m->n_tensors; i++) table += 2 + strlen(m->tensors[i].name) + 8;
    unsigned char *hdr = calloc(32 + table, 1);
    FILE *f = hdr ? fopen(path, "wb") : NULL;
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", path, hdr ? strerror(errno) : "no memory");
        free(hdr);
        return false;
    }
    memcpy(hdr, OPTIM_MAGIC, 8);
    le_put(hdr + 8, OPTIM_VERSION, 4);
    le_put(hdr + 12, (uint32_t)c->opt_type, 4);
    le_put(hdr + 16, (uint64_t)c->opt_step, 8);
    le_put(hdr + 24, (uint32_t)m->n_tensors, 4);
    le_put(hdr + 28, (uint32_t)table, 4);
    unsigned char *p = hdr + 32;
    for (int i = 0; i < m->n_tensors; i++) {
        size_t len = strlen(m->tensors[i].name);
        p[0] = (unsigned char)len;
        p[1] = (unsigned char)(len >> 8);
        memcpy(p + 2, m->tensors[i].name, len);
        le_put(p + 2 + len, (uint64_t)m->tensors[i].numel, 8);
        p += 2 + len + 8;
    }
    static const float zeros[4096];
    bool ok = fwrite(hdr, 1, 32 + table, f) == 32 + table;
    for (int i = 0; ok && i < m->n_tensors; i++) {
        const bert_tensor *t = &m->tensors[i];
        for (int k = 0; ok && k < 2; k++) {
            const float *src = k == 0 ? c->mom1 : c->mom2;
            if (src) {
                ok = fwrite(src + t->offset, 4, t->numel, f) == t->numel;
                continue;
            }
            for (size_t done = 0; ok && done < t->numel; done += 4096) {
                size_t n = t->numel - done < 4096 ? t->numel - done : 4096;
                ok = fwrite(zeros, 4, n, f) == n;
            }
        }
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0) ok = false;
    free(hdr);
    if (!ok) snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
    return ok;
}

/* Record a written file's size and CRC-32 in state.files. */
static bool add_file(cJSON *files, const char *dir, const char *name, char *err, size_t errlen) {
    char path[1400], hex[16];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    uint32_t crc;
    long long size;
    if (!ckpt_file_crc(path, &crc, &size)) {
        snprintf(err, errlen, "%s: cannot read back: %s", path, strerror(errno));
        return false;
    }
    snprintf(hex, sizeof hex, "%08x", crc);
    cJSON *f = cJSON_AddObjectToObject(files, name);
    cJSON_AddNumberToObject(f, "bytes", (double)size);
    cJSON_AddStringToObject(f, "crc32", hex);
    return true;
}

/* state.json text whose "state_crc32" is the CRC-32 of the text with those
 * 8 hex digits read as "00000000". */
static char *state_text(cJSON *state) {
    cJSON_DeleteItemFromObjectCaseSensitive(state, "state_crc32");
    cJSON_AddStringToObject(state, "state_crc32", "00000000");
    char *text = cJSON_Print(state);
    if (!text) return NULL;
    char *at = strstr(text, "\"state_crc32\"");
    at = at ? strstr(at + 13, "\"00000000\"") : NULL;
    if (!at) {
        free(text);
        return NULL;
    }
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", (unsigned)crc32(0L, (const Bytef *)text, (uInt)strlen(text)));
    memcpy(at + 1, hex, 8);
    return text;
}

/* ckpt_remove, or a warning on stderr naming what keeps the directory
 * (`why`: what would have removed it). */
void ckpt_remove_or_warn(const char *dir, const char *why) {
    char err[1400];
    if (!ckpt_remove(dir, err, sizeof err))
        fprintf(stderr, "bertrain: warning: %s: not removing it (%s); move your files out of "
                        "it, or remove it yourself\n", err, why);
}

/* The written directory tmp renamed to dir, the checkpoint of that name it
 * replaces (checked to hold bertrain's files only) moved aside first and
 * removed after; the parent fsynced. false with the reason. */
static bool move_into_place(const char *tmp, const char *dir, char *err, size_t errlen) {
    char old[1300], parent[1300];
    snprintf(old, sizeof old, "%s.old-%ld", dir, (long)getpid());
    const bool had_old = rename(dir, old) == 0;
    const bool ok = rename(tmp, dir) == 0;
    if (!ok) {
        snprintf(err, errlen, "%s: rename failed: %s", dir, strerror(errno));
        if (had_old) rename(old, dir);
    } else if (had_old) {
        ckpt_remove_or_warn(old, "the checkpoint it replaces");
    }
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = 0;
    ckpt_fsync_path(slash ? parent : ".");
    return ok;
}

/* Tell points (if any) that the write of checkpoint step reached point. */
void ckpt_reached(const ckpt_points *points, const char *point, long step) {
    if (points && points->reached && step > 0) points->reached(points->ctx, point, step);
}

bool ckpt_write_dir(const char *dir, const ckpt_contents *c, const ckpt_points *points, long step,
                    char *err, size_t errlen) {
    char tmp[1300], old[1300], path[1400];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", dir, (long)getpid());
    snprintf(old, sizeof old, "%s.old-%ld", dir, (long)getpid());
    /* an existing dir of that name is replaced only when all it holds is bertrain's; a
     * leftover of an earlier process with this PID likewise */
    if (!ckpt_removable(dir, err, errlen)) {
        size_t k = strlen(err);
        snprintf(err + k, errlen - k, ": not replacing it");
        return false;
    }
    if (!ckpt_remove(tmp, err, errlen) || !ckpt_remove(old, err, errlen)) return false;
    if (mkdir(tmp, 0777) != 0) {
        snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        return false;
    }
    /* held while the write runs: a directory nobody holds is an interrupted write's
     * leftover (ckpt_clean_leftovers) */
    const int lock = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock >= 0 && flock(lock, LOCK_EX) != 0) {
        /* no locks on this file system: the leftover is then never taken for stale */
    }
    ckpt_reached(points, "begin", step);
    const bert_model *m = c->m;
    st_tensor *ts = calloc((size_t)m->n_tensors, sizeof *ts);
    bool ok = ts != NULL;
    if (!ok) snprintf(err, errlen, "out of host memory writing a checkpoint");
    if (ok) {
        for (int i = 0; i < m->n_tensors; i++) {
            const bert_tensor *t = &m->tensors[i];
            ts[i] = (st_tensor){t->name, "F32", t->ndim, {t->shape[0], t->shape[1]},
                                c->params + t->offset, t->numel * sizeof(float)};
        }
        const char *meta[] = {"format", "pt", "producer", "bertrain " PACKAGE_VERSION};
        snprintf(path, sizeof path, "%s/model.safetensors", tmp);
        ok = st_write(path, ts, m->n_tensors, c->st_meta ? c->st_meta : meta,
                      c->st_meta ? c->n_meta : 2, err, errlen);
    }
    free(ts);
    if (ok) ckpt_reached(points, "model", step);
    snprintf(path, sizeof path, "%s/optim.bin", tmp);
    ok = ok && write_optim(path, c, err, errlen);
    if (ok) ckpt_reached(points, "optim", step);
    snprintf(path, sizeof path, "%s/vocab.txt", tmp);
    if (ok && c->vocab) ok = ckpt_write_bytes(path, c->vocab, c->vocab_len, err, errlen);
    snprintf(path, sizeof path, "%s/" CKPT_CARRIED_FILE, tmp);
    if (ok && c->n_carried > 0) {
        const char *meta[] = {"format", "pt", "producer", "bertrain " PACKAGE_VERSION};
        ok = st_write(path, c->carried, c->n_carried, meta, 2, err, errlen);
    }
    snprintf(path, sizeof path, "%s/" CKPT_ONEBIT_FILE, tmp);
    if (ok && c->onebit) ok = ckpt_write_bytes(path, c->onebit, c->onebit_len, err, errlen);
    snprintf(path, sizeof path, "%s/" CKPT_LAMB1_FILE, tmp);
    if (ok && c->lamb1) ok = ckpt_write_bytes(path, c->lamb1, c->lamb1_len, err, errlen);
    if (ok) {
        cJSON_DeleteItemFromObjectCaseSensitive(c->state, "files");
        cJSON *files = cJSON_AddObjectToObject(c->state, "files");
        ok = add_file(files, tmp, "model.safetensors", err, errlen) &&
             add_file(files, tmp, "optim.bin", err, errlen) &&
             (!c->vocab || add_file(files, tmp, "vocab.txt", err, errlen)) &&
             (c->n_carried == 0 || add_file(files, tmp, CKPT_CARRIED_FILE, err, errlen)) &&
             (!c->onebit || add_file(files, tmp, CKPT_ONEBIT_FILE, err, errlen)) &&
             (!c->lamb1 || add_file(files, tmp, CKPT_LAMB1_FILE, err, errlen));
    }
    if (ok) {
        char *text = state_text(c->state);
        snprintf(path, sizeof path, "%s/state.json", tmp);
        if (!text) snprintf(err, errlen, "%s: out of memory", path);
        ok = text && ckpt_write_bytes(path, text, strlen(text), err, errlen);
        free(text);
    }
    if (ok) ckpt_reached(points, "state", step);
    if (ok && !ckpt_fsync_path(tmp)) {
        snprintf(err, errlen, "%s: fsync failed: %s", tmp, strerror(errno));
        ok = false;
    }
    if (ok) ckpt_reached(points, "rename", step);
    ok = ok && move_into_place(tmp, dir, err, errlen);
    if (!ok) ckpt_remove_or_warn(tmp, "a failed write");
    if (lock >= 0) close(lock);
    return ok;
}

void ckpt_clean_leftovers(const char *dir) {
    char parent[1200], base[256], path[1600];
    snprintf(parent, sizeof parent, "%s", dir);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/') parent[--n] = 0;
    char *slash = strrchr(parent, '/');
    snprintf(base, sizeof base, "%s", slash ? slash + 1 : parent);
    if (slash) slash[slash == parent] = 0;
    else snprintf(parent, sizeof parent, ".");
    DIR *d = opendir(parent);
    for (struct dirent *e; d && (e = readdir(d));) {
        const size_t bl = strlen(base);
        if (strncmp(e->d_name, base, bl) != 0 || strncmp(e->d_name + bl, ".tmp-", 5) != 0 ||
            !e->d_name[bl + 5] || strspn(e->d_name + bl + 5, "0123456789") != strlen(e->d_name + bl + 5))
            continue;
        snprintf(path, sizeof path, "%s/%s", parent, e->d_name);
        const int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) { /* its writer is gone */
            char why[1800];
            if (ckpt_remove(path, why, sizeof why))
                printf("bertrain: removed %s, left by an interrupted write\n", path);
            else
                fprintf(stderr, "bertrain: warning: %s: not removing it\n", why);
        }
        close(fd);
    }
    if (d) closedir(d);
}

static const char *sched_name(bt_sched_type t) {
    static const char *names[] = {"constant", "WarmupLR", "WarmupDecayLR",
                                  "warmup_linear_decay_exp", "inverse_sqrt", "WarmupCosineLR"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

cJSON *ckpt_base_model(const cJSON *state) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(state, "base_model");
    if (cJSON_IsObject(b)) return cJSON_Duplicate(b, true);
    const cJSON *from = cJSON_GetObjectItemCaseSensitive(state, "imported_from");
    if (!cJSON_IsString(from)) return NULL;
    cJSON *legacy = cJSON_CreateObject();
    cJSON_AddStringToObject(legacy, "imported_from", from->valuestring);
    return legacy;
}

bool ckpt_mlm_head_untrained(const cJSON *state) {
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(state, "step");
    if (!cJSON_IsNumber(step) || step->valuedouble > 0) return false;
    const cJSON *init = cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(state, "base_model"), "initialized"),
                *it;
    cJSON_ArrayForEach(it, init)
        if (cJSON_IsString(it) && !strncmp(it->valuestring, "cls.predictions.", 16)) return true;
    return false;
}

cJSON *ckpt_state_new(const bt_config *cfg, const ckpt_progress *p, const bt_optimizer *o,
                      const bert_config *model) {
    cJSON *st = cJSON_CreateObject();
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)cfg->seed);
    unsigned long long epoch = p->samples_per_epoch ? (unsigned long long)p->position /
                                                          p->samples_per_epoch : 0;
    cJSON_AddStringToObject(st, "format", "bertrain checkpoint");
    cJSON_AddNumberToObject(st, "format_version", CKPT_FORMAT_VERSION);
    cJSON_AddNumberToObject(st, "step", (double)p->step);
    cJSON_AddNumberToObject(st, "samples", (double)p->position);
    cJSON_AddNumberToObject(st, "epoch", (double)epoch);
    cJSON *data = cJSON_AddObjectToObject(st, "data");
    cJSON_AddNumberToObject(data, "position", (double)p->position);
    cJSON_AddNumberToObject(data, "epoch", (double)epoch);
    cJSON_AddNumberToObject(data, "samples_per_epoch", (double)p->samples_per_epoch);
    cJSON_AddNumberToObject(data, "global_batch", (double)p->global_batch);
    cJSON_AddBoolToObject(data, "lowercase", p->lowercase);
    if (p->skips && p->skips->n > 0) /* after a rollback: batches never to train on */
        cJSON_AddItemToObject(data, "skipped_samples", skips_to_json(p->skips));
    if (p->eval) /* held-out metrics at this step (the export's model card states them) */
        cJSON_AddItemToObject(st, "eval", cJSON_Duplicate(p->eval, true));
    cJSON_AddStringToObject(st, "seed", seed);
    cJSON *opt = cJSON_AddObjectToObject(st, "optimizer");
    cJSON_AddStringToObject(opt, "type", optim_type_name(o->cfg.type));
    cJSON_AddNumberToObject(opt, "step", (double)o->step);
    cJSON *layer_steps = cJSON_AddArrayToObject(opt, "layer_steps"); /* fewer under LayerDrop */
    for (int l = 0; l < o->n_layers; l++)
        cJSON_AddItemToArray(layer_steps, cJSON_CreateNumber((double)o->layer_steps[l]));
    if (model->norm == BERT_NORM_ADMIN) { /* set at initialization (profiled), then fixed */
        cJSON *omega = cJSON_AddArrayToObject(st, "admin_omega");
        for (int i = 0; i < 2 * model->num_hidden_layers; i++)
            cJSON_AddItemToArray(omega, cJSON_CreateNumber((double)model->admin_omega[i]));
    }
    cJSON *scaler = cJSON_AddObjectToObject(st, "loss_scaler"); /* scale 1: not fp16 */
    const loss_scaler *ls = p->scaler;
    cJSON_AddNumberToObject(scaler, "scale", ls ? ls->scale : 1.0);
    if (ls) { /* what the dynamic scaler needs to continue exactly */
        cJSON_AddNumberToObject(scaler, "cur_hysteresis", ls->cur_hysteresis);
        cJSON_AddNumberToObject(scaler, "iter", (double)ls->iter);
        cJSON_AddNumberToObject(scaler, "last_overflow", (double)ls->last_overflow);
        cJSON_AddNumberToObject(scaler, "skipped", (double)ls->skipped);
    }
    cJSON *sched = cJSON_AddObjectToObject(st, "schedule");
    cJSON_AddStringToObject(sched, "type", sched_name(cfg->sched.type));
    /* the schedule counts applied updates: skipped steps do not advance it (DeepSpeed) */
    cJSON_AddNumberToObject(sched, "next_step", (double)o->step);
    cJSON_AddNumberToObject(sched, "next_lr",
                            sched_lr(cfg, sched_position(cfg, o->step, p->position)));
    cJSON_AddNumberToObject(st, "world_size", cfg->world_size);
    cJSON_AddStringToObject(st, "bertrain_version", PACKAGE_VERSION);
    cJSON_AddStringToObject(st, "config_file", cfg->path);
    cJSON *conf = cfg->resolved_json ? cJSON_Parse(cfg->resolved_json) : NULL;
    cJSON_AddItemToObject(st, "config", conf ? conf : cJSON_CreateObject());
    return st;
}
