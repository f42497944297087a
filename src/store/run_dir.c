/* Output directories of training runs: the run lock, the check before a fresh
 * run, the check before import/export, and lineage ids. */
#define _XOPEN_SOURCE 700
#include "run_dir.h"

#include "util/file.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* "DIR is in use by another bertrain run (HOLDER; lock PATH): ..." into err,
 * HOLDER the note ("host H, pid P") that lock file PATH holds, if readable. */
static void say_in_use(const char *dir, const char *path, char *err, size_t errlen) {
    char holder[256] = "";
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    const ssize_t n = fd >= 0 ? pread(fd, holder, sizeof holder - 1, 0) : -1;
    if (fd >= 0) close(fd);
    holder[n > 0 ? n : 0] = 0;
    holder[strcspn(holder, "\n")] = 0;
    snprintf(err, errlen, "%s is in use by another bertrain run (%s; lock %s): one run per "
             "output_dir", dir, holder[0] ? holder : "holder unknown", path);
}

/* Write this host and PID into the lock file fd. */
static void write_note(int fd) {
    char host[256] = "?", line[400];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    int len = snprintf(line, sizeof line, "host %s, pid %ld\n", host, (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
        /* the lock holds without the note; a second run says "holder unknown" */
    }
}

/* Open and flock the lock file of dir into lock->file_fd (and its identity). */
static bool lock_file(const char *dir, run_lock *lock, char *err, size_t errlen) {
    char path[1200];
    snprintf(path, sizeof path, "%s/" RUN_DIR_LOCK_FILE, dir);
    lock->file_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lock->file_fd < 0) {
        snprintf(err, errlen, "%s: cannot create the run lock: %s", path, strerror(errno));
        return false;
    }
    if (flock(lock->file_fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(lock->file_fd);
        lock->file_fd = -1;
        if (e == EWOULDBLOCK)
            say_in_use(dir, path, err, errlen);
        else
            snprintf(err, errlen, "%s: cannot lock: %s", path, strerror(e));
        return false;
    }
    struct stat st;
    if (fstat(lock->file_fd, &st) == 0) {
        lock->dev = (unsigned long long)st.st_dev;
        lock->ino = (unsigned long long)st.st_ino;
    }
    write_note(lock->file_fd);
    return true;
}

bool run_dir_lock(const char *dir, run_lock *lock, char *err, size_t errlen) {
    lock->file_fd = -1;
    lock->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock->dir_fd >= 0 && flock(lock->dir_fd, LOCK_EX | LOCK_NB) != 0) {
        const int e = errno;
        close(lock->dir_fd);
        lock->dir_fd = -1;
        if (e == EWOULDBLOCK) { /* held: the note says by whom, if its file is still there */
            char path[1200];
            snprintf(path, sizeof path, "%s/" RUN_DIR_LOCK_FILE, dir);
            say_in_use(dir, path, err, errlen);
            return false;
        } /* else a file system without directory locks: the lock file alone */
    }
    if (!lock_file(dir, lock, err, errlen)) {
        run_dir_unlock(lock);
        return false;
    }
    return true;
}

bool run_dir_lock_check(const char *dir, run_lock *lock, char *err, size_t errlen) {
    char path[1200];
    snprintf(path, sizeof path, "%s/" RUN_DIR_LOCK_FILE, dir);
    struct stat st;
    const bool same = stat(path, &st) == 0 && (unsigned long long)st.st_dev == lock->dev &&
                      (unsigned long long)st.st_ino == lock->ino;
    if (same) return true;
    if (lock->dir_fd >= 0) { /* still held through the directory: put the note back */
        if (lock->file_fd >= 0) close(lock->file_fd);
        lock->file_fd = -1;
        return lock_file(dir, lock, err, errlen);
    }
    snprintf(err, errlen, "%s was deleted or replaced while this run held it, and this file "
             "system cannot lock the directory itself: another run may be writing into %s",
             path, dir);
    return false;
}

