/* The background writer of the training run: a host copy taken at the step
 * boundary, written by a thread of its own (ckpt_write_dir), the keep-last-K
 * pruning of the run's lineage, and the wait for a write in flight at exit. */
#define _XOPEN_SOURCE 700
#include "ckpt.h"
#include "ckpt_internal.h"

#include "run_dir.h"
#include "safetensors.h"
#include "util/clock.h"
#include "util/file.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
        if (!w->ok) fprintf(stderr, "bertrain: checkpoint at step %ld: %s\n", w->step, w->err);
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
            if (leftovers) ckpt_remove_or_warn(path, "an interrupted checkpoint write");
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
            ckpt_remove_or_warn(path, "checkpoint.keep");
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
        ckpt_reached(&w->points, "latest", w->step);
        char target[64];
        snprintf(path, sizeof path, "%s/latest.tmp", w->cfg->output_dir);
        snprintf(target, sizeof target, "ckpt-%08ld\n", w->step);
        w->ok = ckpt_write_bytes(path, target, strlen(target), w->err, sizeof w->err);
        char latest[1200];
        snprintf(latest, sizeof latest, "%s/latest", w->cfg->output_dir);
        if (w->ok && rename(path, latest) != 0) {
            snprintf(w->err, sizeof w->err, "%s: rename failed: %s", latest, strerror(errno));
            w->ok = false;
        }
        ckpt_fsync_path(w->cfg->output_dir);
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
