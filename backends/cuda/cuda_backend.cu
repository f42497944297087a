/* CUDA backend: device selection and listing, the context with its one stream
 * and cuBLAS handle, the memory ops and the error reporting. Kernel launches
 * are in cuda_ops.cu, GEMM in cuda_gemm.cu, the kernels in kernels/. */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

/* ================= errors ================= */

/* Creation-time checks fail the creation with a message instead of exiting. */
#define CU_TRY(call)                                                                   \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) {                                                       \
            snprintf(err, errlen, "cuda: %.*s failed: %s: %s at %s:%d",                \
                     cu_call_name_len(#call), #call, cudaGetErrorName(e_),                \
                     cudaGetErrorString(e_), __FILE__, __LINE__);                      \
            (void)cudaGetLastError();                                                  \
            goto fail;                                                                 \
        }                                                                              \
    } while (0)
#define CUBLAS_TRY(call)                                                               \
    do {                                                                               \
        cublasStatus_t s_ = (call);                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                             \
            snprintf(err, errlen, "cuda: %.*s failed: %s (%d) at %s:%d",               \
                     cu_call_name_len(#call), #call, cublas_status_name(s_), (int)s_,     \
                     __FILE__, __LINE__);                                              \
            goto fail;                                                                 \
        }                                                                              \
    } while (0)

/* ================= devices ================= */

/* The device count, or false with the reason in err; *no_device when the
 * reason is that there is no usable device (no driver, a stub driver, no GPU). */
static bool device_count(int *count, char *err, size_t errlen, bool *no_device) {
    *count = 0;
    cudaError_t e = cudaGetDeviceCount(count);
    (void)cudaGetLastError(); /* not sticky, but leave nothing behind */
    if (e == cudaSuccess && *count > 0) return true;
    if (e == cudaSuccess || e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
        e == cudaErrorStubLibrary) {
        snprintf(err, errlen, "no CUDA device (cudaGetDeviceCount: %s)",
                 e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
        if (no_device) *no_device = true;
    } else {
        snprintf(err, errlen, "cuda: cudaGetDeviceCount failed: %s: %s", cudaGetErrorName(e),
                 cudaGetErrorString(e));
    }
    *count = 0;
    return false;
}

void bt_cuda_list_devices(FILE *out) {
    int count;
    char err[256];
    if (!device_count(&count, err, sizeof err, NULL)) {
        fprintf(out, "cuda: %s\n", err);
        return;
    }
    for (int d = 0; d < count; d++) {
        cudaDeviceProp p;
        cudaError_t e = cudaGetDeviceProperties(&p, d);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            fprintf(out, "cuda:%d: cudaGetDeviceProperties failed: %s\n", d, cudaGetErrorString(e));
            continue;
        }
        fprintf(out, "cuda:%d: %s, compute capability %d.%d, %d SMs, %.1f GB memory, PCI %04x:%02x:%02x\n",
                d, p.name, p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem / 1e9,
                (unsigned)p.pciDomainID, (unsigned)p.pciBusID, (unsigned)p.pciDeviceID);
    }
}

/* ================= memory ================= */

static bt_buffer *cu_alloc(bt_backend *be, size_t bytes) {
    cu_graph_break(cu(be), "alloc");
    if (bytes == 0) bytes = 4;
    bt_buffer *b = (bt_buffer *)malloc(sizeof *b);
    if (!b) return NULL;
    b->bytes = bytes;
    b->ptr = NULL;
    cudaError_t e = cudaMalloc(&b->ptr, bytes);
    if (e != cudaSuccess) { /* out of memory (or an absurd size): NULL, never an abort */
        (void)cudaGetLastError();
        if (e != cudaErrorMemoryAllocation)
            fprintf(stderr, "bertrain: cuda: cudaMalloc(%zu) failed: %s: %s\n", bytes,
                    cudaGetErrorName(e), cudaGetErrorString(e));
        free(b);
        return NULL;
    }
    bt_count_alloc(&((cu_ctx *)be->ctx)->count, bytes);
    return b;
}

static void cu_free(bt_backend *be, bt_buffer *buf) {
    if (!buf) return;
    cu_graph_break(cu(be), "free");
    bt_count_free(&cu(be)->count, buf->bytes);
    CU_CHECK(cudaFree(buf->ptr)); /* waits for the work that uses it */
    free(buf);
}

