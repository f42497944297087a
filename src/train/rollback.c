/* Starting a model fresh, and rolling a diverging run back to a checkpoint
 * (or to that fresh start) so that it continues without the batches the
 * divergence guard rejected. */
#include "train_internal.h"

#include "mpi/dist.h"

#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Admin's omegas for a fresh model: the closed form, or rank 0's profiling
 * forward on the run's first min(8, micro-batch) samples, given to every rank. */
static void admin_init(run_state *s, int micro) {
    bert_config *c = &s->m->cfg;
    const int n = 2 * c->num_hidden_layers, k = micro < 8 ? micro : 8;
    if (c->admin_init == BERT_ADMIN_CLOSED_FORM) {
        bert_admin_closed_form(c);
    } else if (dist_rank() == 0) {
        bt_batch_buf *b = &s->mb[0];
        dataset_fill(s->ds, 0, k, false, b);
        bert_batch bb = {k, b->T, b->input_ids, b->token_type_ids, b->attention_mask,
                         b->n_masked, b->mlm_positions, b->mlm_labels,
                         c->nsp ? b->nsp_labels : NULL, 0, b->masked_bound};
        bert_admin_profile(s->m, &bb);
    }
    dist_broadcast(c->admin_omega, sizeof c->admin_omega);
    if (dist_rank() == 0) {
        printf("bertrain: Admin omega (%s", c->admin_init == BERT_ADMIN_CLOSED_FORM
                                               ? "closed form" : "profiled on");
        if (c->admin_init != BERT_ADMIN_CLOSED_FORM) printf(" %d samples", k);
        printf("), sublayers 0..%d:", n - 1);
        for (int i = 0; i < n; i++) printf(" %.4g", (double)c->admin_omega[i]);
        printf("\n");
    }
}

bool run_start_fresh(run_state *s, const bt_config *cfg, int micro) {
    bert_init_params(s->m, cfg->seed);
    if (dist_world() > 1) { /* every rank starts from rank 0's parameters */
        size_t bytes = bert_n_params(s->m) * sizeof(float);
        float *host = malloc(bytes);
        if (!host) return false;
        s->be->download(s->be, host, bert_params_at(s->m, 0), bytes);
        dist_broadcast(host, bytes);
        s->be->upload(s->be, bert_params_at(s->m, 0), host, bytes);
        free(host);
    }
    optim_reset(s->opt, s->m);
    if (grad_sync_onebit(s->gs)) onebit_reset(grad_sync_onebit(s->gs));
    if (s->m->cfg.norm == BERT_NORM_ADMIN) admin_init(s, micro);
    return true;
}

bool run_load_onebit(run_state *s, const char *dir) {
    char path[1200], err[1400];
    snprintf(path, sizeof path, "%s/" CKPT_ONEBIT_FILE, dir);
    onebit *ob = grad_sync_onebit(s->gs);
    if (!ob) {
        if (dist_rank() == 0 && access(path, F_OK) == 0)
            printf("resume: %s: this job has one rank, which exchanges nothing: the 1-bit "
                   "errors are not used, and later checkpoints have none\n", path);
        return true;
    }
    if (onebit_load(ob, path, err, sizeof err)) return true;
    if (dist_rank() == 0) fprintf(stderr, "bertrain: resume: %s\n", err);
    return false;
}

long run_rollback(run_state *s, const bt_config *cfg, const resume_info *start, int micro,
                  sample_skips *skips, sample_skips *rejected, uint64_t *cursor,
                  loss_scaler *scaler) {
    if (dist_rank() == 0) run_collect_checkpoint(s, true); /* a failed one is said */
    dist_barrier(); /* the newest checkpoint is complete on disk */
    bt_config *c = malloc(sizeof *c);
    if (!c) return -1;
    *c = *cfg;
    snprintf(c->resume, sizeof c->resume, "auto");
    resume_info ri;
    int rc = resume_prepare(c, &ri, true); /* prints "resume: from ..." when there is one */
    free(c);
    if (rc != 0) return -1;
    if (!ri.active && start->active) { /* none of its own: where the run began */
        ri = *start;
        if (dist_rank() == 0)
            printf("rollback: no checkpoint in %s yet: reloading %s, where this run started "
                   "(step %ld)\n", cfg->output_dir, ri.dir, ri.step);
    } else if (!ri.active && dist_rank() == 0) {
        printf("rollback: no checkpoint in %s yet: starting again from the initial weights "
               "(seed %llu, step 0)\n", cfg->output_dir, (unsigned long long)cfg->seed);
    }
    loss_scaler_init(scaler, cfg->fp16_loss_scale, cfg->fp16_initial_scale_power,
                     cfg->fp16_loss_scale_window, cfg->fp16_hysteresis,
                     cfg->fp16_consecutive_hysteresis, cfg->fp16_min_loss_scale);
    if (ri.active) {
        if (!resume_load(&ri, s->m, s->opt) || !run_load_onebit(s, ri.dir)) return -1;
        if (cfg->fp16) resume_scaler(&ri, scaler);
    } else {
        if (!run_start_fresh(s, cfg, micro)) return -1;
    }
    for (int i = 0; i < rejected->n; i++)
        if (rejected->r[i].from >= (uint64_t)ri.position &&
            !skips_add(skips, rejected->r[i].from, rejected->r[i].to))
            return -1;
    rejected->n = 0;
    *cursor = (uint64_t)ri.position;
    return ri.active ? ri.step : 0;
}

void run_where_to_resume(run_state *s, const bt_config *cfg, const resume_info *start, char *out,
                         size_t outlen) {
    char dir[1024];
    cJSON *state = NULL;
    run_collect_checkpoint(s, true); /* the newest one is on disk (a failed one is said) */
    if (ckpt_find_auto(cfg->output_dir, dir, sizeof dir, &state)) {
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(state, "step");
        snprintf(out, outlen, "resume from %s (step %.0f; --resume auto)", dir,
                 cJSON_IsNumber(step) ? step->valuedouble : 0.0);
    } else if (start->active) {
        snprintf(out, outlen, "no checkpoint was written; resume from %s, where this run "
                 "started (--resume %s),", start->dir, start->dir);
    } else {
        snprintf(out, outlen, "no checkpoint was written; start again");
    }
    cJSON_Delete(state);
}
