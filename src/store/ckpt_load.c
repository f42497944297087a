/* Checkpoint reading: checksum verification, picking the newest usable
 * checkpoint, the recorded model config, weights and optimizer moments. */
#define _XOPEN_SOURCE 700
#include "ckpt.h"

#include "util/le.h"
#include "util/parse_num.h"
#include "safetensors.h"
#include "util/file.h"
#include "util/json_dups.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define BAD(...)                                                                             \
    do {                                                                                     \
        int k_ = snprintf(err, errlen, "%s: ", dir);                                         \
        if (k_ > 0 && (size_t)k_ < errlen) snprintf(err + k_, errlen - (size_t)k_, __VA_ARGS__); \
        goto fail;                                                                           \
    } while (0)

/* The numbers state.json may hold: each, when present (or required), is a
 * number in [lo, hi], an integer unless real is set. 2^40 steps is far beyond
 * any run; 2^62 samples keeps position arithmetic exact in int64. */
static const struct {
    const char *path;
    double lo, hi;
    bool required, real;
} STATE_NUMBERS[] = {
    {"format_version", 1, CKPT_FORMAT_VERSION, true, false},
    {"step", 0, 0x1p40, true, false},
    {"samples", 0, 0x1p62, false, false},
    {"epoch", 0, 0x1p62, false, false},
    {"world_size", 1, 0x1p20, false, false},
    {"data.position", 0, 0x1p62, false, false},
    {"data.epoch", 0, 0x1p62, false, false},
    {"data.samples_per_epoch", 0, 0x1p62, false, false},
    {"data.global_batch", 1, 0x1p40, false, false},
    {"optimizer.step", 0, 0x1p40, false, false},
    {"schedule.next_step", 0, 0x1p40, false, false},
    {"schedule.next_lr", 0, 1e6, false, true},
    {"loss_scaler.scale", 0x1p-126, 0x1p127, false, true},
    {"loss_scaler.cur_hysteresis", 0, 1e6, false, false},
    {"loss_scaler.iter", 0, 0x1p40, false, false},
    {"loss_scaler.last_overflow", -1, 0x1p40, false, false},
    {"loss_scaler.skipped", 0, 0x1p40, false, false},
};

/* A number of state.json in range (STATE_NUMBERS); false with the reason. */
static bool check_number(const cJSON *v, const char *path, double lo, double hi, bool real,
                         char *err, size_t errlen) {
    if (!cJSON_IsNumber(v)) {
        snprintf(err, errlen, "state.json: %s is not a number", path);
        return false;
    }
    double x = v->valuedouble;
    if (!(x >= lo && x <= hi) || (!real && x != floor(x))) {
        snprintf(err, errlen, "state.json: %s is %.17g; it must be %s in [%.17g, %.17g]", path,
                 x, real ? "a number" : "an integer", lo, hi);
        return false;
    }
    return true;
}

/* Every field of a checksummed state.json that a reader trusts is in range:
 * a valid checksum says the file is as written, not that it makes sense. */
static bool check_state_fields(const cJSON *st, char *err, size_t errlen) {
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(st, "format");
    if (!cJSON_IsString(format) || strcmp(format->valuestring, "bertrain checkpoint") != 0) {
        snprintf(err, errlen, "state.json: format is not \"bertrain checkpoint\"");
        return false;
    }
    for (size_t i = 0; i < sizeof STATE_NUMBERS / sizeof STATE_NUMBERS[0]; i++) {
        const cJSON *v = ckpt_json_at(st, STATE_NUMBERS[i].path);
        if (!v && !STATE_NUMBERS[i].required) continue;
        if (!v) {
            snprintf(err, errlen, "state.json: %s is missing", STATE_NUMBERS[i].path);
            return false;
        }
        if (!check_number(v, STATE_NUMBERS[i].path, STATE_NUMBERS[i].lo, STATE_NUMBERS[i].hi,
                          STATE_NUMBERS[i].real, err, errlen))
            return false;
    }
    const cJSON *step = ckpt_json_at(st, "step"), *updates = ckpt_json_at(st, "optimizer.step");
    if (updates && updates->valuedouble > step->valuedouble) { /* skipped steps update nothing */
        snprintf(err, errlen, "state.json: optimizer.step %.17g exceeds step %.17g",
                 updates->valuedouble, step->valuedouble);
        return false;
    }
    const cJSON *steps = ckpt_json_at(st, "optimizer.layer_steps");
    for (const cJSON *v = cJSON_IsArray(steps) ? steps->child : NULL; v; v = v->next)
        if (!check_number(v, "optimizer.layer_steps[]", 0, 0x1p40, false, err, errlen))
            return false;
    const cJSON *omega = ckpt_json_at(st, "admin_omega");
    for (const cJSON *v = cJSON_IsArray(omega) ? omega->child : NULL; v; v = v->next)
        if (!check_number(v, "admin_omega[]", 0x1p-126, 0x1p127, true, err, errlen)) return false;
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(st, "seed");
    uint64_t parsed;
    if (seed && !(cJSON_IsString(seed) && parse_u64(seed->valuestring, &parsed))) {
        snprintf(err, errlen, "state.json: seed is not an unsigned 64-bit integer in a string");
        return false;
    }
    return true;
}

