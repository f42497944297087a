/* Checkpoint writing: the atomic directory (ckpt_write_dir), optim.bin,
 * state.json with checksums, and the background writer of the training run. */
#define _XOPEN_SOURCE 700
#include "ckpt.h"

#include "util/le.h"
#include "run_dir.h"
#include "safetensors.h"
#include "util/clock.h"
#include "util/file.h"
#include "config/sched.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "dev"
#endif

static bool fsync_path(const char *path) {
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

static bool write_bytes(const char *path, const void *data, size_t n, char *err, size_t errlen) {
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
static void remove_or_warn(const char *dir, const char *why) {
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
        remove_or_warn(old, "the checkpoint it replaces");
    }
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = 0;
    fsync_path(slash ? parent : ".");
    return ok;
}

/* Tell points (if any) that the write of checkpoint step reached point. */
static void reached(const ckpt_points *points, const char *point, long step) {
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
    reached(points, "begin", step);
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
    if (ok) reached(points, "model", step);
    snprintf(path, sizeof path, "%s/optim.bin", tmp);
    ok = ok && write_optim(path, c, err, errlen);
    if (ok) reached(points, "optim", step);
    snprintf(path, sizeof path, "%s/vocab.txt", tmp);
    if (ok && c->vocab) ok = write_bytes(path, c->vocab, c->vocab_len, err, errlen);
    snprintf(path, sizeof path, "%s/" CKPT_CARRIED_FILE, tmp);
    if (ok && c->n_carried > 0) {
        const char *meta[] = {"format", "pt", "producer", "bertrain " PACKAGE_VERSION};
        ok = st_write(path, c->carried, c->n_carried, meta, 2, err, errlen);
    }
    snprintf(path, sizeof path, "%s/" CKPT_ONEBIT_FILE, tmp);
    if (ok && c->onebit) ok = write_bytes(path, c->onebit, c->onebit_len, err, errlen);
    snprintf(path, sizeof path, "%s/" CKPT_LAMB1_FILE, tmp);
    if (ok && c->lamb1) ok = write_bytes(path, c->lamb1, c->lamb1_len, err, errlen);
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
        ok = text && write_bytes(path, text, strlen(text), err, errlen);
        free(text);
    }
    if (ok) reached(points, "state", step);
    if (ok && !fsync_path(tmp)) {
        snprintf(err, errlen, "%s: fsync failed: %s", tmp, strerror(errno));
        ok = false;
    }
    if (ok) reached(points, "rename", step);
    ok = ok && move_into_place(tmp, dir, err, errlen);
    if (!ok) remove_or_warn(tmp, "a failed write");
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

/* ---- the background writer ---- */

struct ckpt_writer {
    const bt_config *cfg;
    const bert_model *m;
    float *host; /* params, m, v: 3 x n_params */
    char *vocab;
    size_t vocab_len;
    pthread_t thread;
    bool running;
    atomic_bool done; /* the thread has finished the write in flight */
    /* the job in flight */
    long step, opt_step;
    int opt_type;
    cJSON *state;
    double t_boundary, t_start;
    bool ok;
    char err[1400];
    st_file carried_file; /* ckpt_writer_carry: an import's carried tensors */
    st_tensor *carried;
    int n_carried;
    void *onebit, *onebit_next; /* CKPT_ONEBIT_FILE: the write's, and the next write's */
    size_t onebit_len, onebit_next_len;
    void *lamb1;                /* CKPT_LAMB1_FILE: the write's */
    size_t lamb1_len;
    cJSON *base_model; /* ckpt_writer_carry: an import's provenance, or NULL */
    char run_id[RUN_ID_LEN + 1]; /* the lineage: keep-last-K deletes only its checkpoints */
    ckpt_points points;          /* told the points each write reaches (none: zeros) */
    ckpt_writer *next_live;      /* the process's writers (finish_writes_at_exit) */
};

/* The process's writers. An exit with a write in flight (a device error's exit(1)
 * in the next step) finishes the write first: its host copy is whole. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static ckpt_writer *live;

static void finish_writes_at_exit(void) {
    pthread_mutex_lock(&live_lock);
    for (ckpt_writer *w = live; w; w = w->next_live) {
        if (!w->running || pthread_equal(pthread_self(), w->thread)) continue;
        if (!atomic_load(&w->done))
            fprintf(stderr, "bertrain: exiting: the checkpoint of step %ld is written first\n",
                    w->step);
        pthread_join(w->thread, NULL);
        w->running = false;
    }
    pthread_mutex_unlock(&live_lock);
}

static void register_at_exit(void) { atexit(finish_writes_at_exit); }

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether name is one of this writer's leftovers: ckpt-<digits>.tmp-<pid> or
 * ckpt-<digits>.old-<pid> (an interrupted write). */
static bool is_leftover(const char *name) {
    long step, pid;
    int used = 0;
    char kind[4];
    return sscanf(name, "ckpt-%ld.%3[a-z]-%ld%n", &step, kind, &pid, &used) == 3 &&
           used == (int)strlen(name) && (!strcmp(kind, "tmp") || !strcmp(kind, "old"));
}

/* Delete the oldest checkpoints of lineage run_id beyond `keep` (a checkpoint
 * of another run, or of none, is never deleted), and with leftovers true the
 * leftovers of interrupted writes (the caller holds the run lock); only the
 * files bertrain wrote (ckpt_remove). `newest` (the checkpoint just written,
 * or NULL) counts as the newest whatever its step: a run resumed from an
 * earlier step, or started again past damaged checkpoints, keeps what it
 * writes and lets the lineage's later steps go first. */
static void prune(const char *out, const char *run_id, int keep, bool leftovers,
                  const char *newest) {
    DIR *d = opendir(out);
    if (!d) return;
    char *names[4096], path[2048], id[RUN_ID_LEN + 1];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 4096;) {
        if (strncmp(e->d_name, "ckpt-", 5) != 0) continue;
        snprintf(path, sizeof path, "%s/%s", out, e->d_name);
        if (is_leftover(e->d_name)) {
            if (leftovers) remove_or_warn(path, "an interrupted checkpoint write");
            continue;
        }
        if (strchr(e->d_name, '.')) continue;
        run_dir_ckpt_id(path, id);
        if (run_id[0] && strcmp(id, run_id) == 0) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_name);
    for (int i = 0; newest && i < n; i++) /* the just written one last: the newest */
        if (!strcmp(names[i], newest)) {
            char *it = names[i];
            memmove(names + i, names + i + 1, (size_t)(n - 1 - i) * sizeof *names);
            names[n - 1] = it;
            break;
        }
    for (int i = 0; i < n; i++) {
        if (i < n - keep) {
            snprintf(path, sizeof path, "%s/%s", out, names[i]);
            remove_or_warn(path, "checkpoint.keep");
        }
        free(names[i]);
    }
}

