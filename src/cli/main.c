/* bertrain: pretrain BERT on CPUs and GPUs of any vendor. The program's
 * entry: the commands (cli_main.c) with no observer. */
#include "backends/registry.h"
#include "cli.h"

int main(int argc, char **argv) {
    bt_backends_prepare_process(argv);
    return bertrain_main(argc, argv, NULL);
}
