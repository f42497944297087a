/* Internals of the emulated CUDA device, shared by runtime.cpp (devices,
 * memory, streams, errors), launch.cpp (running a grid) and cublas.cpp.
 *
 * The device is configured from the environment, read once:
 *   CUDA_EMU_ARCH     70 (poses as a V100: fp16 tensor cores, no bf16),
 *                     80 (an A100, the default) or 90 (an H100)
 *   CUDA_EMU_BUILT_FOR the architectures the emulated binary has code for
 *                     (default "70 80 90"): on any other a launch fails with
 *                     cudaErrorNoKernelImageForDevice, as a build without code
 *                     for the card does
 *   CUDA_EMU_DEVICES  how many devices (default 2; 0: "no device")
 *   CUDA_EMU_MEM_MB   memory per device (default 2048)
 *   CUDA_EMU_SEED     the seed of the block and thread orders (default 1)
 *   CUDA_EMU_WORKERS  OS threads that run blocks (default 2)
 *   CUDA_EMU_TRACE    a file for the trace of the device's work (count.cpp) */
#ifndef CUEMU_EMU_H
#define CUEMU_EMU_H

#include "include/cuda_runtime.h"

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace cuemu {

/* A device allocation: the payload [ptr, ptr + bytes), 256-byte aligned as
 * cudaMalloc's, ends where its padding to 256 bytes ends, right before a
 * guard page; the bytes between the leading guard page and ptr, and those
 * after the payload, hold a canary pattern. */
struct allocation {
    char *map;          /* the whole mapping, guard pages included */
    size_t map_bytes;
    char *body;         /* between the guard pages */
    size_t body_bytes;
    char *ptr;          /* the payload */
    size_t bytes;
    int device;
};

struct config {
    int arch;       /* 70, 80, 90 */
    bool has_code;  /* arch is in CUDA_EMU_BUILT_FOR */
    char built_for[128]; /* CUDA_EMU_BUILT_FOR as "sm_70 sm_80 sm_90" */
    int devices;
    size_t mem_bytes;
    size_t held_bytes; /* CUDA_EMU_HELD_MB: what other processes hold of each device */
    uint64_t seed;
    int workers;
    /* CUDA_EMU_INVALIDATE_CAPTURE=N: the process's Nth stream capture (from
     * 1; 0, the default: none) is invalidated as it begins, as CUDA
     * invalidates a capture that took a call it cannot, so that what is
     * captured after fails (capture_refuses) and so does its end */
    unsigned long long invalidate_capture;
};
const config &cfg();

/* "cuda-emu: ..." on stderr, one line. */
void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The device current on this thread. */
int current_device();

/* The allocation whose payload contains [p, p + bytes) (bytes 0: p may be its
 * end), or nullptr. */
const allocation *find_payload(const void *p, size_t bytes);
/* The allocation whose mapping (guard pages included) holds p, or nullptr. */
const allocation *find_mapping(const void *p);

/* Describe why [p, p + bytes) is not device memory of device `device`, for
 * a report ("a host pointer", "memory of device 1", "12 bytes past the end of
 * an allocation of 4096 bytes"), into buf. false when it is. */
bool bad_range(const void *p, size_t bytes, int device, char *buf, size_t n);

/* The canaries of allocation a intact? (device access must be on) */
bool canaries_intact(const allocation *a);

/* A fault during device work (an illegal access, a failed kernel): from now
 * on every runtime call returns it, as a GPU's sticky errors. */
void set_sticky(cudaError_t e);
cudaError_t sticky();
/* Record e as this thread's last error (cudaGetLastError), and return it. */
cudaError_t record(cudaError_t e);

/* Every call starts with this: a sticky error answers every call. */
#define STICKY_RETURN()                                        \
    do {                                                       \
        if (sticky() != cudaSuccess) return record(sticky()); \
    } while (0)

/* Sets a kernel node's launch from a cudaKernelNodeParams (its kernel must
 * stay the same): cudaGraphExecKernelNodeSetParams. */
typedef std::function<cudaError_t(const cudaKernelNodeParams *, CUgraphNode_st *)> node_patch;
/* graph.cpp: give a node new work (and a new patch): a kernel node's update. */
void set_node(CUgraphNode_st *n, std::function<void()> op, node_patch patch);

/* A stream: a queue of work that runs only when something synchronises it.
 * While it captures, what is pushed becomes nodes of the capture's graph
 * (graph.cpp) and runs only when a graph made from it is launched. */
struct stream {
    int device;
    unsigned flags;
    CUgraph_st *capture = nullptr; /* the graph being captured, or none */
    bool capture_invalid = false;  /* a call the capture cannot take was made */
    unsigned long long capture_id = 0;
    /* a stream that joined another's capture by waiting on an event recorded
     * there (a fork): the stream that began it. Its work must be joined back
     * (the origin waits on an event recorded after it) before the capture
     * ends: capture_pushes nodes it added, capture_joined of them joined. */
    stream *capture_origin = nullptr;
    unsigned long capture_pushes = 0, capture_joined = 0;
    void push(std::function<void()> op, node_patch patch = nullptr);
};

/* graph.cpp: append op (a kernel: with its patch) to graph g as its last node. */
void graph_append(CUgraph_st *g, std::function<void()> op, node_patch patch);
/* graph.cpp: append an event record node (an external record) to graph g:
 * each launch of the graph records the event. */
void graph_append_event(CUgraph_st *g, cudaEvent_t event);
/* events.cpp: record `event` on s now (what cudaEventRecord does outside a
 * capture), returning the work that reaches the record, to be queued on s. */
std::function<void()> event_record_work(cudaEvent_t event, stream *s);
/* A call that a capturing stream cannot take (a host wait, pageable host
 * memory, an event): reported, and the capture is invalidated, as CUDA
 * invalidates it. Returns true when s was capturing. */
bool refuse_in_capture(stream *s, const char *call);
/* As refuse_in_capture, for a call that waits for the whole device (cudaFree):
 * true when any stream was capturing. */
bool refuse_in_any_capture(const char *call);
/* Work pushed on s now fails, as CUDA fails it, because s captures into a
 * capture that is invalidated: cudaErrorStreamCaptureInvalidated (the
 * caller returns it; nothing is captured). */
bool capture_refuses(const stream *s);
/* Every stream, the default ones included (runtime.cpp). */
std::vector<stream *> all_streams();
/* Run everything queued on s, in order (device memory is reachable only
 * while queued work runs). */
void flush(stream *s);
/* Run s's queued work in order until `done` says to stop or none is left
 * (a stream's queued work may run another's: cudaStreamWaitEvent). */
void flush_until(stream *s, const std::function<bool()> &done);
/* Run every stream's queue (cudaFree, cudaStreamDestroy). */
void flush_all();
/* The stream a call names: s, or device `device`'s default stream for
 * nullptr. Checks that s belongs to `device`; nullptr with the error recorded
 * when not. */
stream *stream_of(cudaStream_t s, int device);

/* Run one kernel launch's grid now (launch.cpp). Returns false when the
 * kernel faulted (reported, sticky error set). */
bool run_grid(const kernel_launch &l);

/* Make every allocation reachable (true) or unreachable (false) from host
 * code. Device work runs between the two. */
void device_access(bool on);

/* Static __shared__ bytes of a kernel (from its symbol table at build time),
 * 0 when unknown. */
size_t static_shared_bytes(const char *kernel);

/* Where a report about a fault in a kernel says it happened. */
struct kernel_site {
    const char *kernel;
    dim3 block, thread;
};
/* The kernel this OS thread is running, or nullptr. */
const kernel_site *running_kernel();
/* The running thread's index in its block (-1 outside a kernel), and the
 * block's failure (reported by the caller): the launch then fails. */
int running_thread();
void fail_running_block();
/* race.cpp: a new interval between barriers of the running block begins;
 * a new block begins. */
void race_new_interval();
void race_new_block();

/* count.cpp: the trace of the device's work (CUDA_EMU_TRACE) and the global
 * memory traffic of instrumented kernels. */
void count_instrumented();     /* __tsan_init: this plugin's kernels are instrumented */
bool tracing();                /* CUDA_EMU_TRACE names a trace file */
bool counting();               /* tracing, and the kernels are instrumented */
/* a kernel's load or store; off_stack: not the thread's stack nor a builtin
 * (threadIdx ...), so shared memory where it is not global memory */
void count_access(const void *p, size_t size, bool write, bool off_stack);
void count_launch_begin();     /* before a grid runs */
void count_block_begin(unsigned threads);
void count_block_end();
void count_launch_end(const kernel_launch &l); /* writes the launch's line */
void trace_gemm(const char *precision, int m, int n, int k, int batch);
void trace_copy(const char *kind, size_t bytes);
void trace_mark();
void trace_flush();            /* after a stream's queue has run */
/* runtime.cpp: every device allocation's payload as [begin, end). */
std::vector<std::pair<uintptr_t, uintptr_t>> payload_ranges();

}  // namespace cuemu

#endif
