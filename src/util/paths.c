/* Output paths: mkdir -p with checks that name the path in the way. */
#include "paths.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

FILE *paths_open_input(const char *path, char *err, size_t errlen) {
    if (paths_is_dir(path)) {
        snprintf(err, errlen, "%s: is a directory, not a text file", path);
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return f;
}

bool paths_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Make one directory level unless it exists; `whole` is the path asked for
 * (for the message when a component, not the whole, is in the way). */
static bool make_level(const char *level, const char *whole, char *err, size_t errlen) {
    struct stat st;
    if (stat(level, &st) != 0) {
        if (errno != ENOENT) {
            snprintf(err, errlen, "%s: %s", level, strerror(errno));
            return false;
        }
        if (mkdir(level, 0777) == 0) return true;
        if (errno != EEXIST) {
            snprintf(err, errlen, "%s: cannot create directory %s: %s", whole, level,
                     strerror(errno));
            return false;
        }
        if (stat(level, &st) != 0) { /* made by someone else meanwhile, then gone */
            snprintf(err, errlen, "%s: %s", level, strerror(errno));
            return false;
        }
    }
    if (S_ISDIR(st.st_mode)) return true;
    if (strcmp(level, whole) == 0)
        snprintf(err, errlen, "%s: exists and is not a directory", whole);
    else
        snprintf(err, errlen, "%s: %s is a file, not a directory", whole, level);
    return false;
}

/* paths_prepare_dir for `dir`, naming `whole` (dir or a path inside it) in err. */
static bool prepare_dir_for(const char *dir, const char *whole, char *err, size_t errlen) {
    char buf[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0) {
        snprintf(err, errlen, "the output path is empty");
        return false;
    }
    if (n >= sizeof buf) {
        snprintf(err, errlen, "%.64s...: path longer than %d bytes", dir, PATH_MAX - 1);
        return false;
    }
    memcpy(buf, dir, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/' || p[-1] == '/') continue;
        *p = 0;
        bool ok = make_level(buf, whole, err, errlen);
        *p = '/';
        if (!ok) return false;
    }
    if (!make_level(buf, whole, err, errlen)) return false;
    if (access(dir, W_OK | X_OK) != 0) {
        if (strcmp(dir, whole) == 0)
            snprintf(err, errlen, "%s: directory not writable: %s", dir, strerror(errno));
        else
            snprintf(err, errlen, "%s: directory %s not writable: %s", whole, dir,
                     strerror(errno));
        return false;
    }
    return true;
}

bool paths_prepare_dir(const char *dir, char *err, size_t errlen) {
    return prepare_dir_for(dir, dir, err, errlen);
}

/* Make the directory that holds path (its parent; "." needs no making) and
 * check that it is writable. */
static bool prepare_parent_of(const char *path, char *err, size_t errlen) {
    char parent[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof parent) {
        snprintf(err, errlen, n ? "%.64s...: path too long" : "the output path is empty", path);
        return false;
    }
    memcpy(parent, path, n + 1);
    while (n > 1 && parent[n - 1] == '/') parent[--n] = 0; /* "dir/" is dir */
    char *slash = strrchr(parent, '/');
    if (slash == parent) return true; /* in "/" */
    if (slash) {
        *slash = 0;
        return prepare_dir_for(parent, path, err, errlen);
    }
    if (access(".", W_OK | X_OK) != 0) {
        snprintf(err, errlen, "%s: the current directory is not writable: %s", path,
                 strerror(errno));
        return false;
    }
    return true;
}

bool paths_prepare_parent(const char *dir, char *err, size_t errlen) {
    if (!prepare_parent_of(dir, err, errlen)) return false;
    if (access(dir, F_OK) == 0 && !paths_is_dir(dir)) {
        snprintf(err, errlen, "%s: exists and is not a directory", dir);
        return false;
    }
    return true;
}

bool paths_prepare_file(const char *path, char *err, size_t errlen) {
    size_t n = strlen(path);
    if ((n > 0 && path[n - 1] == '/') || paths_is_dir(path)) {
        snprintf(err, errlen, "%s: is a directory; give a file name", path);
        return false;
    }
    if (!prepare_parent_of(path, err, errlen)) return false;
    if (access(path, F_OK) == 0 && access(path, W_OK) != 0) {
        snprintf(err, errlen, "%s: exists and is not writable", path);
        return false;
    }
    return true;
}
