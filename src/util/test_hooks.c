/* Test hooks (test_hooks.h): every BERTRAIN_TEST_* variable read once. */
#include "test_hooks.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_LISTED = 64 };

/* A comma-separated list of numbers ("3,5,6"). */
typedef struct {
    int n;
    unsigned long long v[MAX_LISTED];
} number_list;

/* "RANK,STEP" */
typedef struct {
    bool set;
    int rank;
    long step;
} rank_step;

static struct {
    bool read;
    number_list nan_steps, spike_steps, overflow_steps, nan_samples;
    rank_step die, perturb;
    bool ckpt_set;
    char ckpt_point[32], ckpt_action[1024]; /* the action may hold a path (wait:FILE) */
    long ckpt_step;
    bool log_samples, log_layerdrop;
} hooks;

static void read_list(const char *name, number_list *out) {
    const char *env = getenv(name);
    for (const char *p = env; p && *p && out->n < MAX_LISTED;) {
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p) break;
        out->v[out->n++] = v;
        p = *end == ',' ? end + 1 : end;
    }
}

static void read_rank_step(const char *name, rank_step *out) {
    const char *env = getenv(name);
    out->set = env && sscanf(env, "%d,%ld", &out->rank, &out->step) == 2;
}

void test_hooks_init(void) {
    if (hooks.read) return;
    hooks.read = true;
    read_list("BERTRAIN_TEST_NAN_STEPS", &hooks.nan_steps);
    read_list("BERTRAIN_TEST_SPIKE_STEPS", &hooks.spike_steps);
    read_list("BERTRAIN_TEST_OVERFLOW_STEPS", &hooks.overflow_steps);
    read_list("BERTRAIN_TEST_NAN_SAMPLES", &hooks.nan_samples);
    read_rank_step("BERTRAIN_TEST_DIE", &hooks.die);
    read_rank_step("BERTRAIN_TEST_PERTURB", &hooks.perturb);
    const char *ckpt = getenv("BERTRAIN_TEST_CKPT");
    hooks.ckpt_set = ckpt && sscanf(ckpt, "%31[^,],%ld,%1023[^\n]", hooks.ckpt_point,
                                    &hooks.ckpt_step, hooks.ckpt_action) == 3;
    hooks.log_samples = getenv("BERTRAIN_TEST_LOG_SAMPLES") != NULL;
    hooks.log_layerdrop = getenv("BERTRAIN_TEST_LOG_LAYERDROP") != NULL;
}

static bool listed(const number_list *l, long step) {
    for (int i = 0; i < l->n; i++)
        if (l->v[i] == (unsigned long long)step) return true;
    return false;
}

bool hook_nan_step(long step) {
    test_hooks_init();
    return listed(&hooks.nan_steps, step);
}

bool hook_spike_step(long step) {
    test_hooks_init();
    return listed(&hooks.spike_steps, step);
}

bool hook_overflow_step(long step) {
    test_hooks_init();
    return listed(&hooks.overflow_steps, step);
}

bool hook_nan_samples(uint64_t from, uint64_t to) {
    test_hooks_init();
    for (int i = 0; i < hooks.nan_samples.n; i++)
        if (hooks.nan_samples.v[i] >= from && hooks.nan_samples.v[i] < to) return true;
    return false;
}

bool hook_die(int rank, long step) {
    test_hooks_init();
    return hooks.die.set && hooks.die.rank == rank && hooks.die.step == step;
}

bool hook_perturb(int rank, long step) {
    test_hooks_init();
    return hooks.perturb.set && hooks.perturb.rank == rank && hooks.perturb.step == step;
}

void hook_ckpt_point(const char *point, long step) {
    test_hooks_init();
    if (!hooks.ckpt_set || step <= 0 || strcmp(hooks.ckpt_point, point) != 0 ||
        (hooks.ckpt_step != 0 && hooks.ckpt_step != step))
        return;
    fprintf(stderr, "bertrain: test hook: checkpoint %ld writer at '%s': %s\n", step, point,
            hooks.ckpt_action);
    fflush(stderr);
    if (strcmp(hooks.ckpt_action, "kill") == 0) raise(SIGKILL);
    if (strncmp(hooks.ckpt_action, "wait:", 5) == 0) { /* until the test makes the file */
        const struct timespec tick = {0, 20000000};
        for (int i = 0; i < 6000 && access(hooks.ckpt_action + 5, F_OK) != 0; i++)
            nanosleep(&tick, NULL);
        return;
    }
    double secs = strncmp(hooks.ckpt_action, "pause:", 6) == 0 ? atof(hooks.ckpt_action + 6) : 0;
    struct timespec ts = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

bool hook_log_samples(void) {
    test_hooks_init();
    return hooks.log_samples;
}

bool hook_log_layerdrop(void) {
    test_hooks_init();
    return hooks.log_layerdrop;
}
