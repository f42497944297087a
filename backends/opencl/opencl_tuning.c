/* OpenCL backend: tuned CLBlast kernel parameters per device, loaded from
 * a JSON file named after the device (docs/OPENCL.md) into CLBlast before
 * the first GEMM. */
#include "opencl_internal.h"

#include <clblast_c.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef BT_PKGDATADIR
#define BT_PKGDATADIR "/usr/local/share/bertrain"
#endif

void ocl_sanitize_name(const char *name, char *out, size_t outlen) {
    size_t o = 0;
    bool sep = false;
    for (const char *p = name; *p && o + 1 < outlen; p++) {
        if (isalnum((unsigned char)*p)) {
            if (sep && o > 0 && o + 2 < outlen) out[o++] = '_';
            out[o++] = (char)tolower((unsigned char)*p);
            sep = false;
        } else {
            sep = true;
        }
    }
    out[o] = 0;
}

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The whole file as a string (caller frees), or NULL. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len + 1))) {
            if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
                free(buf);
                buf = NULL;
            } else {
                buf[len] = 0;
            }
        }
    }
    fclose(f);
    return buf;
}

enum { MAX_PARAMS = 32 };

/* Parameters of one kernel: a JSON object {"NAME": value, ...} or the
 * CLBlast tuner's "NAME=value NAME=value" string. Returns the count, -1 on a
 * malformed entry. */
static int parse_params(const cJSON *v, char names[][32], size_t *values) {
    int np = 0;
    if (cJSON_IsObject(v)) {
        for (const cJSON *p = v->child; p; p = p->next) {
            if (np == MAX_PARAMS || !cJSON_IsNumber(p) || p->valuedouble < 0 ||
                strlen(p->string) >= 32)
                return -1;
            snprintf(names[np], 32, "%s", p->string);
            values[np++] = (size_t)p->valuedouble;
        }
        return np;
    }
    if (!cJSON_IsString(v)) return -1;
    for (const char *s = v->valuestring; *s;) {
        while (*s == ' ' || *s == '\t') s++;
        if (!*s) break;
        size_t len = strcspn(s, "= \t");
        if (np == MAX_PARAMS || len == 0 || len >= 32 || s[len] != '=') return -1;
        memcpy(names[np], s, len);
        names[np][len] = 0;
        char *end;
        errno = 0;
        unsigned long long val = strtoull(s + len + 1, &end, 10);
        if (errno || end == s + len + 1) return -1;
        values[np++] = (size_t)val;
        s = end;
    }
    return np;
}

/* Override the parameters of CLBlast kernel kname; appends it to loaded. */
static bool apply_kernel(ocl_ctx *c, const char *path, const char *kname, const cJSON *params,
                         char *loaded, size_t loaded_len) {
    char names[MAX_PARAMS][32];
    const char *ptrs[MAX_PARAMS];
    size_t values[MAX_PARAMS];
    int np = parse_params(params, names, values);
    if (np <= 0) {
        fprintf(stderr, "bertrain: opencl: %s: bad parameters for kernel %s\n", path, kname);
        return false;
    }
    int kept = 0; /* PRECISION (in the tuner's output) is the precision argument */
    for (int i = 0; i < np; i++)
        if (strcmp(names[i], "PRECISION") != 0) {
            ptrs[kept] = names[i];
            values[kept++] = values[i];
        }
    np = kept;
    CLBlastStatusCode s = CLBlastOverrideParameters(c->device, kname, CLBlastPrecisionSingle,
                                                    (size_t)np, ptrs, values);
    if (s != CLBlastSuccess) {
        fprintf(stderr, "bertrain: opencl: %s: CLBlastOverrideParameters(%s) failed: %s (%d)\n",
                path, kname, ocl_clblast_status_name(s), (int)s);
        return false;
    }
    size_t at = strlen(loaded);
    snprintf(loaded + at, loaded_len - at, "%s%s", at ? ", " : "", kname);
    return true;
}

/* Apply the tuning file at path to the device: {"kernels": {"Xgemm": {...},
 * ...}}, or one result file of a CLBlast tuner ("best_kernel",
 * "best_parameters"). False if it is unusable. */
static bool apply_tuning(ocl_ctx *c, const char *path) {
    char *text = slurp(path);
    if (!text) {
        fprintf(stderr, "bertrain: opencl: cannot read CLBlast tuning %s\n", path);
        return false;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) {
        fprintf(stderr, "bertrain: opencl: %s: not valid JSON\n", path);
        return false;
    }
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(root, "device");
    if (cJSON_IsString(dev) && strcmp(dev->valuestring, c->info.name) != 0)
        fprintf(stderr, "bertrain: opencl: %s was tuned on \"%s\", this is \"%s\"\n", path,
                dev->valuestring, c->info.name);
    const cJSON *kernels = cJSON_GetObjectItemCaseSensitive(root, "kernels");
    const cJSON *best_k = cJSON_GetObjectItemCaseSensitive(root, "best_kernel");
    const cJSON *best_p = cJSON_GetObjectItemCaseSensitive(root, "best_parameters");
    char loaded[256] = "";
    bool ok = true;
    if (cJSON_IsObject(kernels))
        for (const cJSON *k = kernels->child; k && ok; k = k->next)
            ok = apply_kernel(c, path, k->string, k, loaded, sizeof loaded);
    else if (cJSON_IsString(best_k) && best_p)
        ok = apply_kernel(c, path, best_k->valuestring, best_p, loaded, sizeof loaded);
    cJSON_Delete(root);
    if (ok && *loaded) /* said in the start-up lines (bt_device_info.tuning) */
        snprintf(c->info.tuning, sizeof c->info.tuning, "CLBlast tuning for %s from %s", loaded,
                 path);
    else if (ok)
        fprintf(stderr, "bertrain: opencl: %s: no kernels\n", path);
    return ok && *loaded;
}

/* Where the tuning of this device is looked for, first match wins:
 *   $BERTRAIN_CLBLAST_TUNING (a file, or a directory holding NAME.json;
 *     set but empty, or "none": no tuning),
 *   PKGDATADIR/tuning/NAME.json (installed),
 *   SRCDIR/backends/opencl/tuning/NAME.json (the source tree, uninstalled runs),
 * with NAME the device name sanitized by ocl_sanitize_name. */
void ocl_load_tuning(ocl_ctx *c) {
    char name[160], path[1024];
    ocl_sanitize_name(c->info.name, name, sizeof name);
    const char *env = getenv("BERTRAIN_CLBLAST_TUNING");
    if (env) {
        if (!*env || !strcmp(env, "none")) return;
        if (is_dir(env))
            snprintf(path, sizeof path, "%s/%s.json", env, name);
        else
            snprintf(path, sizeof path, "%s", env);
        if (!is_file(path)) {
            fprintf(stderr, "bertrain: opencl: BERTRAIN_CLBLAST_TUNING: no file %s\n", path);
            return;
        }
        apply_tuning(c, path);
        return;
    }
    const char *dirs[] = {BT_PKGDATADIR "/tuning",
#ifdef BT_SRCDIR
                          BT_SRCDIR "/backends/opencl/tuning"
#endif
    };
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(path, sizeof path, "%s/%s.json", dirs[i], name);
        if (is_file(path)) {
            apply_tuning(c, path);
            return;
        }
    }
}
