/* Checks of the CUDA backend that need the emulated device's runtime in hand
 * (tests/cuda-emu.sh runs them):
 *
 *   test_cuda_emu device-switch
 *     Backends on cuda-emu:0 and cuda-emu:1 used in turn from one thread,
 *     with another library's cudaSetDevice between their calls (a CUDA-aware
 *     MPI does that): every op must still go to its own device. A backend
 *     that trusted a cached current device would launch into device 0's
 *     stream while device 1 is current, which the runtime refuses.
 *
 *   test_cuda_emu sync-flags
 *     The backend's device waits by blocking (cudaDeviceScheduleBlockingSync):
 *     a rank waiting for its GPU leaves its core to the node's other ranks.
 *
 *   test_cuda_emu fault
 *     A fill that runs 3 elements past the end of its buffer, then a
 *     download: the kernel's write outside the allocation is a fault, which a
 *     GPU reports at the next synchronisation (the download), or at the
 *     launch itself with BERTRAIN_CUDA_SYNC=1. Exits non-zero with the
 *     backend's message; the caller checks where it points.
 *
 *   test_cuda_emu count
 *     What tests/cuda-emu-count.sh counts in the trace (CUDA_EMU_TRACE): a
 *     fill of 1000 floats, an add of 1000 floats (out = a + b), a 1-batch
 *     fp32 GEMM of m 8, n 16, k 32, then a download of the sum.
 *
 *   test_cuda_emu upload-async
 *     8 uploads of 1000 floats (upload k holds k), the host source rewritten
 *     at once after each, then one download: every segment must hold its own
 *     value. The emulated device copies from page-locked memory when its
 *     stream runs, at the next wait, so a staging slot reused before its copy
 *     ran would deliver a later upload's values. The uploads must not block
 *     (host_writes 0), and of the 8 only the fifth waits, for the first
 *     copy from its slot (host_syncs 1, the ring holding 4).
 *
 *   test_cuda_emu download-async
 *     A fill, a download_async of it into host_alloc memory, then a fill of
 *     another buffer: the copy has not arrived before a wait (the emulated
 *     device runs queued work only at a wait, so a caller that read its
 *     values early would see the old ones); one wait (host_syncs 1) runs the
 *     stream up to the copy, and then the values are there; the later fill
 *     still lands. An upload_async from host_alloc memory is read when the copy
 *     runs (page-locked: the host's later write reaches the device), and no
 *     async copy blocks (host_reads and host_writes 0).
 *
 * The emulated runtime's cudaSetDevice is reached with dlsym in the plugin
 * the backend loaded (BERTRAIN_CUDA_EMU names it). */
#include "backends/backend.h"
#include "backends/registry.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bt_backend *open_emu(const char *spec) {
    char err[512];
    bool no_device = false;
    bt_backend *be = bt_backend_create(spec, NULL, err, sizeof err, &no_device);
    if (!be) {
        fprintf(stderr, "test_cuda_emu: %s: %s\n", spec, err);
        exit(no_device ? 77 : 1);
    }
    return be;
}

/* fill, scale and a 1x1x1 gemm on be, then the values back: true when they
 * are what they must be */
static bool ops_land(bt_backend *be, float value) {
    bt_buffer *b = be->alloc(be, 4 * sizeof(float));
    bt_ptr p = {b, 0};
    be->fill(be, p, value, 3);
    be->scale(be, p, 2.0f, 3);
    be->gemm(be, false, false, 1, 1, 1, 1.0f, p, 1, 0, bt_at(p, 1), 1, 0, 0.0f, bt_at(p, 3), 1,
             0, 1);
    float got[4];
    be->download(be, got, p, sizeof got);
    be->free(be, b);
    const float v = 2 * value;
    return got[0] == v && got[1] == v && got[2] == v && got[3] == v * v;
}

