/* The CPU backend's threads: by default the CPUs this process may actually
 * use, shared among the job's ranks on the node, and fewer while other
 * processes take them (the governor). A thread pool larger than the CPUs it
 * gets fights itself at every barrier (docs/PERFORMANCE.md, "A rank on a
 * shared node"; DESIGN-NOTES.md, note 31). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cpu_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <omp.h>
#include <dirent.h>
#include <time.h>

/* CPUs in this process's affinity mask (the online CPUs where it cannot be read). */
static int affinity_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* The first line of a file into buf; false when it cannot be read. */
static bool read_line(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    const bool ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    return ok;
}

/* The CPU quota of cgroup directory dir (v2 cpu.max "QUOTA PERIOD", v1
 * cpu.cfs_quota_us and cpu.cfs_period_us) in CPUs; 0: none. */
static double quota_of(const char *dir, bool v2) {
    char path[8320], line[128];
    if (v2) {
        snprintf(path, sizeof path, "%s/cpu.max", dir);
        long long q, p;
        if (read_line(path, line, sizeof line) && sscanf(line, "%lld %lld", &q, &p) == 2 && q > 0 &&
            p > 0)
            return (double)q / (double)p;
        return 0.0; /* "max PERIOD": no quota */
    }
    long long q = -1, p = 0;
    snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
    if (read_line(path, line, sizeof line)) q = atoll(line);
    snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
    if (read_line(path, line, sizeof line)) p = atoll(line);
    return q > 0 && p > 0 ? (double)q / (double)p : 0.0;
}

/* Fold the quotas of cgroup path rel (from "/") and of each of its parents,
 * under the hierarchy mounted at base, into *best (the smallest; 0: none). */
static void walk_up(const char *base, const char *rel, bool v2, double *best) {
    char path[4096], dir[8192];
    snprintf(path, sizeof path, "%s", *rel ? rel : "/");
    for (;;) {
        snprintf(dir, sizeof dir, "%s%s", base, path);
        const double q = quota_of(dir, v2);
        if (q > 0.0 && (*best == 0.0 || q < *best)) *best = q;
        char *slash = strrchr(path, '/');
        if (!slash || !strcmp(path, "/")) break;
        if (slash == path) path[1] = 0; /* the root last */
        else *slash = 0;
    }
}

/* Whether the comma list of controllers names "cpu". */
static bool names_cpu(const char *list) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (!strcmp(t, "cpu")) return true;
    return false;
}

double cpu_cgroup_quota(const char *proc_cgroup, const char *root) {
    FILE *f = fopen(proc_cgroup, "r");
    if (!f) return 0.0;
    char line[4096], v1[4096] = "", v2[4096] = "";
    bool has_v1 = false, has_v2 = false;
    while (fgets(line, sizeof line, f)) { /* "ID:CONTROLLERS:PATH" */
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = 0; /* line: the ID, c1 + 1: the controllers, c2 + 1: the path */
        if (!strcmp(line, "0") && c2 == c1 + 1) {
            has_v2 = true;
            snprintf(v2, sizeof v2, "%s", c2 + 1);
        } else if (names_cpu(c1 + 1)) {
            has_v1 = true;
            snprintf(v1, sizeof v1, "%s", c2 + 1);
        }
    }
    fclose(f);
    double best = 0.0;
    char base[4096];
    if (has_v1) {
        snprintf(base, sizeof base, "%s/cpu", root);
        walk_up(base, v1, false, &best);
    }
    if (has_v2) { /* unified at the root, or beside v1 at unified/ */
        snprintf(base, sizeof base, "%s/cgroup.controllers", root);
        const bool at_root = access(base, F_OK) == 0;
        snprintf(base, sizeof base, at_root ? "%s" : "%s/unified", root);
        walk_up(base, v2, true, &best);
    }
    return best;
}

