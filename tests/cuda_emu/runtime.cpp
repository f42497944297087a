/* The emulated CUDA runtime: devices, memory, streams and errors (emu.h).
 *
 * Faithful where bugs hide:
 *  - device memory is mapped apart from host memory, unreachable from host
 *    code except while queued device work runs (a host read of a device
 *    pointer faults), starts as NaN bytes, and has a guard page behind its
 *    end and canary bytes before it and in its padding;
 *  - a stream is a real queue: launches, memsets and async copies run only
 *    when the stream is synchronised (cudaStreamSynchronize, or cudaFree and
 *    cudaStreamDestroy, which synchronise the device), so a host read of a
 *    download without the synchronisation sees stale bytes (events and
 *    waits between streams: events.cpp);
 *  - a fault in device work is sticky: every later call returns it. */
#include "emu.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

struct CUstream_st : cuemu::stream {
    std::deque<std::function<void()>> queue;
};

namespace cuemu {

static const size_t PAGE = 4096, ALIGN = 256;
static const unsigned char CANARY = 0xA5, FRESH = 0xFF; /* 0xFFFFFFFF is a NaN */

/* ================= configuration ================= */

static long env_long(const char *name, long dflt, long lo, long hi) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "cuda-emu: %s=%s: expected an integer in [%ld, %ld]\n", name, s, lo, hi);
        exit(2);
    }
    return v;
}

/* CUDA_EMU_BUILT_FOR ("70 80 90" by default, spaces or commas): into
 * c->built_for as "sm_70 sm_80 sm_90", and whether c->arch is in it. */
static void read_built_for(config *c) {
    const char *s = getenv("CUDA_EMU_BUILT_FOR");
    if (!s || !*s) s = "70 80 90";
    size_t used = 0;
    c->built_for[0] = 0;
    c->has_code = false;
    for (const char *p = s; *p;) {
        if (*p == ' ' || *p == ',') {
            p++;
            continue;
        }
        char *end;
        long a = strtol(p, &end, 10);
        if (end == p || a < 30 || a > 200 || (*end && *end != ' ' && *end != ',')) {
            fprintf(stderr, "cuda-emu: CUDA_EMU_BUILT_FOR=%s: expected architectures such as "
                            "\"80 90\"\n", s);
            exit(2);
        }
        c->has_code |= a == c->arch;
        used += (size_t)snprintf(c->built_for + used, sizeof c->built_for - used, "%ssm_%ld",
                                 used ? " " : "", a);
        if (used >= sizeof c->built_for) used = sizeof c->built_for - 1;
        p = end;
    }
}

const config &cfg() {
    static config c;
    static std::once_flag once;
    std::call_once(once, [] {
        c.arch = (int)env_long("CUDA_EMU_ARCH", 80, 70, 90);
        if (c.arch != 70 && c.arch != 80 && c.arch != 90) {
            fprintf(stderr, "cuda-emu: CUDA_EMU_ARCH=%d: expected 70 (V100), 80 (A100) or 90 "
                            "(H100)\n", c.arch);
            exit(2);
        }
        read_built_for(&c);
        c.devices = (int)env_long("CUDA_EMU_DEVICES", 2, 0, 16);
        c.mem_bytes = (size_t)env_long("CUDA_EMU_MEM_MB", 2048, 1, 1 << 20) << 20;
        c.held_bytes = (size_t)env_long("CUDA_EMU_HELD_MB", 0, 0, 1 << 20) << 20;
        if (c.held_bytes > c.mem_bytes) c.held_bytes = c.mem_bytes;
        c.seed = (uint64_t)env_long("CUDA_EMU_SEED", 1, 0, 1L << 62);
        c.workers = (int)env_long("CUDA_EMU_WORKERS", 2, 1, 64);
        c.invalidate_capture =
            (unsigned long long)env_long("CUDA_EMU_INVALIDATE_CAPTURE", 0, 0, 1L << 40);
    });
    return c;
}

const char *built_for() { return cfg().built_for; }

void report(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda-emu: %s\n", line);
    fflush(stderr);
}

/* ================= errors ================= */

static std::atomic<int> sticky_error{cudaSuccess};
static thread_local cudaError_t last_error = cudaSuccess;

