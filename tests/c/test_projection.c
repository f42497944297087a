/* The projection's arithmetic (src/util/projection.c) on a hand-made trace
 * and card, against figures worked out by hand:
 *
 * card: 2 SMs, 100 GB/s, fp32 1, tf32 2, 16-bit 4 TFLOP/s, shared memory
 *       2 TB/s (a file)
 * step: op "fill"  mark 0..1: a kernel of 8 blocks x 512 threads (4096 =
 *                  2 x 2048: occupancy 1) writing 8e6 bytes, 1 access a
 *                  thread: 8e6 / (0.8 x 1e11) = 100 us, + 4 us launch
 *       op "small" mark 2..3: 1 block x 1024 threads (occupancy 1/4) reading
 *                  4e6 bytes: 4e6 / 8e10 = 50 us, / 0.25 = 200 us, + 4 us
 *       op "serial" mark 4..5: 1 x 1 thread, 1000 bytes, 1e6 accesses:
 *                  12.5 ns / (1/4096) = 51.2 us < 1e6 x 0.5 ns = 500 us, + 4 us
 *       op "gemm"  mark 6..7: fp32 1.4e9 FLOPs: 1.4e9 / 0.7e12 = 2000 us,
 *                  + 4 us; 16-bit 2.8e9: 1000 us + 4 us; a d2d copy of 8e6
 *                  bytes: 1.6e7 / 8e10 = 200 us + 4 us
 *       op "shared" mark 8..9: 1 block x 256 threads, 800 bytes of global
 *                  memory (160 ns) and 4e8 of shared memory: 4e8 / (0.8 x
 *                  2e12) = 250 us over the half of the SMs one block fills
 *                  = 500 us, + 4 us (the other launches are in the trace's
 *                  format without SHARED, which counts 0)
 *       outside ops: an h2d copy between marks 1 and 2: 4 us (a launch
 *                  before mark 0 is not the step's: left out)
 *       2 host round trips: 40 us
 * step = 104 + 204 + 504 + 2004 + 1004 + 204 + 504 + 4 + 40 = 4572 us;
 * MFU = 4.2e9 / (4.572e-3 x 4e12) = 22.97%. */
#define _POSIX_C_SOURCE 200809L
#include "src/util/projection.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static int failures;

static void near(const char *what, double got, double want) {
    if (fabs(got - want) > 1e-9 * fabs(want) + 1e-12) {
        printf("FAIL %s: %.9g, expected %.9g\n", what, got, want);
        failures++;
    } else {
        printf("ok   %s: %.9g\n", what, got);
    }
}

int main(void) {
    char path[] = "/tmp/test_projection.XXXXXX";
    FILE *card_file = fdopen(mkstemp(path), "w");
    fputs("# a made-up card\nname tiny\nsms 2\nhbm_gbs 100\nfp32_tflops 1\ntf32_tflops 2\n"
          "f16_tflops 4\nsmem_tbs 2\n", card_file);
    fclose(card_file);
    proj_card card;
    char err[256];
    if (!proj_card_get(path, &card, err, sizeof err)) {
        printf("FAIL card: %s\n", err);
        return 1;
    }
    remove(path);
    near("card sms", card.sms, 2);
    near("card f16", card.f16, 4);
    FILE *t = tmpfile();
    fputs("cuda-emu trace counted 1\nlaunch bt_before 1 1 1 1 1 1 4 4 1\nmark\n"
          "launch bt_fill 8 1 1 512 1 1 0 8000000 1\nmark\ncopy h2d 64\nmark\nlaunch bt_x 1 1 1 1024 1 1 4000000 0 7\nmark\n"
          "mark\nlaunch bt_y 1 1 1 1 1 1 500 500 1000000\nmark\n"
          "mark\ngemm fp32 1 1 1 1 1400000000\ngemm bf16 1 1 1 1 2800000000\ncopy d2d 8000000\n"
          "mark\nmark\nlaunch bt_s 1 1 1 256 1 1 800 0 1 400000000\nmark\n", t);
    rewind(t);
    const proj_event ev[] = {{"fill", 0, 1},   {"small", 2, 3}, {"serial", 4, 5},
                             {"gemm", 6, 7},   {"shared", 8, 9}};
    proj_step s = {0};
    if (!proj_read_step(t, ev, 5, &s, err, sizeof err)) {
        printf("FAIL read: %s\n", err);
        return 1;
    }
    fclose(t);
    s.round_trips = 2;
    near("ops", s.n_ops, 6);
    const double want[] = {104e-6, 204e-6, 504e-6, 3212e-6, 504e-6, 4e-6};
    const char *names[] = {"fill", "small", "serial", "gemm", "shared", "(outside ops)"};
    double step = 0.0;
    for (int i = 0; i < 6; i++) {
        const proj_op *o = NULL;
        for (int j = 0; j < s.n_ops; j++)
            if (!strcmp(s.ops[j].name, names[i])) o = &s.ops[j];
        if (!o) {
            printf("FAIL no op %s\n", names[i]);
            return 1;
        }
        double sec = 0.0;
        for (int k = 0; k < o->n_work; k++) sec += proj_seconds(&card, &o->work[k]);
        near(names[i], sec, want[i]);
        step += sec;
    }
    step += 2 * 20e-6;
    near("step", step, 4572e-6);
    double mfu;
    near("proj_step_seconds", proj_step_seconds(&s, &card, &mfu), 4572e-6);
    near("MFU", mfu, 4.2 / (4.572 * 4.0));
    /* as 2 CUDA Graphs: each of the 8 pieces launched at 1 us, each graph at 4 */
    s.graph_launches = 2;
    near("proj_step_seconds in 2 graphs", proj_step_seconds(&s, &card, NULL),
         4572e-6 - 8 * 3e-6 + 2 * 4e-6);
    proj_print(&s, &card, 1, stdout);
    proj_step_free(&s);
    if (!proj_card_get("h100-sxm", &card, err, sizeof err) || card.sms != 132) failures++;
    near("h100-sxm shared memory TB/s", card.smem_tbs, 132 * 128 * 1.98e-3);
    if (proj_card_get("no-such-card", &card, err, sizeof err)) failures++;
    printf("%s\n", failures ? "FAIL" : "PASS: the projection's arithmetic");
    return failures ? 1 : 0;
}
