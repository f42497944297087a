/* Ranks and collectives over MPI (Open MPI). Errors abort the whole job with
 * a message naming the rank and host, so a failure never hangs the others.
 *
 * Every collective is started nonblocking and waited for here: a waiting rank
 * backs off into sleeps instead of spinning, and after distributed.timeout_s
 * it asks every other rank (pings on a private communicator, answered by the
 * ranks that wait too) and aborts the job naming the ranks that did not
 * answer. A collective whose size depends on the model first checks that
 * every rank brings the same size, so a mismatch never overruns a buffer. */
#include "dist.h"

#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/common/half.h"

static int g_rank, g_world = 1, g_local_rank, g_local_size = 1;
static bool g_started; /* dist_init ran: commands that need no ranks never start MPI */
static char g_host[MPI_MAX_PROCESSOR_NAME + 1];
static double g_timeout_s = 600; /* distributed.timeout_s; 0: wait forever */
static MPI_Comm g_diag = MPI_COMM_NULL; /* the time-out's pings and answers */
/* The bf16 wire's all-gathers: a communicator of their own, so that a rank may
 * start one before or after another bucket's all-to-all (MPI orders the
 * collectives of each communicator only); among themselves they start in
 * bucket order (dist_progress). */
static MPI_Comm g_gather = MPI_COMM_NULL;
static long g_seq;                     /* collectives started on this rank */
static long *g_answer;                 /* per rank: the answer sent to its ping */
enum { TAG_PING = 1, TAG_ANSWER = 2, TAG_DATA = 3, EXIT_TIMEOUT = 4 };

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
    /* Open MPI's libnbc (which runs MPI_Iallreduce) takes a binomial tree for any in-place
     * all-reduce, ours included: rank 0 receives and sends the whole buffer log2(W) times
     * in turn. Its reduce-scatter plus all-gather (Rabenseifner's; its ring where the buffer
     * is shorter than the ranks' power of two) instead, unless the user chose
     * (docs/DISTRIBUTED.md). */
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
    /* A process started without mpiexec or srun is an MPI singleton: Open MPI 4 then
     * spawns its own runtime daemon (orted) first, 0.4 s a start here and 5 s where the
     * host's name does not resolve (a fresh Debian 12 chroot). bertrain never spawns
     * processes, so a singleton runs without one; under a launcher this changes nothing. */
    setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
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
    MPI_CHECK(MPI_Comm_size(local, &g_local_size));
    MPI_Comm_free(&local);
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g_diag));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g_gather));
    g_answer = calloc((size_t)g_world, sizeof *g_answer);
    if (!g_answer) MPI_Abort(MPI_COMM_WORLD, 1);
}

void dist_set_timeout(double seconds) { g_timeout_s = seconds; }

static void spare_free(void); /* the ended requests' buffers (below) */

void dist_finalize(void) {
    if (g_started && g_diag != MPI_COMM_NULL) MPI_Comm_free(&g_diag);
    if (g_started && g_gather != MPI_COMM_NULL) MPI_Comm_free(&g_gather);
    free(g_answer);
    g_answer = NULL;
    spare_free();
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
int dist_local_size(void) { return g_local_size; }
const char *dist_hostname(void) {
    if (!g_host[0] && gethostname(g_host, sizeof g_host - 1) != 0) strcpy(g_host, "localhost");
    return g_host;
}
bool dist_is_mpi(void) { return true; }

/* ---- waiting with a back-off and a time-out ---- */

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* How long to sleep between polls after waiting `waited` seconds: spin for
 * the first 2 ms (a collective in flight), then sleep 2% of the wait, at
 * most 1 ms: a rank waiting for a slower one costs little CPU, and one
 * that arrives late is noticed within 1 ms. */
static double backoff_s(double waited) {
    if (waited < 2e-3) return 0;
    double s = 0.02 * waited;
    return s < 1e-3 ? s : 1e-3;
}

/* Answer the other ranks' time-out pings: "I wait in collective #seq". */
static void answer_pings(void) {
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, TAG_PING, g_diag, &flag, &st));
        if (!flag) return;
        long their_seq;
        MPI_CHECK(MPI_Recv(&their_seq, 1, MPI_LONG, st.MPI_SOURCE, TAG_PING, g_diag,
                           MPI_STATUS_IGNORE));
        g_answer[st.MPI_SOURCE] = g_seq;
        MPI_Request r; /* g_answer[src] stays put until it is sent */
        MPI_CHECK(MPI_Isend(&g_answer[st.MPI_SOURCE], 1, MPI_LONG, st.MPI_SOURCE, TAG_ANSWER,
                            g_diag, &r));
        MPI_CHECK(MPI_Request_free(&r));
    }
}

