/* Kernel launches on the emulated device: the checks a GPU makes at a
 * launch, and running a grid.
 *
 * A grid's blocks run in a shuffled order, spread over CUDA_EMU_WORKERS OS
 * threads. A block's threads are a team of fibers on one OS thread: each
 * runs until it reaches __syncthreads() or returns, in a shuffled order,
 * and the barrier opens when every thread of the block has reached it. A
 * missing barrier therefore shows as a thread reading what another has not
 * written yet (or has overwritten), and a kernel that relies on block order
 * sees another order. After a kernel the guard bytes of every allocation it
 * was handed are checked. */
#include "emu.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <dlfcn.h>
#include <memory>
#include <mutex>
#include <signal.h>
#include <sys/mman.h>
#include <thread>
#include <vector>

#include "fiber.h"

thread_local dim3 cuemu_thread_idx, cuemu_block_idx, cuemu_block_dim, cuemu_grid_dim;

namespace cuemu {

static const int MAX_THREADS = 1024;
static const size_t FIBER_STACK = 64 * 1024, PAGE = 4096;

/* ================= the launch checks ================= */

/* The kernel's name from its symbol ("sum_partial"), else as written. */
static std::string kernel_name(const kernel_launch &l) {
    Dl_info info;
    if (dladdr((void *)l.kernel, &info) && info.dli_sname) {
        int status = 0;
        char *d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
        std::string s = d && status == 0 ? d : info.dli_sname;
        free(d);
        size_t paren = s.find('(');
        return paren == std::string::npos ? s : s.substr(0, paren);
    }
    return l.name;
}

/* One queued launch: the launch, its own copy of the name, and whether its
 * arguments already failed the checks (then it faults instead of running). */
struct queued_kernel {
    kernel_launch l;
    std::string name;
    bool bad_pointer = false;
    std::vector<const allocation *> touched; /* allocations its pointers point into */
    ~queued_kernel() {
        if (l.args) l.free_args(l.args);
    }
};

/* Limits as a GPU checks them: an invalid configuration is an error of the
 * launch itself (cudaGetLastError). */
static bool launch_config_ok(const kernel_launch &l, const char *name) {
    const dim3 g = l.grid, b = l.block;
    const unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    const char *why = nullptr;
    char buf[160];
    if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z)
        why = "a zero grid or block dimension";
    else if (threads > MAX_THREADS) {
        snprintf(buf, sizeof buf, "%llu threads per block exceed %d", threads, MAX_THREADS);
        why = buf;
    } else if (b.z > 64) {
        why = "block z above 64";
    } else if (g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
        snprintf(buf, sizeof buf, "grid (%u, %u, %u) exceeds (2^31-1, 65535, 65535)", g.x, g.y,
                 g.z);
        why = buf;
    }
    if (why) {
        report("kernel %s: invalid launch: %s", name, why);
        record(cudaErrorInvalidConfiguration);
        return false;
    }
    const size_t shared = static_shared_bytes(name) + l.dynamic_shared;
    if (shared > 48 * 1024) {
        report("kernel %s: %zu bytes of shared memory exceed 48 KiB", name, shared);
        record(cudaErrorInvalidValue);
        return false;
    }
    return true;
}

/* The queued form of launch l (arguments owned), its pointer arguments
 * checked against device d's memory; nullptr when its configuration is
 * refused (the error recorded). */
static std::shared_ptr<queued_kernel> queue_form(const kernel_launch &l, int d) {
    auto q = std::make_shared<queued_kernel>();
    q->l = l;
    q->name = kernel_name(l);
    q->l.name = q->name.c_str();
    q->l.pointers = nullptr; /* the caller's array dies with the call */
    if (!launch_config_ok(l, q->l.name)) {
        q->l.args = nullptr; /* the caller still owns them */
        return nullptr;
    }
    for (int i = 0; i < l.n_pointers; i++) {
        const void *p = l.pointers[i];
        char why[256];
        if (!p) continue;
        if (bad_range(p, 0, d, why, sizeof why)) {
            report("kernel %s: pointer argument %d: %s", q->l.name, i + 1, why);
            q->bad_pointer = true;
        } else {
            q->touched.push_back(find_mapping(p));
        }
    }
    return q;
}

