/* bertrain: pretrain BERT on CPUs and GPUs of any vendor. Command dispatch. */
#include "../mpi/dist.h"
#include "cli.h"
#include "config.h"
#include "train.h"

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
            "  bertrain train CONFIG.json [--set key.path=value]...\n"
            "  bertrain bench --preset P --seq S --batch B [--backend NAME] [--steps N]\n"
            "  bertrain version\n"
            "\n"
            "backends built: %s. Configuration keys: docs/CONFIG.md.\n",
            PACKAGE_VERSION, bt_backends_built());
}

static int cmd_train(int argc, char **argv) {
    const char *path = NULL;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    int n_sets = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--set")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "bertrain train: --set needs key.path=value\n");
                free(sets);
                return 2;
            }
            sets[n_sets++] = argv[++i];
        } else if (!strncmp(argv[i], "--set=", 6)) {
            sets[n_sets++] = argv[i] + 6;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "bertrain train: unknown option %s\n", argv[i]);
            free(sets);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "bertrain train: more than one config file (%s, %s)\n", path, argv[i]);
            free(sets);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "bertrain train: missing CONFIG.json (try examples/demo.json)\n");
        free(sets);
        return 2;
    }
    bt_config cfg;
    bool ok = config_load(&cfg, path, sets, n_sets, dist_world());
    free(sets);
    if (!ok) return 2;
    return train_main(&cfg);
}

int main(int argc, char **argv) {
    dist_init(&argc, &argv);
    int rc;
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        rc = argc < 2 ? 2 : 0;
    } else if (!strcmp(argv[1], "train")) {
        rc = cmd_train(argc - 2, argv + 2);
    } else if (!strcmp(argv[1], "bench")) {
        rc = cli_bench(argc - 2, argv + 2);
    } else if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("bertrain %s (backends: %s)\n", PACKAGE_VERSION, bt_backends_built());
        rc = 0;
    } else {
        fprintf(stderr, "bertrain: unknown command '%s'\n", argv[1]);
        usage(stderr);
        rc = 2;
    }
    dist_finalize();
    return rc;
}