void run_dir_unlock(run_lock *lock) {
    if (lock->file_fd >= 0) close(lock->file_fd); /* closing releases the flock */
    if (lock->dir_fd >= 0) close(lock->dir_fd);
    lock->file_fd = lock->dir_fd = -1;
}

/* Whether name is a finished checkpoint's: "ckpt-" and digits only. */
static bool is_ckpt_name(const char *name) {
    if (strncmp(name, "ckpt-", 5) != 0 || !name[5]) return false;
    for (const char *p = name + 5; *p; p++)
        if (!isdigit((unsigned char)*p)) return false;
    return true;
}

cJSON *run_dir_read_state(const char *dir) {
    char path[1400];
    size_t len;
    snprintf(path, sizeof path, "%s/state.json", dir);
    char *text = file_read_all(path, &len);
    cJSON *state = text ? cJSON_Parse(text) : NULL;
    free(text);
    return state;
}

void run_dir_ckpt_id(const char *ckpt_dir, char out[RUN_ID_LEN + 1]) {
    out[0] = 0;
    cJSON *state = run_dir_read_state(ckpt_dir);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(state, "run_id");
    if (cJSON_IsString(id) && strlen(id->valuestring) == RUN_ID_LEN)
        memcpy(out, id->valuestring, RUN_ID_LEN + 1);
    cJSON_Delete(state);
}

void run_dir_new_id(char out[RUN_ID_LEN + 1]) {
    uint64_t x = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&x, sizeof x, 1, f) != 1) { /* no /dev/urandom: time, pid, address */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 40 ^
            (uint64_t)(uintptr_t)&x;
    }
    if (f) fclose(f);
    snprintf(out, RUN_ID_LEN + 1, "%016llx", (unsigned long long)x);
}

/* What a run left in dir: its checkpoints (count, the lowest and highest
 * step, the newest one's seed). */
typedef struct {
    int n_ckpt;
    char first[256], last[256];
    char seed[64];
    bool latest, metrics;
} run_found;

static void survey(const char *dir, run_found *r) {
    memset(r, 0, sizeof *r);
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_ckpt_name(e->d_name)) continue;
        if (r->n_ckpt == 0 || strcmp(e->d_name, r->first) < 0)
            snprintf(r->first, sizeof r->first, "%s", e->d_name);
        if (r->n_ckpt == 0 || strcmp(e->d_name, r->last) > 0)
            snprintf(r->last, sizeof r->last, "%s", e->d_name);
        r->n_ckpt++;
    }
    closedir(d);
    if (r->n_ckpt > 0) {
        char last[1400];
        snprintf(last, sizeof last, "%s/%s", dir, r->last);
        cJSON *state = run_dir_read_state(last);
        const cJSON *seed = cJSON_GetObjectItemCaseSensitive(state, "seed");
        snprintf(r->seed, sizeof r->seed, "%s", cJSON_IsString(seed) ? seed->valuestring : "?");
        cJSON_Delete(state);
    }
    char path[1200];
    struct stat st;
    snprintf(path, sizeof path, "%s/latest", dir);
    r->latest = stat(path, &st) == 0;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    r->metrics = stat(path, &st) == 0 && st.st_size > 0;
}

/* The step a checkpoint name stands for ("ckpt-00000010": 10). */
static long name_step(const char *name) { return strtol(name + 5, NULL, 10); }

bool run_dir_check_fresh(const char *dir, char *err, size_t errlen) {
    run_found r;
    survey(dir, &r);
    const char *ways = "continue it with --resume auto, or give this run a new output_dir";
    if (r.n_ckpt > 0)
        snprintf(err, errlen, "%s holds another run's checkpoints (%d: steps %ld to %ld, seed "
                 "%s): %s", dir, r.n_ckpt, name_step(r.first), name_step(r.last), r.seed, ways);
    else if (r.latest || r.metrics)
        snprintf(err, errlen, "%s holds another run's %s: %s", dir,
                 r.metrics ? "metrics.jsonl" : "`latest` file", ways);
    return r.n_ckpt == 0 && !r.latest && !r.metrics;
}

