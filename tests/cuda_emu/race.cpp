/* Data races between the threads of a block, found from the kernels' own
 * memory accesses: a kernel object compiled with g++ -fsanitize=thread calls
 * __tsan_readN / __tsan_writeN before each load and store (tests/cuda-emu-race.sh
 * builds such a plugin; the ordinary one has no instrumented code, so these
 * functions are never called there). No ThreadSanitizer runtime is linked:
 * the functions below are the whole of it. Between two barriers of a block
 * (race_new_interval), a byte written by one thread and read or written by
 * another is a race: it is reported once per block, naming the kernel, the
 * block, the two threads and the address, and the launch fails, whatever order
 * the threads happened to run in. And a read of shared memory (neither device
 * memory nor a stack) that no thread of the block wrote before is reported:
 * the emulation keeps what an earlier block left there, a GPU does not. Each
 * thread's own stack is left out. */
#include <cuda_runtime.h>

#include "emu.h"

#include <stdint.h>

#include <unordered_map>

namespace cuemu {

namespace {
struct cell {
    uint64_t interval;
    int writer, reader;     /* in this interval; -1: none yet */
    bool readers;           /* read by more than one thread in this interval */
    uint64_t written_block; /* the last block in which a thread wrote it */
};
thread_local std::unordered_map<uintptr_t, cell> *shadow;
thread_local uint64_t interval = 1, block_no = 1;
thread_local bool reported;
}  // namespace

void race_new_interval() { interval++; }

void race_new_block() {
    if (shadow && shadow->size() > (1u << 22)) shadow->clear(); /* stale cells only */
    race_new_interval();
    block_no++;
    reported = false;
}

/* A read of shared memory that no thread of the block wrote: what an earlier
 * block (or nothing) left there, which a GPU does not keep. */
static void stale(uintptr_t byte, int me) {
    fail_running_block();
    if (reported) return;
    reported = true;
    const kernel_site *k = running_kernel();
    report("kernel %s, block (%u,%u,%u): thread %d reads shared memory at %#lx that no thread "
           "of the block wrote",
           k ? k->kernel : "?", k ? k->block.x : 0, k ? k->block.y : 0, k ? k->block.z : 0, me,
           (unsigned long)byte);
}

static void race(uintptr_t word, int other, bool other_wrote, int me, bool write) {
    fail_running_block();
    if (reported) return;
    reported = true;
    const kernel_site *k = running_kernel();
    report("kernel %s, block (%u,%u,%u): a data race on %#lx between two barriers: thread %d "
           "%s it, thread %d %s it",
           k ? k->kernel : "?", k ? k->block.x : 0, k ? k->block.y : 0, k ? k->block.z : 0,
           (unsigned long)word, other, other_wrote ? "wrote" : "read", me,
           write ? "writes" : "reads");
}

/* Whether a is in threadIdx, blockIdx, blockDim or gridDim: the emulation
 * writes them, kernels only read them. */
static bool builtin(uintptr_t a) {
    const dim3 *const v[] = {&cuemu_thread_idx, &cuemu_block_idx, &cuemu_block_dim,
                             &cuemu_grid_dim};
    for (const dim3 *d : v)
        if (a >= (uintptr_t)d && a < (uintptr_t)(d + 1)) return true;
    return false;
}

static void access(const volatile void *p, size_t size, bool write) {
    const uintptr_t a = (uintptr_t)p, frame = (uintptr_t)__builtin_frame_address(0);
    const bool stack = a > frame - (1u << 20) && a < frame + (1u << 20); /* this thread's */
    if (counting()) { /* the trace's counts instead of the race checks */
        count_access((const void *)p, size, write, !stack && !builtin(a));
        return;
    }
    const int me = running_thread();
    if (me < 0) return;
    if (stack) return;
    if (!shadow) shadow = new std::unordered_map<uintptr_t, cell>();
    const bool shared = !find_mapping((const void *)a) && !builtin(a); /* not device memory */
    for (uintptr_t w = a; w < a + size; w++) { /* each byte: 16-bit neighbours do not race */
        cell &c = (*shadow)[w];
        if (c.interval != interval) c = {interval, -1, -1, false, c.written_block};
        if (write) c.written_block = block_no;
        else if (shared && c.written_block != block_no) stale(w, me);
        if (c.writer >= 0 && c.writer != me) race(w, c.writer, true, me, write);
        if (write) {
            if (c.readers || (c.reader >= 0 && c.reader != me)) race(w, c.reader, false, me, true);
            c.writer = me;
        } else if (c.reader < 0) {
            c.reader = me;
        } else if (c.reader != me) {
            c.readers = true;
        }
    }
}

}  // namespace cuemu

/* The entry points g++'s -fsanitize=thread instrumentation calls. */
extern "C" {
#define CUEMU_TSAN_RW(n)                                                                     \
    void __tsan_read##n(void *p) { cuemu::access(p, n, false); }                             \
    void __tsan_write##n(void *p) { cuemu::access(p, n, true); }                             \
    void __tsan_unaligned_read##n(void *p) { cuemu::access(p, n, false); }                   \
    void __tsan_unaligned_write##n(void *p) { cuemu::access(p, n, true); }                   \
    void __tsan_volatile_read##n(void *p) { cuemu::access(p, n, false); }                    \
    void __tsan_volatile_write##n(void *p) { cuemu::access(p, n, true); }
CUEMU_TSAN_RW(1)
CUEMU_TSAN_RW(2)
CUEMU_TSAN_RW(4)
CUEMU_TSAN_RW(8)
CUEMU_TSAN_RW(16)
#undef CUEMU_TSAN_RW
void __tsan_read_range(void *p, unsigned long size) { cuemu::access(p, size, false); }
void __tsan_write_range(void *p, unsigned long size) { cuemu::access(p, size, true); }
void __tsan_init(void) { cuemu::count_instrumented(); }
void __tsan_func_entry(void *caller) { (void)caller; }
void __tsan_func_exit(void) {}
void __tsan_vptr_update(void **vptr, void *value) { (void)vptr, (void)value; }
void __tsan_vptr_read(void **vptr) { (void)vptr; }
}