/* What running q does on the stream. */
static std::function<void()> run_queued(std::shared_ptr<queued_kernel> q) {
    return [q] {
        if (q->bad_pointer) { /* on a GPU: an illegal address while it runs */
            set_sticky(cudaErrorIllegalAddress);
            return;
        }
        if (!run_grid(q->l)) return;
        for (const allocation *a : q->touched)
            if (!canaries_intact(a)) {
                report("kernel %s wrote outside a device allocation of %zu bytes (its guard "
                       "bytes changed)", q->l.name, a->bytes);
                set_sticky(cudaErrorIllegalAddress);
                return;
            }
    };
}

/* How a graph's node of q takes new arguments and geometry (the same kernel):
 * they are copied now, and checked as a launch's. */
static node_patch patch_of(std::shared_ptr<queued_kernel> q, int d) {
    return [q, d](const cudaKernelNodeParams *p, CUgraphNode_st *node) -> cudaError_t {
        if (p->func != (void *)q->l.kernel || !p->kernelParams || p->extra) {
            report("cudaGraphExecKernelNodeSetParams: node of %s: another kernel, or no "
                   "kernelParams", q->l.name);
            return cudaErrorInvalidValue;
        }
        kernel_launch l = q->l;
        l.grid = p->gridDim;
        l.block = p->blockDim;
        l.dynamic_shared = p->sharedMemBytes;
        l.args = l.make_args(p->kernelParams);
        const void *ptrs[64];
        l.n_pointers = l.pointers_of(l.args, ptrs);
        l.pointers = ptrs;
        std::shared_ptr<queued_kernel> q2 = queue_form(l, d);
        if (!q2) {
            l.free_args(l.args);
            return cudaErrorInvalidConfiguration;
        }
        set_node(node, run_queued(q2), patch_of(q2, d));
        return cudaSuccess;
    };
}

void enqueue_kernel(const kernel_launch &l, cudaStream_t st) {
    if (sticky() != cudaSuccess) {
        l.free_args(l.args);
        record(sticky());
        return;
    }
    const int d = current_device();
    stream *s = stream_of(st, d);
    if (!s) {
        l.free_args(l.args);
        return;
    }
    if (capture_refuses(s)) {
        l.free_args(l.args);
        record(cudaErrorStreamCaptureInvalidated);
        return;
    }
    if (!cfg().has_code) { /* the binary has no code for this architecture */
        l.free_args(l.args);
        record(cudaErrorNoKernelImageForDevice);
        return;
    }
    std::shared_ptr<queued_kernel> q = queue_form(l, d);
    if (!q) {
        l.free_args(l.args);
        return;
    }
    s->push(run_queued(q), patch_of(q, d));
}

/* ================= a team of fibers ================= */

/* xorshift64*: the block and thread orders, from the seed and the launch. */
struct order_rng {
    uint64_t s;
    explicit order_rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
    uint32_t next(uint32_t n) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return (uint32_t)(((s * 0x2545F4914F6CDD1Dull) >> 32) % n);
    }
};

template <typename T> static void shuffle(T *v, size_t n, order_rng &r) {
    for (size_t i = n - 1; i > 0 && n > 1; i--) {
        size_t j = r.next((uint32_t)i + 1);
        T tmp = v[i];
        v[i] = v[j];
        v[j] = tmp;
    }
}

static unsigned gcd(unsigned x, unsigned y) {
    while (y) {
        unsigned t = x % y;
        x = y;
        y = t;
    }
    return x;
}

/* A random order of 0..n-1 that is cheap to walk: k -> (a k + b) mod n with a
 * coprime to n; a fresh a and b for every pass over a block's threads. */