static int device_switch(void) {
    bt_backend *a = open_emu("cuda-emu:0"), *b = open_emu("cuda-emu:1");
    const char *path = getenv("BERTRAIN_CUDA_EMU");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    int (*set_device)(int) = h ? (int (*)(int))dlsym(h, "cudaSetDevice") : NULL;
    if (!set_device) {
        fprintf(stderr, "test_cuda_emu: cudaSetDevice not found in $BERTRAIN_CUDA_EMU (%s)\n",
                path ? path : "unset");
        return 1;
    }
    int bad = 0;
    for (int round = 0; round < 3; round++) {
        set_device(1); /* another library's cudaSetDevice */
        bad += !ops_land(a, 1.5f + round);
        set_device(0);
        bad += !ops_land(b, 2.5f + round);
        bad += !ops_land(a, 3.5f + round);
    }
    a->destroy(a);
    b->destroy(b);
    printf("device-switch: %s (9 rounds of ops on cuda-emu:0 and :1 with cudaSetDevice between)\n",
           bad ? "FAIL" : "PASS");
    return bad ? 1 : 0;
}

/* The backend asks its device to block, not spin, while the host waits
 * (cudaDeviceScheduleBlockingSync): read back from the emulated runtime. */
static int sync_flags(void) {
    bt_backend *be = open_emu("cuda-emu:0");
    const char *path = getenv("BERTRAIN_CUDA_EMU");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    int (*get_flags)(unsigned *) = h ? (int (*)(unsigned *))dlsym(h, "cudaGetDeviceFlags") : NULL;
    unsigned flags = 0;
    if (!get_flags || get_flags(&flags) != 0) {
        fprintf(stderr, "test_cuda_emu: cudaGetDeviceFlags not found or failed in $BERTRAIN_CUDA_EMU\n");
        return 1;
    }
    be->destroy(be);
    const bool blocking = (flags & 0x07u) == 0x04u; /* cudaDeviceScheduleBlockingSync */
    printf("sync-flags: %s (scheduling flags 0x%x)\n", blocking ? "PASS: a waiting host thread blocks"
                                                              : "FAIL: the host thread may spin",
           flags & 0x07u);
    return blocking ? 0 : 1;
}

static int fault(void) {
    bt_backend *be = open_emu("cuda-emu:0");
    bt_buffer *b = be->alloc(be, 100 * sizeof(float));
    bt_ptr p = {b, 0};
    be->fill(be, bt_at(p, 97), 1.0f, 6); /* elements 97..102 of 100 */
    float got[100];
    be->download(be, got, p, sizeof got);
    printf("fault: the download returned: the write past the end went unnoticed\n");
    return 0;
}

static int count(void) {
    enum { N = 1000 };
    bt_backend *be = open_emu("cuda-emu:0");
    bt_buffer *b = be->alloc(be, 3 * N * sizeof(float));
    bt_ptr p = {b, 0};
    be->fill(be, p, 1.0f, 2 * N);
    be->fill(be, p, 2.0f, N);
    be->add(be, bt_at(p, 2 * N), p, bt_at(p, N), N);
    be->gemm(be, false, false, 8, 16, 32, 1.0f, p, 32, 0, bt_at(p, N), 16, 0, 0.0f,
             bt_at(p, 2 * N), 16, 0, 1);
    float got[N];
    be->download(be, got, bt_at(p, 2 * N + 128), sizeof got / 2);
    be->free(be, b);
    be->destroy(be);
    printf("count: %g (expected 3)\n", (double)got[0]);
    return got[0] == 3.0f ? 0 : 1;
}

