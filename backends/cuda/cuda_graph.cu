/* CUDA backend: a region of a step's work (backend.h's graph_begin and
 * graph_end) recorded once, captured as a CUDA Graph, and replayed with one
 * launch while the host only compares each call with its record (see
 * cuda_internal.h). A region that cannot be replayed as it was recorded
 * runs as it comes, the same work in the same order: the graph changes how
 * the work is launched, never what it computes. */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

/* The most parameters a recorded kernel has (cudaKernelNodeParams). */
#define CU_KERNEL_MAX_PARAMS 64

static void fatal_oom(void) {
    fprintf(stderr, "bertrain: cuda: out of host memory for a CUDA Graph's record\n");
    exit(1);
}

static cu_call *append(cu_region *r) {
    if (r->n == r->cap) {
        const int cap = r->cap ? 2 * r->cap : 1024;
        cu_call *calls = (cu_call *)realloc(r->calls, (size_t)cap * sizeof *calls);
        if (!calls) fatal_oom();
        r->calls = calls;
        r->cap = cap;
    }
    cu_call *call = &r->calls[r->n++];
    memset(call, 0, sizeof *call);
    return call;
}

/* Forget the record, the graph and its instance (outside a capture: the
 * uploads' staging is freed, which waits for the device). At teardown
 * (checked false) a failed free is let pass: the context may hold an error
 * already reported. */
