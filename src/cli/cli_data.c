/* Argument parsing of the data commands: `bertrain vocab` and `bertrain prep`. */
#include "cli.h"
#include "util/parse_num.h"
#include "util/paths.h"
#include "data/prep.h"
#include "data/vocab_train.h"
#include "store/run_dir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of option name at argv[*i] ("--name V" or "--name=V"), advancing
 * *i past it; NULL if argv[*i] is not that option. *missing is set when the
 * option is there without a value. */
static const char *option_value(int argc, char **argv, int *i, const char *name, bool *missing) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return NULL;
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (argv[*i][n] != 0) return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

static bool parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end) return false;
    *out = v;
    return true;
}

#define VOCAB_USAGE                                                                        \
    "usage: bertrain vocab --size N --out vocab.txt [options] FILES...\n"                  \
    "\n"                                                                                   \
    "Learn a WordPiece vocabulary: [PAD] [UNK] [CLS] [SEP] [MASK], every character, then\n" \
    "pieces merged from the most frequent pairs (deterministic).\n"                         \
    "  --size N             tokens in all (the characters alone may need more)\n"          \
    "  --out FILE           the vocab.txt to write (one token per line)\n"                 \
    "  --lowercase          lowercase and strip accents first (BERT uncased)\n"            \
    "  --min-frequency K    a pair must occur K times to be merged (default 2)\n"          \
    "  --limit-alphabet K   keep only the K most frequent characters (default: all)\n"
#define PREP_USAGE                                                                         \
    "usage: bertrain prep --vocab vocab.txt --out DIR [options] FILES...\n"                \
    "       bertrain prep --inspect SHARD [--vocab vocab.txt]\n"                           \
    "\n"                                                                                   \
    "Tokenize text into shards: one sentence per line; a blank line, and the end of each\n" \
    "file, ends a document. Writes DIR/train.shard (DIR/train/train-NNNNN.shard when it\n"  \
    "takes several) and DIR/valid.shard.\n"                                                \
    "  --lowercase          lowercase and strip accents (as when the vocab was made)\n"    \
    "  --valid-fraction F   share of documents held out for validation (default 0.01;\n"   \
    "                       at least one when F > 0 and there are two or more)\n"         \
    "  --seed S             seed of that split (default 0)\n"                              \
    "  --shard-tokens N     start another train shard after N tokens (default 67108864)\n" \
    "  --inspect SHARD      print a shard's header and decode its first 64 tokens\n"

int cli_vocab(int argc, char **argv) {
    bt_vocab_train_options o = {.min_frequency = 2};
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    uint64_t num;
    int rc = 2;
    for (int i = 0; i < argc; i++) {
        bool missing = false;
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf(VOCAB_USAGE);
            rc = 0;
            goto done;
        } else if (!strcmp(argv[i], "--lowercase")) {
            o.lowercase = true;
        } else if ((v = option_value(argc, argv, &i, "--size", &missing))) {
            if (!parse_u64(v, &num) || num < 6 || num > 1u << 30) {
                fprintf(stderr, "bertrain vocab: --size %s is not a count between 6 and 2^30\n", v);
                goto done;
            }
            o.vocab_size = (int)num;
        } else if ((v = option_value(argc, argv, &i, "--out", &missing))) {
            o.out_path = v;
        } else if ((v = option_value(argc, argv, &i, "--min-frequency", &missing))) {
            if (!parse_u64(v, &num) || num < 1 || num > 1u << 30) {
                fprintf(stderr, "bertrain vocab: --min-frequency %s is not a count >= 1\n", v);
                goto done;
            }
            o.min_frequency = (int)num;
        } else if ((v = option_value(argc, argv, &i, "--limit-alphabet", &missing))) {
            if (!parse_u64(v, &num) || num > 1u << 30) {
                fprintf(stderr, "bertrain vocab: --limit-alphabet %s is not a count\n", v);
                goto done;
            }
            o.limit_alphabet = (int)num;
        } else if (missing) {
            fprintf(stderr, "bertrain vocab: %s needs a value; see bertrain vocab --help\n",
                    argv[i]);
            goto done;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "bertrain vocab: unknown option %s; see bertrain vocab --help\n",
                    argv[i]);
            goto done;
        } else {
            files[o.n_files++] = argv[i];
        }
    }
    if (!o.vocab_size || !o.out_path || !o.n_files) {
        fprintf(stderr, "bertrain vocab: missing %s; see bertrain vocab --help\n",
                !o.vocab_size ? "--size" : !o.out_path ? "--out" : "input FILES");
        goto done;
    }
    char err[2400];
    if (!run_dir_check_outside_ckpt(o.out_path, "vocab", err, sizeof err) ||
        !paths_prepare_file(o.out_path, err, sizeof err)) {
        fprintf(stderr, "bertrain vocab: --out %s\n", err);
        goto done;
    }
    o.files = files;
    rc = vocab_train(&o);
