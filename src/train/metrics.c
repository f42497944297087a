/* The training run's console lines and metrics.jsonl records (metrics.h). */
#include "metrics.h"

#include "util/clock.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ================= records ================= */

cJSON *mrec_new(long step) {
    cJSON *rec = cJSON_CreateObject();
    mrec_int(rec, "step", step);
    return rec;
}

void mrec_num(cJSON *rec, const char *key, const char *fmt, double v) {
    char text[64];
    snprintf(text, sizeof text, fmt, v);
    cJSON_AddRawToObject(rec, key, text);
}

void mrec_int(cJSON *rec, const char *key, long long v) {
    char text[32];
    snprintf(text, sizeof text, "%lld", v);
    cJSON_AddRawToObject(rec, key, text);
}

void mrec_str(cJSON *rec, const char *key, const char *s) { cJSON_AddStringToObject(rec, key, s); }

/* s as a JSON string, escaped by cJSON. */
static void write_string(FILE *f, const char *s) {
    cJSON *item = cJSON_CreateString(s);
    char *text = item ? cJSON_PrintUnformatted(item) : NULL;
    if (text) fputs(text, f);
    free(text);
    cJSON_Delete(item);
}

/* v as {"key": value, ...} or [value, ...], raw numbers as they are. */
static void write_value(FILE *f, const cJSON *v) {
    if (cJSON_IsRaw(v)) {
        fputs(v->valuestring, f);
    } else if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        const bool obj = cJSON_IsObject(v);
        fputc(obj ? '{' : '[', f);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) fputs(", ", f);
            if (obj) {
                write_string(f, c->string);
                fputs(": ", f);
            }
            write_value(f, c);
        }
        fputc(obj ? '}' : ']', f);
    } else if (cJSON_IsString(v)) {
        write_string(f, v->valuestring);
    } else {
        char *text = cJSON_PrintUnformatted(v);
        if (text) fputs(text, f);
        free(text);
    }
}

/* One whole line into the log with write(2), never half of one: a failed or
 * short write is cut off again (the file keeps its earlier records), counted
 * and its errno kept for metrics_check. */
static void log_line(metrics_log *log, const char *line, size_t len) {
    const int fd = fileno(log->f);
    struct stat st;
    const off_t before = fstat(fd, &st) == 0 ? st.st_size : -1;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, line + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += (size_t)n;
    }
    if (done == len) return;
    if (!log->err) log->err = errno ? errno : EIO;
    log->lost++;
    if (done > 0 && before >= 0 && S_ISREG(st.st_mode) && ftruncate(fd, before) != 0) {
        /* the record stays cut short; the next line still starts on its own line */
    }
}

void mrec_write(metrics_log *log, cJSON *rec) {
    char *line = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&line, &len);
    if (m) {
        write_value(m, rec);
        fputc('\n', m);
    }
    errno = 0;
    if (m && fclose(m) == 0) {
        log_line(log, line, len);
    } else {
        if (!log->err) log->err = ENOMEM;
        log->lost++;
    }
    free(line);
    if (log->tb) tb_write_record(log->tb, rec);
    cJSON_Delete(rec);
}

/* The line of a failed write: the file, the error, the records lost so far
 * and what happens now. */
static void failure_line(const char *path, int err, long lost, long step, bool stop) {
    fprintf(stderr, "bertrain: %sstep %ld: %s: write failed: %s (%ld record%s not written so "
                    "far); %s\n", stop ? "" : "warning: ", step, path, strerror(err),
            lost, lost == 1 ? "" : "s",
            stop ? "stopping with a checkpoint (metrics.on_error \"stop\"; \"warn\" trains on "
                   "without the records)"
                 : "training goes on without them (metrics.on_error \"warn\")");
}

