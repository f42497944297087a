/* Batch plans and device picks. */
#include "plan.h"

#include "mpi/dist.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

bool plan_sizes(const bt_config *cfg, const size_request *r, const bt_device_info *dev,
                run_sizes *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    const long long T = cfg->data.seq_len; /* a sequence masks at most its own tokens */
    const long long cap_t = r->train_cap < T ? r->train_cap : T,
                    cap_e = r->eval_cap < T ? r->eval_cap : T;
    const long long B = r->micro > r->eval_batch ? r->micro : r->eval_batch;
    const long long masked_t = r->micro * cap_t, masked_e = r->eval_batch * cap_e;
    const long long masked = masked_t > masked_e ? masked_t : masked_e;
    char why[512], what[256];
    snprintf(what, sizeof what, "%s %lld x data.seq_len %lld (%lld masked rows)",
             r->micro >= r->eval_batch ? "train_micro_batch_size_per_gpu" : "eval.batch_size", B,
             T, masked);
    if (!bert_memory_needed(&cfg->model, B, T, masked, dev->max_alloc, &out->model, why,
                            sizeof why)) {
        snprintf(err, errlen, "%s: %s", what, why);
        return false;
    }
    const bert_memory *mm = &out->model;
    out->max_batch = (int)B;
    out->max_masked = (int)masked;
    out->device_bytes = 4 * mm->params + mm->params16 + mm->acts + mm->ints + mm->stash +
                        mm->operand16;
    out->host_bytes = (double)r->buffers * (double)(r->micro * T * 3 + masked * 2 + r->micro) * 4;
    const char *fix = "reduce train_micro_batch_size_per_gpu (or eval.batch_size), or data.seq_len";
    const double one_buffer = mm->largest_act > mm->stash_layer ? mm->largest_act
                                                                : mm->stash_layer;
    if (dev->max_alloc && mm->params > (double)dev->max_alloc) {
        snprintf(err, errlen, "the parameters need %.2f GB in one buffer; %s allows %.2f GB "
                 "per buffer: a smaller model", mm->params / 1e9, dev->name,
                 dev->max_alloc / 1e9);
        return false;
    }
    if (dev->max_alloc && one_buffer > (double)dev->max_alloc) {
        snprintf(err, errlen, "%s: %s needs %.2f GB in one buffer; %s allows %.2f GB per "
                 "buffer: %s", what, mm->largest_act >= mm->stash_layer
                                         ? "the largest activation tensor"
                                         : "one layer's 16-bit activations",
                 one_buffer / 1e9, dev->name, dev->max_alloc / 1e9, fix);
        return false;
    }
    if (dev->total_mem && out->device_bytes > (double)dev->total_mem) {
        snprintf(err, errlen, "%s: needs %.2f GB on the device (parameters, gradients and "
                 "optimizer moments %.2f GB, activations %.2f GB); %s has %.2f GB: %s", what,
                 out->device_bytes / 1e9, 4 * mm->params / 1e9,
                 (mm->acts + mm->ints + mm->stash + mm->operand16) / 1e9, dev->name,
                 dev->total_mem / 1e9, fix);
        return false;
    }
    if (dev->free_mem && out->device_bytes > (double)dev->free_mem) {
        snprintf(err, errlen, "%s: needs %.2f GB on the device; %s has %.2f GB free of its "
                 "%.2f GB now (other processes hold the rest): %s", what,
                 out->device_bytes / 1e9, dev->name, dev->free_mem / 1e9, dev->total_mem / 1e9,
                 fix);
        return false;
    }
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const double host = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (host > 0 && out->host_bytes > host) {
        snprintf(err, errlen, "train_batch_size %ld in micro-batches of %ld: the %ld micro-batch "
                 "buffers of a rank need %.2f GB of host memory, more than its %.2f GB: reduce "
                 "train_batch_size or raise train_micro_batch_size_per_gpu", cfg->train_batch_size,
                 r->micro, r->buffers, out->host_bytes / 1e9, host / 1e9);
        return false;
    }
    return true;
}