/* Append ", N" (or "N" first) to a rank list. */
static void list_add(char *list, size_t len, int rank) {
    size_t n = strlen(list);
    snprintf(list + n, len - n, "%s%d", n ? ", " : "", rank);
}

/* The time-out passed in collective `what`: ping every rank, give the others
 * `grace` seconds to answer (answering theirs meanwhile), then abort the job
 * naming those that did not. Returns only if req completes meanwhile. */
static void timed_out(MPI_Request *req, const char *what, double waited) {
    const double grace = g_timeout_s < 5 ? g_timeout_s : 5;
    static long ping;
    ping = g_seq;
    for (int r = 0; r < g_world; r++) {
        if (r == g_rank) continue;
        MPI_Request q;
        MPI_CHECK(MPI_Isend(&ping, 1, MPI_LONG, r, TAG_PING, g_diag, &q));
        MPI_CHECK(MPI_Request_free(&q));
    }
    char *answered = calloc((size_t)g_world, 1);
    if (!answered) MPI_Abort(MPI_COMM_WORLD, EXIT_TIMEOUT);
    answered[g_rank] = 1;
    int missing = g_world - 1;
    const double t0 = MPI_Wtime();
    while (missing > 0 && MPI_Wtime() - t0 < grace) {
        int done = 0, flag = 0;
        MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) { /* the late rank arrived after all */
            free(answered);
            return;
        }
        answer_pings();
        MPI_Status st;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, TAG_ANSWER, g_diag, &flag, &st));
        if (flag) {
            long their_seq;
            MPI_CHECK(MPI_Recv(&their_seq, 1, MPI_LONG, st.MPI_SOURCE, TAG_ANSWER, g_diag,
                               MPI_STATUS_IGNORE));
            if (!answered[st.MPI_SOURCE]) missing--;
            answered[st.MPI_SOURCE] = 1;
            continue;
        }
        sleep_s(1e-3);
    }
    char absent[1024] = "", waiting[1024] = "";
    int lowest_waiting = g_world;
    for (int r = 0; r < g_world; r++) {
        list_add(answered[r] ? waiting : absent, sizeof absent, r);
        if (answered[r] && r < lowest_waiting) lowest_waiting = r;
    }
    free(answered);
    if (g_rank == lowest_waiting) /* one line for the job, from the lowest waiting rank */
        fprintf(stderr, "bertrain: rank %d (%s): waited %.0f s in %s (collective #%ld; "
                "distributed.timeout_s %g): rank%s %s did not arrive (no answer in %.0f s: "
                "stopped, hung or busy elsewhere); rank%s %s %s waiting; stopping the job\n",
                g_rank, g_host, waited, what, g_seq, g_timeout_s, strchr(absent, ',') ? "s" : "",
                absent[0] ? absent : "(none: all answered, one is stuck inside the collective)",
                grace, strchr(waiting, ',') ? "s" : "", waiting,
                strchr(waiting, ',') ? "are" : "is");
    else
        sleep_s(grace); /* the lowest waiting rank aborts the job meanwhile */
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, EXIT_TIMEOUT);
}

/* Wait for collective req (started as this rank's collective #g_seq), with
 * the back-off and the time-out. */
static void wait_collective(MPI_Request *req, const char *what) {
    const double t0 = MPI_Wtime();
    for (;;) {
        int done = 0;
        MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        answer_pings();
        double waited = MPI_Wtime() - t0;
        if (g_timeout_s > 0 && waited > g_timeout_s) {
            timed_out(req, what, waited);
            return;
        }
        double s = backoff_s(waited);
        if (s > 0) sleep_s(s);
    }
}

