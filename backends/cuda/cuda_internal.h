/* Internals shared by the CUDA backend's files: the context, error checks and
 * launch helpers. Host code lives in cuda_context.cu (errors, the current
 * device, addresses: used by the others, using none of them), cuda_graph.cu
 * (a step's regions as CUDA Graphs) and cuda_scratch.cu (the scratch
 * buffer) above it, cuda_backend.cu (devices, memory, the table),
 * cuda_ops.cu (kernel launches) and cuda_gemm.cu (cuBLAS); the kernels of
 * kernels/ (kernels_cu/ compiles them). All of it is CUDA C++ compiled by
 * nvcc; the entry points in cuda_backend.h have C linkage. */
#ifndef BT_CUDA_INTERNAL_H
#define BT_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "../backend.h"
}
#include "../common/counting.h"
#include "../common/partials.h"
#include "../common/tickets.h"
#include "../common/staged_gemm.h"
#include "cuda_backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Device memory: one cudaMalloc per bt_buffer; a bt_ptr is the pointer plus
 * the byte offset. */
struct bt_buffer {
    void *ptr;
    size_t bytes;
};

/* gemm_grid's arrays of matrix addresses on the device: each set built
 * once, kept with its host copy, and found again by content (a model makes
 * the same calls every step), so a step uploads none. */
#define CU_GRID_SETS 1024 /* a layer makes about 7 sets, every layer its own */
typedef struct {
    void **host[CU_GRID_SETS]; /* 3 x count addresses: B's, A's, C's (cuBLAS's order) */
    size_t count[CU_GRID_SETS], at[CU_GRID_SETS]; /* matrices; bytes into mem */
    int n;
    void *mem; /* device copies of the sets */
    size_t bytes, used;
    void **scratch; /* the set of the call in flight, built on the host */
    size_t scratch_count;
} cu_grid_sets;

/* Uploads go through a ring of page-locked host buffers, so that the copy
 * is asynchronous and the caller may still reuse its source at once
 * (cu_upload): a slot is written again CU_UPLOAD_SLOTS uploads later, once
 * the copy from it has run (its event). */
#define CU_UPLOAD_SLOTS 4
/* Events of download_async's arrived copies kept for later copies, so a
 * step's buckets create none. */
#define CU_SPARE_EVENTS 16
/* Larger uploads (parameters at start-up, checkpoints) copy blocking instead
 * of pinning that much host memory for the run. */
#define CU_UPLOAD_STAGE_MAX ((size_t)8 << 20)
typedef struct {
    void *host;        /* cudaHostAlloc'd, cap bytes; NULL: none yet */
    size_t cap;
    cudaEvent_t done;  /* recorded after the copy from it (no timing: not a mark) */
    bool pending;      /* done was recorded and may not have been reached */
} cu_upload_slot;

/* ---- a step's work as a CUDA Graph (cuda_graph.cu) ----
 * Between graph_begin and graph_end the backend records each call that
 * issues device work: a kernel launch (its kernel, geometry and arguments),
 * an op that calls cuBLAS or copies (its arguments: the work it issues is
 * not recorded apart), an upload (its destination, and page-locked staging
 * of its own), a download_async (its copy on the second stream, forked from
 * the stream and joined back at the region's end, and an external record of
 * its ticket's event, which the region owns: each launch records it). The
 * first time, the stream is captured as the calls run, and
 * the graph is instantiated and launched at graph_end. Later, the same
 * calls are only compared with the record: a kernel whose arguments
 * changed (a dropout key, a learning rate) gets them in its graph node, an
 * upload's bytes go into its staging, and graph_end launches the graph
 * once. A call that differs otherwise (another kernel, shape or op), or
 * one a graph cannot hold (a host wait, an allocation), breaks the region:
 * what the record holds so far is issued as it was and the rest of the
 * region runs as it comes; the next graph_begin captures it again. */
typedef enum { CU_CALL_KERNEL, CU_CALL_OP, CU_CALL_UPLOAD, CU_CALL_DOWNLOAD } cu_call_kind;
typedef enum { CU_EAGER, CU_CAPTURE, CU_REPLAY } cu_graph_mode;

struct cu_ctx;
struct cu_call;

