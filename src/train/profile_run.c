/* train --profile N (train_internal.h): which steps the profiler times and
 * where its report goes. */
#include "train_internal.h"

#include "mpi/dist.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

void run_profile_init(run_state *s, const bt_config *cfg) {
    s->prof.p = bt_profiler_of(s->be);
    if (!s->prof.p) return;
    const long left = cfg->train_steps - s->step0;
    s->prof.first = s->step0 + (left > cfg->profile_steps ? 1 : 0);
    s->prof.end = s->prof.first + cfg->profile_steps;
    if (s->prof.end > cfg->train_steps) s->prof.end = cfg->train_steps;
}

void run_profile_begin(run_state *s, long step) {
    if (s->prof.p && step >= s->prof.first && step < s->prof.end)
        bt_profile_step_begin(s->prof.p);
}

/* Write the profile as JSON to OUTPUT_DIR/name; a failure is one line, the
 * run goes on. */
static void write_json(const bt_profiler *p, const bt_config *cfg, const char *name) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", cfg->output_dir, name);
    cJSON *json = bt_profile_to_json(p);
    char *text = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    FILE *f = text ? fopen(path, "w") : NULL;
    bool ok = f != NULL;
    if (f) {
        ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
        ok = fclose(f) == 0 && ok;
    }
    free(text);
    if (!ok) fprintf(stderr, "bertrain: rank %d: cannot write the profile to %s\n", dist_rank(), path);
}

void run_profile_end(run_state *s, const bt_config *cfg, long step) {
    if (!s->prof.p || step < s->prof.first || step >= s->prof.end) return;
    bt_profile_step_end(s->prof.p);
    if (step != s->prof.end - 1) return;
    char name[64];
    if (dist_rank() == 0) {
        snprintf(name, sizeof name, "profile.json");
        printf("bertrain: profile of steps %ld-%ld (rank 0; JSON in %s/%s)\n", s->prof.first + 1,
               s->prof.end, cfg->output_dir, name);
        bt_profile_print(s->prof.p, stdout);
        fflush(stdout);
    } else {
        snprintf(name, sizeof name, "profile-rank%d.json", dist_rank());
    }
    write_json(s->prof.p, cfg, name);
}
