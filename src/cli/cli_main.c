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
        {"--checkpoint", ARG_STRING, &checkpoint, "a checkpoint directory", 0, 0, false, NULL},
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

/* Commands that run across MPI ranks; the others never start MPI (a second
 * or more of start-up, and they need no ranks). */
static bool runs_across_ranks(const char *cmd) {
    return !strcmp(cmd, "train") || !strcmp(cmd, "eval") || !strcmp(cmd, "bench");
}

int bertrain_main(int argc, char **argv, const train_observer *obs) {
    if (argc >= 2 && runs_across_ranks(argv[1])) dist_init(&argc, &argv);
    int rc;
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        rc = argc < 2 ? 2 : 0;
    } else if (!strcmp(argv[1], "train")) {
        rc = cmd_train(argc - 2, argv + 2, false, obs);
    } else if (!strcmp(argv[1], "eval")) {
        rc = cmd_train(argc - 2, argv + 2, true, obs);
    } else if (!strcmp(argv[1], "bench")) {
        rc = cli_bench(argc - 2, argv + 2);
    } else if (!strcmp(argv[1], "vocab")) {
        rc = cli_vocab(argc - 2, argv + 2);
    } else if (!strcmp(argv[1], "prep")) {
        rc = cli_prep(argc - 2, argv + 2);
    } else if (!strcmp(argv[1], "devices")) {
        rc = no_args("devices", argc - 2, argv + 2);
        if (rc == CLI_OK) bt_backends_list_devices(stdout);
    } else if (!strcmp(argv[1], "export")) {
        rc = cli_export(argc - 2, argv + 2);
    } else if (!strcmp(argv[1], "import")) {
        rc = cli_import(argc - 2, argv + 2);
    } else if (!strcmp(argv[1], "predict")) {
        rc = cli_predict(argc - 2, argv + 2);
    } else if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        rc = no_args("version", argc - 2, argv + 2);
        if (rc == CLI_OK)
            printf("bertrain %s (backends: %s; %s)\n", PACKAGE_VERSION, bt_backends_built(),
                   dist_is_mpi() ? "mpi" : "no mpi");
    } else {
        fprintf(stderr, "bertrain: unknown command '%s'\n", argv[1]);
        usage(stderr);
        rc = 2;
    }
    dist_finalize();
    return rc;
}
