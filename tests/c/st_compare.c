/* Compare the tensors of two safetensors files: prints the relative L2
 * difference over all tensors (and the worst tensor) and exits 0 when it is
 * at most TOL. I32 tensors (a batch's inputs) must be equal exactly.
 * usage: st_compare A.safetensors B.safetensors TOL */
#include "store/safetensors.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: st_compare A.safetensors B.safetensors TOL\n");
        return 2;
    }
    st_file a, b;
    char err[512];
    if (!st_open(&a, argv[1], err, sizeof err) || !st_open(&b, argv[2], err, sizeof err)) {
        fprintf(stderr, "st_compare: %s\n", err);
        return 2;
    }
    double num = 0, den = 0, worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < a.n; i++) {
        const st_entry *ea = &a.entries[i], *eb = st_find(&b, ea->name);
        bool i32 = !strcmp(ea->dtype, "I32");
        if (!eb || (strcmp(ea->dtype, "F32") && !i32) || strcmp(eb->dtype, ea->dtype) ||
            st_numel(ea) != st_numel(eb)) {
            fprintf(stderr, "st_compare: %s differs in presence, dtype or shape\n", ea->name);
            return 1;
        }
        if (i32) {
            if (memcmp(st_data(&a, ea), st_data(&b, eb), st_numel(ea) * 4) != 0) {
                fprintf(stderr, "st_compare: %s (I32) differs\n", ea->name);
                return 1;
            }
            continue;
        }
        const float *x = st_data(&a, ea), *y = st_data(&b, eb);
        double tn = 0, td = 0;
        for (size_t j = 0; j < st_numel(ea); j++) {
            double d = (double)x[j] - y[j];
            tn += d * d;
            td += (double)x[j] * x[j];
        }
        num += tn;
        den += td;
        double rel = sqrt(tn / (td > 0 ? td : 1e-30));
        if (rel > worst) {
            worst = rel;
            worst_name = ea->name;
        }
    }
    if (a.n != b.n) {
        fprintf(stderr, "st_compare: %d vs %d tensors\n", a.n, b.n);
        return 1;
    }
    double rel = sqrt(num / (den > 0 ? den : 1e-30)), tol = atof(argv[3]);
    printf("relative L2 %.3e over %d tensors (worst %s %.3e); tolerance %.1e\n", rel, a.n,
           worst_name, worst, tol);
    st_close(&a);
    st_close(&b);
    return rel <= tol ? 0 : 1;
}
