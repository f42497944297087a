/* Sub-commands of the bertrain executable. */
#ifndef BT_CLI_H
#define BT_CLI_H

#include "rng.h"

/* `bertrain bench ...`; returns the exit code. */
int cli_bench(int argc, char **argv);

/* `bertrain vocab ...`: learn a WordPiece vocab from text; the exit code. */
int cli_vocab(int argc, char **argv);

/* `bertrain prep ...`: text -> token shards, or --inspect one; the exit code. */
int cli_prep(int argc, char **argv);

#endif
