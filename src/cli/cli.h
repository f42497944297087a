/* Sub-commands of the bertrain executable. */
#ifndef BT_CLI_H
#define BT_CLI_H

#include "train/train.h"
#include "util/rng.h"

/* The bertrain program: argv[1] names the command; train runs observed by
 * obs (NULL: none, as the bertrain program's main gives). The exit code. */
int bertrain_main(int argc, char **argv, const train_observer *obs);

/* `bertrain bench ...`; returns the exit code. */
int cli_bench(int argc, char **argv);

/* `bertrain vocab ...`: learn a WordPiece vocab from text; the exit code. */
int cli_vocab(int argc, char **argv);

/* `bertrain prep ...`: text -> token shards, or --inspect one; the exit code. */
int cli_prep(int argc, char **argv);

/* `bertrain export CKPT_DIR OUT_DIR`: a checkpoint as a Hugging Face
 * BertForPreTraining directory; the exit code. */
int cli_export(int argc, char **argv);

/* `bertrain import HF_DIR OUT_CKPT [--seed N] [--no-nsp]`: a Hugging Face BERT directory
 * as a checkpoint that `train --resume OUT_CKPT` continues; the exit code. */
int cli_import(int argc, char **argv);

/* `bertrain predict CKPT [--top K] [--json] [TEXT...]`: the most probable
 * tokens for each [MASK]; the exit code. */
int cli_predict(int argc, char **argv);

#endif