bool ckpt_verify(const char *dir, cJSON **state, char *err, size_t errlen) {
    char path[1400];
    size_t len = 0;
    cJSON *st = NULL;
    *state = NULL;
    snprintf(path, sizeof path, "%s/state.json", dir);
    char *text = file_read_all(path, &len);
    if (!text) BAD("state.json: %s", errno == ENOENT ? "missing" : strerror(errno));
    /* the 8 hex digits of "state_crc32" are the CRC-32 of the text with them as 0s */
    if (strlen(text) != len) BAD("state.json: contains a NUL byte: the file is damaged");
    char *key = strstr(text, "\"state_crc32\""), *digits = NULL;
    if (key) digits = strchr(key + 13, '"');
    if (!digits || strlen(digits) < 10 || digits[9] != '"')
        BAD("state.json: no state_crc32 (truncated, or not a bertrain checkpoint of format %d)",
            CKPT_FORMAT_VERSION);
    char want[9];
    memcpy(want, digits + 1, 8);
    want[8] = 0;
    memset(digits + 1, '0', 8);
    char got[16];
    snprintf(got, sizeof got, "%08x", (unsigned)crc32(0L, (const Bytef *)text, (uInt)len));
    if (strcmp(got, want) != 0)
        BAD("state.json: checksum mismatch (CRC-32 %s, recorded %s): the file is damaged", got,
            want);
    st = cJSON_Parse(text);
    if (!cJSON_IsObject(st)) BAD("state.json: not a JSON object");
    char dup[512];
    if (json_find_duplicate(text, len, dup, sizeof dup)) BAD("state.json: %s", dup);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(st, "files");
    if (!cJSON_IsObject(files) ||
        !cJSON_GetObjectItemCaseSensitive(files, "model.safetensors") ||
        !cJSON_GetObjectItemCaseSensitive(files, "optim.bin"))
        BAD("state.json: does not list model.safetensors and optim.bin");
    char why[512];
    if (!check_state_fields(st, why, sizeof why)) BAD("%s", why);
    for (const cJSON *f = files->child; f; f = f->next) {
        const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(f, "bytes");
        const cJSON *crc = cJSON_GetObjectItemCaseSensitive(f, "crc32");
        if (strchr(f->string, '/') || !cJSON_IsNumber(bytes) || !cJSON_IsString(crc))
            BAD("state.json: bad entry for %s", f->string);
        if (!(bytes->valuedouble >= 0 && bytes->valuedouble <= 0x1p53) ||
            bytes->valuedouble != floor(bytes->valuedouble))
            BAD("state.json: files.%s.bytes is %.17g; a size is a whole number of bytes in [0, "
                "2^53]", f->string, bytes->valuedouble);
        snprintf(path, sizeof path, "%s/%s", dir, f->string);
        struct stat sb;
        if (stat(path, &sb) != 0) BAD("%s: missing", f->string);
        long long want_size = (long long)bytes->valuedouble;
        if ((long long)sb.st_size < want_size)
            BAD("%s: truncated (%lld of %lld bytes)", f->string, (long long)sb.st_size,
                want_size);
        if ((long long)sb.st_size != want_size)
            BAD("%s: %lld bytes, %lld expected", f->string, (long long)sb.st_size, want_size);
        uint32_t c;
        long long size;
        if (!ckpt_file_crc(path, &c, &size)) BAD("%s: cannot read: %s", f->string, strerror(errno));
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", c);
        if (strcmp(hex, crc->valuestring) != 0)
            BAD("%s: checksum mismatch (CRC-32 %s, recorded %s): the file is damaged", f->string,
                hex, crc->valuestring);
    }
    free(text);
    *state = st;
    return true;
fail:
    free(text);
    cJSON_Delete(st);
    return false;
}