/* Every rank brings the same element count n to collective `what` (else the
 * job stops with exit 2 before any byte moves). */
static void agree_size(size_t n, const char *what) {
    long long mm[2] = {(long long)n, -(long long)n};
    MPI_Request req;
    g_seq++;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, mm, 2, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, &req));
    wait_collective(&req, "a size check");
    if (mm[0] != -mm[1]) {
        fprintf(stderr, "bertrain: rank %d (%s): %s: this rank has %zu elements, other ranks "
                "between %lld and %lld: the ranks run different models or configs\n", g_rank,
                g_host, what, n, -mm[1], mm[0]);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* ---- the collectives ---- */

void dist_allreduce_sum_f64(double *x, int n) {
    if (g_world == 1) return;
    MPI_Request req;
    g_seq++;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req));
    wait_collective(&req, "an all-reduce (sum)");
}

void dist_allreduce_max_f64(double *x, int n) {
    if (g_world == 1) return;
    MPI_Request req;
    g_seq++;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &req));
    wait_collective(&req, "an all-reduce (max)");
}

void dist_allgather_f64(const double *mine, int n, double *all) {
    if (g_world == 1) { /* also before dist_init (tests that call train_run directly) */
        memcpy(all, mine, (size_t)n * sizeof *all);
        return;
    }
    MPI_Request req;
    g_seq++;
    MPI_CHECK(MPI_Iallgather(mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, MPI_COMM_WORLD, &req));
    wait_collective(&req, "an all-gather");
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
    agree_size(len, "an all-gather of strings");
    MPI_Request req;
    g_seq++;
    MPI_CHECK(MPI_Iallgather(buf, (int)len, MPI_CHAR, all, (int)len, MPI_CHAR, MPI_COMM_WORLD,
                             &req));
    wait_collective(&req, "an all-gather of strings");
    free(buf);
}

void dist_broadcast(void *buf, size_t bytes) {
    char *p = buf;
    if (g_world == 1) return;
    agree_size(bytes, "a broadcast from rank 0");
    while (bytes > 0) { /* MPI counts are int */
        int chunk = bytes > (1u << 30) ? (1 << 30) : (int)bytes;
        MPI_Request req;
        g_seq++;
        MPI_CHECK(MPI_Ibcast(p, chunk, MPI_BYTE, 0, MPI_COMM_WORLD, &req));
        wait_collective(&req, "a broadcast from rank 0");
        p += chunk;
        bytes -= (size_t)chunk;
    }
}

void dist_barrier(void) {
    if (g_world == 1) return;
    MPI_Request req;
    g_seq++;
    MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
    wait_collective(&req, "a barrier");
}

struct dist_request {
    MPI_Request req;
    /* dist_isum_bf16: 1 while its all-to-all runs, 2 while its all-gather runs
     * (0: a plain all-reduce); the values, the segments and the buffers */
    int phase;
    float *buf;
    int *count, *start, *recv_count, *recv_start; /* per rank: its segment; what it sends */
    uint16_t *wire, *recv, *sum;                   /* (n), (W x own segment), (own segment) */
    size_t wire_cap, recv_cap, sum_cap;            /* their sizes in bytes */
    dist_request *next;                            /* in g_spare */
};

/* Requests that have ended, kept with their buffers for the next ones: the
 * same buckets come every step, so after the first steps no request
 * allocates (a stack through next). */
static dist_request *g_spare;

static dist_request *request_take(void) {
    dist_request *r = g_spare;
    if (r) {
        g_spare = r->next;
        r->next = NULL;
    } else if (!(r = calloc(1, sizeof *r)) ||
               !(r->count = malloc(4 * (size_t)g_world * sizeof(int)))) {
        fprintf(stderr, "bertrain: rank %d: out of host memory for a gradient all-reduce\n",
                g_rank);
        dist_abort(1);
    }
    r->req = MPI_REQUEST_NULL;
    r->phase = 0;
    return r;
}

