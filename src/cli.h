/* Sub-commands of the bertrain executable. */
#ifndef BT_CLI_H
#define BT_CLI_H

#include "rng.h"

/* `bertrain bench ...`; returns the exit code. */
int cli_bench(int argc, char **argv);

#endif
