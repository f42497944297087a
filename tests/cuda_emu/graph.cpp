/* CUDA Graphs on the emulated device: stream capture, instantiation, launch
 * and the update of a kernel node's arguments.
 *
 * While a stream captures, what is pushed on it (kernels, cuBLAS calls,
 * copies from page-locked memory, memsets, external event records), and on
 * the streams forked into the capture (events.cpp), becomes the graph's
 * nodes in issue order (a chain). A call a capture cannot take (a host
 * wait, pageable host memory, a wait on an outside event) is reported and
 * invalidates it (so does CUDA_EMU_INVALIDATE_CAPTURE, a test's fault):
 * work pushed into it after that fails, as CUDA fails it
 * (cudaErrorStreamCaptureInvalidated). Work of a forked stream not joined back makes
 * cudaStreamEndCapture fail, as
 * CUDA invalidates it; cudaStreamEndCapture then fails. An instantiated graph
 * shares its nodes with the graph it came from (the backend instantiates a
 * graph once), so cudaGraphExecKernelNodeSetParams changes both; a launch
 * queues every node's work on the stream, in order. */
#include "emu.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

struct CUgraphNode_st {
    std::function<void()> op;
    cuemu::node_patch patch; /* kernels: how to set their launch; others: none */
    cudaEvent_t event = nullptr; /* an event record node: the event each launch records */
};

struct CUgraph_st {
    int device;
    std::vector<std::shared_ptr<CUgraphNode_st>> nodes;
    const CUgraphNode_st *last = nullptr; /* the capture's dependency */
};

struct CUgraphExec_st {
    int device;
    std::vector<std::shared_ptr<CUgraphNode_st>> nodes;
};

namespace cuemu {

static std::atomic<unsigned long long> capture_ids{0};

void graph_append(CUgraph_st *g, std::function<void()> op, node_patch patch) {
    auto n = std::make_shared<CUgraphNode_st>();
    n->op = std::move(op);
    n->patch = std::move(patch);
    g->last = n.get();
    g->nodes.push_back(std::move(n));
}

void graph_append_event(CUgraph_st *g, cudaEvent_t event) {
    auto n = std::make_shared<CUgraphNode_st>();
    n->event = event;
    g->last = n.get();
    g->nodes.push_back(std::move(n));
}

void set_node(CUgraphNode_st *n, std::function<void()> op, node_patch patch) {
    n->op = std::move(op);
    n->patch = std::move(patch);
}

bool refuse_in_capture(stream *s, const char *call) {
    if (!s || !s->capture) return false;
    if (!s->capture_invalid)
        report("%s on a capturing stream: the capture is invalidated", call);
    s->capture_invalid = true;
    return true;
}

bool capture_refuses(const stream *s) {
    return s && s->capture &&
           (s->capture_invalid || (s->capture_origin && s->capture_origin->capture_invalid));
}

bool refuse_in_any_capture(const char *call) {
    bool any = false;
    for (stream *s : all_streams()) any = refuse_in_capture(s, call) || any;
    return any;
}

}  // namespace cuemu

using namespace cuemu;

