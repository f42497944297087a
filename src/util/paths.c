/* Output paths: mkdir -p with checks that name the path in the way. */
#include "paths.h"

#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
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

/* Directories that belong to the system: a run's files never go straight
 * into one (a directory below them is fine). */
static const char *const SYSTEM_DIRS[] = {
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
    "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr",
    "/var", "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local",
    "/usr/local/bin", "/usr/local/lib", "/usr/local/share", "/usr/sbin", "/usr/share", "/usr/src",
    "/var/backups", "/var/cache", "/var/lib", "/var/local", "/var/lock", "/var/log", "/var/mail",
    "/var/opt", "/var/run", "/var/spool", "/var/tmp"};

/* Whether real (a resolved path) is path once resolved too. */
static bool same_dir(const char *real, const char *path) {
    char other[PATH_MAX];
    return path && path[0] && realpath(path, other) && strcmp(real, other) == 0;
}

bool paths_check_own_dir(const char *dir, const char *what, char *err, size_t errlen) {
    char real[PATH_MAX];
    if (!realpath(dir, real)) return true; /* not there yet: made new, its own */
    const char *kind = NULL;
    const struct passwd *pw = getpwuid(getuid());
    if (same_dir(real, getenv("HOME")) || (pw && same_dir(real, pw->pw_dir)))
        kind = "your home directory";
    for (size_t i = 0; !kind && i < sizeof SYSTEM_DIRS / sizeof SYSTEM_DIRS[0]; i++)
        if (same_dir(real, SYSTEM_DIRS[i])) kind = i == 0 ? "the root directory" : "a system directory";
    if (kind)
        snprintf(err, errlen, "%s %s is %s (%s): bertrain writes its files straight into it; give "
                 "it a directory of its own, such as %s/bertrain-out", what, dir, kind, real,
                 strcmp(kind, "your home directory") ? "runs" : real);
    return kind == NULL;
}
