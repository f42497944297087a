/* The host side of device reductions (partials.h). */
#include "partials.h"

#include "../backend.h"
#include "../../kernels/constants.h"

#include <stdio.h>
#include <stdlib.h>

float *bt_partials_reserve(bt_partials *p, size_t n, const char *backend) {
    if (n > p->cap) {
        free(p->v);
        p->v = malloc(n * sizeof *p->v);
        if (!p->v) {
            fprintf(stderr, "bertrain: %s: out of host memory in a reduction\n", backend);
            exit(1);
        }
        p->cap = n;
    }
    return p->v;
}

void *bt_host_reserve(bt_host_buf *b, size_t bytes, const char *backend, const char *what) {
    if (bytes > b->bytes) {
        free(b->p);
        if (!(b->p = malloc(bytes))) {
            fprintf(stderr, "bertrain: %s: out of host memory for %s\n", backend, what);
            exit(1);
        }
        b->bytes = bytes;
    }
    return b->p;
}

void bt_host_buf_free(bt_host_buf *b) {
    free(b->p);
    b->p = NULL;
    b->bytes = 0;
}

double bt_sum_blocked(const float *p, size_t n, size_t stride) {
    const size_t b = (n + BT_SUM_BLOCKS - 1) / BT_SUM_BLOCKS;
    double total = 0.0;
    for (size_t k0 = 0; k0 < n; k0 += b) {
        const size_t end = k0 + b < n ? k0 + b : n;
        double block = 0.0;
        for (size_t i = k0; i < end; i++) block += p[i * stride];
        total += block;
    }
    return total;
}

double bt_partials_sum(const bt_partials *p, size_t n) { return bt_sum_blocked(p->v, n, 1); }

void bt_partials_free(bt_partials *p) {
    free(p->v);
    p->v = NULL;
    p->cap = 0;
}

int bt_deferrals_add(bt_deferrals *q, int kind, size_t count, const char *backend) {
    if (q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 64;
        bt_deferral *d = realloc(q->d, (size_t)cap * sizeof *d);
        if (!d) {
            fprintf(stderr, "bertrain: %s: out of host memory in a reduction\n", backend);
            exit(1);
        }
        q->d = d;
        q->cap = cap;
    }
    q->d[q->n] = (bt_deferral){kind, q->used, count};
    q->used += count;
    return q->n++;
}

void bt_deferrals_resolve(bt_deferrals *q, const float *partials, double *out) {
    for (int i = 0; i < q->n; i++) {
        const bt_deferral *d = &q->d[i];
        if (d->kind == BT_REDUCE_FINITE || d->kind == BT_DEFER_GATE) {
            out[i] = partials[d->first] == 0.0f ? 1.0 : 0.0;
            continue;
        }
        out[i] = bt_sum_blocked(partials + d->first, d->count, 1);
    }
    q->n = 0;
    q->used = 0;
}

void bt_deferrals_free(bt_deferrals *q) {
    free(q->d);
    q->d = NULL;
    q->n = q->cap = 0;
    q->used = 0;
}

size_t bt_gate_table_len(int n_terms) { return 3 + 3 * (size_t)n_terms; }

/* Deferral i of q when it is of kind `kind`; else one line and exit. */
static const bt_deferral *deferral_of(const bt_deferrals *q, int i, int kind,
                                      const char *backend) {
    if (i < 0 || i >= q->n || q->d[i].kind != kind) {
        fprintf(stderr,
                "bertrain: %s: internal error: step_gate given %d, not a queued reduction of "
                "kind %d\n",
                backend, i, kind);
        exit(1);
    }
    return &q->d[i];
}

int bt_gate_table(const bt_deferrals *q, const bt_step_gate *rule, unsigned long long *tab,
                  double *num, const char *backend) {
    tab[0] = rule->finite < 0 ? ~0ull
                              : deferral_of(q, rule->finite, BT_REDUCE_FINITE, backend)->first;
    const bt_deferral *norm = deferral_of(q, rule->norm_sumsq, BT_REDUCE_SUMSQ, backend);
    tab[1] = norm->first;
    tab[2] = norm->count;
    int k = 0;
    for (int which = 0; which < 2; which++) {
        const int *idx = which ? rule->nsp_loss : rule->mlm_loss;
        const int n = which ? rule->n_nsp : rule->n_mlm;
        for (int j = 0; j < n; j++, k++) {
            const bt_deferral *d = deferral_of(q, idx[j], BT_REDUCE_SUM, backend);
            tab[3 + 3 * k] = d->first;
            tab[4 + 3 * k] = d->count;
            tab[5 + 3 * k] = (unsigned long long)which;
        }
    }
    num[0] = rule->masked;
    num[1] = rule->nsp;
    num[2] = rule->loss_limit;
    return k;
}

size_t bt_gate_first(const bt_deferrals *q, int gate, const char *backend) {
    return deferral_of(q, gate, BT_DEFER_GATE, backend)->first;
}

size_t bt_gate_queue(bt_deferrals *q, int *index, const char *backend) {
    const size_t first = q->used;
    *index = bt_deferrals_add(q, BT_DEFER_GATE, 1, backend);
    bt_deferrals_add(q, BT_REDUCE_SUM, 1, backend); /* the scale: a sum of itself */
    return first;
}
