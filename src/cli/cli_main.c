/* bertrain: pretrain BERT on CPUs and GPUs of any vendor. Command dispatch
 * (bertrain_main, which the program's main and the test build's call). */
#include "mpi/dist.h"
#include "cli.h"
#include "cli_args.h"
#include "config/config.h"
#include "train/eval.h"
#include "train/train.h"
#include "backends/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "dev"
#endif

static void usage(FILE *out) {
    fprintf(out,
            "bertrain %s: pretrain BERT on CPUs and GPUs of any vendor\n"
            "\n"
            "usage:\n"
            "  bertrain train CONFIG.json [--resume auto|DIR [--allow-data-change]] [--profile N] [--set key.path=value]...\n"
            "  bertrain eval CONFIG.json --checkpoint DIR [--set key.path=value]...\n"
            "  bertrain bench --preset P --seq S --batch B [--backend NAME] [--steps N] [--profile] [--json]\n"
            "                 [--set key.path=value]...  (bertrain bench --help: all its options)\n"
            "  bertrain vocab --size N --out vocab.txt [--lowercase] FILES...\n"
            "  bertrain prep --vocab vocab.txt [--lowercase] --out DIR [--valid-fraction F] FILES...\n"
            "  bertrain prep --inspect SHARD [--vocab vocab.txt]\n"
            "  bertrain export CKPT_DIR OUT_DIR [--keep-layers 0,2,...]  (a Hugging Face BertForPreTraining directory)\n"
            "  bertrain import HF_DIR OUT_CKPT [--seed N] [--no-nsp]  (then: train CONFIG --resume OUT_CKPT)\n"
            "  bertrain predict CKPT [--top K] [--json] \"text with [MASK] ...\"...  (or lines on stdin)\n"
            "  bertrain devices\n"
            "  bertrain version\n"
            "\n"
            "backends built: %s. Configuration keys: docs/CONFIG.md.\n",
            PACKAGE_VERSION, bt_backends_built());
}

/* `bertrain train|eval CONFIG.json [options]`; the exit code. */
static int cmd_train(int argc, char **argv, bool eval, const train_observer *obs) {
    const char *checkpoint = NULL, *resume = NULL, *cmd = eval ? "eval" : "train";
    const char **pos = calloc((size_t)argc + 1, sizeof *pos);
    cli_list sets = cli_list_new(argc);
    int n_pos = 0, profile_steps = 0;
    bool allow_data_change = false;
    const cli_opt train_opts[] = {
        {"--set", ARG_LIST, &sets, "key.path=value", 0, 0, false, NULL},
        {"--resume", ARG_STRING, &resume, "auto or a checkpoint directory", 0, 0, false, NULL},
        {"--allow-data-change", ARG_FLAG, &allow_data_change, NULL, 0, 0, false, NULL},
        {"--profile", ARG_INT, &profile_steps, "a number of steps", 1, 100000, false, NULL},
    };
    const cli_opt eval_opts[] = {
        {"--set", ARG_LIST, &sets, "key.path=value", 0, 0, false, NULL},
        {"--checkpoint", ARG_STRING, &checkpoint, "a checkpoint directory", 0, 0, false, NULL}, /* or a run's */
    };
    const cli_spec spec = {cmd, eval ? eval_opts : train_opts,
                           eval ? 2 : (int)(sizeof train_opts / sizeof *train_opts), 1,
                           "one CONFIG.json", NULL};
    int rc = pos && sets.items ? cli_parse(&spec, argc, argv, pos, &n_pos) : CLI_ERROR;
    const char *path = n_pos ? pos[0] : NULL;
    free(pos);
    if (rc == CLI_OK && !path)
        fprintf(stderr, "bertrain %s: missing CONFIG.json (try examples/demo.json)\n", cmd);
    else if (rc == CLI_OK && eval && !checkpoint)
        fprintf(stderr, "bertrain eval: missing --checkpoint DIR\n");
    if (rc != CLI_OK || !path || (eval && !checkpoint)) {
        free(sets.items);
        return 2;
    }
    bt_config cfg;
    bool ok = config_load(&cfg, path, sets.items, sets.n, dist_world());
    free(sets.items);
    if (!ok) return 2;
    if (resume && strlen(resume) >= sizeof cfg.resume) {
        fprintf(stderr, "bertrain train: --resume: path longer than %zu characters\n",
                sizeof cfg.resume - 1);
        config_free(&cfg);
        return 2;
    }
    if (resume) snprintf(cfg.resume, sizeof cfg.resume, "%s", resume);
    cfg.profile_steps = profile_steps;
    cfg.allow_data_change = allow_data_change;
    dist_set_timeout(cfg.dist_timeout_s);
    rc = eval ? eval_main(&cfg, checkpoint) : train_main(&cfg, obs);
    config_free(&cfg);
    return rc;
}

/* A command that takes no arguments (devices, version): CLI_OK, or
 * CLI_ERROR after one line. */
static int no_args(const char *cmd, int argc, char **argv) {
    const char *pos[1];
    int n_pos = 0;
    const cli_spec spec = {cmd, NULL, 0, 0, "", NULL};
    return cli_parse(&spec, argc, argv, pos, &n_pos);
}

static int run_train(int argc, char **argv, const train_observer *obs) {
    return cmd_train(argc, argv, false, obs);
}

static int run_eval(int argc, char **argv, const train_observer *obs) {
    return cmd_train(argc, argv, true, obs);
}

static int run_devices(int argc, char **argv, const train_observer *obs) {
    (void)obs;
    const int rc = no_args("devices", argc, argv);
    if (rc == CLI_OK) bt_backends_list_devices(stdout);
    return rc;
}

static int run_version(int argc, char **argv, const train_observer *obs) {
    (void)obs;
    const int rc = no_args("version", argc, argv);
    if (rc == CLI_OK)
        printf("bertrain %s (backends: %s; %s)\n", PACKAGE_VERSION, bt_backends_built(),
               dist_is_mpi() ? "mpi" : "no mpi");
    return rc;
}

/* The commands that need no observer: cli.h's. */
#define PLAIN(fn)                                                                  \
    static int run_##fn(int argc, char **argv, const train_observer *obs) {        \
        (void)obs;                                                                 \
        return cli_##fn(argc, argv);                                               \
    }
PLAIN(bench)
PLAIN(vocab)
PLAIN(prep)
PLAIN(export)
PLAIN(import)
PLAIN(predict)
#undef PLAIN

/* Every command: its name, what runs it (with the arguments after the name)
 * and whether it runs across MPI ranks (the others never start MPI: a second
 * or more of start-up, and they need no ranks). */
static const struct {
    const char *name;
    int (*run)(int argc, char **argv, const train_observer *obs);
    bool across_ranks;
} COMMANDS[] = {
    {"train", run_train, true},     {"eval", run_eval, true},       {"bench", run_bench, true},
    {"vocab", run_vocab, false},    {"prep", run_prep, false},      {"devices", run_devices, false},
    {"export", run_export, false},  {"import", run_import, false},  {"predict", run_predict, false},
    {"version", run_version, false}, {"--version", run_version, false},
};

int bertrain_main(int argc, char **argv, const train_observer *obs) {
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++) {
        if (strcmp(argv[1], COMMANDS[i].name)) continue;
        if (COMMANDS[i].across_ranks) dist_init(&argc, &argv);
        const int rc = COMMANDS[i].run(argc - 2, argv + 2, obs);
        dist_finalize();
        return rc;
    }
    fprintf(stderr, "bertrain: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
