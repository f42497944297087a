/* The CPU backend's default thread count (backends/cpu/cpu_threads.c):
 * cpu_cgroup_quota on made-up cgroup trees, each quota worked out by hand,
 * and cpu_default_threads's reasons:
 *   v2:     0::/a/b, a/b/cpu.max "max 100000", a/cpu.max "150000 100000"  -> 1.5
 *   v1:     4:cpu,cpuacct:/x, cpu/x quota 50000 period 100000            -> 0.5
 *   none:   v2 with "max" everywhere                                      -> 0
 *   hybrid: v1 cpu 2.0 and v2 (at unified/) 1.0                           -> 1.0
 *   no /proc/self/cgroup file                                             -> 0
 *   OMP_NUM_THREADS set: 0 threads (OpenMP reads it), reason named;
 *   unset with 2 ranks on the node: at least 1, "shared by 2 ranks". */
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

int main(void) {
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
    printf("%s\n", failures ? "FAIL" : "PASS: the CPU backend's default threads");
    return failures ? 1 : 0;
}