bool metrics_check(metrics_log *log, long step, int on_error) {
    long tb_lost = 0;
    const char *tb_path = "";
    const int tb_err = log->tb ? tb_failed(log->tb, &tb_lost, &tb_path) : 0;
    if (!log->err && !tb_err) return false;
    const bool stop = on_error == METRICS_ON_ERROR_STOP;
    if (!(stop && log->stopping)) { /* once when stopping; the summary line counts the rest */
        if (log->err) failure_line(log->path, log->err, log->lost, step, stop);
        if (tb_err) failure_line(tb_path, tb_err, tb_lost, step, stop);
    }
    log->stopping = stop;
    log->err = 0;
    return stop;
}

bool metrics_close(metrics_log *log) {
    const bool tb_ok = tb_close(log->tb);
    if (!log->f) return tb_ok;
    errno = 0;
    const bool ok = fclose(log->f) == 0;
    if (!ok && !log->err) log->err = errno ? errno : EIO;
    log->f = NULL;
    return ok && log->lost == 0 && tb_ok;
}

/* ================= step lines ================= */

void metrics_window_add(metrics_window *w, const step_result *r) {
    w->samples += r->n_samples;
    w->tokens += r->n_tokens;
    w->compute_s += r->compute_s;
    w->idle_s += r->idle_s;
    w->comm_s += r->comm_s;
}

void metrics_window_reset(metrics_window *w, double t) {
    memset(w, 0, sizeof *w);
    w->t0 = t;
}

/* The per-rank times of a multi-rank step: console lines and the "ranks" list. */
static void rank_times(cJSON *rec, const metrics_step_info *i) {
    cJSON *ranks = cJSON_AddArrayToObject(rec, "ranks");
    for (int q = 0; q < i->world; q++) {
        const double *t = &i->per_rank[3 * q];
        printf("  rank %d | compute %.3f s | communication not hidden %.3f s | idle (waiting for "
               "slower ranks) %.3f s | share %ld\n", q, t[0], t[1], t[2], i->shares[q]);
        cJSON *one = cJSON_CreateObject();
        mrec_num(one, "compute_s", "%.4g", t[0]);
        mrec_num(one, "comm_s", "%.4g", t[1]);
        mrec_num(one, "idle_s", "%.4g", t[2]);
        mrec_int(one, "share", i->shares[q]);
        cJSON_AddItemToArray(ranks, one);
    }
}

void metrics_step(metrics_log *log, const step_result *r, const metrics_window *w, double now,
                  const metrics_step_info *i) {
    const double dt = now - w->t0, sps = w->samples / dt, tps = w->tokens / dt;
    char eta[32], extra[96] = "";
    format_eta(i->eta_s, eta, sizeof eta);
    if (i->fp16) snprintf(extra, sizeof extra, " | loss_scale %.10g", r->loss_scale);
    if (i->rampup)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " | batch %ld",
                 i->global_batch);
    if (i->world > 1)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " | sent %.2f MB %s",
                 r->wire_bytes / 1e6, r->onebit ? "1-bit" : i->grad_bf16 ? "bf16" : "fp32");
    printf("step %6ld | loss %.4f | mlm_acc %.4f | lr %.3e | grad_norm %.3f%s | %.1f samples/s | "
           "%.0f tokens/s | data %.2f%% | ETA %s\n", i->step, r->loss, r->mlm_acc, r->lr,
           r->grad_norm, extra, sps, tps, 100.0 * w->data_s / dt, eta);
    cJSON *rec = mrec_new(i->step);
    mrec_num(rec, "loss", "%.9g", r->loss);
    mrec_num(rec, "mlm_loss", "%.9g", r->mlm_loss);
    mrec_num(rec, "mlm_acc", "%.6g", r->mlm_acc);
    mrec_num(rec, "lr", "%.9g", r->lr);
    mrec_num(rec, "grad_norm", "%.9g", r->grad_norm);
    mrec_num(rec, "samples_per_s", "%.4g", sps);
    mrec_num(rec, "tokens_per_s", "%.4g", tps);
    mrec_num(rec, "data_time_frac", "%.4g", w->data_s / dt);
    mrec_num(rec, "eta_s", "%.0f", i->eta_s);
    if (i->nsp) {
        mrec_num(rec, "nsp_loss", "%.9g", r->nsp_loss);
        mrec_num(rec, "nsp_acc", "%.6g", r->nsp_acc);
    }
    if (i->fp16) mrec_num(rec, "loss_scale", "%.9g", r->loss_scale);
    if (i->z_loss) mrec_num(rec, "z_loss", "%.9g", r->z_loss);
    if (i->attn_penalty) mrec_num(rec, "attn_penalty", "%.9g", r->attn_penalty);
    if (i->world > 1) {
        rank_times(rec, i);
        mrec_num(rec, "grad_sent_mb", "%.6g", r->wire_bytes / 1e6);
    }
    mrec_int(rec, "batch_size", i->global_batch);
    mrec_int(rec, "samples", i->samples);
    mrec_write(log, rec);
    fflush(stdout);
}