int cpu_default_threads(int local_ranks, char *why, size_t n) {
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && *env) {
        snprintf(why, n, "OMP_NUM_THREADS");
        return 0; /* OpenMP's own reading of it */
    }
    const int aff = affinity_cpus();
    const double quota = cpu_cgroup_quota("/proc/self/cgroup", "/sys/fs/cgroup");
    int cpus = aff;
    if (quota > 0.0 && (int)quota < cpus) {
        cpus = quota < 1.0 ? 1 : (int)quota;
        snprintf(why, n, "a cgroup quota of %.2f CPUs", quota);
    } else {
        snprintf(why, n, "%d CPU%s in the affinity mask", aff, aff == 1 ? "" : "s");
    }
    if (local_ranks > 1) {
        const size_t len = strlen(why);
        snprintf(why + len, n > len ? n - len : 0, ", shared by %d ranks", local_ranks);
        cpus /= local_ranks;
    }
    return cpus < 1 ? 1 : cpus;
}

/* The governor's constants: how often it looks (its window), the mean
 * number of this process's threads that waited to run over the window
 * (the run-queue delay the kernel counts per thread, /proc/self/task/N/
 * schedstat) above which others take the CPUs, and how long it waits before
 * it tries one thread more: 2 s, doubled up to 32 s each time a try meets
 * contention again at once, back to 2 s when one holds for a second. Idle,
 * 2 threads on 2 cores wait about 0; beside one busy process, 3 runnable
 * threads share 2 cores and ours wait about 0.67 of a thread's time. It
 * tries only where the CPUs it may use were idle for at least IDLE_FOR_TRY
 * of a CPU over the window (/proc/stat): beside a process that keeps a core
 * busy it does not try at all, and loses no window to a try. Its first
 * window runs from the backend's creation, when the pool has not run yet and
 * no thread of ours waits: there it also drops a thread where other
 * processes took OTHERS_AT_START of a CPU or more (the machine's busy time
 * less this process's CPU time), so that a run started beside a busy process
 * does not spend a window contended. */
#define GOVERN_WINDOW_S 0.1
#define CONTENDED_WAITING 0.2
#define IDLE_FOR_TRY 0.5
#define OTHERS_AT_START 0.5
#define PROBE_FIRST_S 2.0
#define PROBE_MOST_S 32.0
#define PROBE_HELD_S 1.0

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Seconds this process's threads have waited on run queues, summed; < 0
 * where the kernel does not say (no schedstat). */
static double run_queue_wait_s(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1.0;
    double sum = 0.0;
    bool any = false;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[64], line[128];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/schedstat", e->d_name);
        unsigned long long run, wait;
        if (read_line(path, line, sizeof line) && sscanf(line, "%llu %llu", &run, &wait) == 2) {
            sum += (double)wait * 1e-9;
            any = true;
        }
    }
    closedir(d);
    return any ? sum : -1.0;
}

/* Idle seconds (the idle and iowait columns of /proc/stat) summed over the
 * CPUs in this process's affinity mask, and in *cpus how many those are;
 * < 0 where it cannot be read. */
static double idle_cpu_s(int *cpus) {
    cpu_set_t set;
    const bool masked = sched_getaffinity(0, sizeof set, &set) == 0;
    const long hz = sysconf(_SC_CLK_TCK);
    *cpus = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f || hz <= 0) {
        if (f) fclose(f);
        return -1.0;
    }
    char line[512];
    double sum = 0.0;
    while (fgets(line, sizeof line, f)) { /* "cpu" (all), then "cpuN ..." lines, then others */
        int cpu;
        unsigned long long user, nice, sys, idle, iowait;
        if (sscanf(line, "cpu%d %llu %llu %llu %llu %llu", &cpu, &user, &nice, &sys, &idle,
                   &iowait) != 6) {
            if (*cpus) break;
            continue;
        }
        if (masked && (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set))) continue;
        sum += (double)(idle + iowait) / (double)hz;
        (*cpus)++;
    }
    fclose(f);
    return *cpus ? sum : -1.0;
}

