/* How the global batch is split over ranks, which device each rank uses, and
 * the checks that keep ranks consistent. Any plan keeps the global batch and
 * the global sample order: rank r trains on positions [offset_r, offset_r +
 * share_r) of every step's global range. */
#ifndef BT_PLAN_H
#define BT_PLAN_H

#include "backends/backend.h"
#include "config/config.h"
#include "model/bert.h"

typedef struct {
    int world;
    long global;                /* sequences per optimizer step */
    long share[BT_MAX_RANKS];   /* per rank, summing to global */
    long offset[BT_MAX_RANKS];  /* first position of each rank's slice */
    int micro;                  /* largest micro-batch (the model's capacity) */
} batch_plan;

/* The plan from the config: explicit distributed.shares, or an equal split. */
void plan_from_config(batch_plan *p, const bt_config *cfg, int world);

/* Shares proportional to speed[r] (samples/s), each >= 1, summing to the
 * global batch (largest remainders, ties to the lower rank). */
void plan_proportional(batch_plan *p, const double *speed);

/* An equal split where every rank accumulates `accum` full micro-batches
 * (batch-size rampup: the global batch grows through the accumulation). */
void plan_set_accum(batch_plan *p, long accum);

/* Number of micro-batches of rank r and their sizes (sizes has room for
 * ceil(share / micro) entries). */
int plan_micro_batches(const batch_plan *p, int rank, int *sizes);

/* This rank's device spec: $BERTRAIN_DEVICE, else the config's "devices"
 * entry for this rank (list) or for "host:local_rank" / "host" / "*"
 * (object), else "device". ("auto" and a bare "cuda" take the GPU of this
 * rank's local rank: open_backend hands the registry dist_local_rank().) */
void plan_device_spec(const bt_config *cfg, char *out, size_t n);

/* What set-up is about to allocate (plan_sizes). */
typedef struct {
    long micro;         /* training micro-batch (0: evaluation only) */
    long buffers;       /* host micro-batch buffers a rank holds */
    int train_cap;      /* masked rows per training sequence (data.max_predictions or its default) */
    long eval_batch;    /* evaluation batch (0: none) */
    int eval_cap;       /* masked rows per held-out sequence */
} size_request;

typedef struct {
    int max_batch;      /* the model's capacity: sequences, ... */
    int max_masked;     /* ... and masked rows of a batch */
    bert_memory model;  /* what bert_create allocates */
    double device_bytes; /* the model, its gradients and the optimizer's two moments */
    double host_bytes;  /* the micro-batch buffers */
} run_sizes;

/* The model's capacity for request r and the memory it and the batch buffers
 * take, computed in 64 bits and checked before anything is allocated: every
 * count within the model's int32 indices, the activation buffer within the
 * device's largest allocation (dev->max_alloc, when it has one), everything
 * within its memory (dev->total_mem) and the buffers within the host's.
 * false with one line naming the config keys in err. */
bool plan_sizes(const bt_config *cfg, const size_request *r, const bt_device_info *dev,
                run_sizes *out, char *err, size_t errlen);

/* "5+11" style text of the shares. */
void plan_format(const batch_plan *p, char *out, size_t n);

#endif
