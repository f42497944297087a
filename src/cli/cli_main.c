/* bertrain: pretrain BERT on CPUs and GPUs of any vendor. Command dispatch
 * (bertrain_main, which the program's main and the test build's call). */
#include "mpi/dist.h"
#include "cli.h"
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

static int cmd_train(int argc, char **argv, bool eval, const train_observer *obs) {
    const char *path = NULL, *checkpoint = NULL, *resume = NULL, *cmd = eval ? "eval" : "train";
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    int n_sets = 0, profile_steps = 0;
    bool allow_data_change = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--set")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "bertrain %s: --set needs key.path=value\n", cmd);
                free(sets);
                return 2;
            }
            sets[n_sets++] = argv[++i];
        } else if (eval && !strcmp(argv[i], "--checkpoint") && i + 1 < argc) {
            checkpoint = argv[++i];
        } else if (!eval && !strncmp(argv[i], "--resume=", 9)) {
            resume = argv[i] + 9;
        } else if (!eval && !strcmp(argv[i], "--resume")) {
            if (i + 1 >= argc || !argv[i + 1][0]) {
                fprintf(stderr, "bertrain train: --resume needs auto or a checkpoint directory\n");
                free(sets);
                return 2;
            }
            resume = argv[++i];
        } else if (!eval && !strcmp(argv[i], "--allow-data-change")) {
            allow_data_change = true;
        } else if (!eval && !strcmp(argv[i], "--profile")) {
            char *end = NULL;
            const long n = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || !end || *end || n < 1 || n > 100000) {
                fprintf(stderr, "bertrain train: --profile needs a number of steps (1 to 100000)\n");
                free(sets);
                return 2;
            }
            profile_steps = (int)n;
            i++;
        } else if (!strncmp(argv[i], "--set=", 6)) {
            sets[n_sets++] = argv[i] + 6;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "bertrain %s: unknown option %s\n", cmd, argv[i]);
            free(sets);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "bertrain %s: more than one config file (%s, %s)\n", cmd, path, argv[i]);
            free(sets);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "bertrain %s: missing CONFIG.json (try examples/demo.json)\n", cmd);
        free(sets);
        return 2;
    }
    if (eval && !checkpoint) {
        fprintf(stderr, "bertrain eval: missing --checkpoint DIR\n");
        free(sets);
        return 2;
    }
    bt_config cfg;
    bool ok = config_load(&cfg, path, sets, n_sets, dist_world());
    free(sets);
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
    int rc = eval ? eval_main(&cfg, checkpoint) : train_main(&cfg, obs);
    config_free(&cfg);
    return rc;
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
        bt_backends_list_devices(stdout);
        rc = 0;
    } else if (!strcmp(argv[1], "export")) {
        rc = cli_export(argc - 2, argv + 2);
    } else if (!strcmp(argv[1], "import")) {
        rc = cli_import(argc - 2, argv + 2);
    } else if (!strcmp(argv[1], "predict")) {
        rc = cli_predict(argc - 2, argv + 2);
    } else if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("bertrain %s (backends: %s; %s)\n", PACKAGE_VERSION, bt_backends_built(),
               dist_is_mpi() ? "mpi" : "no mpi");
        rc = 0;
    } else {
        fprintf(stderr, "bertrain: unknown command '%s'\n", argv[1]);
        usage(stderr);
        rc = 2;
    }
    dist_finalize();
    return rc;
}