/* This process's CPU time (all its threads), s. */
static double own_cpu_s(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0.0;
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* What the governor reads at a look; false where the kernel does not say how
 * long threads waited (no schedstat). */
static bool govern_sample(cpu_gov_sample *s) {
    s->now = monotonic_s();
    s->waited = run_queue_wait_s();
    if (s->waited < 0.0) return false;
    s->idle = idle_cpu_s(&s->cpus);
    s->own = own_cpu_s();
    return true;
}

/* Open a window at sample s. */
static void govern_mark(cpu_ctx *c, const cpu_gov_sample *s) {
    c->gov_t = s->now;
    c->gov_waited = s->waited;
    c->gov_idle = s->idle;
    c->gov_own = s->own;
}

void cpu_govern_open(cpu_ctx *c, const cpu_gov_sample *s, bool at_creation) {
    govern_mark(c, s);
    c->gov_changed_t = s->now;
    c->gov_probe_s = PROBE_FIRST_S;
    c->gov_started = !at_creation; /* opened later: run-queue waits alone */
}

void cpu_govern_start(cpu_ctx *c) {
    cpu_gov_sample s;
    if (c->threads_max > 1 && govern_sample(&s)) cpu_govern_open(c, &s, true);
}

int cpu_govern_decide(cpu_ctx *c, const cpu_gov_sample *s) {
    const double span = s->now - c->gov_t, waiting = (s->waited - c->gov_waited) / span;
    /* where /proc/stat cannot be read, as if idle: the tries alone decide */
    const bool known = s->idle >= 0.0 && c->gov_idle >= 0.0;
    const double idle_cpus = known ? (s->idle - c->gov_idle) / span : (double)c->threads_max;
    /* the CPUs other processes took: the busy ones less this process's CPU time */
    const double others = known ? s->cpus - idle_cpus - (s->own - c->gov_own) / span : 0.0;
    /* the first window (from the creation) goes by the others' CPU alone: its
     * run-queue waits are those of this process's start-up, not of its pool */
    const bool contended = !c->gov_started && known ? others >= OTHERS_AT_START
                                                    : waiting > CONTENDED_WAITING;
    const bool room = idle_cpus >= IDLE_FOR_TRY, tried = c->gov_last_up;
    govern_mark(c, s);
    c->gov_started = true;
    int want = c->threads_now;
    if (contended && want > 1)
        want--;
    else if (!contended && room && want < c->threads_max &&
             s->now - c->gov_changed_t >= c->gov_probe_s)
        want++;
    if (want == c->threads_now) {
        if (tried && s->now - c->gov_changed_t >= PROBE_HELD_S) { /* the try held */
            c->gov_probe_s = PROBE_FIRST_S;
            c->gov_last_up = false;
        }
        return want;
    }
    if (want < c->threads_now && tried) /* the try met contention at once: wait longer */
        c->gov_probe_s = c->gov_probe_s * 2 < PROBE_MOST_S ? c->gov_probe_s * 2 : PROBE_MOST_S;
    c->gov_last_up = want > c->threads_now;
    c->threads_now = want;
    c->gov_changed_t = s->now;
    return want;
}

void cpu_govern_threads(cpu_ctx *c) {
    if (c->threads_max <= 1) return;
    if (c->gov_t > 0.0 && monotonic_s() - c->gov_t < GOVERN_WINDOW_S) return;
    cpu_gov_sample s;
    if (!govern_sample(&s)) { /* nothing to go by: the threads it has, always */
        c->threads_max = c->threads_now;
        return;
    }
    if (c->gov_t == 0.0) { /* the first look (no window from the creation) */
        cpu_govern_open(c, &s, false);
        return;
    }
    const int was = c->threads_now;
    if (cpu_govern_decide(c, &s) != was) omp_set_num_threads(c->threads_now);
}