done:
    free(files);
    return rc;
}

int cli_prep(int argc, char **argv) {
    bt_prep_options o = {.valid_fraction = PREP_DEFAULT_VALID_FRACTION,
                         .shard_tokens = PREP_DEFAULT_SHARD_TOKENS};
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    const char *inspect = NULL;
    int rc = 2;
    for (int i = 0; i < argc; i++) {
        bool missing = false;
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf(PREP_USAGE);
            rc = 0;
            goto done;
        } else if (!strcmp(argv[i], "--lowercase")) {
            o.lowercase = true;
        } else if ((v = option_value(argc, argv, &i, "--vocab", &missing))) {
            o.vocab_path = v;
        } else if ((v = option_value(argc, argv, &i, "--out", &missing))) {
            o.out_dir = v;
        } else if ((v = option_value(argc, argv, &i, "--inspect", &missing))) {
            inspect = v;
        } else if ((v = option_value(argc, argv, &i, "--valid-fraction", &missing))) {
            if (!parse_double(v, &o.valid_fraction) || !(o.valid_fraction >= 0) ||
                !(o.valid_fraction < 1)) {
                fprintf(stderr, "bertrain prep: --valid-fraction %s is not a number in [0, 1)\n",
                        v);
                goto done;
            }
        } else if ((v = option_value(argc, argv, &i, "--seed", &missing))) {
            if (!parse_u64(v, &o.seed)) {
                fprintf(stderr, "bertrain prep: --seed %s is not a non-negative integer\n", v);
                goto done;
            }
        } else if ((v = option_value(argc, argv, &i, "--shard-tokens", &missing))) {
            if (!parse_u64(v, &o.shard_tokens) || o.shard_tokens == 0) {
                fprintf(stderr, "bertrain prep: --shard-tokens %s is not a count >= 1\n", v);
                goto done;
            }
        } else if (missing) {
            fprintf(stderr, "bertrain prep: %s needs a value; see bertrain prep --help\n",
                    argv[i]);
            goto done;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "bertrain prep: unknown option %s; see bertrain prep --help\n",
                    argv[i]);
            goto done;
        } else {
            files[o.n_files++] = argv[i];
        }
    }
    if (inspect) {
        if (o.n_files || o.out_dir) {
            fprintf(stderr, "bertrain prep: --inspect takes one SHARD and optionally --vocab; "
                            "see bertrain prep --help\n");
            goto done;
        }
        rc = prep_inspect(inspect, o.vocab_path);
        goto done;
    }
    if (!o.vocab_path || !o.out_dir || !o.n_files) {
        fprintf(stderr, "bertrain prep: missing %s; see bertrain prep --help\n",
                !o.vocab_path ? "--vocab" : !o.out_dir ? "--out" : "input FILES");
        goto done;
    }
    char err[2400];
    if (!paths_check_own_dir(o.out_dir, "--out", err, sizeof err)) {
        fprintf(stderr, "bertrain prep: %s\n", err);
        goto done;
    }
    if (!run_dir_check_outside_ckpt(o.out_dir, "prep", err, sizeof err)) {
        fprintf(stderr, "bertrain prep: --out %s\n", err);
        goto done;
    }
    o.files = files;
    rc = prep_run(&o);
done:
    free(files);
    return rc;
}
