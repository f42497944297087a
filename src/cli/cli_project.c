/* `bertrain bench --project` (cli_project.h). */
#define _POSIX_C_SOURCE 200809L
#include "cli_project.h"


#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

bool project_setup(bench_projection *pr, const char *cards, const char *counts) {
    memset(pr, 0, sizeof *pr);
    for (const char *p = cards; *p;) {
        const size_t len = strcspn(p, ",");
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(len < 255 ? len : 255), p);
        if (pr->n_cards == BENCH_MAX_CARDS) {
            fprintf(stderr, "bertrain bench: --project: at most %d cards\n", BENCH_MAX_CARDS);
            return false;
        }
        if (!proj_card_get(name, &pr->cards[pr->n_cards++], pr->err, sizeof pr->err)) {
            fprintf(stderr, "bertrain bench: --project: %s\n", pr->err);
            return false;
        }
        p += len + (p[len] == ',');
    }
    pr->counts = counts && *counts ? counts : getenv("CUDA_EMU_TRACE");
    if (!pr->counts || !*pr->counts) {
        fprintf(stderr, "bertrain bench: --project: no counts of the device's work: run on the "
                        "emulated CUDA device built to count (tests/cuda-emu-count.sh) with "
                        "CUDA_EMU_TRACE=FILE, or name its trace with --counts FILE\n");
        return false;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    pr->t_start = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    return true;
}

/* Whether the trace file was written since the bench began. */
static bool written_by_this_run(const bench_projection *pr) {
    struct stat st;
    if (stat(pr->counts, &st) != 0) return false;
    return (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9 >= pr->t_start - 1e-3;
}

void project_after_step(bench_projection *pr, const bt_profiler *p) {
    if (pr->failed) return;
    if (!p) {
        snprintf(pr->err, sizeof pr->err, "the backend was opened without its profiler");
        pr->failed = true;
        return;
    }
    if (!pr->f) {
        if (!written_by_this_run(pr) || !(pr->f = fopen(pr->counts, "r"))) {
            snprintf(pr->err, sizeof pr->err, "no counts of the device's work: %s was not "
                     "written by this run (only the emulated CUDA device, cuda-emu, writes "
                     "them)", pr->counts);
            pr->failed = true;
            return;
        }
    }
    const int n = bt_profile_step_len(p);
    proj_event *ev = calloc((size_t)(n > 0 ? n : 1), sizeof *ev);
    if (!ev) {
        snprintf(pr->err, sizeof pr->err, "out of host memory");
        pr->failed = true;
        return;
    }
    for (int i = 0; i < n; i++)
        bt_profile_step_op(p, i, &ev[i].name, &ev[i].mark_before, &ev[i].mark_after);
    clearerr(pr->f);
    char why[256];
    if (!proj_read_step(pr->f, ev, n, &pr->step, why, sizeof why)) {
        snprintf(pr->err, sizeof pr->err, "%s: %s", pr->counts, why);
        pr->failed = true;
    }
    free(ev);
}

int project_report(bench_projection *pr, const bt_profiler *p, FILE *out) {
    int rc = 0;
    if (!pr->failed && !pr->step.counted) {
        snprintf(pr->err, sizeof pr->err, "%s has no counts of global memory: the emulated "
                 "device's kernels were not compiled to count (-fsanitize=thread; "
                 "tests/cuda-emu-count.sh builds such a plugin)", pr->counts);
        pr->failed = true;
    }
    if (pr->failed) {
        fprintf(stderr, "bertrain bench: --project: %s\n", pr->err);
        rc = 1;
    } else {
        const bt_profile_summary s = bt_profile_summarize(p);
        pr->step.round_trips = s.host_reads + s.host_syncs;
        proj_print(&pr->step, pr->cards, pr->n_cards, out);
    }
    if (pr->f) fclose(pr->f);
    proj_step_free(&pr->step);
    return rc;
}