/* How a recorded kernel's arguments (a std::tuple of its parameter types)
 * are compared, copied, pointed to and launched again: one per kernel
 * signature (cuda_launch.cuh). */
typedef struct {
    bool (*same)(const void *a, const void *b); /* each parameter's bytes equal */
    void *(*clone)(const void *a);
    void (*release)(void *a);
    void (*params)(void *a, void **out);        /* out[i] = &parameter i */
    void (*launch)(struct cu_ctx *c, const struct cu_call *call); /* on the stream, now */
} cu_kernel_kind;

typedef struct cu_call {
    cu_call_kind kind;
    const void *fn;             /* KERNEL: the kernel; OP: the function that issues it */
    const char *name;           /* KERNEL: "bt_..." */
    unsigned grid, block;       /* KERNEL */
    const cu_kernel_kind *kk;   /* KERNEL */
    void *args;                 /* KERNEL: the tuple; OP: a copy of its arguments */
    size_t args_bytes;          /* OP */
    cudaGraphNode_t node;       /* KERNEL: its node in the captured graph */
    void *host, *dst;           /* UPLOAD: page-locked staging, device destination;
                                 * DOWNLOAD: host destination, device source */
    size_t bytes;               /* UPLOAD, DOWNLOAD */
    cudaEvent_t event;          /* DOWNLOAD: its ticket's event, the region's own */
} cu_call;

/* Issue an OP's work again from its recorded arguments. */
typedef void (*cu_op_fn)(bt_backend *be, const void *args);

#define CU_GRAPH_REGIONS 2 /* backend.h's BT_GRAPH_STEP, BT_GRAPH_UPDATE */
typedef struct {
    cu_call *calls;
    int n, cap;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaEvent_t done;       /* recorded after the graph's last launch */
    bool ready;             /* graph and exec hold calls[0..n) */
    int downloads;          /* DOWNLOAD calls among calls[0..n) */
    int failures;           /* breaks since the region last ran as a graph to its end */
    int wait;               /* regions to run as they come before capturing again: after
                             * k > 2 breaks in a row 2^(k-2) - 1, at most 63 (a region
                             * that a profiler's marks break every time is seldom captured;
                             * the first two may be a warm-up's buffers growing) */
} cu_region;

typedef struct {
    bool enabled;           /* BERTRAIN_CUDA_GRAPHS is not 0, nor BERTRAIN_CUDA_SYNC 1 */
    cu_graph_mode mode;
    bt_backend *be;         /* for OP reissues */
    int region, cursor;     /* the region being recorded or replayed; the next call's index */
    int nested;             /* > 0: inside a recorded OP, whose own calls are not recorded */
    bool forked;            /* capturing: the copies stream has joined the capture */
    cu_region regions[CU_GRAPH_REGIONS];
    long captures, replays, breaks; /* since creation */
    long launches_before;   /* count.launches when the capture began */
    bool log;               /* BERTRAIN_CUDA_GRAPHS=log */
} cu_graphs;

/* cuBLASLt, for the GEMMs with an epilogue (cuda_gemm_lt.cu): its handle,
 * a workspace allocated with the context (cudaMalloc cannot run inside a
 * graph's capture), and each shape's algorithm, chosen once. */
#define CU_LT_PLANS 64
typedef struct {
    int epilogue, dtype;           /* cublasLtEpilogue_t; cudaDataType_t of A and B */
    int m, n, k;                   /* backend.h's (row-major) shape */
    unsigned align;                /* the operands' address alignment, bytes (<= 256) */
} cu_lt_key;
typedef struct {
    cu_lt_key key;
    bool ok;                       /* cuBLASLt has an algorithm: algo; else composed */
    cublasLtMatmulAlgo_t algo;
} cu_lt_plan;
typedef struct {
    cublasLtHandle_t handle;       /* NULL: no 16-bit tensor cores, every call composed */
    void *workspace;
    size_t workspace_bytes;
    cu_lt_plan plans[CU_LT_PLANS];
    int n_plans, next_evict;
    bool told;                     /* the fallback's one line was printed */
} cu_lt;

