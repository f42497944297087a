/* The CPU backend's default thread count (backends/cpu/cpu_threads.c):
 * cpu_cgroup_quota on made-up cgroup trees, each quota worked out by hand,
 * and cpu_default_threads's reasons:
 *   v2:     0::/a/b, a/b/cpu.max "max 100000", a/cpu.max "150000 100000"  -> 1.5
 *   v1:     4:cpu,cpuacct:/x, cpu/x quota 50000 period 100000            -> 0.5
 *   none:   v2 with "max" everywhere                                      -> 0
 *   hybrid: v1 cpu 2.0 and v2 (at unified/) 1.0                           -> 1.0
 *   no /proc/self/cgroup file                                             -> 0
 *   OMP_NUM_THREADS set: 0 threads (OpenMP reads it), reason named;
 *   unset with 2 ranks on the node: at least 1, "shared by 2 ranks".
 * And the governor's decisions (cpu_govern_open/cpu_govern_decide) on made-up
 * samples of a 2-CPU machine, 2 threads at most:
 *   start-up idle: its own threads wait 0.45, others take 0      -> 2
 *   start-up beside a busy process: no wait yet, others take 1.0 -> 1
 *   later windows: waits of 0.67 -> 1; no idle CPU for 3 s -> still 1;
 *     then 0.9 CPUs idle -> 2 (a try); contention at once -> 1, and
 *     the next try waits twice as long (4 s, not 2);
 *   a first window opened at the first GEMM (not at the creation), or
 *     where /proc/stat is unknown: run-queue waits decide it. */
#define _POSIX_C_SOURCE 200809L
#include "backends/cpu/cpu_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int failures;
static char root[256];