static int cmp_desc(const void *a, const void *b) {
    return strcmp(*(char *const *)b, *(char *const *)a);
}

bool ckpt_find_auto(const char *out_dir, char *path, size_t pathlen, cJSON **state) {
    DIR *d = opendir(out_dir);
    if (!d) return false;
    char *names[4096];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 4096;) {
        const char *s = e->d_name;
        if (strncmp(s, "ckpt-", 5) == 0 && s[5] && strspn(s + 5, "0123456789") == strlen(s + 5))
            names[n++] = strdup(s);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_desc);
    bool found = false;
    for (int i = 0; i < n; i++) {
        char dir[1400], err[1024];
        snprintf(dir, sizeof dir, "%s/%s", out_dir, names[i]);
        if (!found) {
            if (ckpt_verify(dir, state, err, sizeof err)) {
                snprintf(path, pathlen, "%s", dir);
                found = true;
            } else {
                fprintf(stderr, "bertrain: resume: skipping damaged checkpoint %s\n", err);
            }
        }
        free(names[i]);
    }
    return found;
}

const cJSON *ckpt_json_at(const cJSON *obj, const char *path) {
    char part[256];
    while (obj && *path) {
        size_t len = strcspn(path, ".");
        snprintf(part, sizeof part, "%.*s", (int)len, path);
        obj = cJSON_GetObjectItemCaseSensitive(obj, part);
        path += len + (path[len] == '.');
    }
    return obj;
}

void ckpt_resolve(const char *path, char *out, size_t outlen) {
    char latest_path[1200];
    size_t len = 0;
    snprintf(out, outlen, "%s", path);
    snprintf(latest_path, sizeof latest_path, "%s/latest", path);
    char *latest = file_read_all(latest_path, &len);
    if (!latest) return;
    latest[strcspn(latest, "\n")] = 0;
    snprintf(out, outlen, "%s/%s", path, latest);
    free(latest);
}

void ckpt_vocab_path(const char *dir, const cJSON *state, char *out, size_t outlen) {
    snprintf(out, outlen, "%s/vocab.txt", dir);
    const cJSON *dv = ckpt_json_at(state, "config.data.vocab");
    if (access(out, R_OK) != 0 && cJSON_IsString(dv)) snprintf(out, outlen, "%s", dv->valuestring);
}

bool ckpt_lowercase(const cJSON *state) {
    return !cJSON_IsFalse(ckpt_json_at(state, "data.lowercase"));
}

