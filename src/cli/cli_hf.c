/* `bertrain export` and `bertrain import`: their command lines (the work is
 * store/hf_export.c and store/hf_import.c). */
#include "cli.h"
#include "cli_args.h"

#include "store/hf.h"
#include "util/utf8_check.h"

#include <stdio.h>
#include <string.h>

/* The paths export and import record (the export's mark and model card, an
 * import's state.json) are UTF-8, as JSON must be; false after one line. */
static bool paths_utf8(const char *cmd, const char *a, const char *b) {
    const char *bad = !utf8_valid(a) ? a : !utf8_valid(b) ? b : NULL;
    if (!bad) return true;
    char shown[512];
    utf8_shown(bad, shown, sizeof shown);
    fprintf(stderr, "bertrain %s: \"%s\" is not valid UTF-8: bertrain records the path in JSON, "
                    "which must be UTF-8; rename it\n", cmd, shown);
    return false;
}

#define EXPORT_USAGE "usage: bertrain export CKPT_DIR OUT_DIR [--keep-layers 0,2,4,...]\n"
#define IMPORT_USAGE                                                                       \
    "usage: bertrain import HF_DIR OUT_CKPT [--seed N] [--no-nsp] [--lowercase | "          \
    "--no-lowercase]\n"

int cli_export(int argc, char **argv) {
    const char *keep = NULL, *pos[2];
    int n_pos = 0;
    const cli_opt opts[] = {
        {"--keep-layers", ARG_STRING, &keep, "a comma list of layers", 0, 0, false, NULL},
    };
    const cli_spec spec = {"export", opts, 1, 2, "CKPT_DIR OUT_DIR", EXPORT_USAGE};
    const int parsed = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (parsed != CLI_OK) return parsed == CLI_HELP ? 0 : 2;
    if (n_pos != 2) {
        fprintf(stderr, EXPORT_USAGE);
        return 2;
    }
    if (!paths_utf8("export", pos[0], pos[1])) return 2;
    return hf_export(pos[0], pos[1], keep);
}

int cli_import(int argc, char **argv) {
    const char *pos[2];
    int n_pos = 0;
    hf_import_opts o = {42, false, -1};
    bool lower = false, no_lower = false;
    const cli_opt opts[] = {
        {"--seed", ARG_U64, &o.seed, "N", 0, 0, false, NULL},
        {"--no-nsp", ARG_FLAG, &o.no_nsp, NULL, 0, 0, false, NULL},
        {"--lowercase", ARG_FLAG, &lower, NULL, 0, 0, false, NULL},
        {"--no-lowercase", ARG_FLAG, &no_lower, NULL, 0, 0, false, NULL},
    };
    const cli_spec spec = {"import", opts, (int)(sizeof opts / sizeof *opts), 2, "HF_DIR OUT_CKPT",
                           IMPORT_USAGE};
    const int parsed = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (parsed != CLI_OK) return parsed == CLI_HELP ? 0 : 2;
    if (n_pos != 2) {
        fprintf(stderr, IMPORT_USAGE);
        return 2;
    }
    if (lower && no_lower) {
        fprintf(stderr, "bertrain import: --lowercase and --no-lowercase contradict each other; "
                        "give one\n");
        return 2;
    }
    if (lower || no_lower) o.lowercase = lower;
    if (!paths_utf8("import", pos[0], pos[1])) return 2;
    return hf_import(pos[0], pos[1], &o);
}