void set_sticky(cudaError_t e) {
    int expected = cudaSuccess;
    sticky_error.compare_exchange_strong(expected, (int)e);
}
cudaError_t sticky() { return (cudaError_t)sticky_error.load(); }

cudaError_t record(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

/* ================= devices ================= */

static thread_local int this_device = 0;

int current_device() { return this_device; }

static void fill_props(cudaDeviceProp *p, int device) {
    memset(p, 0, sizeof *p);
    const int arch = cfg().arch;
    const char *card = arch == 70 ? "Tesla V100-SXM2-16GB" : arch == 80 ? "NVIDIA A100-SXM4-80GB"
                                                                        : "NVIDIA H100 80GB HBM3";
    snprintf(p->name, sizeof p->name, "%s (cuda-emu %d)", card, device);
    p->totalGlobalMem = cfg().mem_bytes;
    p->sharedMemPerBlock = 48 * 1024;
    p->maxThreadsPerBlock = 1024;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = arch / 10;
    p->minor = 0;
    p->multiProcessorCount = arch == 70 ? 80 : arch == 80 ? 108 : 132;
    p->pciBusID = device + 1;
}

/* ================= memory ================= */

static std::mutex mem_lock;                       /* guards the two below */
static std::map<uintptr_t, allocation *> allocs;  /* by mapping address */
static size_t used_bytes[16];
static bool access_on = false;                    /* device memory reachable from host code */

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

/* The allocation whose mapping holds p (lock held). */
static allocation *mapping_locked(const void *p) {
    uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return nullptr;
    --it;
    allocation *al = it->second;
    return a < (uintptr_t)al->map + al->map_bytes ? al : nullptr;
}

const allocation *find_mapping(const void *p) {
    std::lock_guard<std::mutex> g(mem_lock);
    return mapping_locked(p);
}

const allocation *find_payload(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> g(mem_lock);
    allocation *a = mapping_locked(p);
    if (!a) return nullptr;
    const char *c = (const char *)p;
    if (c < a->ptr || c > a->ptr + a->bytes || bytes > (size_t)(a->ptr + a->bytes - c))
        return nullptr;
    return a;
}

std::vector<std::pair<uintptr_t, uintptr_t>> payload_ranges() {
    std::lock_guard<std::mutex> g(mem_lock);
    std::vector<std::pair<uintptr_t, uintptr_t>> v;
    v.reserve(allocs.size());
    for (auto &kv : allocs)
        v.emplace_back((uintptr_t)kv.second->ptr, (uintptr_t)(kv.second->ptr + kv.second->bytes));
    return v;
}

bool bad_range(const void *p, size_t bytes, int device, char *buf, size_t n) {
    std::lock_guard<std::mutex> g(mem_lock);
    allocation *a = mapping_locked(p);
    const char *c = (const char *)p;
    if (!a) {
        snprintf(buf, n, "%p is not device memory (a host pointer?)", p);
        return true;
    }
    if (a->device != device) {
        snprintf(buf, n, "%p is memory of device %d, not of device %d", p, a->device, device);
        return true;
    }
    if (c < a->ptr) {
        snprintf(buf, n, "%p is %zu bytes before an allocation of %zu bytes", p,
                 (size_t)(a->ptr - c), a->bytes);
        return true;
    }
    if (c > a->ptr + a->bytes || bytes > (size_t)(a->ptr + a->bytes - c)) {
        snprintf(buf, n, "%zu bytes at %p reach %zu bytes past the end of an allocation of %zu "
                         "bytes", bytes, p, (size_t)(c + bytes - (a->ptr + a->bytes)), a->bytes);
        return true;
    }
    return false;
}

static void protect(allocation *a, bool on) {
    if (mprotect(a->body, a->body_bytes, on ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
        report("mprotect failed: %s", strerror(errno));
        abort();
    }
}

void device_access(bool on) {
    std::lock_guard<std::mutex> g(mem_lock);
    if (access_on == on) return;
    for (auto &kv : allocs) protect(kv.second, on);
    access_on = on;
}

bool canaries_intact(const allocation *a) {
    for (const char *c = a->body; c < a->ptr; c++)
        if ((unsigned char)*c != CANARY) return false;
    for (const char *c = a->ptr + a->bytes; c < a->body + a->body_bytes; c++)
        if ((unsigned char)*c != CANARY) return false;
    return true;
}

/* ================= faults in host code and kernels ================= */

static struct sigaction old_segv, old_bus;

/* A SIGSEGV/SIGBUS at an address of device memory: say whose fault it was
 * and exit; anything else goes to the handler before ours. */
static void on_fault(int sig, siginfo_t *si, void *uc) {
    const char *addr = (const char *)si->si_addr;
    allocation *a = nullptr;
    if (mem_lock.try_lock()) {
        a = mapping_locked(addr);
        mem_lock.unlock();
    }
    const kernel_site *k = running_kernel();
    char where[256] = "host code";
    if (k)
        snprintf(where, sizeof where, "kernel %s (block (%u,%u,%u), thread (%u,%u,%u))", k->kernel,
                 k->block.x, k->block.y, k->block.z, k->thread.x, k->thread.y, k->thread.z);
    if (a && addr >= a->ptr + a->bytes)
        report("%s: access %zu bytes past the end of a device allocation of %zu bytes "
               "(device %d)", where, (size_t)(addr - (a->ptr + a->bytes)), a->bytes, a->device);
    else if (a && addr < a->ptr)
        report("%s: access %zu bytes before a device allocation of %zu bytes (device %d)", where,
               (size_t)(a->ptr - addr), a->bytes, a->device);
    else if (a)
        report("%s: read or wrote device memory at %p (an allocation of %zu bytes on device "
               "%d) outside device work: device memory is reached through copies and kernels",
               where, (const void *)addr, a->bytes, a->device);
    else if (k)
        report("%s: access to %p, which is no memory a kernel may touch (thread stack "
               "overflow, or a wild pointer)", where, (const void *)addr);
    else {
        struct sigaction *old = sig == SIGSEGV ? &old_segv : &old_bus;
        sigaction(sig, old, nullptr); /* not ours: the fault repeats under the old handler */
        (void)uc;
        return;
    }
    _exit(1);
}

static void install_fault_handler() {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &old_segv);
        sigaction(SIGBUS, &sa, &old_bus);
    });
}