bool ckpt_model_config(const cJSON *state, bert_config *mc, char *err, size_t errlen) {
    const cJSON *conf = cJSON_GetObjectItemCaseSensitive(state, "config");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(conf, "model");
    if (!cJSON_IsObject(model)) {
        snprintf(err, errlen, "state.json: no config.model");
        return false;
    }
    bert_preset("tiny", mc);
    static const struct {
        const char *key;
        size_t off;
        bool is_float;
    } keys[] = {
#define K(f, fl) {#f, offsetof(bert_config, f), fl}
        K(vocab_size, false), K(hidden_size, false), K(num_hidden_layers, false),
        K(num_attention_heads, false), K(intermediate_size, false),
        K(max_position_embeddings, false), K(type_vocab_size, false), K(layer_norm_eps, true),
        K(hidden_dropout_prob, true), K(attention_probs_dropout_prob, true),
        K(initializer_range, true),
#undef K
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, keys[i].key);
        if (!cJSON_IsNumber(v)) {
            if (keys[i].is_float) continue; /* not shape-defining: the preset's default */
            snprintf(err, errlen, "state.json: config.model.%s is missing", keys[i].key);
            return false;
        }
        char *field = (char *)mc + keys[i].off;
        if (keys[i].is_float)
            *(float *)field = (float)v->valuedouble;
        else
            *(int *)field = (int)v->valuedouble;
    }
    mc->nsp = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "nsp"));
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(model, "norm");
    mc->norm = !cJSON_IsString(norm)                  ? BERT_NORM_POST
               : !strcmp(norm->valuestring, "pre")    ? BERT_NORM_PRE
               : !strcmp(norm->valuestring, "admin")  ? BERT_NORM_ADMIN
                                                      : BERT_NORM_POST;
    if (mc->norm == BERT_NORM_ADMIN) { /* the omegas the model was initialized with */
        const cJSON *omega = cJSON_GetObjectItemCaseSensitive(state, "admin_omega");
        int n = 2 * mc->num_hidden_layers;
        if (!cJSON_IsArray(omega) || cJSON_GetArraySize(omega) != n ||
            mc->num_hidden_layers > BERT_MAX_LAYERS) {
            snprintf(err, errlen, "state.json: an Admin model needs admin_omega, %d numbers", n);
            return false;
        }
        for (int i = 0; i < n; i++) {
            const cJSON *v = cJSON_GetArrayItem(omega, i);
            mc->admin_omega[i] = cJSON_IsNumber(v) ? (float)v->valuedouble : -1.0f;
        }
    }
    return bert_config_valid(mc, err, errlen);
}

bool ckpt_check_finite(const char *file, const char *name, const void *x, size_t n, char *err,
                       size_t errlen) {
    size_t bad = 0, first = 0;
    float v, first_v = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(&v, (const char *)x + 4 * i, 4);
        if (!isfinite(v) && bad++ == 0) first = i, first_v = v;
    }
    if (bad)
        snprintf(err, errlen, "%s: tensor %s holds %zu NaN or infinite value%s (the first at "
                 "element %zu: %g): refusing to load it", file, name, bad, bad == 1 ? "" : "s",
                 first, first_v);
    return bad == 0;
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
        } else if (!(ok = ckpt_check_finite(path, t->name, st_data(&f, e), t->numel, err,
                                            errlen))) {
        } else {
            m->be->upload(m->be, bert_params_at(m, t->offset), st_data(&f, e),
                          t->numel * 4);
        }
    }
    st_close(&f);
    return ok;
}

#undef BAD
#define BAD(...)                                                                             \
    do {                                                                                     \
        int k_ = snprintf(err, errlen, "%s: ", path);                                        \
        if (k_ > 0 && (size_t)k_ < errlen) snprintf(err + k_, errlen - (size_t)k_, __VA_ARGS__); \
        goto out;                                                                            \
    } while (0)

/* The moments of one tensor as read: every m finite, every v finite and >= 0
 * (a second moment is a mean of squares); false with the first bad element. */
static bool moments_valid(const float *x, size_t n, bool second, const char *name, char *err,
                          size_t errlen) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || (second && x[i] < 0)) {
            snprintf(err, errlen, "tensor %s: its %s moment holds %g at element %zu; a %s: the "
                     "file is damaged or was not written by bertrain", name,
                     second ? "second" : "first", x[i], i,
                     second ? "second moment is finite and >= 0" : "first moment is finite");
            return false;
        }
    return true;
}

/* 1-bit LAMB's state from dir's CKPT_LAMB1_FILE (none there, as after a
 * LAMB run: a fresh state). */
static bool load_lamb1(const char *dir, bert_model *m, bt_optimizer *o, char *err, size_t errlen) {
    char path[1200];
    snprintf(path, sizeof path, "%s/" CKPT_LAMB1_FILE, dir);
    onebit_lamb_reset(o->lamb1, m);
    if (access(path, F_OK) != 0) return true;
    size_t len = 0;
    char *bytes = file_read_all(path, &len), why[512];
    const bool ok = bytes && onebit_lamb_load(o->lamb1, m, bytes, len, why, sizeof why);
    if (!ok) snprintf(err, errlen, "%s: %s", path, bytes ? why : "cannot read");
    free(bytes);
    return ok;
}