/* Every weight and moment of the host copy finite: a checkpoint that resume
 * would refuse is not written, so rotation never trades a good checkpoint for
 * it. false with the first tensor that is not in err. */
static bool host_copy_finite(const ckpt_writer *w, char *err, size_t errlen) {
    const size_t np = bert_n_params(w->m);
    static const char *const what[3] = {"weights", "first moments", "second moments"};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < w->m->n_tensors; i++) {
            const bert_tensor *t = &w->m->tensors[i];
            const float *x = w->host + k * np + t->offset;
            for (size_t j = 0; j < t->numel; j++)
                if (!isfinite(x[j])) {
                    snprintf(err, errlen, "the %s of tensor %s hold %g (element %zu): not "
                             "writing a checkpoint that resume would refuse (the older ones "
                             "are kept)", what[k], t->name, x[j], j);
                    return false;
                }
        }
    return true;
}

static void *writer_main(void *arg) {
    ckpt_writer *w = arg;
    const size_t np = bert_n_params(w->m);
    char final[1200], path[1300];
    snprintf(final, sizeof final, "%s/ckpt-%08ld", w->cfg->output_dir, w->step);
    ckpt_contents c = {w->m, w->host, w->host + np, w->host + 2 * np, w->opt_step, w->opt_type,
                       w->vocab, w->vocab_len, w->state, NULL, 0, w->carried, w->n_carried,
                       w->onebit, w->onebit_len, w->lamb1, w->lamb1_len};
    char id[RUN_ID_LEN + 1];
    run_dir_ckpt_id(final, id);
    /* never another run's (one without an id, damaged or older, is replaced: only a
     * --resume run gets here with checkpoints in its directory) */
    if (id[0] && strcmp(id, w->run_id) != 0) {
        snprintf(w->err, sizeof w->err, "%s belongs to another run (run id %s, this run %s): "
                 "not replacing it; give this run a new output_dir", final, id, w->run_id);
        w->ok = false;
        atomic_store(&w->done, true);
        return NULL;
    }
    w->ok = host_copy_finite(w, w->err, sizeof w->err) &&
            ckpt_write_dir(final, &c, &w->points, w->step, w->err, sizeof w->err);
    if (w->ok) {
        reached(&w->points, "latest", w->step);
        char target[64];
        snprintf(path, sizeof path, "%s/latest.tmp", w->cfg->output_dir);
        snprintf(target, sizeof target, "ckpt-%08ld\n", w->step);
        w->ok = write_bytes(path, target, strlen(target), w->err, sizeof w->err);
        char latest[1200];
        snprintf(latest, sizeof latest, "%s/latest", w->cfg->output_dir);
        if (w->ok && rename(path, latest) != 0) {
            snprintf(w->err, sizeof w->err, "%s: rename failed: %s", latest, strerror(errno));
            w->ok = false;
        }
        fsync_path(w->cfg->output_dir);
        char name[32];
        snprintf(name, sizeof name, "ckpt-%08ld", w->step);
        if (w->ok) prune(w->cfg->output_dir, w->run_id, w->cfg->ckpt_keep, false, name);
    }
    if (w->ok) {
        printf("checkpoint step %ld -> %s (%.2f s at the step boundary, %.2f s writing in the "
               "background)\n", w->step, final, w->t_boundary, now_s() - w->t_start);
        fflush(stdout);
    }
    atomic_store(&w->done, true);
    return NULL;
}