struct affine_order {
    unsigned n = 1, a = 1, pos = 0, left = 0;
    void start(unsigned count, order_rng &r) {
        n = count;
        pos = r.next(n);
        a = 1;
        if (n > 2)
            do a = 1 + r.next(n - 1); while (gcd(a, n) != 1);
        left = n;
    }
    /* the next index, or false at the end of the pass */
    bool next(unsigned *i) {
        if (!left) return false;
        left--;
        *i = pos;
        pos = pos + a >= n ? pos + a - n : pos + a;
        return true;
    }
};

static dim3 unflatten(unsigned i, dim3 d) {
    if (d.y == 1 && d.z == 1) return dim3(i, 0, 0);
    return dim3(i % d.x, i / d.x % d.y, i / (d.x * d.y));
}

enum thread_state { FRESH, WAITING, WARP_WAITING, DONE };

/* A warp's shuffle, ballot or __syncwarp in progress: the lanes that have
 * reached it, where, with which mask and values. */
struct warp_op {
    unsigned arrived = 0, mask = 0;
    int kind = 0;
    const char *file = nullptr;
    int line = 0;
    unsigned long long value[32];
    int src_arg[32];
};

/* What one OS thread needs to run blocks: the fibers with their stacks, and
 * the state of the block being run. A block's threads hand over to each other
 * directly: the one that reaches a barrier (or returns) switches to the next
 * in this pass's order; the last of a pass starts the next pass; the block's
 * end switches back to sched. */
struct team {
    fiber sched;
    fiber fibers[MAX_THREADS];
    thread_state state[MAX_THREADS];
    char *stacks = nullptr;
    const kernel_launch *l = nullptr;
    kernel_site site;
    /* the block being run */
    unsigned n = 0, live = 0, waiting = 0, finished = 0;
    int current = -1;
    int solo = -1; /* the thread running, in a block run thread after thread */
    const char *barrier_file = nullptr; /* the __syncthreads() this pass's threads wait at */
    int barrier_line = 0;
    bool ok = true;
    affine_order order;
    order_rng rng{0};
    /* warps: the operation each is in, results per thread, lanes released */
    warp_op warps[MAX_THREADS / 32];
    unsigned long long warp_result[MAX_THREADS];
    int ready[MAX_THREADS];
    int n_ready = 0, warp_waiting = 0;

