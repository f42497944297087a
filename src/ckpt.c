/* Checkpoint writing (atomic) and weight loading. */
#define _XOPEN_SOURCE 700
#include "ckpt.h"

#include "safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static bool write_text(const char *path, const char *text, char *err, size_t errlen) {
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return false;
    }
    bool ok = fputs(text, f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0) ok = false;
    if (!ok) snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
    return ok;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Delete the oldest ckpt-* directories beyond `keep`. */
static void prune(const char *out, int keep) {
    DIR *d = opendir(out);
    if (!d) return;
    char *names[4096];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 4096;)
        if (strncmp(e->d_name, "ckpt-", 5) == 0 && !strchr(e->d_name, '.'))
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_name);
    for (int i = 0; i < n; i++) {
        if (i < n - keep) {
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", out, names[i]);
            rm_tree(path);
        }
        free(names[i]);
    }
}

bool ckpt_save(const bt_config *cfg, bert_model *m, long step, long samples, char *err,
               size_t errlen) {
    char final[1200], tmp[1300], path[1400];
    snprintf(final, sizeof final, "%s/ckpt-%08ld", cfg->output_dir, step);
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", final, (long)getpid());
    rm_tree(tmp);
    if (mkdir(tmp, 0777) != 0) {
        snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        return false;
    }
    float *host = malloc(m->n_params * sizeof *host);
    st_tensor *ts = calloc((size_t)m->n_tensors, sizeof *ts);
    bool ok = host && ts;
    if (!ok) snprintf(err, errlen, "out of host memory writing a checkpoint");
    if (ok) {
        m->be->download(m->be, host, (bt_ptr){m->params, 0}, m->n_params * sizeof *host);
        for (int i = 0; i < m->n_tensors; i++) {
            const bert_tensor *t = &m->tensors[i];
            ts[i] = (st_tensor){t->name, "F32", t->ndim, {t->shape[0], t->shape[1]},
                                host + t->offset, t->numel * sizeof(float)};
        }
        const char *meta[] = {"format", "pt", "producer", "bertrain " PACKAGE_VERSION};
        snprintf(path, sizeof path, "%s/model.safetensors", tmp);
        ok = st_write(path, ts, m->n_tensors, meta, 2, err, errlen);
    }
    if (ok) {
        cJSON *st = cJSON_CreateObject();
        char seed[32];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)cfg->seed);
        cJSON_AddNumberToObject(st, "step", (double)step);
        cJSON_AddNumberToObject(st, "samples", (double)samples);
        cJSON_AddStringToObject(st, "seed", seed);
        cJSON_AddStringToObject(st, "bertrain_version", PACKAGE_VERSION);
        cJSON_AddStringToObject(st, "config_file", cfg->path);
        char *state = cJSON_Print(st);
        cJSON_Delete(st);
        snprintf(path, sizeof path, "%s/state.json", tmp);
        ok = state && write_text(path, state, err, errlen);
        free(state);
    }
    free(host);
    free(ts);
    if (ok) ok = fsync_path(tmp);
    if (ok) {
        rm_tree(final); /* a checkpoint of the same step from an earlier run */
        if (rename(tmp, final) != 0) {
            snprintf(err, errlen, "%s: rename failed: %s", final, strerror(errno));
            ok = false;
        }
    }
    if (ok) {
        snprintf(path, sizeof path, "%s/latest.tmp", cfg->output_dir);
        char target[64];
        snprintf(target, sizeof target, "ckpt-%08ld\n", step);
        ok = write_text(path, target, err, errlen);
        char latest[1200];
        snprintf(latest, sizeof latest, "%s/latest", cfg->output_dir);
        if (ok && rename(path, latest) != 0) {
            snprintf(err, errlen, "%s: rename failed: %s", latest, strerror(errno));
            ok = false;
        }
        fsync_path(cfg->output_dir);
        if (ok) prune(cfg->output_dir, cfg->ckpt_keep);
    }
    if (!ok) rm_tree(tmp);
    return ok;
}

bool ckpt_load_weights(const char *dir, bert_model *m, char *err, size_t errlen) {
    char path[1200];
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
    else
        snprintf(path, sizeof path, "%s", dir);
    st_file f;
    if (!st_open(&f, path, err, errlen)) return false;
    bool ok = true;
    for (int i = 0; ok && i < m->n_tensors; i++) {
        const bert_tensor *t = &m->tensors[i];
        const st_entry *e = st_find(&f, t->name);
        if (!e) {
            snprintf(err, errlen, "%s: tensor %s is missing", path, t->name);
            ok = false;
        } else if (strcmp(e->dtype, "F32") != 0 || st_numel(e) != t->numel ||
                   e->shape[0] != t->shape[0]) {
            snprintf(err, errlen, "%s: tensor %s has dtype %s and %zu elements; the model "
                                  "needs F32 with %zu (a different model shape?)",
                     path, t->name, e->dtype, st_numel(e), t->numel);
            ok = false;
        } else {
            m->be->upload(m->be, (bt_ptr){m->params, t->offset * 4}, st_data(&f, e),
                          t->numel * 4);
        }
    }
    st_close(&f);
    return ok;
}
