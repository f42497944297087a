/* Hugging Face interchange. `export` (hf_export.c) writes a checkpoint as a
 * directory that transformers' BertForPreTraining.from_pretrained loads
 * (model.safetensors with the tied decoder tensors, config.json, vocab.txt,
 * tokenizer files, a model card); `import` (hf_import.c) reads an HF BERT
 * directory (BertForPreTraining, BertForMaskedLM or BertModel keys, old
 * LayerNorm gamma/beta names, F32/F16/BF16/F64) into a checkpoint at step 0
 * that `train --resume` continues. */
#ifndef BT_HF_H
#define BT_HF_H

#include <stdbool.h>
#include <stdint.h>

/* Export checkpoint ckpt (a checkpoint directory or a run's output_dir, its
 * latest) into the new directory out, keeping only the encoder layers listed
 * in keep_layers ("0,2,4", renumbered; NULL: all). Admin's omegas are folded
 * into a plain Post-LN model; a model without model.nsp gets the import's
 * heads where it carries them, else initialized ones. Returns the exit
 * status after printing what it did or one line why not. */
int hf_export(const char *ckpt, const char *out, const char *keep_layers);

/* How import reads an HF directory (bertrain import's options). */
typedef struct {
    uint64_t seed; /* initializes the tensors the model has but the file lacks */
    bool no_nsp;   /* drop a trained NSP head (MLM-only training; the pooler and
                      head are carried unchanged for the export) */
    int lowercase; /* the tokenizer lowercases: 1 or 0 (--lowercase, --no-lowercase);
                      -1: as tokenizer_config.json's do_lower_case says */
} hf_import_opts;

/* Import the HF model directory in as the new checkpoint out. A
 * do_lower_case that contradicts the vocab's casing is reported (opts
 * decides). The checkpoint records its base model: the directory, the
 * licence its model card names, and the tensors initialized here. Returns
 * the exit status after printing what it did or one line why not. */
int hf_import(const char *in, const char *out, const hf_import_opts *opts);

#endif
