/* bertrain: pretrain BERT on CPUs and GPUs of any vendor. The program's
 * entry: the commands (cli_main.c) with no observer. */
#include "cli.h"

int main(int argc, char **argv) { return bertrain_main(argc, argv, NULL); }
