/* The start-up comparison of every rank's fingerprint with rank 0's. */
#include "rank_agree.h"

#include "mpi/dist.h"
#include "data/vocab.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "dev"
#endif

/* Keys each rank may set for itself (its own device). */
static const char *const PER_RANK_KEYS[] = {"device", "cpu_threads"};

/* This rank's fingerprint as JSON text: the resolved config without the
 * per-rank keys, plus the data's and vocab's hashes and the version. */
static char *fingerprint_text(const bt_config *cfg, uint64_t train_data, uint64_t valid_data,
                              uint64_t vocab_hash) {
    cJSON *fp = cJSON_Parse(cfg->resolved_json ? cfg->resolved_json : "{}");
    if (!fp) fp = cJSON_CreateObject();
    for (size_t i = 0; i < sizeof PER_RANK_KEYS / sizeof PER_RANK_KEYS[0]; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(fp, PER_RANK_KEYS[i]);
    char hex[3][17];
    snprintf(hex[0], sizeof hex[0], "%016llx", (unsigned long long)train_data);
    snprintf(hex[1], sizeof hex[1], "%016llx", (unsigned long long)valid_data);
    snprintf(hex[2], sizeof hex[2], "%016llx", (unsigned long long)vocab_hash);
    cJSON *rank = cJSON_AddObjectToObject(fp, "fingerprint");
    cJSON_AddStringToObject(rank, "train_shards", hex[0]);
    cJSON_AddStringToObject(rank, "valid_shards", hex[1]);
    cJSON_AddStringToObject(rank, "vocab", hex[2]);
    cJSON_AddStringToObject(rank, "bertrain_version", PACKAGE_VERSION);
    char *text = cJSON_PrintUnformatted(fp);
    cJSON_Delete(fp);
    return text;
}

/* The first leaf where `a` (rank 0's) and `b` (this rank's) differ, as
 * "KEY is A on rank 0 and B on rank R"; false when none differs. */
static bool first_difference(const cJSON *a, const cJSON *b, const char *prefix, int rank,
                             char *out, size_t outlen) {
    for (const cJSON *x = a->child; x; x = x->next) {
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", x->string);
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
        if (cJSON_IsObject(x) && cJSON_IsObject(y)) {
            if (first_difference(x, y, path, rank, out, outlen)) return true;
            continue;
        }
        char *ta = cJSON_PrintUnformatted(x), *tb = y ? cJSON_PrintUnformatted(y) : NULL;
        bool differ = !ta || !tb || strcmp(ta, tb) != 0;
        if (differ)
            snprintf(out, outlen, "%s is %.200s on rank 0 and %.200s on rank %d", path,
                     ta ? ta : "?", tb ? tb : "absent", rank);
        free(ta);
        free(tb);
        if (differ) return true;
    }
    for (const cJSON *y = b->child; y; y = y->next) /* a key only this rank has */
        if (!cJSON_GetObjectItemCaseSensitive(a, y->string)) {
            snprintf(out, outlen, "%s%s%s is absent on rank 0 and set on rank %d", prefix,
                     *prefix ? "." : "", y->string, rank);
            return true;
        }
    return false;
}

bool rank_agree(const bt_config *cfg, uint64_t train_data, uint64_t valid_data,
                uint64_t vocab_hash) {
    const int world = dist_world(), rank = dist_rank();
    if (world == 1) return true;
    char *text = fingerprint_text(cfg, train_data, valid_data, vocab_hash);
    char mine[17], *all = malloc((size_t)world * sizeof mine);
    if (!text || !all) {
        fprintf(stderr, "bertrain: rank %d: out of host memory\n", rank);
        dist_abort(1);
    }
    snprintf(mine, sizeof mine, "%016llx",
             (unsigned long long)fnv1a64(FNV1A64_INIT, text, strlen(text)));
    dist_allgather_str(mine, sizeof mine, all);
    char differing[512] = "";
    int lowest = world;
    for (int r = 1; r < world; r++)
        if (strcmp(all + (size_t)r * sizeof mine, all) != 0) {
            size_t n = strlen(differing);
            snprintf(differing + n, sizeof differing - n, "%s%d", n ? ", " : "", r);
            if (r < lowest) lowest = r;
        }
    free(all);
    if (lowest == world) {
        free(text);
        return true;
    }
    unsigned long long len = strlen(text) + 1; /* rank 0's text, to name the key */
    dist_broadcast(&len, sizeof len);
    char *zero = rank == 0 ? text : malloc(len);
    if (!zero) dist_abort(1);
    dist_broadcast(zero, len);
    if (rank == lowest) {
        cJSON *a = cJSON_Parse(zero), *b = cJSON_Parse(text);
        char what[700] = "their fingerprints differ";
        if (a && b) first_difference(a, b, "", rank, what, sizeof what);
        fprintf(stderr, "bertrain: rank %d (%s) differs from rank 0 before any work: %s (ranks "
                "differing from rank 0: %s); every rank needs the same config (all but device "
                "and cpu_threads), shards, vocab and bertrain version\n", rank, dist_hostname(),
                what, differing);
        fflush(stderr);
        cJSON_Delete(a);
        cJSON_Delete(b);
    }
    dist_barrier(); /* the line is out before any rank stops the job */
    if (zero != text) free(zero);
    free(text);
    return false;
}