/* The next upload slot with room for `bytes`, its last copy done (waiting
 * for it, counted, only if it has not run); NULL where no page-locked memory
 * can be had. */
static cu_upload_slot *upload_slot(cu_ctx *c, size_t bytes) {
    cu_upload_slot *s = &c->uploads[c->upload_next];
    c->upload_next = (c->upload_next + 1) % CU_UPLOAD_SLOTS;
    if (!s->done) CU_CHECK(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming));
    if (s->pending) {
        const cudaError_t q = cudaEventQuery(s->done);
        if (q == cudaErrorNotReady) {
            (void)cudaGetLastError(); /* not an error: the next launch's check must not see it */
            c->count.host_syncs++;
            CU_CHECK(cudaEventSynchronize(s->done));
        } else {
            CU_CHECK(q);
        }
        s->pending = false;
    }
    if (s->cap < bytes) {
        if (s->host) CU_CHECK(cudaFreeHost(s->host));
        s->cap = bytes > 65536 ? bytes : 65536;
        if (cudaHostAlloc(&s->host, s->cap, cudaHostAllocDefault) != cudaSuccess) {
            (void)cudaGetLastError(); /* a limit on page-locked memory: copy blocking */
            s->host = NULL;
            s->cap = 0;
            return NULL;
        }
    }
    return s;
}

/* The caller may reuse src at once (the contract), and nothing waits: src is
 * copied into a page-locked slot, from which the device copies it on the
 * stream in order with the ops. Beyond CU_UPLOAD_STAGE_MAX, or where no
 * page-locked memory can be had, a blocking copy (from pageable memory
 * cudaMemcpyAsync "might be synchronous", which is no promise). */
static void cu_upload(bt_backend *be, bt_ptr dst, const void *src, size_t bytes) {
    if (!bytes) return;
    cu_ctx *c = cu(be);
    char *d = (char *)dst.buf->ptr + dst.off;
    if (cu_graph_upload(c, d, src, bytes)) return;
    cu_graph_break(c, "upload"); /* inside a recorded op */
    cu_upload_slot *s = bytes <= CU_UPLOAD_STAGE_MAX ? upload_slot(c, bytes) : NULL;
    if (!s) {
        c->count.host_writes++;
        CU_CHECK(cudaMemcpyAsync(d, src, bytes, cudaMemcpyHostToDevice, c->stream));
        CU_CHECK(cudaStreamSynchronize(c->stream));
        return;
    }
    memcpy(s->host, src, bytes);
    CU_CHECK(cudaMemcpyAsync(d, s->host, bytes, cudaMemcpyHostToDevice, c->stream));
    CU_CHECK(cudaEventRecord(s->done, c->stream));
    s->pending = true;
}

static void cu_download(bt_backend *be, void *dst, bt_ptr src, size_t bytes) {
    if (!bytes) return;
    cu_ctx *c = cu(be);
    cu_graph_break(c, "download");
    c->count.host_reads++;
    CU_CHECK(cudaMemcpyAsync(dst, (char *)src.buf->ptr + src.off, bytes, cudaMemcpyDeviceToHost,
                             c->stream));
    CU_CHECK(cudaStreamSynchronize(c->stream));
}

/* host_alloc's header before the bytes it returns: whether they are
 * page-locked, so that host_free frees them as they were made; 64 bytes keep
 * the caller's bytes 64-byte aligned. */
#define CU_HOST_HEADER 64

static void *cu_host_alloc(bt_backend *be, size_t bytes) {
    (void)cu(be); /* the device current */
    char *h = NULL;
    if (cudaHostAlloc((void **)&h, bytes + CU_HOST_HEADER, cudaHostAllocDefault) == cudaSuccess) {
        h[0] = 1;
    } else { /* a limit on page-locked memory: ordinary memory, copies still right */
        (void)cudaGetLastError();
        if (!(h = (char *)malloc(bytes + CU_HOST_HEADER))) return NULL;
        h[0] = 0;
    }
    return h + CU_HOST_HEADER;
}

/* Both streams finish first: a copy may still use p. */
static void cu_host_free(bt_backend *be, void *p) {
    if (!p) return;
    cu_ctx *c = cu(be);
    cu_graph_break(c, "host_free");
    CU_CHECK(cudaStreamSynchronize(c->stream));
    if (c->copies) CU_CHECK(cudaStreamSynchronize(c->copies));
    char *h = (char *)p - CU_HOST_HEADER;
    if (h[0])
        CU_CHECK(cudaFreeHost(h));
    else
        free(h);
}

