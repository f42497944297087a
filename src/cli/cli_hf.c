/* `bertrain export` and `bertrain import`: their command lines (the work is
 * store/hf_export.c and store/hf_import.c). */
#include "cli.h"

#include "store/hf.h"
#include "util/parse_num.h"
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

int cli_export(int argc, char **argv) {
    const char *keep = NULL, *pos[2] = {NULL, NULL};
    int n_pos = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--keep-layers") && i + 1 < argc)
            keep = argv[++i];
        else if (argv[i][0] != '-' && n_pos < 2)
            pos[n_pos++] = argv[i];
        else
            n_pos = 3;
    }
    if (n_pos != 2) {
        fprintf(stderr, "usage: bertrain export CKPT_DIR OUT_DIR [--keep-layers 0,2,4,...]\n");
        return 2;
    }
    if (!paths_utf8("export", pos[0], pos[1])) return 2;
    return hf_export(pos[0], pos[1], keep);
}

int cli_import(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    uint64_t seed = 42;
    bool no_nsp = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            if (!parse_u64(argv[++i], &seed)) {
                fprintf(stderr, "bertrain import: --seed %s: not an integer in [0, "
                                "18446744073709551615]\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--no-nsp")) {
            no_nsp = true;
        } else if (!in && argv[i][0] != '-') {
            in = argv[i];
        } else if (!out && argv[i][0] != '-') {
            out = argv[i];
        } else {
            in = out = NULL;
            i = argc;
        }
    }
    if (!in || !out) {
        fprintf(stderr, "usage: bertrain import HF_DIR OUT_CKPT [--seed N] [--no-nsp]\n");
        return 2;
    }
    if (!paths_utf8("import", in, out)) return 2;
    return hf_import(in, out, seed, no_nsp);
}
