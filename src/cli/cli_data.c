/* Argument parsing of the data commands: `bertrain vocab` and `bertrain prep`. */
#include "cli.h"
#include "cli_args.h"
#include "util/paths.h"
#include "data/prep.h"
#include "data/vocab_train.h"
#include "store/run_dir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int rc = 2;
    const cli_opt opts[] = {
        {"--size", ARG_INT, &o.vocab_size, "N", 6, 1 << 30, false, NULL},
        {"--out", ARG_STRING, &o.out_path, "FILE", 0, 0, false, NULL},
        {"--lowercase", ARG_FLAG, &o.lowercase, NULL, 0, 0, false, NULL},
        {"--min-frequency", ARG_INT, &o.min_frequency, "K", 1, 1 << 30, false, NULL},
        {"--limit-alphabet", ARG_INT, &o.limit_alphabet, "K", 0, 1 << 30, false, NULL},
    };
    const cli_spec spec = {"vocab", opts, sizeof opts / sizeof *opts, -1, "FILES", VOCAB_USAGE};
    if (!files) goto done;
    const int parsed = cli_parse(&spec, argc, argv, files, &o.n_files);
    if (parsed != CLI_OK) {
        rc = parsed == CLI_HELP ? 0 : 2;
        goto done;
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
    const cli_opt opts[] = {
        {"--vocab", ARG_STRING, &o.vocab_path, "vocab.txt", 0, 0, false, NULL},
        {"--out", ARG_STRING, &o.out_dir, "DIR", 0, 0, false, NULL},
        {"--lowercase", ARG_FLAG, &o.lowercase, NULL, 0, 0, false, NULL},
        {"--valid-fraction", ARG_DOUBLE, &o.valid_fraction, "F", 0, 1, true, NULL},
        {"--seed", ARG_U64, &o.seed, "S", 0, 0, false, NULL},
        {"--shard-tokens", ARG_U64, &o.shard_tokens, "N", 0, 0, false, NULL},
        {"--inspect", ARG_STRING, &inspect, "SHARD", 0, 0, false, NULL},
    };
    const cli_spec spec = {"prep", opts, sizeof opts / sizeof *opts, -1, "FILES", PREP_USAGE};
    if (!files) goto done;
    const int parsed = cli_parse(&spec, argc, argv, files, &o.n_files);
    if (parsed != CLI_OK) {
        rc = parsed == CLI_HELP ? 0 : 2;
        goto done;
    }
    if (o.shard_tokens == 0) {
        fprintf(stderr, "bertrain prep: --shard-tokens 0 is out of range [1, 18446744073709551615]\n");
        goto done;
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