ckpt_writer *ckpt_writer_new(const bt_config *cfg, const bert_model *m, const char *run_id,
                             const ckpt_points *points, char *err, size_t errlen) {
    ckpt_writer *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    if (points) w->points = *points;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_at_exit);
    pthread_mutex_lock(&live_lock);
    w->next_live = live;
    live = w;
    pthread_mutex_unlock(&live_lock);
    w->cfg = cfg;
    w->m = m;
    snprintf(w->run_id, sizeof w->run_id, "%s", run_id);
    FILE *f = cfg->data.vocab[0] ? fopen(cfg->data.vocab, "rb") : NULL;
    if (f) { /* the vocab goes into every checkpoint, for export */
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        w->vocab = len > 0 ? malloc((size_t)len) : NULL;
        if (w->vocab && fread(w->vocab, 1, (size_t)len, f) == (size_t)len) {
            w->vocab_len = (size_t)len;
        } else {
            free(w->vocab);
            w->vocab = NULL;
        }
        fclose(f);
    }
    /* leftovers of writes that a crash interrupted (the run lock is held) */
    prune(cfg->output_dir, w->run_id, 1 << 30, true, NULL);
    return w;
}

/* The "base_model" of checkpoint src_dir's state.json into w (none: NULL). */
static void carry_base_model(ckpt_writer *w, const char *src_dir) {
    char path[1200];
    size_t len;
    snprintf(path, sizeof path, "%s/state.json", src_dir);
    char *text = file_read_all(path, &len);
    cJSON *state = text ? cJSON_Parse(text) : NULL;
    w->base_model = ckpt_base_model(state);
    cJSON_Delete(state);
    free(text);
}

void ckpt_writer_set_onebit(ckpt_writer *w, void *bytes, size_t len) {
    free(w->onebit_next);
    w->onebit_next = bytes;
    w->onebit_next_len = len;
}

bool ckpt_writer_carry(ckpt_writer *w, const char *src_dir, char *err, size_t errlen) {
    char path[1200];
    carry_base_model(w, src_dir);
    snprintf(path, sizeof path, "%s/" CKPT_CARRIED_FILE, src_dir);
    if (access(path, F_OK) != 0) return true;
    if (!st_open(&w->carried_file, path, err, errlen)) return false;
    const st_file *f = &w->carried_file;
    if (!(w->carried = calloc((size_t)f->n, sizeof *w->carried))) {
        snprintf(err, errlen, "out of host memory");
        return false;
    }
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = &f->entries[i];
        w->carried[i] = (st_tensor){e->name, e->dtype, e->ndim, {0}, st_data(f, e),
                                    e->end - e->begin};
        memcpy(w->carried[i].shape, e->shape, sizeof e->shape);
    }
    w->n_carried = f->n;
    return true;
}