/* Only the backend's own stream captures: the legacy default stream cannot. */
cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode mode) {
    STICKY_RETURN();
    if (!st) {
        report("cudaStreamBeginCapture on the default stream");
        return record(cudaErrorStreamCaptureImplicit);
    }
    stream *s = stream_of(st, current_device());
    if (!s) return cudaErrorInvalidResourceHandle;
    if (s->capture || (int)mode < 0 || (int)mode > 2) return record(cudaErrorInvalidValue);
    s->capture = new CUgraph_st();
    s->capture->device = s->device;
    s->capture_id = ++capture_ids;
    s->capture_invalid = s->capture_id == cfg().invalidate_capture; /* the test's fault */
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *graph) {
    STICKY_RETURN();
    stream *s = st ? stream_of(st, current_device()) : nullptr;
    if (!s || !s->capture || !graph) return record(cudaErrorInvalidValue);
    if (s->capture_origin) {
        report("cudaStreamEndCapture on a stream that joined another's capture");
        return record(cudaErrorInvalidValue);
    }
    CUgraph_st *g = s->capture;
    bool invalid = s->capture_invalid;
    cudaError_t why = cudaErrorStreamCaptureInvalidated;
    for (stream *f : all_streams()) { /* the streams forked into it leave it */
        if (f == s || f->capture != g) continue;
        if (f->capture_pushes > f->capture_joined) {
            report("cudaStreamEndCapture: a stream forked into the capture has work not "
                   "joined back to the origin stream");
            invalid = true;
            why = cudaErrorStreamCaptureUnjoined;
        }
        invalid = invalid || f->capture_invalid;
        f->capture = nullptr;
        f->capture_invalid = false;
        f->capture_origin = nullptr;
        f->capture_pushes = f->capture_joined = 0;
    }
    s->capture = nullptr;
    s->capture_invalid = false;
    s->capture_pushes = s->capture_joined = 0;
    if (invalid) {
        delete g;
        *graph = nullptr;
        return record(why);
    }
    *graph = g;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t st, cudaStreamCaptureStatus *status) {
    STICKY_RETURN();
    stream *s = stream_of(st, current_device());
    if (!s || !status) return record(cudaErrorInvalidValue);
    *status = !s->capture           ? cudaStreamCaptureStatusNone
              : s->capture_invalid ? cudaStreamCaptureStatusInvalidated
                                   : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

/* The capture's one dependency is its last node (a chain). */
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t st, cudaStreamCaptureStatus *status,
                                     unsigned long long *id, cudaGraph_t *graph,
                                     const cudaGraphNode_t **dependencies,
                                     const cudaGraphEdgeData **edge_data,
                                     size_t *n_dependencies) {
    const cudaError_t e = cudaStreamIsCapturing(st, status);
    if (e != cudaSuccess) return e;
    stream *s = stream_of(st, current_device());
    thread_local cudaGraphNode_t dep;
    dep = s->capture ? (cudaGraphNode_t)s->capture->last : nullptr;
    if (id) *id = s->capture ? s->capture_id : 0;
    if (graph) *graph = s->capture;
    if (dependencies) *dependencies = &dep;
    if (edge_data) *edge_data = nullptr;
    if (n_dependencies) *n_dependencies = dep ? 1 : 0;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
                                          unsigned long long flags) {
    STICKY_RETURN();
    if (!exec || !graph || flags) return record(cudaErrorInvalidValue);
    CUgraphExec_st *x = new CUgraphExec_st();
    x->device = graph->device;
    x->nodes = graph->nodes;
    *exec = x;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st) {
    STICKY_RETURN();
    if (!exec) return record(cudaErrorInvalidValue);
    stream *s = stream_of(st, current_device());
    if (!s) return cudaErrorInvalidResourceHandle;
    if (s->device != exec->device) return record(cudaErrorInvalidValue);
    if (s->capture) {
        report("cudaGraphLaunch on a capturing stream is not emulated");
        return record(cudaErrorStreamCaptureUnsupported);
    }
    for (const auto &n : exec->nodes) /* a copy: a later update changes none */
        s->push(n->event ? event_record_work(n->event, s) : n->op);
    return cudaSuccess;
}

cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                             const cudaKernelNodeParams *params) {
    STICKY_RETURN();
    if (!exec || !node || !params) return record(cudaErrorInvalidValue);
    for (const auto &n : exec->nodes)
        if (n.get() == node) {
            if (!n->patch) {
                report("cudaGraphExecKernelNodeSetParams: not a kernel node");
                return record(cudaErrorInvalidValue);
            }
            return record(n->patch(params, n.get()));
        }
    report("cudaGraphExecKernelNodeSetParams: the node is not in the graph");
    return record(cudaErrorInvalidValue);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    if (!exec) return record(cudaErrorInvalidValue);
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    if (!graph) return record(cudaErrorInvalidValue);
    delete graph;
    return cudaSuccess;
}
