/* Wall-clock marks (counting.h). */
#define _POSIX_C_SOURCE 200809L
#include "counting.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int bt_wall_mark(bt_wall_marks *m, const char *backend) {
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 256;
        double *t = realloc(m->t, (size_t)cap * sizeof *t);
        if (!t) {
            fprintf(stderr, "bertrain: %s: out of host memory for profiling marks\n", backend);
            exit(1);
        }
        m->t = t;
        m->cap = cap;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    m->t[m->n] = ts.tv_sec + ts.tv_nsec * 1e-9;
    return m->n++;
}

double bt_wall_mark_seconds(const bt_wall_marks *m, int a, int b) {
    if (a < 0 || b < 0 || a >= m->n || b >= m->n) return 0.0;
    return m->t[b] - m->t[a];
}

void bt_wall_marks_free(bt_wall_marks *m) {
    free(m->t);
    m->t = NULL;
    m->n = m->cap = 0;
}
