/* Schedules over the run: the learning rate at a step (DeepSpeed's and
 * fairseq's schedules), counted in steps or samples, and the batch-size rampup. */
#include "sched.h"

#include <math.h>

long sched_position(const bt_config *cfg, long step, long long samples) {
    const long at = cfg->sched.unit == SCHED_UNIT_SAMPLES ? (long)samples : step;
    return at > cfg->sched.start ? at - cfg->sched.start : 0;
}

long rampup_accum(const bt_config *cfg, long long samples) {
    const long full = cfg->grad_accum;
    if (cfg->rampup_start <= 0 || samples >= cfg->rampup_samples) return full;
    const long a0 = cfg->rampup_start / (cfg->micro_batch * cfg->world_size);
    /* exact integer floors: linear a0 + floor((full - a0) samples / R); stepwise the
     * same at the start of stage k = floor(stages samples / R) */
    unsigned __int128 s = (unsigned long long)samples, r = (unsigned long long)cfg->rampup_samples;
    if (cfg->rampup_type == RAMPUP_STEPWISE) {
        unsigned long long k = (unsigned long long)(s * (unsigned)cfg->rampup_stages / r);
        return a0 + (long)((unsigned long long)(full - a0) * k / (unsigned)cfg->rampup_stages);
    }
    return a0 + (long)((unsigned long long)(s * (unsigned long long)(full - a0) / r));
}

double sched_lr(const bt_config *cfg, long step) {
    const bt_sched_config *s = &cfg->sched;
    const double lr = cfg->optim.lr, wmax = s->warmup_max_lr, wmin = s->warmup_min_lr;
    const double w = (double)s->warmup_num_steps, t = (double)step;
    switch (s->type) {
    case SCHED_CONSTANT:
        return lr;
    case SCHED_WARMUP:
    case SCHED_WARMUP_DECAY: {
        if (t < w) {
            double f = s->warmup_log ? log(t + 1) / log(w) : t / w;
            return wmin + (wmax - wmin) * f;
        }
        if (s->type == SCHED_WARMUP) return wmax;
        double tot = (double)s->total_num_steps;
        double f = (tot - t) / (tot - w);
        return wmax * (f > 0 ? f : 0.0);
    }
    case SCHED_WARMUP_EXP_DECAY:
        if (t < w) return lr * (t + 1) / w;
        return lr * pow(s->decay_rate, (t - w) / (double)s->decay_step);
    case SCHED_INVERSE_SQRT:
        if (t < w) return wmin + (lr - wmin) * (t + 1) / w;
        return lr * sqrt((w > 0 ? w : 1.0) / (t + 1));
    case SCHED_COSINE: {
        double tot = (double)s->total_num_steps;
        if (t < w) {
            double r = s->warmup_min_ratio + (1.0 - s->warmup_min_ratio) * t / w;
            return lr * r;
        }
        double prog = (t - w) / (tot - w);
        if (prog > 1) prog = 1;
        double r = s->cos_min_ratio + (1 - s->cos_min_ratio) * 0.5 * (1 + cos(M_PI * prog));
        return lr * r;
    }
    }
    return lr;
}