static void region_clear(cu_region *r, bool checked) {
#define CU_FREE_CALL(call)                                                                 \
    do {                                                                                   \
        const cudaError_t e_ = (call);                                                     \
        if (checked && e_ != cudaSuccess) cu_fatal(#call, e_, __FILE__, __LINE__);         \
    } while (0)
    for (int i = 0; i < r->n; i++) {
        cu_call *call = &r->calls[i];
        if (call->kind == CU_CALL_KERNEL) call->kk->release(call->args);
        if (call->kind == CU_CALL_OP) free(call->args);
        if (call->kind == CU_CALL_UPLOAD) CU_FREE_CALL(cudaFreeHost(call->host));
        if (call->kind == CU_CALL_DOWNLOAD) CU_FREE_CALL(cudaEventDestroy(call->event));
    }
    r->n = 0;
    r->downloads = 0;
    if (r->exec) CU_FREE_CALL(cudaGraphExecDestroy(r->exec));
    if (r->graph) CU_FREE_CALL(cudaGraphDestroy(r->graph));
#undef CU_FREE_CALL
    r->exec = NULL;
    r->graph = NULL;
    r->ready = false;
}

/* Issue calls[0..n) of r on the stream as they were recorded. */
static void issue_record(cu_ctx *c, const cu_region *r, int n) {
    for (int i = 0; i < n; i++) {
        const cu_call *call = &r->calls[i];
        switch (call->kind) {
        case CU_CALL_KERNEL:
            call->kk->launch(c, call);
            c->count.launches++;
            CU_CHECK(cudaGetLastError());
            break;
        case CU_CALL_OP:
            ((cu_op_fn)call->fn)(c->graphs.be, call->args);
            break;
        case CU_CALL_UPLOAD:
            CU_CHECK(cudaMemcpyAsync(call->dst, call->host, call->bytes, cudaMemcpyHostToDevice,
                                     c->stream));
            break;
        case CU_CALL_DOWNLOAD:
            CU_CHECK(cu_copy_to_host_after(c, call->host, call->dst, call->bytes, call->event,
                                           false));
            break;
        }
    }
}

/* Capturing, the copies stream forked into the capture joins it back, as
 * ending a capture requires; a failure is left to cudaStreamEndCapture. */
static void join_copies(cu_ctx *c) {
    if (!c->graphs.forked) return;
    c->graphs.forked = false;
    if (cudaEventRecord(c->joined, c->copies) != cudaSuccess ||
        cudaStreamWaitEvent(c->stream, c->joined, 0) != cudaSuccess)
        (void)cudaGetLastError();
}

/* The region is given up for this time: capturing, what was captured is
 * launched (it has not run); replaying, the calls matched so far are issued
 * as recorded. The rest runs as it comes, and the next graph_begin captures
 * again. */
void cu_graph_break(cu_ctx *c, const char *why) {
    cu_graphs *g = &c->graphs;
    if (g->mode == CU_EAGER) return;
    cu_region *r = &g->regions[g->region];
    const cu_graph_mode was = g->mode;
    const int in_op = g->nested; /* inside a recorded op, which goes on as it comes */
    g->mode = CU_EAGER;
    g->nested = 0;
    g->breaks++;
    if (g->log)
        fprintf(stderr, "bertrain: cuda: graph region %d: %s at call %d: %s\n", g->region,
                was == CU_CAPTURE ? "capture ends" : "replay ends", was == CU_CAPTURE ? r->n : g->cursor,
                why);
    if (was == CU_CAPTURE) {
        c->count.launches = g->launches_before; /* nothing captured was launched */
        join_copies(c);
        cudaGraph_t graph = NULL;
        const cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
        if (e != cudaSuccess || !graph) {
            /* the capture holds nothing that ran: issue the record, whose every call
             * issued work (nothing else issues any while a region records). Inside an
             * op, whose rest goes on as it comes, its first part would run twice (or,
             * left out, not at all): nothing can be issued right, so the run stops. */
            if (in_op) {
                fprintf(stderr, "bertrain: cuda: a CUDA Graph's capture failed inside an op "
                                "(%s, %s): run with BERTRAIN_CUDA_GRAPHS=0\n",
                        cudaGetErrorName(e), why);
                exit(1);
            }
            (void)cudaGetLastError();
            issue_record(c, r, r->n);
        } else {
            cudaGraphExec_t exec = NULL;
            CU_CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
            CU_CHECK(cudaGraphLaunch(exec, c->stream));
            c->count.launches++;
            CU_CHECK(cudaGraphExecDestroy(exec)); /* the launch still runs */
            CU_CHECK(cudaGraphDestroy(graph));
        }
    } else {
        issue_record(c, r, g->cursor);
    }
    r->ready = false; /* the record is freed at the next graph_begin, outside any capture */
    if (was == CU_CAPTURE && r->n == 0) return; /* before its first call (a profiler's mark) */
    r->failures++;
    r->wait = r->failures <= 2 ? 0 : r->failures >= 8 ? 63 : (1 << (r->failures - 2)) - 1;
}

/* The capture's last node: the kernel just launched. */
static cudaGraphNode_t last_captured(cu_ctx *c) {
    cudaStreamCaptureStatus status;
    const cudaGraphNode_t *deps = NULL;
    size_t n = 0;
#if CUDART_VERSION >= 13000 /* edge data added */
    CU_CHECK(cudaStreamGetCaptureInfo(c->stream, &status, NULL, NULL, &deps, NULL, &n));
#elif CUDART_VERSION >= 12000
    CU_CHECK(cudaStreamGetCaptureInfo(c->stream, &status, NULL, NULL, &deps, &n));
#else /* CUDA 11 (the V100 build): the dependencies came with _v2 */
    CU_CHECK(cudaStreamGetCaptureInfo_v2(c->stream, &status, NULL, NULL, &deps, &n));
#endif
    return status == cudaStreamCaptureStatusActive && n == 1 ? deps[0] : NULL;
}

bool cu_graph_kernel(cu_ctx *c, const char *name, const void *fn, unsigned grid, unsigned block,
                     const cu_kernel_kind *kk, void *args) {
    cu_graphs *g = &c->graphs;
    if (g->mode == CU_EAGER || g->nested) return false;
    cu_region *r = &g->regions[g->region];
    if (g->mode == CU_CAPTURE) {
        cu_call *call = append(r);
        *call = (cu_call){CU_CALL_KERNEL, fn, name, grid, block, kk, kk->clone(args), 0, NULL,
                          NULL, NULL, 0, NULL};
        kk->launch(c, call); /* captured: not launched, and not counted */
        CU_CHECK(cudaGetLastError());
        if (!(call->node = last_captured(c))) {
            r->n--; /* issued: not in the record, which break does not reissue in a capture */
            kk->release(call->args);
            cu_graph_break(c, "the capture names no node for a kernel");
        }
        return true;
    }
    cu_call *call = g->cursor < r->n ? &r->calls[g->cursor] : NULL;
    if (!call || call->kind != CU_CALL_KERNEL || call->fn != fn || call->grid != grid ||
        call->block != block) {
        if (g->log && call && call->kind == CU_CALL_KERNEL)
            fprintf(stderr, "bertrain: cuda: graph: %s<<<%u, %u>>> where %s<<<%u, %u>>> was "
                            "recorded\n", name, grid, block, call->name, call->grid, call->block);
        cu_graph_break(c, call ? "another kernel or grid than recorded" : "more calls than recorded");
        return false;
    }
    if (!kk->same(call->args, args)) { /* new scalars or pointers: into the node */
        void *fresh = kk->clone(args);
        void *params[CU_KERNEL_MAX_PARAMS];
        kk->params(fresh, params);
        cudaKernelNodeParams p = {};
        p.func = (void *)fn;
        p.gridDim = dim3(grid);
        p.blockDim = dim3(block);
        p.kernelParams = params;
        if (cudaGraphExecKernelNodeSetParams(r->exec, call->node, &p) != cudaSuccess) {
            (void)cudaGetLastError();
            kk->release(fresh);
            cu_graph_break(c, "a kernel node refused its new arguments");
            return false;
        }
        kk->release(call->args);
        call->args = fresh;
    }
    g->cursor++;
    return true;
}

void cu_graph_op(bt_backend *be, cu_op_fn fn, const void *args, size_t bytes) {
    cu_ctx *c = cu(be);
    cu_graphs *g = &c->graphs;
    if (g->mode == CU_REPLAY) {
        cu_region *r = &g->regions[g->region];
        const cu_call *call = g->cursor < r->n ? &r->calls[g->cursor] : NULL;
        if (call && call->kind == CU_CALL_OP && call->fn == (const void *)fn &&
            call->args_bytes == bytes && !memcmp(call->args, args, bytes)) {
            g->cursor++;
            return;
        }
        cu_graph_break(c, "another op or operands than recorded");
    }
    if (g->mode == CU_CAPTURE && !g->nested) {
        cu_call *call = append(&g->regions[g->region]);
        call->kind = CU_CALL_OP;
        call->fn = (const void *)fn;
        if (!(call->args = malloc(bytes ? bytes : 1))) fatal_oom();
        memcpy(call->args, args, bytes);
        call->args_bytes = bytes;
        g->nested++;
        fn(be, args);
        if (g->mode == CU_CAPTURE) g->nested--; /* a break inside has reset it */
        return;
    }
    fn(be, args);
}

bool cu_graph_upload(cu_ctx *c, void *dst, const void *src, size_t bytes) {
    cu_graphs *g = &c->graphs;
    if (g->mode == CU_EAGER || g->nested) return false;
    cu_region *r = &g->regions[g->region];
    if (g->mode == CU_REPLAY) {
        cu_call *call = g->cursor < r->n ? &r->calls[g->cursor] : NULL;
        if (!call || call->kind != CU_CALL_UPLOAD || call->dst != dst || call->bytes != bytes) {
            cu_graph_break(c, "another upload than recorded");
            return false;
        }
        memcpy(call->host, src, bytes); /* the graph's last launch has run (graph_begin) */
        g->cursor++;
        return true;
    }
    void *host = NULL;
    if (cudaHostAlloc(&host, bytes, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        cu_graph_break(c, "no page-locked memory for an upload");
        return false;
    }
    memcpy(host, src, bytes);
    cu_call *call = append(r);
    call->kind = CU_CALL_UPLOAD;
    call->host = host;
    call->dst = dst;
    call->bytes = bytes;
    CU_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, c->stream));
    return true;
}