typedef struct cu_ctx {
    int device;              /* CUDA ordinal */
    cudaStream_t stream;     /* the one stream: every op is issued on it, in order */
    cublasHandle_t blas;     /* bound to stream */
    bool tf32;               /* GEMMs in TF32 (bt_backend_options.tf32) */
    void *scratch;           /* reduction partials, flags, overlapping copies; grown on demand */
    size_t scratch_bytes;
    bt_stage stage[4];       /* gemm16: A and B converted to 16 bits (or rounded), a 16-bit C
                              * widened (no tensor cores); gemm16_bias_grad's bias gradient;
                              * grown on demand */
    cu_lt lt;                /* the GEMMs with an epilogue (cuda_gemm_lt.cu) */
    cu_grid_sets grid_sets;  /* gemm_grid: the matrices' addresses */
    bool sync_each;          /* synchronise after every launch and cuBLAS call (debugging) */
    bt_counters count;       /* what the profiler reads (launches: kernels and cuBLAS calls) */
    cudaEvent_t *marks;      /* the profiler's marks since marks_reset (events, reused) */
    int n_marks, cap_marks;
    bt_partials partials;    /* host copy of the reduction partials where no page-locked memory */
    float *fetch_host;       /* page-locked: where the reductions' partials are read to */
    size_t fetch_cap;        /* floats */
    bool fetch_refused;      /* the driver granted no page-locked fetch_host: partials instead */
    float *defer_mem;        /* partials of the deferred reductions, grown on demand */
    size_t defer_cap;        /* floats */
    bt_deferrals defer;      /* the reductions queued since the last fetch */
    void *multi_mem;         /* multi-tensor optimizers: span table, partials, trust ratios */
    size_t multi_bytes;
    bt_host_buf multi_host;  /* the span table built on the host */
    void *gate_mem;          /* step_gate: its table and numbers, grown on demand */
    size_t gate_bytes;
    bt_host_buf gate_host;   /* the same built on the host */
    bt_device_info info;     /* static part; free_mem is queried by info() */
    cu_upload_slot uploads[CU_UPLOAD_SLOTS]; /* the page-locked staging of uploads */
    int upload_next;         /* the slot the next upload takes */
    cudaStream_t copies;     /* download_async's copies, ordered after the stream by events */
    cudaEvent_t issued;      /* recorded on stream at each download_async, waited by copies */
    cudaEvent_t joined;      /* recorded on copies at a capture's end, waited by stream */
    bt_tickets reads;        /* download_async's copies not yet seen to arrive (their events) */
    cudaEvent_t spare_events[CU_SPARE_EVENTS]; /* arrived copies' events, for the next ones */
    int n_spare_events;
    cu_graphs graphs;        /* the step's graphs */
} cu_ctx;

/* Print "bertrain: cuda: CALL failed: NAME: description at FILE:LINE" and
 * exit: a failed launch or transfer leaves device memory undefined. */
[[noreturn]] void cu_fatal(const char *call, cudaError_t err, const char *file, int line);
[[noreturn]] void cublas_fatal(const char *call, cublasStatus_t st, const char *file, int line);

/* The symbolic name of a cuBLAS status ("CUBLAS_STATUS_INVALID_VALUE"). */
const char *cublas_status_name(cublasStatus_t st);

/* "cudaFoo(a, b)" -> the length of "cudaFoo", for messages about a call. */
int cu_call_name_len(const char *call);

/* Make `device` current on this thread unless the runtime says it already is. */
cudaError_t cu_use_device(int device);

/* kernel<<<grid, block, 0, stream>>>(args...): every launch goes through this
 * one macro so that the emulated device (tests/cuda_emu), compiled by g++,
 * takes the same launches; its cuda_runtime.h defines CUEMU_LAUNCH. */
#ifdef CUEMU_LAUNCH
#define BT_KERNEL_LAUNCH(kernel, grid, block, stream, ...) \
    CUEMU_LAUNCH(kernel, grid, block, 0, stream, __VA_ARGS__)
#else
#define BT_KERNEL_LAUNCH(kernel, grid, block, stream, ...) \
    kernel<<<grid, block, 0, stream>>>(__VA_ARGS__)
#endif

/* The GPU code this build holds, "sm_80 sm_90 compute_90" (configure's
 * reading of CUDA_ARCH, BT_CUDA_ARCH_LIST), for the line a GPU without code
 * gets; the emulated device says what its binary poses as built for. */