/* The copy runs on the second stream once the stream has reached this
 * point (an event), so the ops issued after it do not wait for it; its own
 * event, recorded after it, is the ticket's. Inside a region the copy is
 * part of the graph (cuda_graph.cu). */
static long cu_download_async(bt_backend *be, void *dst, bt_ptr src, size_t bytes) {
    cu_ctx *c = cu(be);
    const char *from = (const char *)src.buf->ptr + src.off;
    const long recorded = cu_graph_download(c, dst, from, bytes);
    if (recorded) return recorded;
    cu_graph_break(c, "download_async"); /* inside a recorded op */
    cudaEvent_t done;
    if (c->n_spare_events)
        done = c->spare_events[--c->n_spare_events];
    else
        CU_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CU_CHECK(cu_copy_to_host_after(c, dst, from, bytes, done, false));
    return bt_tickets_issue(&c->reads, (void *)done, "cuda");
}

/* Inside a region the copies issued in it have not been launched (their
 * events would still answer for the last launch): without wait they count
 * as not arrived, and nothing is queried; a wait ends the region first. */
static bool cu_downloads_done(bt_backend *be, long ticket, bool wait) {
    cu_ctx *c = cu(be);
    if (c->graphs.mode != CU_EAGER && !wait) return c->reads.arrived >= ticket;
    cu_graph_break(c, "downloads_done");
    for (void *ev; c->reads.arrived < ticket && (ev = bt_tickets_oldest(&c->reads)) != NULL;) {
        const cudaError_t q = cudaEventQuery((cudaEvent_t)ev);
        if (q == cudaErrorNotReady) {
            (void)cudaGetLastError(); /* not an error: the next launch's check must not see it */
            if (!wait) return false;
            c->count.host_syncs++;
            CU_CHECK(cudaEventSynchronize((cudaEvent_t)ev));
        } else {
            CU_CHECK(q);
        }
        const cudaEvent_t arrived = (cudaEvent_t)bt_tickets_pop(&c->reads);
        if (cu_graph_owns_event(c, arrived))
            continue; /* the region's record keeps it */
        if (c->n_spare_events < CU_SPARE_EVENTS)
            c->spare_events[c->n_spare_events++] = arrived; /* for a later copy */
        else
            CU_CHECK(cudaEventDestroy(arrived));
    }
    return c->reads.arrived >= ticket;
}

/* On the stream, in order with the ops: from page-locked src the device
 * reads it when the copy runs and nothing waits; from pageable src CUDA
 * stages it before returning (which may wait). */
static void cu_upload_async(bt_backend *be, bt_ptr dst, const void *src, size_t bytes) {
    if (!bytes) return;
    cu_ctx *c = cu(be);
    char *d = (char *)dst.buf->ptr + dst.off;
    if (cu_graph_upload(c, d, src, bytes)) return;
    cu_graph_break(c, "upload_async"); /* inside a recorded op */
    CU_CHECK(cudaMemcpyAsync(d, src, bytes, cudaMemcpyHostToDevice, c->stream));
}

/* Like memmove: overlapping ranges of one buffer go through the scratch
 * buffer (cudaMemcpy* requires disjoint ranges). */
static void copy_issue(bt_backend *be, bt_ptr dst, bt_ptr src, size_t bytes);

/* copy's arguments, as a graph region records them */
typedef struct {
    bt_ptr dst, src;
    size_t bytes;
} copy_call;

static void copy_again(bt_backend *be, const void *p) {
    const copy_call *k = (const copy_call *)p;
    copy_issue(be, k->dst, k->src, k->bytes);
}

static void cu_copy(bt_backend *be, bt_ptr dst, bt_ptr src, size_t bytes) {
    const copy_call k = {dst, src, bytes};
    cu_graph_op(be, copy_again, &k, sizeof k);
}

