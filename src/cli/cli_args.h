/* One command-line parser for every subcommand: each declares a table of its
 * options (name, kind, range, where the value goes) and how many positional
 * arguments it takes. "--opt value" and "--opt=value" both work; "--" ends
 * the options. Every error is one line on stderr naming the option and the
 * value, and the caller exits 2 (bad input, before any work). */
#ifndef BT_CLI_ARGS_H
#define BT_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    ARG_FLAG,   /* no value: *(bool *)dest = true (may repeat) */
    ARG_STRING, /* *(const char **)dest: a non-empty value */
    ARG_CHOICE, /* *(const char **)dest: one of choices ("a|b|c") */
    ARG_INT,    /* *(int *)dest: an integer in [min, max] */
    ARG_U64,    /* *(uint64_t *)dest: decimal digits that fit in 64 bits */
    ARG_DOUBLE, /* *(double *)dest: a finite number in [min, max] ([min, max) if max_open) */
    ARG_LIST,   /* cli_list *dest: every value, in order (may repeat) */
} cli_arg_kind;

/* The values of an ARG_LIST option; items has room for every argument. */
typedef struct {
    const char **items;
    int n;
} cli_list;

/* One option of a table. */
typedef struct {
    const char *name;    /* "--steps" */
    cli_arg_kind kind;
    void *dest;
    const char *meta;    /* what the value is, for "needs a value" ("N", "auto|DIR") */
    double min, max;     /* ARG_INT, ARG_DOUBLE */
    bool max_open;       /* ARG_DOUBLE: max itself is out */
    const char *choices; /* ARG_CHOICE */
} cli_opt;

/* A subcommand's command line. */
typedef struct {
    const char *cmd;      /* "bench": messages start "bertrain bench: " */
    const cli_opt *opts;
    int n_opts;
    int max_pos;          /* positional arguments at most (-1: any number) */
    const char *pos_what; /* what they are, for "too many" ("CONFIG.json") */
    const char *help;     /* printed to stdout by --help / -h (NULL: no --help) */
} cli_spec;

enum { CLI_OK = 0, CLI_HELP = 1, CLI_ERROR = 2 };

/* Parse argv[0..argc) by spec: options into their dests (left as they are
 * when absent), positional arguments into pos[0..*n_pos) (pos has room for
 * argc). CLI_OK; CLI_HELP after printing spec->help; CLI_ERROR after one
 * line on stderr: an unknown option (with the closest name), a missing
 * value, a number with anything after it or out of range, an option given
 * twice that may appear once, too many positional arguments. */
int cli_parse(const cli_spec *spec, int argc, char **argv, const char **pos, int *n_pos);

/* A cli_list with room for argc values (NULL items when out of memory). */
cli_list cli_list_new(int argc);

#endif