long cu_graph_download(cu_ctx *c, void *dst, const void *src, size_t bytes) {
    cu_graphs *g = &c->graphs;
    if (g->mode == CU_EAGER || g->nested) return 0;
    cu_region *r = &g->regions[g->region];
    if (g->mode == CU_REPLAY) {
        cu_call *call = g->cursor < r->n ? &r->calls[g->cursor] : NULL;
        if (!call || call->kind != CU_CALL_DOWNLOAD || call->host != dst || call->dst != src ||
            call->bytes != bytes) {
            cu_graph_break(c, "another download than recorded");
            return 0;
        }
        g->cursor++;
        return bt_tickets_issue(&c->reads, (void *)call->event, "cuda");
    }
    cudaEvent_t ev = NULL;
    CU_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    g->forked = true; /* from the copy's fork on, the copies stream is in the capture */
    if (cu_copy_to_host_after(c, dst, src, bytes, ev, true) != cudaSuccess) {
        (void)cudaGetLastError();
        CU_CHECK(cudaEventDestroy(ev));
        cu_graph_break(c, "a download the capture refused (pageable memory?)");
        return 0;
    }
    cu_call *call = append(r);
    call->kind = CU_CALL_DOWNLOAD;
    call->host = dst;
    call->dst = (void *)src;
    call->bytes = bytes;
    call->event = ev;
    r->downloads++;
    return bt_tickets_issue(&c->reads, (void *)ev, "cuda");
}