static int upload_async(void) {
    enum { N = 1000, K = 8 };
    bt_backend *be = open_emu("cuda-emu:0");
    bt_buffer *b = be->alloc(be, (size_t)K * N * sizeof(float));
    bt_counters before, after;
    be->counters(be, &before);
    static float host[N], got[K * N];
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++) host[i] = (float)k;
        be->upload(be, (bt_ptr){b, (size_t)k * N * sizeof(float)}, host, sizeof host);
        for (int i = 0; i < N; i++) host[i] = -1.0f; /* the caller reuses its source */
    }
    be->counters(be, &after);
    be->download(be, got, (bt_ptr){b, 0}, sizeof got);
    int bad = 0;
    for (int i = 0; i < K * N; i++) bad += got[i] != (float)(i / N);
    const long writes = after.host_writes - before.host_writes,
               waits = after.host_syncs - before.host_syncs;
    be->free(be, b);
    be->destroy(be);
    const bool ok = !bad && writes == 0 && waits == 1;
    printf("upload-async: %s (%d of %d values wrong; %ld blocking uploads, %ld waits)\n",
           ok ? "PASS" : "FAIL", bad, K * N, writes, waits);
    return ok ? 0 : 1;
}

static int download_async(void) {
    enum { N = 1000 };
    bt_backend *be = open_emu("cuda-emu:0");
    bt_buffer *b = be->alloc(be, 2 * N * sizeof(float));
    float *h = be->host_alloc(be, N * sizeof(float)), got[N];
    for (int i = 0; i < N; i++) h[i] = -7.0f;
    bt_counters before, after;
    be->counters(be, &before);
    be->fill(be, (bt_ptr){b, 0}, 1.0f, N);
    const long t = be->download_async(be, h, (bt_ptr){b, 0}, N * sizeof(float));
    be->fill(be, bt_at((bt_ptr){b, 0}, N), 2.0f, N); /* issued after: not waited for */
    const bool early = be->downloads_done(be, t, false);
    int stale = 0, bad = 0;
    for (int i = 0; i < N; i++) stale += h[i] == -7.0f;
    const bool waited = be->downloads_done(be, t, true);
    for (int i = 0; i < N; i++) bad += h[i] != 1.0f;
    be->counters(be, &after);
    const long syncs = after.host_syncs - before.host_syncs,
               blocking = after.host_reads - before.host_reads +
                          after.host_writes - before.host_writes;
    for (int i = 0; i < N; i++) h[i] = 3.0f;
    be->upload_async(be, (bt_ptr){b, 0}, h, N * sizeof(float));
    for (int i = 0; i < N; i++) h[i] = 4.0f; /* before the copy runs: page-locked, read late */
    be->download(be, got, (bt_ptr){b, 0}, sizeof got);
    int late = 0;
    for (int i = 0; i < N; i++) late += got[i] == 4.0f;
    be->download(be, got, bt_at((bt_ptr){b, 0}, N), sizeof got);
    int second = 0;
    for (int i = 0; i < N; i++) second += got[i] == 2.0f;
    be->host_free(be, h);
    be->free(be, b);
    be->destroy(be);
    const bool ok = !early && stale == N && waited && !bad && syncs == 1 && blocking == 0 &&
                    late == N && second == N;
    printf("download-async: %s (arrived before a wait: %s; %d of %d values stale before it; %d "
           "wrong after; %ld waits, %ld blocking copies; upload read late: %d of %d; the later "
           "fill: %d of %d)\n",
           ok ? "PASS" : "FAIL", early ? "yes" : "no", stale, N, bad, syncs, blocking, late, N,
           second, N);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "device-switch")) return device_switch();
    if (argc == 2 && !strcmp(argv[1], "fault")) return fault();
    if (argc == 2 && !strcmp(argv[1], "sync-flags")) return sync_flags();
    if (argc == 2 && !strcmp(argv[1], "count")) return count();
    if (argc == 2 && !strcmp(argv[1], "upload-async")) return upload_async();
    if (argc == 2 && !strcmp(argv[1], "download-async")) return download_async();
    fprintf(stderr, "usage: test_cuda_emu device-switch | sync-flags | fault | count | "
                    "upload-async | download-async\n");
    return 2;
}
