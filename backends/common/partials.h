/* The host side of a device reduction, shared by the OpenCL and CUDA
 * backends: the device writes one float partial per fixed chunk, the host
 * reads them into this growable array and adds them in double in a fixed
 * blocked order (bt_sum_blocked), so the sum depends only on the data and
 * the chunk size. */
#ifndef BT_PARTIALS_H
#define BT_PARTIALS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float *v;
    size_t cap;
} bt_partials;

/* Room for n partials (grown as needed); on out of host memory, one line
 * naming `backend` and exit. */
float *bt_partials_reserve(bt_partials *p, size_t n, const char *backend);

/* Host memory a backend builds a table in before its upload (the
 * optimizers' span tables, step_gate's), grown as needed. */
typedef struct {
    void *p;
    size_t bytes;
} bt_host_buf;

/* At least `bytes` of b, its old contents not kept where it grows; on out
 * of host memory, one line naming `backend` and `what` the memory is for,
 * and exit. */
void *bt_host_reserve(bt_host_buf *b, size_t bytes, const char *backend, const char *what);

/* Free b's memory; b is then empty. */
void bt_host_buf_free(bt_host_buf *b);

/* The sum in double of p[0], p[stride], ..., p[(n-1) stride] in blocks:
 * b = ceil(n / BT_SUM_BLOCKS) consecutive partials a block (at most
 * BT_SUM_BLOCKS blocks), each block added in order from 0, then the blocks'
 * sums in order; up to BT_SUM_BLOCKS partials, plain order. The device's
 * parallel sums of partials (LAMB's trust ratios) add in this order, so a
 * device with fp64 has the host's bits (kernels/constants.h). */
double bt_sum_blocked(const float *p, size_t n, size_t stride);

/* bt_sum_blocked of v[0 .. n). */
double bt_partials_sum(const bt_partials *p, size_t n);

void bt_partials_free(bt_partials *p);

/* The host side of deferred reductions (backend.h's reduce_defer and
 * reduce_fetch) on a device: each queued reduction owns `count` consecutive
 * float partials of one device buffer, from `first`. */
typedef struct {
    int kind; /* bt_reduce_kind */
    size_t first, count;
} bt_deferral;

typedef struct {
    bt_deferral *d;
    int n, cap;
    size_t used; /* partials the queued reductions own */
} bt_deferrals;

/* The kind of step_gate's first queued value (bt_deferral.kind): one
 * partial, the skip flag (resolved as BT_REDUCE_FINITE's: 1 when it is 0);
 * the gradients' scale follows it as a BT_REDUCE_SUM of one partial. */
#define BT_DEFER_GATE 3

/* Queue a reduction of `kind` owning `count` partials; its index. On out of
 * host memory, one line naming `backend` and exit. */
int bt_deferrals_add(bt_deferrals *q, int kind, size_t count, const char *backend);

/* out[i] = the value of queued reduction i from the partials read back (all
 * q->used of them): a sum in double, as bt_partials_sum, or
 * for BT_REDUCE_FINITE 1 when its flag partial is 0. Empties the queue. */
void bt_deferrals_resolve(bt_deferrals *q, const float *partials, double *out);

void bt_deferrals_free(bt_deferrals *q);

/* The ulongs of step_gate's table for n_terms loss terms (kernels/optim.cl's
 * bt_step_gate). */
size_t bt_gate_table_len(int n_terms);

struct bt_step_gate_s;

/* Fill step_gate's table (tab, bt_gate_table_len of the rule's terms) and
 * numbers (num: masked, nsp, loss_limit) from rule, whose indices name
 * reductions of q; returns the number of loss terms. An index that is not
 * a queued reduction of the kind the rule needs: one line naming `backend`
 * and exit (an internal error). */
int bt_gate_table(const bt_deferrals *q, const struct bt_step_gate_s *rule,
                  unsigned long long *tab, double *num, const char *backend);

/* The first partial of gate, a step_gate's index in q (the skip flag; the
 * scale follows); an index that is not one: one line naming `backend` and
 * exit. */
size_t bt_gate_first(const bt_deferrals *q, int gate, const char *backend);

/* Queue step_gate's two values (the flag, the scale) in q: two adjacent
 * partials from the first, which is returned with *index the flag's. */
size_t bt_gate_queue(bt_deferrals *q, int *index, const char *backend);

#ifdef __cplusplus
}
#endif

#endif
