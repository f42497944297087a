/* The test build's faults and traces (fault_hooks.h): every BERTRAIN_TEST_*
 * variable read once, into a train_observer and a backend wrapper. */
#include "fault_hooks.h"

#include <errno.h>
#include <math.h>
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
    number_list nan_steps, spike_steps, overflow_steps, nan_samples;
    rank_step die, perturb;
    bool ckpt_set;
    char ckpt_point[32], ckpt_action[1024]; /* the action may hold a path (wait:FILE) */
    long ckpt_step;
} hooks;

/* The backend wrapper's state: one training backend per process. */
static struct {
    bt_backend *inner;        /* the real backend */
    const bert_model *m;      /* the model of the step in flight */
    bool nan_due, inf_due;    /* faults of the step in flight, not yet written */
    bool spike_due;           /* SPIKE_STEPS names the step in flight */
} wrap;

/* Variable `name` as a list of numbers (none when unset). */
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

/* Variable `name` as "RANK,STEP". */
static void read_rank_step(const char *name, rank_step *out) {
    const char *env = getenv(name);
    out->set = env && sscanf(env, "%d,%ld", &out->rank, &out->step) == 2;
}

/* Does l hold step? */
static bool listed(const number_list *l, long step) {
    for (int i = 0; i < l->n; i++)
        if (l->v[i] == (unsigned long long)step) return true;
    return false;
}

/* ---- the backend wrapper: gradient faults ---- */

/* Write value into the first gradient of the word embeddings. */
static void poison_grads(float value) {
    const bert_tensor *t = bert_find_tensor(wrap.m, "bert.embeddings.word_embeddings.weight");
    wrap.inner->fill(wrap.inner, (bt_ptr){wrap.m->grads, t->offset * 4}, value, 1);
}

/* reduce_defer, forwarded; a reduction over the whole gradient of a step
 * with a fault due gets the fault first. */
static int fault_reduce_defer(bt_backend *be, bt_reduce_kind kind, bt_ptr x, size_t n) {
    (void)be;
    if (wrap.m && x.buf == wrap.m->grads && x.off == 0 && n == wrap.m->n_params) {
        if (wrap.nan_due) poison_grads(NAN);
        wrap.nan_due = false;
        if (wrap.inf_due && kind == BT_REDUCE_FINITE) {
            poison_grads(INFINITY);
            wrap.inf_due = false;
        }
    }
    return wrap.inner->reduce_defer(wrap.inner, kind, x, n);
}

/* step_gate, forwarded; with a spike due, the gate sees the MLM loss 1000x
 * as the host does (loss_summed): its divisor a 1000th. */
static int fault_step_gate(bt_backend *be, const bt_step_gate *rule) {
    (void)be;
    bt_step_gate r = *rule;
    if (wrap.spike_due) r.masked /= 1000.0;
    return wrap.inner->step_gate(wrap.inner, &r);
}

/* The wrapper's destroy: itself, then the real backend. */
static void fault_destroy(bt_backend *be) {
    free(be);
    wrap.inner->destroy(wrap.inner);
    wrap.inner = NULL;
}

/* The wrapper: the real backend's table (its ops run on its own context)
 * with reduce_defer and destroy replaced. */
static bt_backend *wrap_backend(void *ctx, bt_backend *be) {
    (void)ctx;
    bt_backend *w = malloc(sizeof *w);
    if (!w) return NULL;
    *w = *be;
    w->reduce_defer = fault_reduce_defer;
    w->step_gate = fault_step_gate;
    w->destroy = fault_destroy;
    wrap.inner = be;
    return w;
}

/* ---- the observer ---- */

/* A step begins: arm the wrapper with the faults NAN_STEPS, NAN_SAMPLES,
 * OVERFLOW_STEPS and SPIKE_STEPS name for it. */
static void step_begin(void *ctx, bert_model *m, long step, uint64_t from, uint64_t to) {
    (void)ctx;
    wrap.m = m;
    wrap.nan_due = listed(&hooks.nan_steps, step);
    for (int i = 0; i < hooks.nan_samples.n; i++)
        if (hooks.nan_samples.v[i] >= from && hooks.nan_samples.v[i] < to) wrap.nan_due = true;
    wrap.inf_due = listed(&hooks.overflow_steps, step);
    wrap.spike_due = listed(&hooks.spike_steps, step);
}