static void request_give(dist_request *r) {
    r->next = g_spare;
    g_spare = r;
}

static void spare_free(void) {
    while (g_spare) {
        dist_request *r = g_spare;
        g_spare = r->next;
        free(r->count);
        free(r->wire);
        free(r->recv);
        free(r->sum);
        free(r);
    }
}

/* *p holds at least bytes (grown, never shrunk; *cap its size); false when
 * out of memory. */
static bool hold(uint16_t **p, size_t *cap, size_t bytes) {
    if (*cap >= bytes) return true;
    void *q = realloc(*p, bytes);
    if (!q) return false;
    *p = q;
    *cap = bytes;
    return true;
}

/* A per-rank payload of `bytes` for one collective: within MPI's int counts
 * and the same on every rank. */
static int payload_bytes(size_t bytes, const char *what) {
    if (bytes > INT32_MAX / (size_t)g_world) {
        fprintf(stderr, "bertrain: rank %d: %s of %zu bytes a rank is too large\n", g_rank, what,
                bytes);
        dist_abort(1);
    }
    agree_size(bytes, what);
    return (int)bytes;
}

void dist_alltoall_bytes(const void *send, size_t bytes, void *recv) {
    if (g_world == 1) {
        memcpy(recv, send, bytes);
        return;
    }
    const int n = payload_bytes(bytes, "an all-to-all");
    MPI_Request req;
    g_seq++;
    MPI_CHECK(MPI_Ialltoall(send, n, MPI_BYTE, recv, n, MPI_BYTE, MPI_COMM_WORLD, &req));
    wait_collective(&req, "an all-to-all");
}

void dist_allgather_bytes(const void *mine, size_t bytes, void *all) {
    if (g_world == 1) {
        memcpy(all, mine, bytes);
        return;
    }
    const int n = payload_bytes(bytes, "an all-gather");
    MPI_Request req;
    g_seq++;
    MPI_CHECK(MPI_Iallgather(mine, n, MPI_BYTE, all, n, MPI_BYTE, MPI_COMM_WORLD, &req));
    wait_collective(&req, "an all-gather");
}

/* Rank 0 and rank r move `bytes` (from rank r to 0 when to_root) in pieces
 * within MPI's int counts. */
static void move_bytes(int r, void *buf, size_t bytes, bool to_root, const char *what) {
    char *p = buf;
    while (bytes > 0) {
        const int piece = bytes > (1u << 30) ? (1 << 30) : (int)bytes;
        MPI_Request req;
        const bool receive = (g_rank == 0) == to_root;
        const int peer = g_rank == 0 ? r : 0;
        if (receive)
            MPI_CHECK(MPI_Irecv(p, piece, MPI_BYTE, peer, TAG_DATA, MPI_COMM_WORLD, &req));
        else
            MPI_CHECK(MPI_Isend(p, piece, MPI_BYTE, peer, TAG_DATA, MPI_COMM_WORLD, &req));
        wait_collective(&req, what);
        p += piece;
        bytes -= (size_t)piece;
    }
}

/* Rank r's `bytes` at mine and rank 0's all[r * bytes ..] for every rank r:
 * moved to rank 0 (to_root) or from it, one collective on every rank. */
static void root_exchange(void *mine, void *all, size_t bytes, bool to_root) {
    const char *what = to_root ? "a gather to rank 0" : "a scatter from rank 0";
    if (g_rank == 0) memcpy(to_root ? all : mine, to_root ? mine : all, bytes);
    if (g_world == 1) return;
    agree_size(bytes, what);
    g_seq++; /* one collective on every rank, however many pieces move */
    for (int r = 1; r < g_world; r++) {
        if (g_rank == 0)
            move_bytes(r, (char *)all + (size_t)r * bytes, bytes, to_root, what);
        else if (g_rank == r)
            move_bytes(r, mine, bytes, to_root, what);
    }
}

void dist_gather_bytes(const void *mine, size_t bytes, void *all) {
    root_exchange((void *)mine, all, bytes, true);
}

void dist_scatter_bytes(const void *all, size_t bytes, void *mine) {
    root_exchange(mine, (void *)all, bytes, false);
}

