/* The dist layer called directly under mpiexec, for tests/mpi-agree.sh.
 *   test_dist sizes   rank r starts a gradient all-reduce of 100 + r floats:
 *                     the job must stop (exit 2) before it runs, so
 *                     "reduced" is never printed. */
#include "mpi/dist.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    dist_init(&argc, &argv);
    if (argc < 2 || strcmp(argv[1], "sizes") != 0) {
        fprintf(stderr, "usage: test_dist sizes (under mpiexec -n 2)\n");
        dist_finalize();
        return 2;
    }
    float buf[128];
    for (int i = 0; i < 128; i++) buf[i] = (float)i;
    dist_request *r = dist_iallreduce_sum_f32(buf, 100 + (size_t)dist_rank());
    dist_wait(r);
    printf("rank %d: reduced (%g)\n", dist_rank(), (double)buf[99]);
    dist_finalize();
    return 0;
}
