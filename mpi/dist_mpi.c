/* Ranks and collectives over MPI (Open MPI). Errors abort the whole job with
 * a message naming the rank and host, so a failure never hangs the others. */
#include "dist.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_rank, g_world = 1, g_local_rank;
static bool g_started; /* dist_init ran: commands that need no ranks never start MPI */
static char g_host[MPI_MAX_PROCESSOR_NAME + 1];

#define MPI_CHECK(call)                                                                      \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != MPI_SUCCESS) {                                                            \
            char msg_[MPI_MAX_ERROR_STRING];                                                 \
            int len_ = 0;                                                                    \
            MPI_Error_string(rc_, msg_, &len_);                                              \
            fprintf(stderr, "bertrain: rank %d (%s): %s failed at %s:%d: %s\n", g_rank,      \
                    g_host, #call, __FILE__, __LINE__, msg_);                                \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                    \
        }                                                                                    \
    } while (0)

void dist_init(int *argc, char ***argv) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    g_started = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &g_world));
    int len = 0;
    MPI_CHECK(MPI_Get_processor_name(g_host, &len));
    g_host[len] = 0;
    MPI_Comm local;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL,
                                  &local));
    MPI_CHECK(MPI_Comm_rank(local, &g_local_rank));
    MPI_Comm_free(&local);
}

void dist_finalize(void) {
    if (g_started) MPI_Finalize();
    g_started = false;
}

void dist_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    if (g_world > 1) MPI_Abort(MPI_COMM_WORLD, code);
    dist_finalize();
    exit(code);
}

int dist_rank(void) { return g_rank; }
int dist_world(void) { return g_world; }
int dist_local_rank(void) { return g_local_rank; }
const char *dist_hostname(void) {
    if (!g_host[0] && gethostname(g_host, sizeof g_host - 1) != 0) strcpy(g_host, "localhost");
    return g_host;
}
bool dist_is_mpi(void) { return true; }

void dist_allreduce_sum_f64(double *x, int n) {
    if (g_world > 1) MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
}

void dist_allreduce_max_f64(double *x, int n) {
    if (g_world > 1) MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
}

void dist_allgather_f64(const double *mine, int n, double *all) {
    if (g_world == 1) { /* also before dist_init (tests that call train_run directly) */
        memcpy(all, mine, (size_t)n * sizeof *all);
        return;
    }
    MPI_CHECK(MPI_Allgather(mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, MPI_COMM_WORLD));
}

void dist_allgather_str(const char *mine, size_t len, char *all) {
    char *buf = calloc(1, len);
    if (!buf) dist_abort(1);
    strncpy(buf, mine, len - 1);
    if (g_world == 1) {
        memcpy(all, buf, len);
        free(buf);
        return;
    }
    MPI_CHECK(MPI_Allgather(buf, (int)len, MPI_CHAR, all, (int)len, MPI_CHAR, MPI_COMM_WORLD));
    free(buf);
}

void dist_broadcast(void *buf, size_t bytes) {
    char *p = buf;
    if (g_world == 1) return;
    while (bytes > 0) { /* MPI counts are int */
        int chunk = bytes > (1u << 30) ? (1 << 30) : (int)bytes;
        MPI_CHECK(MPI_Bcast(p, chunk, MPI_BYTE, 0, MPI_COMM_WORLD));
        p += chunk;
        bytes -= (size_t)chunk;
    }
}

void dist_barrier(void) {
    if (g_world > 1) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

struct dist_request {
    MPI_Request req;
};

dist_request *dist_iallreduce_sum_f32(float *buf, size_t n) {
    if (g_world == 1) return NULL;
    if (n > INT32_MAX) {
        fprintf(stderr, "bertrain: rank %d: gradient bucket of %zu floats is too large\n", g_rank, n);
        dist_abort(1);
    }
    dist_request *r = malloc(sizeof *r);
    if (!r) dist_abort(1);
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                             &r->req));
    return r;
}

void dist_progress(dist_request *r) {
    if (!r) return;
    int done = 0;
    MPI_CHECK(MPI_Test(&r->req, &done, MPI_STATUS_IGNORE));
    if (done) r->req = MPI_REQUEST_NULL;
}

void dist_wait(dist_request *r) {
    if (!r) return;
    if (r->req != MPI_REQUEST_NULL) MPI_CHECK(MPI_Wait(&r->req, MPI_STATUS_IGNORE));
    free(r);
}