/* A gradient bucket of n floats: within MPI's int counts (else the job
 * stops), and the same n on every rank (agree_size). */
static void check_bucket(size_t n, const char *what) {
    if (n > INT32_MAX) {
        fprintf(stderr, "bertrain: rank %d: gradient bucket of %zu floats is too large\n", g_rank, n);
        dist_abort(1);
    }
    agree_size(n, what);
}

dist_request *dist_iallreduce_sum_f32(float *buf, size_t n) {
    if (g_world == 1) return NULL;
    check_bucket(n, "the gradient all-reduce");
    dist_request *r = request_take();
    g_seq++;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                             &r->req));
    return r;
}

static float bf16_value(uint16_t h) { return bt_f32_from_bits(bf16_to_f32(h)); }

static uint16_t bf16_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return f32_to_bf16(u);
}

dist_request *dist_isum_bf16(float *buf, size_t n) {
    if (g_world == 1) return NULL;
    check_bucket(n, "the gradient all-reduce (bf16 wire)");
    dist_request *r = request_take();
    const size_t W = (size_t)g_world, own = n * (g_rank + 1) / W - n * g_rank / W;
    if (!hold(&r->wire, &r->wire_cap, n * 2 + 2) || !hold(&r->recv, &r->recv_cap, W * own * 2 + 2) ||
        !hold(&r->sum, &r->sum_cap, own * 2 + 2)) {
        fprintf(stderr, "bertrain: rank %d: out of host memory for the bf16 wire\n", g_rank);
        dist_abort(1);
    }
    r->start = r->count + W;
    r->recv_count = r->count + 2 * W;
    r->recv_start = r->count + 3 * W;
    for (size_t j = 0; j < W; j++) {
        r->start[j] = (int)(n * j / W);
        r->count[j] = (int)(n * (j + 1) / W) - r->start[j];
        r->recv_count[j] = (int)own;
        r->recv_start[j] = (int)(j * own);
    }
    for (size_t i = 0; i < n; i++) r->wire[i] = bf16_of(buf[i]);
    r->buf = buf;
    r->phase = 1;
    g_seq++;
    MPI_CHECK(MPI_Ialltoallv(r->wire, r->count, r->start, MPI_UINT16_T, r->recv, r->recv_count,
                             r->recv_start, MPI_UINT16_T, MPI_COMM_WORLD, &r->req));
    return r;
}

/* The bf16 wire's first phase is done: this rank's segment summed in fp32
 * in rank order, rounded once, and its all-gather started. */
static void bf16_gather(dist_request *r) {
    const int own = r->count[g_rank];
    for (int k = 0; k < own; k++) {
        float s = 0.0f;
        for (int j = 0; j < g_world; j++) s += bf16_value(r->recv[(size_t)j * own + k]);
        r->sum[k] = bf16_of(s);
    }
    r->phase = 2;
    g_seq++;
    MPI_CHECK(MPI_Iallgatherv(r->sum, own, MPI_UINT16_T, r->wire, r->count, r->start,
                              MPI_UINT16_T, g_gather, &r->req));
}

bool dist_progress(dist_request *r) {
    if (!r) return true;
    int done = 0;
    if (r->req != MPI_REQUEST_NULL) MPI_CHECK(MPI_Test(&r->req, &done, MPI_STATUS_IGNORE));
    if (done) r->req = MPI_REQUEST_NULL;
    if (done && r->phase == 1) bf16_gather(r);
    return r->phase != 1;
}

void dist_wait(dist_request *r) {
    if (!r) return;
    if (r->req != MPI_REQUEST_NULL) wait_collective(&r->req, "the gradient all-reduce");
    if (r->phase == 1) {
        bf16_gather(r);
        wait_collective(&r->req, "the gradient all-reduce (bf16 wire, all-gather)");
    }
    if (r->phase) {
        size_t n = (size_t)r->start[g_world - 1] + (size_t)r->count[g_world - 1];
        for (size_t i = 0; i < n; i++) r->buf[i] = bf16_value(r->wire[i]);
    }
    request_give(r);
}