/* ================= steps without an update ================= */

void metrics_guard_skip(metrics_log *log, long step, const char *why, uint64_t from, uint64_t to) {
    fprintf(stderr, "bertrain: step %ld skipped: %s; parameters and optimizer state unchanged, "
                    "samples [%llu, %llu) not learned from\n", step, why,
            (unsigned long long)from, (unsigned long long)to);
    cJSON *rec = mrec_new(step);
    mrec_str(rec, "skipped", why);
    mrec_int(rec, "samples_from", (long long)from);
    mrec_int(rec, "samples_to", (long long)to);
    mrec_write(log, rec);
}

void metrics_overflow(metrics_log *log, const step_result *r, long step, long overflow_steps,
                      const char *output_dir) {
    if (r->at_min_scale)
        fprintf(stderr, "bertrain: step %ld: fp16 gradient overflow at the minimum loss scale "
                        "%.10g (fp16.min_loss_scale): the gradients overflow even at the "
                        "smallest scale allowed, so every step would be skipped; stopping. "
                        "Resume from the last checkpoint in %s with bf16, a lower learning rate "
                        "or a smaller fp16.min_loss_scale\n", step, r->loss_scale, output_dir);
    else
        fprintf(stderr, "bertrain: step %ld skipped: %s; parameters and optimizer state "
                        "unchanged; loss scale %.10g -> %.10g (%ld overflow steps so far)\n",
                step, r->skip_why, r->loss_scale, r->next_loss_scale, overflow_steps);
    cJSON *rec = mrec_new(step);
    mrec_str(rec, "skipped", r->skip_why);
    mrec_num(rec, "loss_scale", "%.9g", r->loss_scale);
    mrec_num(rec, "next_loss_scale", "%.9g", r->next_loss_scale);
    mrec_write(log, rec);
}

void metrics_rollback(metrics_log *log, long at_step, long back_to, uint64_t cursor, const char *ranges,
                      const uint64_t (*skipped)[2], int n) {
    printf("bertrain: rolled back from step %ld to step %ld; the data continues at sample %llu "
           "and never trains on samples %s\n", at_step, back_to, (unsigned long long)cursor,
           ranges);
    cJSON *rec = mrec_new(at_step);
    mrec_int(rec, "rollback_to_step", back_to);
    cJSON *list = cJSON_AddArrayToObject(rec, "skipped_samples");
    for (int i = 0; i < n; i++) {
        char pair[64];
        cJSON *one = cJSON_CreateArray();
        snprintf(pair, sizeof pair, "%llu", (unsigned long long)skipped[i][0]);
        cJSON_AddItemToArray(one, cJSON_CreateRaw(pair));
        snprintf(pair, sizeof pair, "%llu", (unsigned long long)skipped[i][1]);
        cJSON_AddItemToArray(one, cJSON_CreateRaw(pair));
        cJSON_AddItemToArray(list, one);
    }
    mrec_write(log, rec);
    fflush(stdout);
}

/* ================= evaluation ================= */

