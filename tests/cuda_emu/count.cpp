/* The device's work as counts, in a trace file (CUDA_EMU_TRACE=FILE): what
 * `bertrain bench --project` turns into a projected step time
 * (src/util/projection.h; docs/PERFORMANCE.md, "Projection").
 *
 * Each line is one piece of device work, in the order the streams ran it:
 *   launch NAME GX GY GZ BX BY BZ READ WRITTEN MAXACC SHARED
 *       a kernel: its grid and block, the bytes of global memory (device
 *       allocations; not shared memory, not the stack) its threads read and
 *       wrote, the most global accesses one thread made, and the bytes its
 *       threads read and wrote in shared memory (every access counted, a
 *       broadcast read once per thread)
 *   gemm PREC M N K BATCH FLOPS    a cuBLAS GEMM, PREC fp32, tf32, bf16 or fp16
 *   copy KIND BYTES                a cudaMemcpyAsync (d2d, h2d, d2h) or memset
 *   mark                           a cudaEventRecord reached
 * after a first line "cuda-emu trace counted 1" or "... counted 0". Only a
 * plugin whose kernels were compiled with -fsanitize=thread counts (every
 * load and store then calls race.cpp's __tsan_* entry points, which hand
 * them here; gcc's instrumentation calls __tsan_init at load, which is how
 * the plugin knows); without it READ, WRITTEN and MAXACC are 0 and the
 * first line says counted 0. While tracing, race.cpp's race checks are off. */
#include "emu.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace cuemu {

namespace {
std::mutex trace_lock;
FILE *trace_file;
bool trace_tried, instrumented;

/* Device payloads [lo, hi), sorted: a snapshot taken at each launch (no
 * allocation changes while a grid runs). */
std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
std::atomic<unsigned long long> generation{1}; /* of the snapshot */
/* the range the last hit was in, valid in snapshot hit_gen */
thread_local uintptr_t hit_lo, hit_hi;
thread_local unsigned long long hit_gen;

/* The running launch's totals (merged at each block's end). */
unsigned long long launch_read, launch_written, launch_most, launch_shared;

/* This OS thread's block: bytes, and accesses per thread. */
thread_local unsigned long long block_read, block_written, block_shared;
thread_local std::vector<unsigned long long> per_thread;
}  // namespace

void count_instrumented() { instrumented = true; }

/* The trace file, opened on first use; nullptr when CUDA_EMU_TRACE is unset
 * (lock held). */
static FILE *trace_locked() {
    if (trace_tried) return trace_file;
    trace_tried = true;
    const char *path = getenv("CUDA_EMU_TRACE");
    if (!path || !*path) return nullptr;
    trace_file = fopen(path, "w");
    if (!trace_file) {
        report("CUDA_EMU_TRACE=%s: cannot open it for writing", path);
        exit(2);
    }
    fprintf(trace_file, "cuda-emu trace counted %d\n", instrumented ? 1 : 0);
    return trace_file;
}

bool tracing() {
    std::lock_guard<std::mutex> g(trace_lock);
    return trace_locked() != nullptr;
}

bool counting() {
    static const bool on = tracing() && instrumented;
    return on;
}

void count_access(const void *p, size_t size, bool write, bool off_stack) {
    const int me = running_thread();
    if (me < 0) return;
    const uintptr_t a = (uintptr_t)p;
    if (hit_gen != generation.load(std::memory_order_relaxed)) {
        hit_gen = generation.load(std::memory_order_relaxed);
        hit_lo = hit_hi = 0;
    }
    if (a < hit_lo || a >= hit_hi) {
        auto it = std::upper_bound(ranges.begin(), ranges.end(),
                                   std::make_pair(a, ~(uintptr_t)0));
        if (it == ranges.begin() || a >= (--it)->second) { /* not global memory */
            if (off_stack) block_shared += size;
            return;
        }
        hit_lo = it->first;
        hit_hi = it->second;
    }
    (write ? block_written : block_read) += size;
    if ((size_t)me < per_thread.size()) per_thread[(size_t)me]++;
}

void count_block_begin(unsigned threads) {
    if (!counting()) return;
    block_read = block_written = block_shared = 0;
    per_thread.assign(threads, 0);
}

void count_block_end() {
    if (!counting()) return;
    unsigned long long most = 0;
    for (unsigned long long n : per_thread) most = std::max(most, n);
    std::lock_guard<std::mutex> g(trace_lock);
    launch_read += block_read;
    launch_written += block_written;
    launch_shared += block_shared;
    launch_most = std::max(launch_most, most);
}

void count_launch_begin() {
    if (!counting()) return;
    ranges = payload_ranges();
    std::sort(ranges.begin(), ranges.end());
    generation++;
    launch_read = launch_written = launch_most = launch_shared = 0;
}

void count_launch_end(const kernel_launch &l) {
    std::lock_guard<std::mutex> g(trace_lock);
    FILE *f = trace_locked();
    if (!f) return;
    fprintf(f, "launch %s %u %u %u %u %u %u %llu %llu %llu %llu\n", l.name, l.grid.x, l.grid.y,
            l.grid.z, l.block.x, l.block.y, l.block.z, launch_read, launch_written, launch_most,
            launch_shared);
}

void trace_gemm(const char *precision, int m, int n, int k, int batch) {
    std::lock_guard<std::mutex> g(trace_lock);
    FILE *f = trace_locked();
    if (!f) return;
    fprintf(f, "gemm %s %d %d %d %d %.0f\n", precision, m, n, k, batch,
            2.0 * m * n * (double)k * batch);
}

void trace_copy(const char *kind, size_t bytes) {
    std::lock_guard<std::mutex> g(trace_lock);
    FILE *f = trace_locked();
    if (f) fprintf(f, "copy %s %zu\n", kind, bytes);
}

void trace_mark() {
    std::lock_guard<std::mutex> g(trace_lock);
    FILE *f = trace_locked();
    if (f) fputs("mark\n", f);
}

void trace_flush() {
    std::lock_guard<std::mutex> g(trace_lock);
    if (trace_file) fflush(trace_file);
}

}  // namespace cuemu