    team() {
        const size_t per = FIBER_STACK + PAGE;
        stacks = (char *)mmap(nullptr, per * MAX_THREADS, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (stacks == MAP_FAILED) {
            report("cannot map the fiber stacks");
            abort();
        }
        for (int i = 0; i < MAX_THREADS; i++) {
            mprotect(stacks + i * per, PAGE, PROT_NONE); /* guard below each stack */
            fibers[i].stack = stacks + i * per + PAGE;
            fibers[i].stack_bytes = FIBER_STACK;
        }
        /* the fault handler needs a stack of its own when a fiber's overflows */
        stack_t ss;
        ss.ss_sp = malloc(64 * 1024);
        ss.ss_size = 64 * 1024;
        ss.ss_flags = 0;
        if (ss.ss_sp) sigaltstack(&ss, nullptr);
    }

    /* The next thread to run: the rest of this pass, then a new pass once
     * every live thread waits at the barrier; -1 when the block is over
     * (every thread returned, or they diverged: reported, ok = false). */
    int pick_next() {
        for (;;) {
            unsigned i;
            if (n_ready) return ready[--n_ready]; /* lanes a warp operation released */
            while (order.next(&i))
                if (state[i] != DONE && state[i] != WARP_WAITING) return (int)i;
            if (warp_waiting && ok) {
                report("kernel %s, block (%u,%u,%u): %d threads wait at a warp operation (%s:%d) "
                       "that lanes of its mask never reach (divergent code, or a lane that "
                       "returned)", site.kernel, site.block.x, site.block.y, site.block.z,
                       warp_waiting, first_warp_site(), first_warp_line());
                ok = false;
            }
            if (!ok) return -1;
            live -= finished;
            if (waiting && finished) {
                report("kernel %s, block (%u,%u,%u): %u threads returned while %u wait at "
                       "__syncthreads() (a barrier in divergent code)", site.kernel,
                       site.block.x, site.block.y, site.block.z, finished, waiting);
                ok = false;
            }
            if (!ok || live == 0) return -1;
            waiting = finished = 0;
            barrier_file = nullptr;
            race_new_interval(); /* every thread passed the barrier */
            order.start(n, rng);
        }
    }

    const char *first_warp_site() const {
        for (const warp_op &w : warps)
            if (w.arrived) return w.file;
        return "?";
    }
    int first_warp_line() const {
        for (const warp_op &w : warps)
            if (w.arrived) return w.line;
        return 0;
    }

    /* Leave fiber `from` for the next thread (or sched at the block's end). */
    void switch_next(fiber *from) {
        const int i = pick_next();
        if (i < 0) {
            current = -1;
            fiber_switch(from, &sched);
            return;
        }
        current = i;
        cuemu_thread_idx = unflatten((unsigned)i, l->block);
        site.thread = cuemu_thread_idx;
        fiber_switch(from, &fibers[i]);
    }
};

static thread_local team *my_team;
static thread_local const kernel_site *my_site;

const kernel_site *running_kernel() { return my_site; }

int running_thread() {
    if (!my_site || !my_team) return -1;
    return my_team->current >= 0 ? my_team->current : my_team->solo;
}

void fail_running_block() {
    if (my_team) my_team->ok = false;
}

static team *get_team() {
    if (!my_team) my_team = new team(); /* one per OS thread, for the life of the process */
    return my_team;
}

static void fiber_main(void *arg) {
    team *t = (team *)arg;
    t->l->run(t->l->kernel, t->l->args);
    t->state[t->current] = DONE;
    t->finished++;
    t->switch_next(&t->fibers[t->current]);
    abort(); /* a returned thread is never resumed */
}

}  // namespace cuemu

using namespace cuemu;

/* A warp operation (cuda_runtime.h's __shfl_*_sync, __ballot_sync,
 * __syncwarp): the lanes of `mask` meet here, as at a barrier of their own;
 * the last to arrive computes every lane's result and releases the others.
 * A lane outside its mask, lanes of one mask at different operations or with
 * different masks, a lane reading from one outside the mask, and lanes that
 * never arrive are reported, and the launch fails. */
unsigned long long cuemu_warp_op(int kind, unsigned mask, unsigned long long value, int arg,
                                 const char *file, int line) {
    static const char *const names[] = {"__shfl_sync", "__shfl_down_sync", "__shfl_up_sync",
                                        "__shfl_xor_sync", "__ballot_sync", "__syncwarp"};
    team *t = my_team;
    if (!t || !my_site || t->current < 0) {
        report("%s at %s:%d outside a kernel with __shared__ memory (the emulation runs only such "
               "kernels' threads as a team)", names[kind], file, line);
        abort();
    }
    const int me = t->current, lane = me % 32, w = me / 32;
    warp_op &op = t->warps[w];
    auto fail = [&](const char *why) {
        if (t->ok)
            report("kernel %s, block (%u,%u,%u), thread %d: %s at %s:%d: %s", t->site.kernel,
                   t->site.block.x, t->site.block.y, t->site.block.z, me, names[kind], file, line,
                   why);
        t->ok = false;
    };
    if (!(mask >> lane & 1u)) {
        fail("the lane is not in its mask");
        return value;
    }
    if (!op.arrived) {
        op.mask = mask;
        op.kind = kind;
        op.file = file;
        op.line = line;
    } else if (op.mask != mask || op.kind != kind || op.line != line || strcmp(op.file, file)) {
        fail("lanes of the warp are at different warp operations or masks (divergent)");
        return value;
    }
    op.value[lane] = value;
    op.src_arg[lane] = arg;
    op.arrived |= 1u << lane;
    if (op.arrived != mask) { /* wait for the rest of the mask */
        t->state[me] = WARP_WAITING;
        t->warp_waiting++;
        t->switch_next(&t->fibers[me]);
        return t->warp_result[me]; /* released by the last lane */
    }
    unsigned long long ballot = 0;
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1u) ballot |= (unsigned long long)(op.value[l] != 0ull) << l;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u)) continue;
        const int a = op.src_arg[l];
        int src = l;
        switch (kind) {
        case 0: src = a & 31; break;
        case 1: src = l + a < 32 ? l + a : l; break;
        case 2: src = l - a >= 0 ? l - a : l; break;
        case 3: src = (l ^ a) & 31; break;
        }
        if (kind <= 3 && !(mask >> src & 1u)) {
            fail("a lane reads from a lane outside the mask");
            src = l;
        }
        t->warp_result[w * 32 + l] = kind == 4 ? ballot : kind == 5 ? 0 : op.value[src];
        if (l != lane) { /* release it */
            t->state[w * 32 + l] = FRESH;
            t->warp_waiting--;
            t->ready[t->n_ready++] = w * 32 + l;
        }
    }
    op.arrived = 0;
    return t->warp_result[me];
}

