/* Batch plans and device picks. */
#include "plan.h"

#include "mpi/dist.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_offsets(batch_plan *p) {
    long off = 0;
    for (int r = 0; r < p->world; r++) {
        p->offset[r] = off;
        off += p->share[r];
    }
}

void plan_from_config(batch_plan *p, const bt_config *cfg, int world) {
    memset(p, 0, sizeof *p);
    p->world = world;
    p->global = cfg->train_batch_size;
    p->micro = (int)cfg->micro_batch;
    for (int r = 0; r < world; r++)
        p->share[r] = cfg->n_shares > 0 ? cfg->shares[r] : cfg->train_batch_size / world;
    set_offsets(p);
}

void plan_proportional(batch_plan *p, const double *speed) {
    double total = 0;
    for (int r = 0; r < p->world; r++) total += speed[r] > 0 ? speed[r] : 0;
    long given = 0;
    double rem[BT_MAX_RANKS];
    for (int r = 0; r < p->world; r++) { /* one each first, the rest by speed */
        double want = total > 0 ? (double)(p->global - p->world) * speed[r] / total
                                : (double)(p->global - p->world) / p->world;
        p->share[r] = 1 + (long)floor(want);
        rem[r] = want - floor(want);
        given += p->share[r];
    }
    while (given < p->global) { /* largest remainder first */
        int best = 0;
        for (int r = 1; r < p->world; r++)
            if (rem[r] > rem[best]) best = r;
        p->share[best]++;
        rem[best] = -1.0;
        given++;
    }
    set_offsets(p);
}

int plan_micro_batches(const batch_plan *p, int rank, int *sizes) {
    long left = p->share[rank];
    int n = 0;
    while (left > 0) {
        sizes[n] = (int)(left < p->micro ? left : p->micro);
        left -= sizes[n++];
    }
    return n;
}

void plan_device_spec(const bt_config *cfg, char *out, size_t n) {
    const char *env = getenv("BERTRAIN_DEVICE");
    const char *spec = cfg->device;
    cJSON *devs = cfg->devices_json[0] ? cJSON_Parse(cfg->devices_json) : NULL;
    if (env && *env) {
        spec = env;
    } else if (cJSON_IsArray(devs)) {
        cJSON *x = cJSON_GetArrayItem(devs, dist_rank() % cJSON_GetArraySize(devs));
        if (cJSON_IsString(x)) spec = x->valuestring;
    } else if (cJSON_IsObject(devs)) {
        char key[300];
        snprintf(key, sizeof key, "%s:%d", dist_hostname(), dist_local_rank());
        cJSON *x = cJSON_GetObjectItemCaseSensitive(devs, key);
        if (!x) x = cJSON_GetObjectItemCaseSensitive(devs, dist_hostname());
        if (!x) x = cJSON_GetObjectItemCaseSensitive(devs, "*");
        if (cJSON_IsString(x)) spec = x->valuestring;
    }
    if (strcmp(spec, "auto") == 0)
        snprintf(out, n, "auto:%d", dist_local_rank());
    else
        snprintf(out, n, "%s", spec);
    cJSON_Delete(devs);
}

void plan_format(const batch_plan *p, char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int r = 0; r < p->world && used + 1 < n; r++) {
        int k = snprintf(out + used, n - used, "%s%ld", r ? "+" : "", p->share[r]);
        if (k < 0) break;
        used += (size_t)k;
    }
}

void plan_set_accum(batch_plan *p, long accum) {
    p->global = 0;
    for (int r = 0; r < p->world; r++) {
        p->share[r] = (long)p->micro * accum;
        p->offset[r] = p->global;
        p->global += p->share[r];
    }
}
