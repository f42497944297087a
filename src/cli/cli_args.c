/* The one command-line parser of every subcommand (cli_args.h). */
#include "cli_args.h"

#include "config/config.h"
#include "util/parse_num.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cli_list cli_list_new(int argc) {
    return (cli_list){calloc((size_t)argc + 1, sizeof(const char *)), 0};
}

/* The option of spec called name (len characters), or NULL. */
static const cli_opt *find_opt(const cli_spec *spec, const char *name, size_t len) {
    for (int i = 0; i < spec->n_opts; i++)
        if (strlen(spec->opts[i].name) == len && !strncmp(spec->opts[i].name, name, len))
            return &spec->opts[i];
    return NULL;
}

/* "unknown option X", with the closest option name when one is close (as
 * the config's unknown keys). */
static void unknown_option(const cli_spec *spec, const char *arg, size_t len) {
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(len < 100 ? len : 100), arg);
    const char *best = NULL;
    int best_d = 1 << 20;
    for (int i = 0; i < spec->n_opts; i++) {
        const int d = edit_distance(name, spec->opts[i].name);
        if (d < best_d) {
            best_d = d;
            best = spec->opts[i].name;
        }
    }
    const int n = (int)strlen(name);
    if (best && best_d <= (n < 8 ? 2 : n / 3))
        fprintf(stderr, "bertrain %s: unknown option %s (did you mean %s?)\n", spec->cmd, name,
                best);
    else
        fprintf(stderr, "bertrain %s: unknown option %s\n", spec->cmd, name);
}

/* Whether choice is one of the '|'-separated names of choices. */
static bool is_choice(const char *choices, const char *choice) {
    const size_t n = strlen(choice);
    for (const char *c = choices; *c;) {
        const size_t len = strcspn(c, "|");
        if (len == n && !strncmp(c, choice, n)) return true;
        c += len + (c[len] == '|');
    }
    return false;
}

/* Store value v of option o; false after one line naming both. */
static bool store(const cli_spec *spec, const cli_opt *o, const char *v) {
    const char *cmd = spec->cmd;
    int64_t i;
    double d;
    switch (o->kind) {
    case ARG_FLAG:
        *(bool *)o->dest = true;
        return true;
    case ARG_STRING:
        if (!*v) {
            fprintf(stderr, "bertrain %s: %s needs a value (%s), not \"\"\n", cmd, o->name, o->meta);
            return false;
        }
        *(const char **)o->dest = v;
        return true;
    case ARG_CHOICE:
        if (!is_choice(o->choices, v)) {
            fprintf(stderr, "bertrain %s: %s %s: expected %s\n", cmd, o->name, v, o->choices);
            return false;
        }
        *(const char **)o->dest = v;
        return true;
    case ARG_INT:
        if (!parse_i64(v, &i)) {
            fprintf(stderr, "bertrain %s: %s %s: expected an integer\n", cmd, o->name, v);
            return false;
        }
        if ((double)i < o->min || (double)i > o->max) {
            fprintf(stderr, "bertrain %s: %s %s is out of range [%.0f, %.0f]\n", cmd, o->name, v,
                    o->min, o->max);
            return false;
        }
        *(int *)o->dest = (int)i;
        return true;
    case ARG_U64:
        if (!parse_u64(v, (uint64_t *)o->dest)) {
            fprintf(stderr, "bertrain %s: %s %s: not an integer in [0, 18446744073709551615]\n",
                    cmd, o->name, v);
            return false;
        }
        return true;
    case ARG_DOUBLE:
        if (!parse_f64(v, &d)) {
            fprintf(stderr, "bertrain %s: %s %s: expected a number\n", cmd, o->name, v);
            return false;
        }
        if (d < o->min || d > o->max || (o->max_open && d == o->max)) {
            fprintf(stderr, "bertrain %s: %s %s is out of range [%g, %g%c\n", cmd, o->name, v,
                    o->min, o->max, o->max_open ? ')' : ']');
            return false;
        }
        *(double *)o->dest = d;
        return true;
    case ARG_LIST: {
        cli_list *l = o->dest;
        l->items[l->n++] = v;
        return true;
    }
    }
    return false;
}

int cli_parse(const cli_spec *spec, int argc, char **argv, const char **pos, int *n_pos) {
    bool seen[64] = {false};
    bool options = true;
    *n_pos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (options && !strcmp(a, "--")) {
            options = false;
            continue;
        }
        if (!options || a[0] != '-' || !a[1]) { /* positional ("-" included) */
            if (spec->max_pos >= 0 && *n_pos >= spec->max_pos) {
                fprintf(stderr, "bertrain %s: unexpected argument %s (%s%s)\n", spec->cmd, a,
                        spec->max_pos ? "takes " : "takes no arguments",
                        spec->max_pos ? spec->pos_what : "");
                return CLI_ERROR;
            }
            pos[(*n_pos)++] = a;
            continue;
        }
        if (spec->help && (!strcmp(a, "--help") || !strcmp(a, "-h"))) {
            fputs(spec->help, stdout);
            return CLI_HELP;
        }
        const char *eq = strchr(a, '=');
        const size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const cli_opt *o = find_opt(spec, a, len);
        if (!o) {
            unknown_option(spec, a, len);
            return CLI_ERROR;
        }
        const int k = (int)(o - spec->opts);
        if (o->kind == ARG_FLAG && eq) {
            fprintf(stderr, "bertrain %s: %s takes no value (%s)\n", spec->cmd, o->name, a);
            return CLI_ERROR;
        }
        if (o->kind != ARG_FLAG && o->kind != ARG_LIST && k < 64 && seen[k]) {
            fprintf(stderr, "bertrain %s: %s given twice (%s); it takes one value\n", spec->cmd,
                    o->name, eq ? eq + 1 : i + 1 < argc ? argv[i + 1] : "");
            return CLI_ERROR;
        }
        if (k < 64) seen[k] = true;
        const char *v = NULL;
        if (o->kind != ARG_FLAG) {
            if (!eq && i + 1 >= argc) {
                fprintf(stderr, "bertrain %s: %s needs a value (%s)\n", spec->cmd, o->name,
                        o->meta);
                return CLI_ERROR;
            }
            v = eq ? eq + 1 : argv[++i];
        }
        if (!store(spec, o, v)) return CLI_ERROR;
    }
    return CLI_OK;
}