void cuemu_check_block(unsigned threads, const char *file, int line) {
    if (cuemu_block_dim.x == threads && cuemu_block_dim.y == 1 && cuemu_block_dim.z == 1 &&
        cuemu_grid_dim.y == 1 && cuemu_grid_dim.z == 1)
        return;
    report("kernel %s assumes 1-D blocks of %u threads (%s:%d) and runs in blocks of "
           "(%u,%u,%u), a grid of (%u,%u,%u)",
           my_site ? my_site->kernel : "?", threads, file, line, cuemu_block_dim.x,
           cuemu_block_dim.y, cuemu_block_dim.z, cuemu_grid_dim.x, cuemu_grid_dim.y,
           cuemu_grid_dim.z);
    abort();
}

void cuemu_syncthreads(const char *file, int line) {
    team *t = my_team;
    if (!t || !my_site) {
        report("__syncthreads() outside a kernel");
        abort();
    }
    if (t->current < 0) {
        report("kernel %s: __syncthreads() in a kernel without __shared__ memory: the emulation "
               "runs such kernels' threads one after another (tests/cuda_emu/launch.cpp)",
               my_site->kernel);
        abort();
    }
    const int me = t->current;
    /* a barrier is its place in the source (the optimizer may copy its code) */
    if (t->waiting++ == 0) {
        t->barrier_file = file;
        t->barrier_line = line;
    }
    if ((line != t->barrier_line || strcmp(file, t->barrier_file) != 0) && t->ok) {
        report("kernel %s, block (%u,%u,%u): threads wait at different __syncthreads() (%s:%d "
               "and %s:%d)",
               t->site.kernel, t->site.block.x, t->site.block.y, t->site.block.z,
               t->barrier_file, t->barrier_line, file, line);
        t->ok = false;
    }
    t->state[me] = WAITING;
    t->switch_next(&t->fibers[me]);
}

