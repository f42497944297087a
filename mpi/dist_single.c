/* One process: every collective is the identity. */
#include "dist.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void dist_init(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
}
void dist_finalize(void) {}
void dist_set_timeout(double seconds) { (void)seconds; }
void dist_abort(int code) { exit(code); }
int dist_rank(void) { return 0; }
int dist_world(void) { return 1; }
int dist_local_rank(void) { return 0; }
int dist_local_size(void) { return 1; }
bool dist_is_mpi(void) { return false; }

const char *dist_hostname(void) {
    static char name[256];
    if (!name[0] && gethostname(name, sizeof name - 1) != 0) strcpy(name, "localhost");
    return name;
}

void dist_allreduce_sum_f64(double *x, int n) {
    (void)x;
    (void)n;
}
void dist_allreduce_max_f64(double *x, int n) {
    (void)x;
    (void)n;
}
void dist_allgather_f64(const double *mine, int n, double *all) {
    memcpy(all, mine, (size_t)n * sizeof *all);
}
void dist_allgather_str(const char *mine, size_t len, char *all) {
    memset(all, 0, len);
    strncpy(all, mine, len - 1);
}
void dist_broadcast(void *buf, size_t bytes) {
    (void)buf;
    (void)bytes;
}
void dist_barrier(void) {}
void dist_alltoall_bytes(const void *send, size_t bytes, void *recv) {
    memcpy(recv, send, bytes);
}
void dist_allgather_bytes(const void *mine, size_t bytes, void *all) { memcpy(all, mine, bytes); }
void dist_gather_bytes(const void *mine, size_t bytes, void *all) { memcpy(all, mine, bytes); }
void dist_scatter_bytes(const void *all, size_t bytes, void *mine) { memcpy(mine, all, bytes); }
dist_request *dist_iallreduce_sum_f32(float *buf, size_t n) {
    (void)buf;
    (void)n;
    return NULL;
}
dist_request *dist_isum_bf16(float *buf, size_t n) {
    (void)buf;
    (void)n;
    return NULL;
}
bool dist_progress(dist_request *r) {
    (void)r;
    return true;
}
void dist_wait(dist_request *r) { (void)r; }