/* ================= streams ================= */

static std::mutex stream_lock; /* guards the streams' list (not their queues) */
static std::deque<CUstream_st *> streams;
static CUstream_st default_streams[16];

void stream::push(std::function<void()> op, node_patch patch) {
    if (capture) {
        graph_append(capture, std::move(op), std::move(patch));
        capture_pushes++;
        return;
    }
    ((CUstream_st *)this)->queue.push_back(op);
}

std::vector<stream *> all_streams() {
    std::vector<stream *> out;
    for (int d = 0; d < cfg().devices; d++) out.push_back(stream_of(nullptr, d));
    std::lock_guard<std::mutex> g(stream_lock);
    for (CUstream_st *s : streams) out.push_back(s);
    return out;
}

/* Streams being run: a stream's queued work may run another's (a
 * cudaStreamWaitEvent), and device memory stays reachable until the
 * outermost is done. */
static int running = 0;

void flush_until(stream *sp, const std::function<bool()> &done) {
    CUstream_st *s = (CUstream_st *)sp;
    if (s->queue.empty() || done()) return;
    if (running++ == 0) device_access(true);
    while (!s->queue.empty() && !done()) {
        std::function<void()> op = std::move(s->queue.front());
        s->queue.pop_front();
        if (sticky() == cudaSuccess) op(); /* after a fault the device runs nothing */
    }
    if (--running == 0) {
        device_access(false);
        trace_flush();
    }
}

void flush(stream *sp) {
    flush_until(sp, [] { return false; });
}

void flush_all() {
    std::vector<CUstream_st *> all;
    {
        std::lock_guard<std::mutex> g(stream_lock);
        all.assign(streams.begin(), streams.end());
    }
    for (int d = 0; d < cfg().devices; d++) flush(&default_streams[d]);
    for (CUstream_st *s : all) flush(s);
}