namespace cuemu {

/* Run block `bidx` of l: as a team of fibers when the kernel has shared
 * memory (the kernels that meet at barriers), else each thread to its end in
 * turn, in a shuffled order (a __syncthreads() there is reported). false
 * when the threads diverged at a barrier (reported). */
static bool run_block(team *t, const kernel_launch &l, dim3 bidx, bool as_team, uint64_t seed) {
    const unsigned n = l.block.x * l.block.y * l.block.z;
    t->l = &l;
    t->site.kernel = l.name;
    t->site.block = bidx;
    t->rng = order_rng(seed);
    my_site = &t->site;
    cuemu_block_idx = bidx;
    cuemu_block_dim = l.block;
    cuemu_grid_dim = l.grid;
    t->current = -1;
    race_new_block();
    count_block_begin(n);
    if (as_team) {
        for (unsigned i = 0; i < n; i++) {
            t->state[i] = FRESH;
            fiber_prepare(&t->fibers[i], fiber_main, t);
        }
        t->n = t->live = n;
        t->waiting = t->finished = 0;
        t->n_ready = t->warp_waiting = 0;
        for (warp_op &w : t->warps) w.arrived = 0;
        t->barrier_file = nullptr;
        t->ok = true;
        t->order.start(n, t->rng);
        t->switch_next(&t->sched); /* back when the block is over */
    } else {
        t->ok = true;
        t->order.start(n, t->rng);
        unsigned i;
        while (t->order.next(&i)) {
            cuemu_thread_idx = unflatten(i, l.block);
            t->site.thread = cuemu_thread_idx;
            t->solo = (int)i;
            l.run(l.kernel, l.args);
        }
    }
    count_block_end();
    t->current = -1;
    t->solo = -1;
    my_site = nullptr;
    return t->ok;
}

/* ================= the grid over OS threads ================= */

/* One grid being run: the blocks in their shuffled order, taken in turn. */
struct grid_job {
    const kernel_launch *l;
    bool as_team; /* threads as a team of fibers (the kernel has shared memory) */
    std::vector<unsigned> blocks;
    std::atomic<size_t> next{0};
    std::atomic<bool> ok{true};
    uint64_t seed;
};

static void run_blocks(grid_job *g) {
    team *t = get_team();
    for (;;) {
        size_t k = g->next.fetch_add(1);
        if (k >= g->blocks.size() || !g->ok.load()) return;
        if (!run_block(t, *g->l, unflatten(g->blocks[k], g->l->grid), g->as_team,
                       g->seed ^ (k + 1) * 0xD1B54A32D192ED03ull))
            g->ok = false;
    }
}

/* The workers beside the thread that flushes: each waits for a grid. */
class pool {
    std::mutex m;
    std::condition_variable cv, done_cv;
    grid_job *job = nullptr;
    uint64_t generation = 0;
    int busy = 0;
    std::vector<std::thread> threads;

    void work() {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lk(m);
        for (;;) {
            cv.wait(lk, [&] { return generation != seen; });
            seen = generation;
            grid_job *g = job;
            lk.unlock();
            run_blocks(g);
            lk.lock();
            if (--busy == 0) done_cv.notify_all();
        }
    }

  public:
    explicit pool(int extra) {
        for (int i = 0; i < extra; i++) threads.emplace_back([this] { work(); });
        for (auto &t : threads) t.detach();
    }
    void run(grid_job *g) {
        {
            std::lock_guard<std::mutex> lk(m);
            job = g;
            busy = (int)threads.size();
            generation++;
        }
        cv.notify_all();
        run_blocks(g);
        std::unique_lock<std::mutex> lk(m);
        done_cv.wait(lk, [&] { return busy == 0; });
    }
};

bool run_grid(const kernel_launch &l) {
    static std::atomic<uint64_t> launches{0};
    static pool *workers = new pool(cfg().workers - 1);
    grid_job g;
    g.l = &l;
    g.as_team = l.dynamic_shared > 0 || static_shared_bytes(l.name) > 0;
    const unsigned n = l.grid.x * l.grid.y * l.grid.z;
    g.blocks.resize(n);
    for (unsigned i = 0; i < n; i++) g.blocks[i] = i;
    g.seed = cfg().seed * 0x9E3779B97F4A7C15ull + launches.fetch_add(1);
    order_rng rng(g.seed);
    shuffle(g.blocks.data(), n, rng);
    count_launch_begin();
    if (n == 1 || cfg().workers == 1)
        run_blocks(&g);
    else
        workers->run(&g);
    count_launch_end(l);
    if (!g.ok.load()) set_sticky(cudaErrorLaunchFailure);
    return g.ok.load();
}

}  // namespace cuemu
