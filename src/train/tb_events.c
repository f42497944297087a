/* TensorBoard event files from metrics.jsonl's records (tb_events.h):
 * protobuf-c encodes the Event messages (tb_event.proto), ISA-L computes the
 * CRC32C of the TFRecord framing. */
#include "tb_events.h"

#include "util/le.h"
#include "train/tb_event.pb-c.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef Bertrain__Tb__Event tb_event;
typedef Bertrain__Tb__Summary__Value tb_value;

#define TB_PREFIX "events.out.tfevents."
#define TB_SUFFIX ".bertrain" /* marks the files bertrain wrote: the only ones it changes */
#define TB_HEADER 12          /* length (8 bytes) and its masked CRC (4) */
#define TB_MAX_RECORD (64u << 20)

struct tb_writer {
    int fd;
    char path[1400];
    int err;   /* errno of the first failed write since tb_failed; 0: none */
    long lost; /* records not written, in all */
};

/* ISA-L's crc32_iscsi takes and returns the CRC register without the
 * standard's initial and final inversions: both are done here. */
uint32_t tb_masked_crc32c(const void *p, size_t n) {
    const uint32_t crc = crc32_iscsi((unsigned char *)p, (int)n, 0xFFFFFFFFu) ^ 0xFFFFFFFFu;
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* n bytes at fd whole, or the file cut back to where it was; false (errno
 * set) when they could not be written. */
static bool write_whole(int fd, const uint8_t *p, size_t n) {
    struct stat st;
    const off_t before = fstat(fd, &st) == 0 ? st.st_size : -1;
    size_t done = 0;
    errno = 0;
    while (done < n) {
        const ssize_t k = write(fd, p + done, n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        done += (size_t)k;
    }
    if (done == n) return true;
    const int e = errno ? errno : EIO;
    if (done > 0 && before >= 0 && ftruncate(fd, before) != 0) {
        /* the torn record stays; a resume cuts it (read_record) */
    }
    errno = e;
    return false;
}

/* ev as one framed record at the end of w's file; a failure is counted. */
static void write_event(tb_writer *w, const tb_event *ev) {
    const size_t n = bertrain__tb__event__get_packed_size(ev);
    uint8_t *rec = malloc(TB_HEADER + n + 4);
    if (rec) {
        le_put(rec, n, 8);
        le_put(rec + 8, tb_masked_crc32c(rec, 8), 4);
        bertrain__tb__event__pack(ev, rec + TB_HEADER);
        le_put(rec + TB_HEADER + n, tb_masked_crc32c(rec + TB_HEADER, n), 4);
    }
    if (!rec || !write_whole(w->fd, rec, TB_HEADER + n + 4)) {
        if (!w->err) w->err = rec ? errno : ENOMEM;
        w->lost++;
    }
    free(rec);
}

static double wall_time(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* The next record of f into *buf (*len bytes): 1, 0 at the end of the
 * file, -1 for a record cut short or damaged (its CRCs disagree), -2 out of
 * host memory. */
static int read_record(FILE *f, uint8_t **buf, size_t *len) {
    uint8_t head[TB_HEADER], crc[4];
    const size_t got = fread(head, 1, TB_HEADER, f);
    if (got == 0) return 0;
    if (got < TB_HEADER || le_get(head + 8, 4) != tb_masked_crc32c(head, 8)) return -1;
    const uint64_t n = le_get(head, 8);
    if (n > TB_MAX_RECORD) return -1;
    uint8_t *data = realloc(*buf, TB_HEADER + n + 4);
    if (!data) return -2;
    *buf = data;
    memcpy(data, head, TB_HEADER);
    if (fread(data + TB_HEADER, 1, n, f) != n || fread(crc, 1, 4, f) != 4 ||
        le_get(crc, 4) != tb_masked_crc32c(data + TB_HEADER, n))
        return -1;
    memcpy(data + TB_HEADER + n, crc, 4);
    *len = TB_HEADER + (size_t)n + 4;
    return 1;
}

/* Keep the records of `path` whose step is at most `last_step`, through a
 * temporary file renamed over it; a torn or damaged tail ends the file. A
 * file left with no summaries is removed. false with err set (a read, write
 * or memory failure: the file is left as it was). */
static bool cut_file(const char *path, long last_step, char *err, size_t errlen) {
    char tmp[1500];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *in = fopen(path, "rb"), *out = in ? fopen(tmp, "wb") : NULL;
    uint8_t *buf = NULL;
    size_t len = 0;
    long kept = 0, dropped = 0;
    int r = 0;
    while (out && (r = read_record(in, &buf, &len)) == 1) {
        errno = 0;
        tb_event *ev = bertrain__tb__event__unpack(NULL, len - TB_HEADER - 4, buf + TB_HEADER);
        if (!ev) { /* its CRCs agree: out of memory, or not bertrain's message */
            r = -2;
            errno = errno ? errno : EBADMSG;
            break;
        }
        const bool keep = ev->step <= last_step;
        if (keep && fwrite(buf, 1, len, out) != len) r = -2;
        kept += keep && ev->what_case == BERTRAIN__TB__EVENT__WHAT_SUMMARY;
        dropped += !keep;
        bertrain__tb__event__free_unpacked(ev, NULL);
        if (r == -2) break;
    }
    free(buf);
    const int e = errno;
    bool ok = out && r != -2;
    if (out && fclose(out) != 0) ok = false;
    if (in) fclose(in);
    if (ok && kept == 0) ok = unlink(path) == 0 && unlink(tmp) == 0;
    else if (ok && (dropped || r == -1)) ok = rename(tmp, path) == 0;
    else if (ok) ok = unlink(tmp) == 0;
    if (!ok) {
        snprintf(err, errlen, "%s: cannot cut back to step %ld: %s", path, last_step,
                 strerror(errno ? errno : e));
        if (out) unlink(tmp);
    }
    return ok;
}

/* Every event file bertrain wrote in dir: cut back to `last_step`, or
 * removed for a fresh run (last_step < 0). */
static bool prepare_dir(const char *dir, long last_step, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%s: cannot list: %s", dir, strerror(errno));
        return false;
    }
    bool ok = true;
    const size_t np = strlen(TB_PREFIX), ns = strlen(TB_SUFFIX);
    for (struct dirent *e; ok && (e = readdir(d));) {
        const size_t n = strlen(e->d_name);
        if (n <= np + ns || strncmp(e->d_name, TB_PREFIX, np) != 0 ||
            strcmp(e->d_name + n - ns, TB_SUFFIX) != 0)
            continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (last_step >= 0) {
            ok = cut_file(path, last_step, err, errlen);
        } else if (unlink(path) != 0) {
            snprintf(err, errlen, "%s: cannot remove: %s", path, strerror(errno));
            ok = false;
        }
    }
    closedir(d);
    return ok;
}

tb_writer *tb_open(const char *output_dir, long resume_step, char *err, size_t errlen) {
    if (!prepare_dir(output_dir, resume_step, err, errlen)) return NULL;
    tb_writer *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    snprintf(w->path, sizeof w->path, "%s/" TB_PREFIX "%lld.%s.%ld" TB_SUFFIX, output_dir,
             (long long)time(NULL), host, (long)getpid());
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        snprintf(err, errlen, "%s: cannot create: %s", w->path, strerror(errno));
        free(w);
        return NULL;
    }
    tb_event ev = BERTRAIN__TB__EVENT__INIT;
    ev.wall_time = wall_time();
    ev.what_case = BERTRAIN__TB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    write_event(w, &ev);
    return w;
}

/* The tag group of a record: "eval" for an evaluation (its keys lose their
 * "eval_" prefix), "skipped" for a step without an update, "rollback",
 * else "train". */
static const char *record_group(const cJSON *rec, size_t *strip) {
    *strip = 0;
    if (cJSON_GetObjectItemCaseSensitive(rec, "skipped")) return "skipped";
    if (cJSON_GetObjectItemCaseSensitive(rec, "rollback_to_step")) return "rollback";
    for (const cJSON *c = rec->child; c; c = c->next)
        if (c->string && strncmp(c->string, "eval_", 5) == 0) {
            *strip = 5;
            return "eval";
        }
    return "train";
}

/* The number v holds: a printed number (metrics.h's raw values) or a JSON
 * number; false for anything else. */
static bool number_of(const cJSON *v, double *x) {
    if (cJSON_IsNumber(v)) {
        *x = v->valuedouble;
        return true;
    }
    if (!cJSON_IsRaw(v) || !v->valuestring) return false;
    char *end;
    *x = strtod(v->valuestring, &end);
    return end != v->valuestring && *end == 0;
}

/* Scalars collected for one Event. */
typedef struct {
    tb_value *values;
    tb_value **list;
    char (*tags)[128];
    size_t n, cap;
} scalar_list;

static void add_scalar(scalar_list *s, const char *group, const char *key, double x) {
    if (s->n == s->cap) return;
    tb_value *v = &s->values[s->n];
    bertrain__tb__summary__value__init(v);
    snprintf(s->tags[s->n], sizeof s->tags[s->n], "%s/%s", group, key);
    v->tag = s->tags[s->n];
    v->value_case = BERTRAIN__TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v->simple_value = (float)x;
    s->list[s->n++] = v;
}

/* The numbers of the "ranks" list: rank<i>/<key>. */
static void add_ranks(scalar_list *s, const cJSON *ranks) {
    int i = 0;
    for (const cJSON *r = ranks->child; r; r = r->next, i++) {
        char group[32];
        snprintf(group, sizeof group, "rank%d", i);
        double x;
        for (const cJSON *c = r->child; c; c = c->next)
            if (c->string && number_of(c, &x)) add_scalar(s, group, c->string, x);
    }
}

void tb_write_record(tb_writer *w, const cJSON *rec) {
    double step;
    if (!w || !number_of(cJSON_GetObjectItemCaseSensitive(rec, "step"), &step)) return;
    size_t cap = (size_t)cJSON_GetArraySize(rec);
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(rec, "ranks");
    for (const cJSON *r = cJSON_IsArray(ranks) ? ranks->child : NULL; r; r = r->next)
        cap += (size_t)cJSON_GetArraySize(r);
    scalar_list s = {malloc(cap * sizeof *s.values), malloc(cap * sizeof *s.list),
                     malloc(cap * sizeof *s.tags), 0, cap};
    if (!s.values || !s.list || !s.tags) {
        if (!w->err) w->err = ENOMEM;
        w->lost++;
        s.cap = 0;
    }
    size_t strip;
    const char *group = record_group(rec, &strip);
    double x;
    for (const cJSON *c = rec->child; s.cap && c; c = c->next) {
        if (!c->string || strcmp(c->string, "step") == 0) continue;
        if (cJSON_IsArray(c) && strcmp(c->string, "ranks") == 0) add_ranks(&s, c);
        else if (number_of(c, &x))
            add_scalar(&s, group, c->string + (strncmp(c->string, "eval_", 5) ? 0 : strip), x);
    }
    if (s.n) {
        Bertrain__Tb__Summary sum = BERTRAIN__TB__SUMMARY__INIT;
        sum.n_value = s.n;
        sum.value = s.list;
        tb_event ev = BERTRAIN__TB__EVENT__INIT;
        ev.wall_time = wall_time();
        ev.step = (int64_t)step;
        ev.what_case = BERTRAIN__TB__EVENT__WHAT_SUMMARY;
        ev.summary = &sum;
        write_event(w, &ev);
    }
    free(s.values);
    free(s.list);
    free(s.tags);
}

int tb_failed(tb_writer *w, long *lost, const char **path) {
    *lost = w->lost;
    *path = w->path;
    const int e = w->err;
    w->err = 0;
    return e;
}

bool tb_close(tb_writer *w) {
    if (!w || w->fd < 0) return !w || w->lost == 0;
    errno = 0;
    if (close(w->fd) != 0 && !w->err) w->err = errno ? errno : EIO;
    w->fd = -1;
    return w->err == 0 && w->lost == 0;
}

void tb_free(tb_writer *w) {
    tb_close(w);
    free(w);
}