bool ckpt_load_optim(const char *dir, bert_model *m, bt_optimizer *o, long max_step,
                     bool exact_step, char *err, size_t errlen) {
    char path[1200];
    snprintf(path, sizeof path, "%s/optim.bin", dir);
    bool ok = false;
    unsigned char hdr[32], *table = NULL;
    float *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) BAD("cannot open: %s", strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || fread(hdr, 1, 32, f) != 32) BAD("truncated header");
    if (memcmp(hdr, OPTIM_MAGIC, 8) != 0) BAD("not an optimizer state file (bad magic)");
    if (le_get(hdr + 8, 4) != OPTIM_VERSION)
        BAD("version %u; this bertrain reads version %d", (unsigned)le_get(hdr + 8, 4),
            OPTIM_VERSION);
    const int saved_type = (int)le_get(hdr + 12, 4);
    /* AdamW's moments are 1-bit Adam's (its warm-up is AdamW), LAMB's 1-bit LAMB's: either
     * continues the other */
    const bool saved_lamb = saved_type == OPT_LAMB || saved_type == OPT_ONEBIT_LAMB,
               lamb = o->cfg.type == OPT_LAMB || o->cfg.type == OPT_ONEBIT_LAMB;
    if (saved_lamb != lamb)
        BAD("moments of %s; the config's optimizer.type is %s",
            optim_type_name((int)le_get(hdr + 12, 4)), optim_type_name(o->cfg.type));
    uint64_t n = le_get(hdr + 24, 4), tbytes = le_get(hdr + 28, 4);
    if (n != (uint64_t)m->n_tensors)
        BAD("%llu tensors; the model has %d", (unsigned long long)n, m->n_tensors);
    if (tbytes > (uint64_t)sb.st_size - 32) /* read no more than the file holds */
        BAD("a tensor table of %llu bytes in a file of %lld", (unsigned long long)tbytes,
            (long long)sb.st_size);
    table = malloc(tbytes + 1);
    if (!table || fread(table, 1, tbytes, f) != tbytes) BAD("truncated tensor table");
    size_t largest = 0, total = 0, pos = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const bert_tensor *t = &m->tensors[i];
        size_t len = pos + 2 <= tbytes ? (size_t)le_get(table + pos, 2) : (size_t)-1;
        if (len == (size_t)-1 || pos + 2 + len + 8 > tbytes) BAD("truncated tensor table");
        if (len != strlen(t->name) || memcmp(table + pos + 2, t->name, len) != 0 ||
            le_get(table + pos + 2 + len, 8) != t->numel)
            BAD("tensor %d is %.*s with %llu elements; the model has %s with %zu", i, (int)len,
                (const char *)table + pos + 2,
                (unsigned long long)le_get(table + pos + 2 + len, 8), t->name, t->numel);
        pos += 2 + len + 8;
        total += 2 * t->numel * 4;
        if (t->numel > largest) largest = t->numel;
    }
    if ((uint64_t)sb.st_size != 32 + tbytes + total)
        BAD("%lld bytes; header and table say %llu", (long long)sb.st_size,
            (unsigned long long)(32 + tbytes + total));
    const uint64_t step = le_get(hdr + 16, 8);
    if (step > (uint64_t)max_step || (exact_step && step != (uint64_t)max_step))
        BAD("optimizer step %llu; state.json says %s%ld: the file is damaged or from another "
            "checkpoint", (unsigned long long)step, exact_step ? "" : "at most ", max_step);
    buf = malloc(largest * 4 + 4);
    if (!buf) BAD("out of host memory");
    char why[512];
    for (int i = 0; i < m->n_tensors; i++) {
        const bert_tensor *t = &m->tensors[i];
        for (int k = 0; k < 2; k++) {
            if (fread(buf, 4, t->numel, f) != t->numel) BAD("truncated data");
            if (!moments_valid(buf, t->numel, k == 1, t->name, why, sizeof why)) BAD("%s", why);
            m->be->upload(m->be, optim_moment_at(o, k, t->offset), buf, t->numel * 4);
        }
    }
    o->step = (long)step;
    for (int l = 0; l < o->n_layers; l++) o->layer_steps[l] = o->step; /* state.json may refine */
    ok = !o->lamb1 || load_lamb1(dir, m, o, err, errlen);
out:
    if (f) fclose(f);
    free(table);
    free(buf);
    return ok;
}