bool run_dir_check_new_output(const char *dir, const char *what, char *err, size_t errlen) {
    struct stat st;
    if (stat(dir, &st) != 0) return true; /* made new */
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: exists and is not a directory", dir);
        return false;
    }
    cJSON *state = run_dir_read_state(dir);
    cJSON_Delete(state);
    char lock[1200];
    snprintf(lock, sizeof lock, "%s/" RUN_DIR_LOCK_FILE, dir);
    run_found r;
    survey(dir, &r);
    if (state) {
        snprintf(err, errlen, "%s is a bertrain checkpoint: %s never writes into one; choose a "
                 "new directory", dir, what);
        return false;
    }
    if (r.n_ckpt > 0 || r.latest || access(lock, F_OK) == 0) {
        char which[300] = "";
        if (r.n_ckpt) snprintf(which, sizeof which, " (%s)", r.last);
        snprintf(err, errlen, "%s holds a training run%s: %s never writes into one; choose a "
                 "new directory", dir, which, what);
        return false;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%s: cannot read: %s", dir, strerror(errno));
        return false;
    }
    char first[256] = "";
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!n++) snprintf(first, sizeof first, "%s", e->d_name);
    }
    closedir(d);
    if (n > 0)
        snprintf(err, errlen, "%s is not empty (%d entr%s, such as %s): %s writes only into a new "
                 "or empty directory, so that nothing there is lost", dir, n, n == 1 ? "y" : "ies",
                 first, what);
    return n == 0;
}

/* Whether directory dir holds a bertrain checkpoint's state.json. */
static bool is_checkpoint(const char *dir) {
    cJSON *state = run_dir_read_state(dir);
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(state, "format");
    const bool yes = cJSON_IsString(format) && !strcmp(format->valuestring, "bertrain checkpoint");
    cJSON_Delete(state);
    return yes;
}

bool run_dir_check_outside_ckpt(const char *path, const char *what, char *err, size_t errlen) {
    char existing[PATH_MAX], real[PATH_MAX];
    snprintf(existing, sizeof existing, "%s", path[0] ? path : ".");
    struct stat st; /* the longest part of path that exists: nothing below it is a checkpoint */
    while (stat(existing, &st) != 0) {
        char *slash = strrchr(existing, '/');
        if (!slash) {
            snprintf(existing, sizeof existing, ".");
        } else {
            while (slash > existing && slash[-1] == '/') slash--;
            if (slash == existing) slash++; /* "/x": "/" */
            *slash = 0;
        }
    }
    if (!realpath(existing, real)) return true; /* nothing to read: the write itself will say */
    for (;;) { /* real and each directory above it, "/" last */
        if (is_checkpoint(real)) {
            snprintf(err, errlen, "%s is inside the bertrain checkpoint %s: %s never writes into "
                     "a checkpoint (its rotation would delete it); choose a directory outside "
                     "it", path, real, what);
            return false;
        }
        char *slash = strrchr(real, '/');
        if (!slash || (slash == real && !real[1])) break;
        slash[slash == real] = 0; /* "/a/b" -> "/a", "/a" -> "/" */
    }
    return true;
}

void run_dir_newest_id(const char *dir, char out[RUN_ID_LEN + 1]) {
    out[0] = 0;
    DIR *d = opendir(dir);
    if (!d) return;
    char best[256] = "", path[1400], id[RUN_ID_LEN + 1];
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_ckpt_name(e->d_name) || strlen(e->d_name) >= sizeof best) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        run_dir_ckpt_id(path, id);
        if (id[0] && strcmp(e->d_name, best) > 0) {
            snprintf(best, sizeof best, "%s", e->d_name);
            memcpy(out, id, sizeof id);
        }
    }
    closedir(d);
}