int ckpt_writer_collect(ckpt_writer *w, bool wait, long *step, char *err, size_t errlen) {
    if (!w || !w->running || (!wait && !atomic_load(&w->done))) return 0;
    pthread_mutex_lock(&live_lock); /* not joined twice by an exit on another thread */
    if (w->running) pthread_join(w->thread, NULL);
    w->running = false;
    pthread_mutex_unlock(&live_lock);
    cJSON_Delete(w->state);
    w->state = NULL;
    *step = w->step;
    if (!w->ok) snprintf(err, errlen, "%s", w->err);
    return w->ok ? 1 : -1;
}

bool ckpt_writer_wait(ckpt_writer *w, char *err, size_t errlen) {
    long step;
    return ckpt_writer_collect(w, true, &step, err, errlen) >= 0;
}

bool ckpt_writer_start(ckpt_writer *w, bert_model *m, const bt_optimizer *o,
                       const ckpt_progress *p, char *err, size_t errlen) {
    double t0 = now_s();
    if (!ckpt_writer_wait(w, err, errlen)) return false;
    const size_t np = bert_n_params(m), bytes = np * sizeof(float);
    if (!w->host && !(w->host = malloc(3 * bytes))) {
        snprintf(err, errlen, "out of host memory for a checkpoint (%.1f MB)", 3.0 * bytes / 1e6);
        return false;
    }
    m->be->download(m->be, w->host, bert_params_at(m, 0), bytes);
    m->be->download(m->be, w->host + np, optim_moment_at(o, 0, 0), bytes);
    m->be->download(m->be, w->host + 2 * np, optim_moment_at(o, 1, 0), bytes);
    free(w->onebit); /* the last write's is written */
    w->onebit = w->onebit_next;
    w->onebit_len = w->onebit_next_len;
    w->onebit_next = NULL;
    free(w->lamb1);
    w->lamb1 = o->lamb1 ? onebit_lamb_save(o->lamb1, m, &w->lamb1_len) : NULL;
    if (o->lamb1 && !w->lamb1) {
        snprintf(err, errlen, "out of host memory for 1-bit LAMB's state");
        return false;
    }
    w->step = p->step;
    w->opt_step = o->step;
    w->opt_type = o->cfg.type;
    w->state = ckpt_state_new(w->cfg, p, o, &m->cfg);
    cJSON_AddStringToObject(w->state, "run_id", w->run_id);
    if (w->base_model) /* every checkpoint of an import's descendants names it */
        cJSON_AddItemToObject(w->state, "base_model", cJSON_Duplicate(w->base_model, true));
    w->t_start = now_s();
    w->t_boundary = w->t_start - t0;
    atomic_store(&w->done, false);
    /* the writer thread takes no signals: they belong to the training loop */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, writer_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        writer_main(w); /* no thread: write in the foreground */
        w->running = false;
        cJSON_Delete(w->state);
        w->state = NULL;
        if (!w->ok) snprintf(err, errlen, "%s", w->err);
        return w->ok;
    }
    w->running = true;
    return true;
}

void ckpt_writer_free(ckpt_writer *w) {
    if (!w) return;
    char err[512];
    if (!ckpt_writer_wait(w, err, sizeof err))
        fprintf(stderr, "bertrain: checkpoint at step %ld: %s\n", w->step, err);
    pthread_mutex_lock(&live_lock);
    for (ckpt_writer **p = &live; *p; p = &(*p)->next_live)
        if (*p == w) {
            *p = w->next_live;
            break;
        }
    pthread_mutex_unlock(&live_lock);
    free(w->host);
    free(w->vocab);
    free(w->carried);
    free(w->onebit);
    free(w->onebit_next);
    free(w->lamb1);
    cJSON_Delete(w->base_model);
    if (w->carried_file.file) st_close(&w->carried_file);
    free(w);
}