#if defined(CUEMU_BUILT_FOR)
#define BT_CUDA_BUILT_FOR CUEMU_BUILT_FOR()
#elif defined(BT_CUDA_ARCH_LIST)
#define BT_CUDA_BUILT_FOR BT_CUDA_ARCH_LIST
#else
#define BT_CUDA_BUILT_FOR "(unknown: configure did not say)"
#endif

/* Check a CUDA runtime call. */
#define CU_CHECK(call)                                                       \
    do {                                                                     \
        cudaError_t cu_err_ = (call);                                        \
        if (cu_err_ != cudaSuccess) cu_fatal(#call, cu_err_, __FILE__, __LINE__); \
    } while (0)

/* Check a cuBLAS call. */
#define CUBLAS_CHECK(call)                                                   \
    do {                                                                     \
        cublasStatus_t cb_st_ = (call);                                      \
        if (cb_st_ != CUBLAS_STATUS_SUCCESS) cublas_fatal(#call, cb_st_, __FILE__, __LINE__); \
    } while (0)

/* With BERTRAIN_CUDA_SYNC=1 (c->sync_each), wait for the work just issued and
 * check it, so that a fault inside a kernel or a GEMM is reported at the
 * launch's own file:line instead of at the next synchronisation. */
#define CU_SYNC_IF_DEBUG(c)                                                  \
    do {                                                                     \
        if ((c)->sync_each) CU_CHECK(cudaStreamSynchronize((c)->stream));    \
    } while (0)

/* Make the backend's device current on this thread and return its context.
 * Every op starts with it, so backends on different devices can share a
 * thread; it asks the runtime rather than trusting a cache, since another
 * library (a CUDA-aware MPI) may have called cudaSetDevice in between. */
cu_ctx *cu(bt_backend *be);

/* A device buffer of at least `bytes` (the context's scratch, grown as
 * needed; growing frees the old one, which cudaFree orders after the work
 * that uses it; cuda_scratch.cu). */
void *cu_scratch(cu_ctx *c, size_t bytes);

/* Copy `bytes` from device src to host dst on the copies stream once the
 * stream has reached this point, then record `done` there (external: as a
 * graph's event record node, when capturing). Returns the first failure. */
cudaError_t cu_copy_to_host_after(cu_ctx *c, void *dst, const void *src, size_t bytes,
                                  cudaEvent_t done, bool external);

/* Device address of p for elements of esz bytes (exits when the offset is not
 * a multiple of esz). */
void *cu_addr(bt_ptr p, size_t esz);
static inline float *cu_f32(bt_ptr p) { return (float *)cu_addr(p, 4); }
static inline int *cu_i32(bt_ptr p) { return (int *)cu_addr(p, 4); }

/* ---- cuda_ops.cu ---- */
/* Fill the op slots that launch kernels into a table (with the two below). */
void cu_fill_ops(bt_backend *be);
/* Launch bt_fill on one float of the context's scratch buffer (allocated if
 * there is none) and return the launch's error without exiting: creation's
 * check that this build has code for the device (cudaErrorNoKernelImageForDevice
 * when not). Counted nowhere; nothing waits for it. */
cudaError_t cu_probe_launch(cu_ctx *c);

/* ---- cuda_reduce.cu ---- */
/* Fill sum, sumsq, all_finite, reduce_defer, reduce_fetch and step_gate. */
void cu_fill_reduce_ops(bt_backend *be);
/* Release the deferred reductions' buffers (at destroy). */
void cu_reduce_release(cu_ctx *c);
/* The multi-tensor optimizers' gate argument for `gate` (step_gate's index,
 * or -1: none): the gate's two floats, or NULL. */
const float *cu_gate_arg(cu_ctx *c, int gate);

/* ---- cuda_optim.cu ---- */
/* Fill adamw_step, lamb_update, adamw_multi and lamb_multi. */
void cu_fill_optim_ops(bt_backend *be);

/* Fill the fused ops (cuda_fused.cu) into a table. */
void cu_fill_fused_ops(bt_backend *be);
/* Fill attention_fwd and attention_bwd (cuda_attention.cu). */
void cu_fill_attention_ops(bt_backend *be);
/* Release the multi-tensor optimizers' buffers (at destroy). */
void cu_optim_release(cu_ctx *c);

/* ---- cuda_graph.cu ---- */
/* Fill graph_begin and graph_end; read BERTRAIN_CUDA_GRAPHS. */
void cu_fill_graph_ops(bt_backend *be);
/* Release the regions' graphs and records (at destroy). */
void cu_graph_release(cu_ctx *c);
/* Before work a graph cannot hold (a host wait, an allocation, a copy
 * from pageable memory): ends the region's recording (see above). */
void cu_graph_break(cu_ctx *c, const char *why);
/* The launch of a kernel inside a region: false outside one (or inside a
 * recorded OP), and the caller launches it; true when it was recorded
 * (and launched, capturing) or matched (replaying). */
bool cu_graph_kernel(cu_ctx *c, const char *name, const void *fn, unsigned grid, unsigned block,
                     const cu_kernel_kind *kk, void *args);
/* An op that issues cuBLAS calls or copies: fn(be, args) runs it, now or
 * (replaying, when args are the recorded ones) not at all. */
void cu_graph_op(bt_backend *be, cu_op_fn fn, const void *args, size_t bytes);
/* An upload of `bytes` from host src to device dst inside a region, through
 * staging of its own: true when done so (the caller does nothing more). */
bool cu_graph_upload(cu_ctx *c, void *dst, const void *src, size_t bytes);
/* A download_async inside a region: its ticket when recorded (capturing)
 * or matched (replaying), and the caller does nothing more; 0 otherwise. */
long cu_graph_download(cu_ctx *c, void *dst, const void *src, size_t bytes);
/* Whether a download's event belongs to a region's record (not to the
 * spare events of download_async). */
bool cu_graph_owns_event(const cu_ctx *c, cudaEvent_t ev);


/* ---- cuda_gemm.cu ---- */
/* The gemm op (cuBLAS). */
void cu_gemm(bt_backend *be, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
             bt_ptr a, int lda, long stride_a, bt_ptr b, int ldb, long stride_b, float beta,
             bt_ptr c, int ldc, long stride_c, int batch);
/* gemm and gemm16 over a two-level grid (backend.h's gemm_grid): one
 * cublasGemmBatchedEx with arrays of the matrices' addresses. */
void cu_gemm_grid(bt_backend *be, bt_dtype dt, unsigned stored16, bool trans_a, bool trans_b,
                  int m, int n, int k, float alpha, bt_ptr a, int lda, bt_ptr b, int ldb,
                  float beta, bt_ptr c, int ldc, const bt_gemm_grid *grid);

/* Free gemm_grid's address sets. */
void cu_grid_release(cu_ctx *c);

/* The operand's span in dt for cuBLAS's 16-bit inputs: src itself where it is
 * stored in dt (half), else converted into staging area i (the same leading
 * dimension and batch stride, from element 0). */
const void *cu_operand16(bt_backend *be, int i, bt_ptr src, size_t span, bt_dtype dt, bool half);

/* ---- cuda_gemm_lt.cu ---- */
/* Create the context's cuBLASLt handle and workspace where the device has
 * 16-bit tensor cores (cuBLASLt's status; CUBLAS_STATUS_SUCCESS, doing
 * nothing, where it has not), and release them at destroy. */
cublasStatus_t cu_lt_create(cu_ctx *c, const cudaDeviceProp *prop);
void cu_lt_release(cu_ctx *c);
/* backend.h's gemm16_bias and gemm16_bias_grad on cuBLASLt's BIAS and
 * BGRADB epilogues (composed where cuBLASLt has no algorithm for one). */
void cu_gemm16_bias(bt_backend *be, bt_dtype dt, unsigned stored16, int m, int n, int k, bt_ptr a,
                    bt_ptr b, bt_ptr bias, bt_ptr bias16, bt_ptr c16);
void cu_gemm16_bias_grad(bt_backend *be, bt_dtype dt, unsigned stored16, int m, int n, int k,
                         bt_ptr a, bt_ptr b, bt_ptr c, bt_ptr dbias);

/* gemm with 16-bit operands on tensor cores (backend.h's gemm16). */
void cu_gemm16(bt_backend *be, bt_dtype dt, unsigned stored16, bool trans_a, bool trans_b, int m, int n, int k,
               float alpha, bt_ptr a, int lda, long stride_a, bt_ptr b, int ldb, long stride_b,
               float beta, bt_ptr c, int ldc, long stride_c, int batch);

#endif