/* SPIKE_STEPS: a 1000x loss, on every rank alike (after the sum over ranks). */
static void loss_summed(void *ctx, long step, double *mlm_loss_sum) {
    (void)ctx;
    if (listed(&hooks.spike_steps, step)) *mlm_loss_sum *= 1000.0;
}

/* LOG_SAMPLES: one line per micro-batch. */
static void log_micro_batch(void *ctx, int rank, long step, uint64_t from, uint64_t to) {
    (void)ctx;
    fprintf(stderr, "samples rank %d step %ld: %llu %llu\n", rank, step, (unsigned long long)from,
            (unsigned long long)to);
}

/* LOG_LAYERDROP: one line per step, the layers skipped. */
static void log_layerdrop(void *ctx, int rank, long step, const unsigned char *skip,
                          int n_layers) {
    (void)ctx;
    char line[4096]; /* one write, so ranks' lines do not interleave */
    int n = snprintf(line, sizeof line, "layerdrop rank %d step %ld:", rank, step);
    for (int l = 0; l < n_layers && n < (int)sizeof line - 16; l++)
        if (skip[l]) n += snprintf(line + n, sizeof line - (size_t)n, " %d", l);
    fprintf(stderr, "%s\n", line);
}

/* PERTURB: add 1e-2 to one parameter of this rank after `step`, so the drift
 * check has something to find; DIE: this rank kills itself with SIGKILL, to
 * check that the job ends. */
static void step_done(void *ctx, bert_model *m, int rank, long step) {
    (void)ctx;
    if (hooks.perturb.set && hooks.perturb.rank == rank && hooks.perturb.step == step) {
        float x;
        const bert_tensor *t = bert_find_tensor(m, "bert.embeddings.LayerNorm.weight");
        bt_ptr p = bert_params_at(m, t->offset);
        m->be->download(m->be, &x, p, 4);
        x += 1e-2f;
        m->be->upload(m->be, p, &x, 4);
        fprintf(stderr, "bertrain: rank %d: test hook perturbed a parameter after step %ld\n",
                rank, step);
    }
    if (hooks.die.set && hooks.die.rank == rank && hooks.die.step == step) {
        fprintf(stderr, "bertrain: rank %d: test hook killing this rank after step %ld\n", rank,
                step);
        fflush(stderr);
        raise(SIGKILL);
    }
}

/* The checkpoint writer of `step` reached `point`: kill, pause or wait here
 * when BERTRAIN_TEST_CKPT says so. */
static void ckpt_point(void *ctx, const char *point, long step) {
    (void)ctx;
    if (strcmp(hooks.ckpt_point, point) != 0 || (hooks.ckpt_step != 0 && hooks.ckpt_step != step))
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

void fault_hooks_observer(train_observer *obs) {
    *obs = (train_observer){0};
    read_list("BERTRAIN_TEST_NAN_STEPS", &hooks.nan_steps);
    read_list("BERTRAIN_TEST_SPIKE_STEPS", &hooks.spike_steps);
    read_list("BERTRAIN_TEST_OVERFLOW_STEPS", &hooks.overflow_steps);
    read_list("BERTRAIN_TEST_NAN_SAMPLES", &hooks.nan_samples);
    read_rank_step("BERTRAIN_TEST_DIE", &hooks.die);
    read_rank_step("BERTRAIN_TEST_PERTURB", &hooks.perturb);
    const char *ckpt = getenv("BERTRAIN_TEST_CKPT");
    hooks.ckpt_set = ckpt && sscanf(ckpt, "%31[^,],%ld,%1023[^\n]", hooks.ckpt_point,
                                    &hooks.ckpt_step, hooks.ckpt_action) == 3;
    if (hooks.nan_steps.n || hooks.overflow_steps.n || hooks.nan_samples.n || hooks.spike_steps.n) {
        obs->wrap_backend = wrap_backend;
        obs->step_begin = step_begin;
    }
    if (hooks.spike_steps.n) obs->loss_summed = loss_summed;
    if (getenv("BERTRAIN_TEST_LOG_SAMPLES")) obs->micro_batch = log_micro_batch;
    if (getenv("BERTRAIN_TEST_LOG_LAYERDROP")) obs->layerdrop = log_layerdrop;
    if (hooks.die.set || hooks.perturb.set) obs->step_done = step_done;
    if (hooks.ckpt_set) obs->ckpt.reached = ckpt_point;
}