static void copy_issue(bt_backend *be, bt_ptr dst, bt_ptr src, size_t bytes) {
    if (!bytes || (dst.buf == src.buf && dst.off == src.off)) return;
    cu_ctx *c = cu(be);
    char *d = (char *)dst.buf->ptr + dst.off;
    const char *s = (const char *)src.buf->ptr + src.off;
    bool overlap = dst.buf == src.buf && dst.off < src.off + bytes && src.off < dst.off + bytes;
    if (!overlap) {
        CU_CHECK(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, c->stream));
        return;
    }
    void *tmp = cu_scratch(c, bytes);
    CU_CHECK(cudaMemcpyAsync(tmp, s, bytes, cudaMemcpyDeviceToDevice, c->stream));
    CU_CHECK(cudaMemcpyAsync(d, tmp, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

/* ================= device ================= */

static void cu_sync(bt_backend *be) {
    cu_ctx *c = cu(be);
    cu_graph_break(c, "sync");
    c->count.host_syncs++;
    CU_CHECK(cudaStreamSynchronize(c->stream));
}

/* ================= profiling ================= */

static void cu_counters(bt_backend *be, bt_counters *out) { *out = ((cu_ctx *)be->ctx)->count; }

/* An event recorded on the stream (events are made once and reused). */
static int cu_mark(bt_backend *be) {
    cu_ctx *c = cu(be);
    cu_graph_break(c, "a profiler mark");
    if (c->n_marks == c->cap_marks) {
        int cap = c->cap_marks ? 2 * c->cap_marks : 256;
        cudaEvent_t *m = (cudaEvent_t *)realloc(c->marks, (size_t)cap * sizeof *m);
        if (!m) {
            fprintf(stderr, "bertrain: cuda: out of host memory for profiling marks\n");
            exit(1);
        }
        for (int i = c->cap_marks; i < cap; i++) CU_CHECK(cudaEventCreate(&m[i]));
        c->marks = m;
        c->cap_marks = cap;
    }
    CU_CHECK(cudaEventRecord(c->marks[c->n_marks], c->stream));
    return c->n_marks++;
}

static double cu_mark_seconds(bt_backend *be, int a, int b) {
    cu_ctx *c = cu(be);
    if (a < 0 || b < 0 || a >= c->n_marks || b >= c->n_marks) return 0.0;
    float ms = 0.0f;
    cu_graph_break(c, "mark_seconds");
    CU_CHECK(cudaEventSynchronize(c->marks[b]));
    CU_CHECK(cudaEventElapsedTime(&ms, c->marks[a], c->marks[b]));
    return ms * 1e-3;
}

static void cu_marks_reset(bt_backend *be) { ((cu_ctx *)be->ctx)->n_marks = 0; }

static void cu_info(bt_backend *be, bt_device_info *out) {
    cu_ctx *c = cu(be);
    *out = c->info;
    size_t free_b = 0, total_b = 0;
    CU_CHECK(cudaMemGetInfo(&free_b, &total_b)); /* free memory now, for the batch planner */
    out->free_mem = free_b;
    out->total_mem = total_b;
}

/* Tears down what create made, also after a failed create; statuses are
 * ignored on purpose: a broken context has nothing left to save. */
static void cu_destroy(bt_backend *be) {
    cu_ctx *c = (cu_ctx *)be->ctx;
    if (c) {
        if (cu_use_device(c->device) == cudaSuccess) {
            if (c->stream) (void)cudaStreamSynchronize(c->stream);
            if (c->copies) (void)cudaStreamSynchronize(c->copies);
            for (void *ev; (ev = bt_tickets_pop(&c->reads)) != NULL;) /* a region's: its own */
                if (!cu_graph_owns_event(c, (cudaEvent_t)ev)) (void)cudaEventDestroy((cudaEvent_t)ev);
            cu_graph_release(c);
            if (c->blas) (void)cublasDestroy(c->blas);
            cu_lt_release(c);
            for (int i = 0; i < 4; i++)
                if (c->stage[i].buf) {
                    (void)cudaFree(c->stage[i].buf->ptr);
                    free(c->stage[i].buf);
                }
            if (c->scratch) (void)cudaFree(c->scratch);
            cu_reduce_release(c);
            cu_optim_release(c);
            cu_grid_release(c);
            for (int i = 0; i < CU_UPLOAD_SLOTS; i++) {
                if (c->uploads[i].host) (void)cudaFreeHost(c->uploads[i].host);
                if (c->uploads[i].done) (void)cudaEventDestroy(c->uploads[i].done);
            }
            for (int i = 0; i < c->n_spare_events; i++) (void)cudaEventDestroy(c->spare_events[i]);
            if (c->issued) (void)cudaEventDestroy(c->issued);
            if (c->joined) (void)cudaEventDestroy(c->joined);
            if (c->copies) (void)cudaStreamDestroy(c->copies);
            if (c->stream) (void)cudaStreamDestroy(c->stream);
        }
        (void)cudaGetLastError();
        bt_partials_free(&c->partials);
        bt_tickets_free(&c->reads);
        for (int i = 0; i < c->cap_marks; i++) (void)cudaEventDestroy(c->marks[i]);
        free(c->marks);
        free(c);
    }
    free(be);
}

/* Every slot of the table, as create fills it. */
static void fill_table(bt_backend *be) {
    be->name = "cuda";
    be->destroy = cu_destroy;
    be->info = cu_info;
    be->sync = cu_sync;
    be->alloc = cu_alloc;
    be->free = cu_free;
    be->upload = cu_upload;
    be->download = cu_download;
    be->host_alloc = cu_host_alloc;
    be->host_free = cu_host_free;
    be->download_async = cu_download_async;
    be->downloads_done = cu_downloads_done;
    be->upload_async = cu_upload_async;
    be->copy = cu_copy;
    be->gemm = cu_gemm;
    be->gemm16 = cu_gemm16;
    be->gemm_grid = cu_gemm_grid;
    be->gemm16_bias = cu_gemm16_bias;
    be->gemm16_bias_grad = cu_gemm16_bias_grad;
    be->counters = cu_counters;
    be->mark = cu_mark;
    be->mark_seconds = cu_mark_seconds;
    be->marks_reset = cu_marks_reset;
    cu_fill_ops(be);
    cu_fill_graph_ops(be);
}

bool bt_cuda_op_table_complete(void) {
    bt_backend be;
    memset(&be, 0, sizeof be);
    fill_table(&be);
    return bt_backend_complete(&be);
}

/* Launch one kernel on the new context and wait for it: a build without code
 * for this GPU fails its creation here with one line on how to rebuild,
 * instead of exiting at the first op. False with that line in err. */
static bool probe_kernels(cu_ctx *c, const cudaDeviceProp *p, char *err, size_t errlen) {
    cudaError_t e = cu_probe_launch(c);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    (void)cudaGetLastError();
    if (e == cudaSuccess) return true;
    char sm[24], card[400], toolkit[96] = "";
    snprintf(sm, sizeof sm, "sm_%d%d", p->major, p->minor);
    snprintf(card, sizeof card, "cuda:%d (%s, %s)", c->device, p->name, sm);
    if (p->major * 10 + p->minor < 75) /* CUDA 13 builds sm_75 and later only */
        snprintf(toolkit, sizeof toolkit, "CUDA 12 or 11.8 (CUDA 13 has no %s) and ", sm);
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction)
        snprintf(err, errlen, "%s: this build has no code for %s (built for: %s); rebuild with "
                 "%sCUDA_ARCH including -gencode arch=compute_%d%d,code=%s "
                 "(README, \"NVIDIA GPUs\")", card, sm, BT_CUDA_BUILT_FOR, toolkit, p->major,
                 p->minor, sm);
    else if (e == cudaErrorUnsupportedPtxVersion || e == cudaErrorInvalidPtx)
        snprintf(err, errlen, "%s: the driver cannot compile this build's PTX for %s (%s; built "
                 "for: %s); update the NVIDIA driver, or rebuild with CUDA_ARCH including "
                 "-gencode arch=compute_%d%d,code=%s (README, \"NVIDIA GPUs\")", card, sm,
                 cudaGetErrorName(e), BT_CUDA_BUILT_FOR, p->major, p->minor, sm);
    else
        snprintf(err, errlen, "%s: a one-element test kernel failed: %s: %s", card,
                 cudaGetErrorName(e), cudaGetErrorString(e));
    return false;
}

bt_backend *bt_cuda_backend_create(int device, const bt_backend_options *opts, char *err,
                                   size_t errlen, bool *no_device) {
    if (no_device) *no_device = false;
    int count;
    if (!device_count(&count, err, errlen, no_device)) return NULL;
    int ord = device >= 0 ? device : (-device - 1) % count;
    if (ord >= count) {
        snprintf(err, errlen, "no CUDA device %d (%d device%s: cuda:0..cuda:%d)", ord, count,
                 count == 1 ? "" : "s", count - 1);
        if (no_device) *no_device = true;
        return NULL;
    }
    cu_ctx *c = (cu_ctx *)calloc(1, sizeof *c);
    bt_backend *be = (bt_backend *)calloc(1, sizeof *be);
    if (!c || !be) {
        free(c);
        free(be);
        snprintf(err, errlen, "cuda: out of host memory");
        return NULL;
    }
    be->ctx = c;
    c->graphs.be = be;
    fill_table(be);
    c->device = ord;
    cudaDeviceProp prop;
    CU_TRY(cu_use_device(ord));
    /* A rank waiting for its GPU sleeps on a primitive instead of spinning a
     * core that the node's other ranks and threads need. A context another
     * library made first keeps its flags on CUDA before 12 (SetOnActiveProcess). */
    if (cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) == cudaErrorSetOnActiveProcess)
        (void)cudaGetLastError();
    else
        CU_TRY(cudaGetLastError()); /* any other failure of cudaSetDeviceFlags */
    CU_TRY(cudaGetDeviceProperties(&prop, ord));
    CU_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    if (!probe_kernels(c, &prop, err, errlen)) goto fail; /* before cuBLAS, which may lack it too */
    CUBLAS_TRY(cublasCreate(&c->blas));
    CUBLAS_TRY(cublasSetStream(c->blas, c->stream));
    CUBLAS_TRY(cublasSetPointerMode(c->blas, CUBLAS_POINTER_MODE_HOST));
    /* the same bits on every run: no atomics inside cuBLAS routines */
    CUBLAS_TRY(cublasSetAtomicsMode(c->blas, CUBLAS_ATOMICS_NOT_ALLOWED));
    CUBLAS_TRY(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH)); /* fp32; TF32 per call */
    CUBLAS_TRY(cu_lt_create(c, &prop));
    {
        bt_device_info *i = &c->info;
        memset(i, 0, sizeof *i);
        snprintf(i->name, sizeof i->name, "%.*s", (int)sizeof i->name - 1, prop.name);
        snprintf(i->vendor, sizeof i->vendor, "NVIDIA, compute capability %d.%d", prop.major,
                 prop.minor);
        i->total_mem = prop.totalGlobalMem;
        i->compute_units = prop.multiProcessorCount;
        i->has_fp16 = prop.major > 5 || (prop.major == 5 && prop.minor >= 3);
        i->tensor_f16 = prop.major >= 7;  /* Volta on: fp16 tensor cores */
        i->tensor_bf16 = prop.major >= 8; /* Ampere on: bf16 too */
        i->has_fp64 = true;
        i->fused_ops_pay = true;
        i->gemm_rows_multiple = 64;
        /* also under BERTRAIN_CUDA_GRAPHS=0, which then changes nothing but launches */
        i->replays_graphs = true;
    }
    {
        const char *sync = getenv("BERTRAIN_CUDA_SYNC");
        c->sync_each = sync && !strcmp(sync, "1");
        /* BERTRAIN_CUDA_GRAPHS=0: every region runs as it comes (and with
         * BERTRAIN_CUDA_SYNC=1, whose waits a graph cannot hold); =log: each
         * capture's end and each break on stderr */
        const char *graphs = getenv("BERTRAIN_CUDA_GRAPHS");
        c->graphs.enabled = !c->sync_each && !(graphs && !strcmp(graphs, "0"));
        c->graphs.log = graphs && !strcmp(graphs, "log");
        if (c->sync_each)
            fprintf(stderr, "bertrain: cuda: synchronising after every launch "
                            "(BERTRAIN_CUDA_SYNC=1)\n");
    }
    {
        /* BERTRAIN_CUDA_TF32=1 or 0 overrides the option (bench, the
         * conformance suite); only Ampere and later have TF32 */
        const char *tf32 = getenv("BERTRAIN_CUDA_TF32");
        const bool env_set = tf32 && (!strcmp(tf32, "1") || !strcmp(tf32, "0"));
        const bool wanted = env_set ? !strcmp(tf32, "1") : opts && opts->tf32;
        c->tf32 = wanted && prop.major >= 8;
        c->info.gemm_tf32 = c->tf32;
    }
    return be;
fail:
    cu_destroy(be);
    return NULL;
}

/* The one symbol the program looks up in bertrain-cuda.so. */
extern "C" const bt_cuda_plugin bt_cuda_plugin_entry = {BT_CUDA_PLUGIN_ABI, bt_cuda_backend_create,
                                                        bt_cuda_list_devices,
                                                        bt_cuda_op_table_complete};