void metrics_eval(metrics_log *log, long step, const eval_result *ev, bool nsp, double seconds) {
    printf("eval step %ld | mlm_acc %.4f | perplexity %.3f | mlm_loss %.4f | baseline_acc %.4f "
           "(most common token) | %ld masked tokens | %.1f s\n", step, ev->mlm_acc,
           ev->perplexity, ev->mlm_loss, ev->baseline_acc, ev->n_masked, seconds);
    cJSON *rec = mrec_new(step);
    mrec_num(rec, "eval_mlm_loss", "%.9g", ev->mlm_loss);
    mrec_num(rec, "eval_mlm_acc", "%.6g", ev->mlm_acc);
    mrec_num(rec, "eval_perplexity", "%.6g", ev->perplexity);
    mrec_num(rec, "eval_baseline_acc", "%.6g", ev->baseline_acc);
    mrec_int(rec, "eval_masked", ev->n_masked);
    if (nsp) mrec_num(rec, "eval_nsp_acc", "%.6g", ev->nsp_acc);
    mrec_write(log, rec);
}

void metrics_fill_mask(metrics_log *log, long step, int n, char *const *texts, const int *n_masks,
                       fill_mask_guess *const *guesses, int top, const bt_vocab *vocab) {
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddNumberToObject(rec, "step", (double)step);
    cJSON *all = cJSON_AddArrayToObject(rec, "fill_mask");
    for (int i = 0; i < n; i++) {
        printf("fill-mask step %ld | %s ->", step, texts[i]);
        cJSON *one = cJSON_CreateObject();
        cJSON_AddItemToArray(all, one);
        cJSON_AddStringToObject(one, "text", texts[i]);
        cJSON *masks = cJSON_AddArrayToObject(one, "masks");
        for (int k = 0; k < n_masks[i]; k++) {
            cJSON *list = cJSON_CreateArray();
            cJSON_AddItemToArray(masks, list);
            printf("%s", n_masks[i] > 1 ? (k ? " |" : "") : "");
            for (int j = 0; j < top; j++) {
                const fill_mask_guess *g = &guesses[i][k * top + j];
                const char *tok = g->id < vocab->size ? vocab->tokens[g->id] : "[?]";
                printf("%s %s %.3f", j ? "," : "", tok, g->prob);
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "token", tok);
                char p4[32]; /* 4 significant digits are what a reader needs */
                snprintf(p4, sizeof p4, "%.4g", g->prob);
                cJSON_AddNumberToObject(e, "prob", strtod(p4, NULL));
                cJSON_AddItemToArray(list, e);
            }
        }
        printf("\n");
    }
    char *text = cJSON_PrintUnformatted(rec); /* the compact print, as metrics.h says */
    char *line = text ? realloc(text, strlen(text) + 2) : NULL;
    if (line) {
        strcat(line, "\n");
        log_line(log, line, strlen(line));
    } else {
        free(text);
        if (!log->err) log->err = ENOMEM;
        log->lost++;
    }
    free(line);
    cJSON_Delete(rec);
}

/* ================= the rest ================= */

void metrics_rebalance(long step, const char *shares) {
    printf("rebalance step %ld | shares %s\n", step, shares);
}

void metrics_drift(long step, int rank, double diff, double tolerance) {
    printf("drift step %ld | rank %d parameters differ from rank 0 by %.3e (relative, tolerance "
           "%.1e); re-syncing from rank 0\n", step, rank, diff, tolerance);
}

void metrics_rank_row(int rank, const char *host, const char *backend, const char *device,
                      double memory_gb, long share, double speed) {
    if (rank == 0) printf("rank | host | backend | device | memory | share | samples/s\n");
    char sp[32] = "-";
    if (speed > 0) snprintf(sp, sizeof sp, "%.1f", speed);
    printf("%4d | %s | %s | %s | %.1f GB | %ld | %s\n", rank, host, backend, device, memory_gb,
           share, sp);
}