bool cu_graph_owns_event(const cu_ctx *c, cudaEvent_t ev) {
    for (int i = 0; i < CU_GRAPH_REGIONS; i++) {
        const cu_region *r = &c->graphs.regions[i];
        for (int k = 0; r->downloads && k < r->n; k++)
            if (r->calls[k].kind == CU_CALL_DOWNLOAD && r->calls[k].event == ev) return true;
    }
    return false;
}

/* Record region `region` from here (its first time, or after a break), or
 * replay it. */
static void cu_graph_begin(bt_backend *be, int region) {
    cu_ctx *c = cu(be);
    cu_graphs *g = &c->graphs;
    if (!g->enabled || region < 0 || region >= CU_GRAPH_REGIONS) return;
    if (g->mode != CU_EAGER) cu_graph_break(c, "graph_begin inside a region");
    cu_region *r = &g->regions[region];
    g->be = be;
    g->region = region;
    g->cursor = 0;
    g->nested = 0;
    if (r->ready) {
        /* the uploads' staging is written as the calls come: the last launch must have run */
        if (cudaEventQuery(r->done) == cudaErrorNotReady) {
            (void)cudaGetLastError();
            c->count.host_syncs++;
            CU_CHECK(cudaEventSynchronize(r->done));
        }
        g->mode = CU_REPLAY;
        return;
    }
    if (r->wait > 0) { /* broken lately: this time as it comes */
        r->wait--;
        return;
    }
    if (r->downloads && c->reads.arrived < c->reads.issued)
        be->downloads_done(be, c->reads.issued, true); /* no ticket keeps a record's event */
    region_clear(r, true);
    if (!r->done) CU_CHECK(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    CU_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed));
    g->mode = CU_CAPTURE;
    g->launches_before = c->count.launches;
}

/* Launch the region's graph: captured now, or replayed with its updates. */
static void cu_graph_end(bt_backend *be) {
    cu_ctx *c = cu(be);
    cu_graphs *g = &c->graphs;
    if (g->mode == CU_EAGER) return; /* graphs off, or the region broke */
    cu_region *r = &g->regions[g->region];
    if (g->mode == CU_REPLAY && g->cursor != r->n) {
        cu_graph_break(c, "fewer calls than recorded");
        return;
    }
    const bool captured = g->mode == CU_CAPTURE;
    if (captured) {
        g->mode = CU_EAGER;
        c->count.launches = g->launches_before; /* nothing captured was launched */
        join_copies(c);
        cudaGraph_t graph = NULL;
        cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
        if (e == cudaSuccess && graph) e = cudaGraphInstantiateWithFlags(&r->exec, graph, 0);
        if (e != cudaSuccess || !graph) { /* nothing captured ran: issue it, and stop capturing */
            (void)cudaGetLastError();
            fprintf(stderr, "bertrain: cuda: a step's CUDA Graph failed (%s): steps run without "
                            "one from now on\n", cudaGetErrorName(e));
            if (graph) CU_CHECK(cudaGraphDestroy(graph));
            issue_record(c, r, r->n);
            g->enabled = false;
            return;
        }
        r->graph = graph;
        r->ready = true;
        g->captures++;
    } else {
        g->mode = CU_EAGER;
        g->replays++;
    }
    if (g->log)
        fprintf(stderr, "bertrain: cuda: graph region %d: %s, %d calls, %d downloads\n",
                g->region, captured ? "captured" : "replayed", r->n, r->downloads);
    CU_CHECK(cudaGraphLaunch(r->exec, c->stream));
    c->count.launches++;
    r->failures = 0;
    CU_CHECK(cudaEventRecord(r->done, c->stream));
    CU_SYNC_IF_DEBUG(c);
}

void cu_graph_release(cu_ctx *c) {
    for (int i = 0; i < CU_GRAPH_REGIONS; i++) {
        cu_region *r = &c->graphs.regions[i];
        region_clear(r, false);
        free(r->calls);
        if (r->done) (void)cudaEventDestroy(r->done);
        memset(r, 0, sizeof *r);
    }
}

void cu_fill_graph_ops(bt_backend *be) {
    be->graph_begin = cu_graph_begin;
    be->graph_end = cu_graph_end;
}