stream *stream_of(cudaStream_t s, int device) {
    if (!s) {
        default_streams[device].device = device;
        return &default_streams[device];
    }
    if (s->device != device) {
        report("a stream of device %d used while device %d is current", s->device, device);
        record(cudaErrorInvalidResourceHandle);
        return nullptr;
    }
    return s;
}

}  // namespace cuemu

using namespace cuemu;

/* ================= the runtime API ================= */

cudaError_t cudaGetDeviceCount(int *count) {
    *count = cfg().devices;
    install_fault_handler();
    return cfg().devices > 0 ? cudaSuccess : record(cudaErrorNoDevice);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
    if (device < 0 || device >= cfg().devices) return record(cudaErrorInvalidDevice);
    fill_props(prop, device);
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= cfg().devices) return record(cudaErrorInvalidDevice);
    this_device = device;
    return cudaSuccess;
}

/* The scheduling flags of each device (cudaSetDeviceFlags): recorded, so that
 * a test can ask which wait the backend chose; the emulator's waits are its
 * own. Only the scheduling bits exist here. */
static unsigned device_flags[64];

cudaError_t cudaSetDeviceFlags(unsigned int flags) {
    if ((flags & ~(unsigned)cudaDeviceScheduleMask) || this_device < 0 || this_device >= 64)
        return record(cudaErrorInvalidValue);
    device_flags[this_device] = flags;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceFlags(unsigned int *flags) {
    if (!flags || this_device < 0 || this_device >= 64) return record(cudaErrorInvalidValue);
    *flags = device_flags[this_device];
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    *device = this_device;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    if (sticky() != cudaSuccess) return sticky();
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define N(x) case x: return #x;
        N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation)
        N(cudaErrorInitializationError) N(cudaErrorInvalidConfiguration)
        N(cudaErrorInvalidDevicePointer) N(cudaErrorInvalidMemcpyDirection)
        N(cudaErrorStubLibrary) N(cudaErrorInsufficientDriver) N(cudaErrorNoDevice)
        N(cudaErrorInvalidDevice) N(cudaErrorInvalidResourceHandle) N(cudaErrorNotReady)
        N(cudaErrorInvalidDeviceFunction) N(cudaErrorNoKernelImageForDevice)
        N(cudaErrorInvalidPtx) N(cudaErrorUnsupportedPtxVersion)
        N(cudaErrorIllegalAddress)
        N(cudaErrorLaunchFailure) N(cudaErrorSetOnActiveProcess)
        N(cudaErrorStreamCaptureUnsupported) N(cudaErrorStreamCaptureInvalidated)
        N(cudaErrorStreamCaptureUnjoined) N(cudaErrorStreamCaptureImplicit)
        N(cudaErrorGraphExecUpdateFailure)
#undef N
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnjoined:
        return "capture was not joined back to the origin stream";
    case cudaErrorStreamCaptureImplicit:
        return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorGraphExecUpdateFailure:
        return "the graph update was not performed because it included changes which violated "
               "constraints specific to instantiated graph update";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorStubLibrary: return "CUDA driver is a stub library";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoKernelImageForDevice:
        return "no kernel image is available for execution on the device";
    case cudaErrorInvalidPtx: return "a PTX JIT compilation failed";
    case cudaErrorUnsupportedPtxVersion:
        return "the provided PTX was compiled with an unsupported toolchain.";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorSetOnActiveProcess:
        return "cannot set while device is active in this process";
    }
    return "unknown error";
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
    STICKY_RETURN();
    install_fault_handler();
    *ptr = nullptr;
    if (bytes == 0) return cudaSuccess;
    const int d = this_device;
    const size_t padded = round_up(bytes, ALIGN);
    const size_t ours = cfg().mem_bytes - cfg().held_bytes; /* others hold the rest */
    if (bytes > ours) return record(cudaErrorMemoryAllocation);
    {
        std::lock_guard<std::mutex> g(mem_lock);
        if (used_bytes[d] + bytes > ours) return record(cudaErrorMemoryAllocation);
        used_bytes[d] += bytes;
    }
    allocation *a = new allocation;
    a->body_bytes = round_up(padded, PAGE);
    a->map_bytes = a->body_bytes + 2 * PAGE;
    void *m = mmap(nullptr, a->map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
        delete a;
        std::lock_guard<std::mutex> g(mem_lock);
        used_bytes[d] -= bytes;
        return record(cudaErrorMemoryAllocation);
    }
    a->map = (char *)m;
    a->body = a->map + PAGE;
    a->ptr = a->body + a->body_bytes - padded;
    a->bytes = bytes;
    a->device = d;
    mprotect(a->body, a->body_bytes, PROT_READ | PROT_WRITE);
    memset(a->body, CANARY, (size_t)(a->ptr - a->body));
    memset(a->ptr, FRESH, bytes); /* never zeros: nothing may rely on them */
    memset(a->ptr + bytes, CANARY, padded - bytes);
    std::lock_guard<std::mutex> g(mem_lock);
    if (!access_on) protect(a, false);
    allocs[(uintptr_t)a->map] = a;
    *ptr = a->ptr;
    return cudaSuccess;
}

