/* bertrain backend conformance suite.
 *
 *   conformance [--backend SPEC]... [--op NAME] [--seed N] [--quick] [--threads-check]
 *   conformance --perf [--backend SPEC]... [--op NAME]
 *
 * Checks every op of the bt_backend dispatch table (backends/backend.h) on one
 * or more backends against the float64 references of conformance_ref.c, using
 * only the public interface (alloc/upload/download and the ops). Every tensor
 * lives in a larger device buffer with sentinel guard bands on both sides;
 * every op runs twice and must give the same bits; inputs must come back
 * unchanged. Backward ops are compared with analytic float64 gradients, which
 * are in turn checked against finite differences of the float64 forwards.
 *
 * One line per check: op, shape, backend, metric (NMSE unless noted), PASS|FAIL;
 * then "N passed, N failed, N skipped". Exit 1 on any failure, 77 when
 * everything was skipped, 0 otherwise. --perf checks nothing: it times each
 * op at its largest shape (conformance_perf.c).
 *
 * This file holds the driver (arguments, backend loop, summary);
 * conformance_harness.c the shared harness; conformance_ops_*.c the checks,
 * by op family (declared in conformance_ops.h). */
#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/registry.h"
#include "harness.h"
#include "ops.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ================= driver ================= */

static void run_pass(bt_backend *be) {
    thread_check_restart();
    test_memory(be);
    test_vector_ops(be);
    test_gemm(be);
    test_gemm16(be);
    test_gemm_grid(be);
    test_gemm16_epilogues(be);
    test_bias(be);
    test_embed(be);
    test_layernorm(be);
    test_activations(be);
    test_softmax(be);
    test_dropout(be);
    test_layernorm_bwd_dropout(be);
    test_dropout_rows(be);
    test_gather_scatter(be);
    test_xent(be);
    test_reductions(be);
    test_deferred_reductions(be);
    test_optimizers(be);
    test_multi_optimizers(be);
    test_step_gate(be);
    test_fused(be);
    test_attention(be);
    test_cast(be);
    test_round16(be);
    test_nan_propagation(be);
    test_profiling(be);
    test_graphs(be);
    be->destroy(be);
    if (want_op("destroy")) {
        verdict v = v_new();
        v_report(&v, "destroy", "returned");
    }
    g_check_references = false; /* the references are backend-independent: check them once */
}

static void usage(FILE *f) {
    fprintf(f, "usage: conformance [--backend SPEC]... [--op NAME] [--seed N] [--quick] "
               "[--threads-check]\n"
               "       conformance --perf [--backend SPEC]... [--op NAME]\n"
               "  SPEC: cpu (default), opencl[:P:D], cuda[:N], auto, all, or a comma list\n");
}

int main(int argc, char **argv) {
    char specs[16][64];
    int nspec = 0;
    bool threads_check = false, perf = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "--backend") && more) {
            char list[1024];
            snprintf(list, sizeof list, "%s", argv[++i]);
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                if (!strcmp(tok, "all")) {
                    char built[256];
                    snprintf(built, sizeof built, "%s", bt_backends_built());
                    for (char *p = built, *e; *p && nspec < 16; p = e + (*e != 0)) {
                        e = p + strcspn(p, " ");
                        snprintf(specs[nspec++], sizeof specs[0], "%.*s", (int)(e - p), p);
                    }
                } else if (nspec < 16) {
                    snprintf(specs[nspec++], sizeof specs[0], "%s", tok);
                }
            }
        } else if (!strcmp(a, "--op") && more) {
            g_op_filter = argv[++i];
            bool known = false;
            for (int k = 0; k < bt_op_count; k++) known |= !strcmp(g_op_filter, bt_op_names[k]);
            if (!known) {
                fprintf(stderr, "conformance: unknown op '%s'\n", g_op_filter);
                return 2;
            }
        } else if (!strcmp(a, "--seed") && more) {
            g_seed = strtoull(argv[++i], NULL, 0);
        } else if (!strcmp(a, "--quick")) {
            g_quick = true;
        } else if (!strcmp(a, "--threads-check")) {
            threads_check = true;
        } else if (!strcmp(a, "--perf")) {
            perf = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!nspec) snprintf(specs[nspec++], sizeof specs[0], "cpu");
    if (perf) { /* timings only */
        int rc = 0;
        for (int s = 0; s < nspec; s++) {
            char err[256] = "";
            bool nodev = false;
            bt_backend *be = bt_backend_create(specs[s], NULL, err, sizeof err, &nodev);
            if (!be) {
                printf("%s backend %s: %s\n", nodev ? "SKIP" : "FAIL", specs[s], err);
                rc = nodev ? rc : 1;
                continue;
            }
            bt_device_info info;
            be->info(be, &info);
            printf("# %s: %s\n", specs[s], info.name);
            g_backend_name = specs[s];
            run_perf(be);
            be->destroy(be);
        }
        return rc;
    }
    struct timespec t0, t1;
    timespec_get(&t0, TIME_UTC);
    printf("# seed %llu%s\n", (unsigned long long)g_seed, g_quick ? ", quick" : "");
    printf("%-14s %-42s %-12s %-10s %s\n", "op", "shape", "backend", "NMSE", "result");
    int ops = g_op_filter ? 1 : bt_op_count;
    for (int s = 0; s < nspec; s++) {
        if (threads_check && !strcmp(specs[s], "cpu")) {
            /* the OpenMP thread pool is process-wide: 1 thread, then 2 (BLAS runs
             * single-threaded inside the backend's own GEMM tiles) */
            for (int pass = 1; pass <= 2; pass++) {
                bt_backend *be = bt_cpu_backend_create(pass, 1);
                if (!be || !bt_backend_complete(be)) {
                    printf("FAIL backend cpu: cannot create\n");
                    g_n_failed += ops;
                    break;
                }
                g_thread_mode = pass;
                g_backend_name = pass == 1 ? "cpu/t1" : "cpu/t2";
                run_pass(be);
            }
            g_thread_mode = 0;
            continue;
        }
        if (threads_check) printf("# note: --threads-check applies to cpu only\n");
        char err[256] = "";
        bool nodev = false;
        bt_backend *be = bt_backend_create(specs[s], NULL, err, sizeof err, &nodev);
        if (!be) {
            printf("%s backend %s: %s\n", nodev ? "SKIP" : "FAIL", specs[s], err);
            if (nodev)
                g_n_skipped += ops;
            else
                g_n_failed += ops;
            continue;
        }
        g_backend_name = specs[s];
        run_pass(be);
    }
    thread_records_free();
    timespec_get(&t1, TIME_UTC);
    fprintf(stderr, "# %.1f s\n", (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
    printf("%d passed, %d failed, %d skipped\n", g_n_passed, g_n_failed, g_n_skipped);
    if (g_n_failed) return 1;
    return g_n_passed == 0 && g_n_skipped > 0 ? 77 : 0;
}
