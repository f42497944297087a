/* The host side of device reductions (partials.h). */
#include "partials.h"

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

double bt_partials_sum(const bt_partials *p, size_t n) {
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total += p->v[i];
    return total;
}

void bt_partials_free(bt_partials *p) {
    free(p->v);
    p->v = NULL;
    p->cap = 0;
}
