/* Records of verified shards (shard_record.h). */
#define _XOPEN_SOURCE 700
#include "shard_record.h"

#include "util/file.h"
#include "util/paths.h"
#include "vocab.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define RECORD_MAGIC "BTSHREC1"
#define RECORDS_KEPT 256

/* What identifies one version of one file, as the record stores it. */
typedef struct {
    uint64_t dev, ino, size;
    int64_t mtime_s, mtime_ns, ctime_s, ctime_ns;
    uint32_t header_crc, pad;
} record_key;

typedef struct {
    char magic[8];
    record_key key;
    uint32_t max_id, n_ids;
} record_head;

static record_key key_of(const struct stat *st, uint32_t header_crc) {
    record_key k;
    memset(&k, 0, sizeof k); /* no uninitialized padding in the name's hash */
    k.dev = (uint64_t)st->st_dev;
    k.ino = (uint64_t)st->st_ino;
    k.size = (uint64_t)st->st_size;
    k.mtime_s = (int64_t)st->st_mtim.tv_sec;
    k.mtime_ns = (int64_t)st->st_mtim.tv_nsec;
    k.ctime_s = (int64_t)st->st_ctim.tv_sec;
    k.ctime_ns = (int64_t)st->st_ctim.tv_nsec;
    k.header_crc = header_crc;
    return k;
}

/* The records' directory into dir (made if missing); false when records are
 * off or there is no place for them. */
static bool records_dir(char *dir, size_t n) {
    const char *off = getenv("BERTRAIN_SHARD_RECORDS");
    if (off && !strcmp(off, "off")) return false;
    const char *own = getenv("BERTRAIN_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (own && *own) snprintf(dir, n, "%s", own);
    else if (xdg && *xdg) snprintf(dir, n, "%s/bertrain", xdg);
    else if (home && *home) snprintf(dir, n, "%s/.cache/bertrain", home);
    else return false;
    char err[256];
    return paths_prepare_dir(dir, err, sizeof err);
}

/* The record file of key k in dir. */
static void record_path(char *out, size_t n, const char *dir, const record_key *k) {
    snprintf(out, n, "%s/shard-%016llx.rec", dir,
             (unsigned long long)fnv1a64(FNV1A64_INIT, k, sizeof *k));
}

bool shard_record_load(const struct stat *st, uint32_t header_crc, shard_facts *f) {
    memset(f, 0, sizeof *f);
    char dir[1024], file[1200];
    if (!records_dir(dir, sizeof dir)) return false;
    const record_key k = key_of(st, header_crc);
    record_path(file, sizeof file, dir, &k);
    size_t len = 0;
    unsigned char *text = (unsigned char *)file_read_all(file, &len);
    record_head h;
    bool ok = text && len >= sizeof h + 4;
    if (ok) memcpy(&h, text, sizeof h);
    ok = ok && !memcmp(h.magic, RECORD_MAGIC, 8) && !memcmp(&h.key, &k, sizeof k) &&
         len == sizeof h + (size_t)h.n_ids * 8 + 4 && (h.n_ids == 0 || h.n_ids == h.max_id + 1);
    if (ok) {
        uint32_t crc;
        memcpy(&crc, text + len - 4, 4);
        ok = crc == (uint32_t)crc32(0L, text, (uInt)(len - 4));
    }
    if (ok && h.n_ids && (f->count = malloc((size_t)h.n_ids * 8))) {
        memcpy(f->count, text + sizeof h, (size_t)h.n_ids * 8);
    } else if (ok && h.n_ids) {
        ok = false;
    }
    if (ok) {
        f->max_id = h.max_id;
        f->n_ids = h.n_ids;
    }
    free(text);
    return ok;
}

/* Keep the newest RECORDS_KEPT records of dir: remove the oldest others
 * (files named shard-*.rec only: this code wrote them). */
static void prune_records(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    int n = 0;
    time_t oldest = 0;
    char victim[1200] = "";
    for (struct dirent *e; (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "shard-", 6) != 0 || len < 10 || strcmp(e->d_name + len - 4, ".rec"))
            continue;
        char p[1200];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &st) != 0) continue;
        if (!n++ || st.st_mtime < oldest) {
            oldest = st.st_mtime;
            snprintf(victim, sizeof victim, "%s", p);
        }
    }
    closedir(d);
    if (n > RECORDS_KEPT && victim[0]) remove(victim); /* one a save: the count stays bounded */
}

void shard_record_save(const struct stat *st, uint32_t header_crc, const shard_facts *f) {
    char dir[1024], file[1200], tmp[1300];
    if (!records_dir(dir, sizeof dir)) return;
    record_head h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, RECORD_MAGIC, 8);
    h.key = key_of(st, header_crc);
    h.max_id = f->max_id;
    h.n_ids = f->n_ids;
    const size_t len = sizeof h + (size_t)f->n_ids * 8 + 4;
    unsigned char *buf = malloc(len);
    if (!buf) return;
    memcpy(buf, &h, sizeof h);
    if (f->n_ids) memcpy(buf + sizeof h, f->count, (size_t)f->n_ids * 8);
    const uint32_t crc = (uint32_t)crc32(0L, buf, (uInt)(len - 4));
    memcpy(buf + len - 4, &crc, 4);
    record_path(file, sizeof file, dir, &h.key);
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", file, (long)getpid());
    FILE *out = fopen(tmp, "wb");
    bool ok = out && fwrite(buf, 1, len, out) == len;
    if (out && fclose(out) != 0) ok = false;
    if (ok && rename(tmp, file) == 0) prune_records(dir);
    else if (out) remove(tmp);
    free(buf);
}