static void put(const char *rel, const char *text) {
    char path[512];
    mkdir(root, 0755);
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) { /* parents */
        *p = 0;
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0) {
        printf("FAIL cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void expect(const char *what, const char *proc_rel, double want) {
    char proc[512];
    snprintf(proc, sizeof proc, "%s/%s", root, proc_rel);
    const double got = cpu_cgroup_quota(proc, root);
    const bool ok = fabs(got - want) < 1e-12;
    printf("%s %s: %g CPUs (expected %g)\n", ok ? "ok  " : "FAIL", what, got, want);
    failures += !ok;
}

/* The governor at a look: a sample of a 2-CPU machine at time now (s), with
 * the run-queue wait, idle time and this process's CPU time so far. */
static int look(cpu_ctx *c, double now, double waited, double idle, double own) {
    const cpu_gov_sample s = {.now = now, .waited = waited, .idle = idle, .own = own, .cpus = 2};
    return cpu_govern_decide(c, &s);
}

static void expect_threads(const char *what, int got, int want) {
    printf("%s governor, %s: %d threads (expected %d)\n", got == want ? "ok  " : "FAIL", what, got,
           want);
    failures += got != want;
}

/* A 2-thread governor with its first window opened at time 0. */
static cpu_ctx opened(bool at_creation, double idle) {
    cpu_ctx c = {.threads_max = 2, .threads_now = 2};
    const cpu_gov_sample s = {.now = 0.0, .waited = 0.0, .idle = idle, .own = 0.0, .cpus = 2};
    cpu_govern_open(&c, &s, at_creation);
    return c;
}

static void governor_cases(void) {
    /* 0.2 s of start-up, idle: own 1.8 CPUs, idle 0.2, own threads waiting 0.45 */
    cpu_ctx c = opened(true, 100.0);
    expect_threads("idle start-up, its own threads wait", look(&c, 0.2, 0.09, 100.04, 0.36), 2);
    /* beside a busy process: the main thread alone (1 CPU), no idle CPU */
    c = opened(true, 100.0);
    expect_threads("start-up beside a busy process", look(&c, 0.2, 0.0, 100.0, 0.2), 1);
    /* later windows, 0.1 s each; idle time per window in CPU-seconds */
    c = opened(true, 100.0);
    double t = 0.2, w = 0.0, idle = 100.0, own = 0.36;
    look(&c, t, w, idle += 0.04, own); /* idle start-up: 2 */
    t += 0.1, w += 0.067, own += 0.13;
    expect_threads("waits of 0.67 of a thread", look(&c, t, w, idle, own), 1);
    int n = 0;
    for (int i = 0; i < 30; i++) { /* 3 s beside the busy process: no idle CPU */
        t += 0.1, own += 0.1;
        n = look(&c, t, w, idle, own);
        if (n != 1) break;
    }
    expect_threads("3 s without an idle CPU", n, 1);
    t += 0.1, own += 0.1, idle += 0.09;
    expect_threads("0.9 idle CPUs after 2 s: a try", look(&c, t, w, idle, own), 2);
    const double tried = t;
    t += 0.1, w += 0.067, own += 0.13;
    expect_threads("the try meets contention", look(&c, t, w, idle, own), 1);
    for (n = 1; n == 1 && t < tried + 8.0;) { /* idle from now on: when does it try again? */
        t += 0.1, own += 0.1, idle += 0.09;
        n = look(&c, t, w, idle, own);
    }
    const bool waited_twice = n == 2 && t - tried > 4.0 && t - tried < 4.35;
    printf("%s governor, the next try after %.1f s (expected 4.1-4.3: twice 2 s)\n",
           waited_twice ? "ok  " : "FAIL", t - tried);
    failures += !waited_twice;
    /* opened at the first GEMM: the pool has run, its waits decide */
    c = opened(false, 100.0);
    expect_threads("a window opened at the first GEMM", look(&c, 0.2, 0.09, 100.04, 0.36), 1);
    /* /proc/stat unknown: run-queue waits decide the first window too */
    c = opened(true, -1.0);
    expect_threads("the first window, /proc/stat unknown", look(&c, 0.2, 0.09, -1.0, 0.36), 1);
}

int main(void) {
    governor_cases();
    char tmpl[] = "/tmp/test_cpu_threads.XXXXXX";
    if (!mkdtemp(tmpl)) return 1;
    /* v2 at the root */
    snprintf(root, sizeof root, "%s/v2", tmpl);
    put("proc", "0::/a/b\n");
    put("cgroup.controllers", "cpu memory\n");
    put("a/b/cpu.max", "max 100000\n");
    put("a/cpu.max", "150000 100000\n");
    expect("v2, the parent's quota", "proc", 1.5);
    /* v1 */
    snprintf(root, sizeof root, "%s/v1", tmpl);
    put("proc", "5:memory:/y\n4:cpu,cpuacct:/x\n0::/\n");
    put("cpu/x/cpu.cfs_quota_us", "50000\n");
    put("cpu/x/cpu.cfs_period_us", "100000\n");
    put("cpu/cpu.cfs_quota_us", "-1\n");
    put("cpu/cpu.cfs_period_us", "100000\n");
    expect("v1, cpu,cpuacct", "proc", 0.5);
    /* no quota */
    snprintf(root, sizeof root, "%s/none", tmpl);
    put("proc", "0::/s\n");
    put("cgroup.controllers", "cpu\n");
    put("s/cpu.max", "max 100000\n");
    put("cpu.max", "max 100000\n");
    expect("v2, no quota", "proc", 0.0);
    /* hybrid: v1 cpu and the unified hierarchy beside it */
    snprintf(root, sizeof root, "%s/hybrid", tmpl);
    put("proc", "1:cpu:/j\n0::/j\n");
    put("cpu/j/cpu.cfs_quota_us", "200000\n");
    put("cpu/j/cpu.cfs_period_us", "100000\n");
    put("unified/j/cpu.max", "100000 100000\n");
    expect("hybrid, the smaller of v1 and v2", "proc", 1.0);
    expect("no cgroup file", "no-such-file", 0.0);

    char why[160];
    setenv("OMP_NUM_THREADS", "3", 1);
    int t = cpu_default_threads(1, why, sizeof why);
    const bool env_ok = t == 0 && !strcmp(why, "OMP_NUM_THREADS");
    printf("%s OMP_NUM_THREADS set: %d threads, '%s'\n", env_ok ? "ok  " : "FAIL", t, why);
    failures += !env_ok;
    unsetenv("OMP_NUM_THREADS");
    t = cpu_default_threads(2, why, sizeof why);
    const bool shared_ok = t >= 1 && strstr(why, "shared by 2 ranks") != NULL;
    printf("%s 2 ranks on the node: %d threads, '%s'\n", shared_ok ? "ok  " : "FAIL", t, why);
    failures += !shared_ok;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
    if (system(cmd) != 0) printf("note: %s left behind\n", tmpl);
    printf("%s\n", failures ? "FAIL" : "PASS: the CPU backend's default threads and governor");
    return failures ? 1 : 0;
}