/* Page-locked host memory (cudaHostAlloc): start -> bytes. A copy from it
 * to the device reads it when the stream runs the copy, as a GPU's DMA does,
 * so host code that rewrites it before the copy has run changes what
 * arrives; from pageable memory the call stages a copy first. */
static std::mutex pinned_lock;
static std::map<uintptr_t, size_t> pinned;

/* Whether [p, p + bytes) lies in one page-locked allocation. */
static bool is_pinned(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> g(pinned_lock);
    auto it = pinned.upper_bound((uintptr_t)p);
    if (it == pinned.begin()) return false;
    --it;
    return (uintptr_t)p + bytes <= it->first + it->second;
}

cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned int flags) {
    STICKY_RETURN();
    *ptr = nullptr;
    if (flags != cudaHostAllocDefault) {
        report("cudaHostAlloc: flags %#x are not emulated", flags);
        return record(cudaErrorInvalidValue);
    }
    void *p = nullptr;
    if (posix_memalign(&p, PAGE, bytes ? bytes : 1) != 0) return record(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> g(pinned_lock);
    pinned[(uintptr_t)p] = bytes ? bytes : 1;
    *ptr = p;
    return cudaSuccess;
}

/* Synchronises the device first (copies may still read the memory). */
cudaError_t cudaFreeHost(void *ptr) {
    STICKY_RETURN();
    if (!ptr) return cudaSuccess;
    if (refuse_in_any_capture("cudaFreeHost")) return record(cudaErrorStreamCaptureImplicit);
    flush_all();
    {
        std::lock_guard<std::mutex> g(pinned_lock);
        if (!pinned.erase((uintptr_t)ptr)) {
            report("cudaFreeHost(%p): not the start of a live cudaHostAlloc allocation", ptr);
            return record(cudaErrorInvalidValue);
        }
    }
    free(ptr);
    return cudaSuccess;
}

/* Synchronises the device first, as cudaFree does. */
cudaError_t cudaFree(void *ptr) {
    STICKY_RETURN();
    if (!ptr) return cudaSuccess;
    if (refuse_in_any_capture("cudaFree")) return record(cudaErrorStreamCaptureImplicit);
    flush_all();
    STICKY_RETURN();
    allocation *a;
    {
        std::lock_guard<std::mutex> g(mem_lock);
        a = mapping_locked(ptr);
        if (!a || a->ptr != (char *)ptr) {
            report("cudaFree(%p): not the start of a live device allocation", ptr);
            return record(cudaErrorInvalidValue);
        }
        allocs.erase((uintptr_t)a->map);
        used_bytes[a->device] -= a->bytes;
    }
    mprotect(a->body, a->body_bytes, PROT_READ);
    bool intact = canaries_intact(a);
    if (!intact) report("cudaFree: the guard bytes of an allocation of %zu bytes were "
                        "overwritten by device work", a->bytes);
    munmap(a->map, a->map_bytes);
    delete a;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    STICKY_RETURN();
    std::lock_guard<std::mutex> g(mem_lock);
    *total_bytes = cfg().mem_bytes;
    *free_bytes = cfg().mem_bytes - cfg().held_bytes - used_bytes[this_device];
    return cudaSuccess;
}

/* The copy's ranges checked now, as the runtime checks its arguments; the
 * bytes move when the stream runs. */
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t st) {
    STICKY_RETURN();
    const int d = this_device;
    stream *s = stream_of(st, d);
    if (!s) return cudaErrorInvalidResourceHandle;
    if (capture_refuses(s)) return record(cudaErrorStreamCaptureInvalidated);
    if (!bytes) return cudaSuccess;
    char why[256];
    const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost &&
        kind != cudaMemcpyDeviceToDevice) {
        report("cudaMemcpyAsync: copy kind %d is not emulated", (int)kind);
        return record(cudaErrorInvalidMemcpyDirection);
    }
    if ((dst_dev && bad_range(dst, bytes, d, why, sizeof why)) ||
        (src_dev && bad_range(src, bytes, d, why, sizeof why))) {
        report("cudaMemcpyAsync(%zu bytes): %s", bytes, why);
        return record(cudaErrorInvalidValue);
    }
    if ((!dst_dev && find_mapping(dst)) || (!src_dev && find_mapping(src))) {
        report("cudaMemcpyAsync(%zu bytes): a host side that is device memory (wrong kind)",
               bytes);
        return record(cudaErrorInvalidValue);
    }
    if (dst_dev && src_dev && (const char *)dst < (const char *)src + bytes &&
        (const char *)src < (const char *)dst + bytes) {
        report("cudaMemcpyAsync(%zu bytes): overlapping device ranges", bytes);
        return record(cudaErrorInvalidValue);
    }
    if (((kind == cudaMemcpyHostToDevice && !is_pinned(src, bytes)) ||
         (kind == cudaMemcpyDeviceToHost && !is_pinned(dst, bytes))) &&
        refuse_in_capture(s, "cudaMemcpyAsync from or to pageable host memory"))
        return record(cudaErrorStreamCaptureUnsupported);
    if (kind == cudaMemcpyHostToDevice && !is_pinned(src, bytes)) { /* CUDA stages pageable */
        auto staged = std::make_shared<std::vector<char>>((const char *)src,  /* host memory */
                                                          (const char *)src + bytes); /* before */
        s->push([=] { /* it returns: the caller may reuse src at once */
            memcpy(dst, staged->data(), bytes);
            trace_copy("h2d", bytes);
        });
        return cudaSuccess;
    }
    s->push([=] { /* page-locked memory: read when the copy runs */
        memcpy(dst, src, bytes);
        trace_copy(src_dev && dst_dev ? "d2d" : dst_dev ? "h2d" : "d2h", bytes);
    });
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t st) {
    STICKY_RETURN();
    const int d = this_device;
    stream *s = stream_of(st, d);
    if (!s) return cudaErrorInvalidResourceHandle;
    if (capture_refuses(s)) return record(cudaErrorStreamCaptureInvalidated);
    if (!bytes) return cudaSuccess;
    char why[256];
    if (bad_range(ptr, bytes, d, why, sizeof why)) {
        report("cudaMemsetAsync(%zu bytes): %s", bytes, why);
        return record(cudaErrorInvalidValue);
    }
    s->push([=] {
        memset(ptr, value, bytes);
        trace_copy("memset", bytes);
    });
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags) {
    STICKY_RETURN();
    CUstream_st *s = new CUstream_st();
    s->device = this_device;
    s->flags = flags;
    std::lock_guard<std::mutex> g(stream_lock);
    streams.push_back(s);
    *out = s;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return record(cudaErrorInvalidResourceHandle);
    if (refuse_in_capture(s, "cudaStreamDestroy")) return record(cudaErrorStreamCaptureUnsupported);
    flush(s); /* its work still completes */
    std::lock_guard<std::mutex> g(stream_lock);
    auto it = std::find(streams.begin(), streams.end(), s);
    if (it == streams.end()) return record(cudaErrorInvalidResourceHandle);
    streams.erase(it);
    delete s;
    return sticky() != cudaSuccess ? record(sticky()) : cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st) {
    STICKY_RETURN();
    stream *s = st ? (stream *)st : stream_of(nullptr, this_device);
    if (refuse_in_capture(s, "cudaStreamSynchronize"))
        return record(cudaErrorStreamCaptureUnsupported);
    flush(s);
    return sticky() != cudaSuccess ? record(sticky()) : cudaSuccess;
}
