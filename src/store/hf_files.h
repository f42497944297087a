/* What export and import share: the files of a Hugging Face model directory
 * that `bertrain export` writes besides model.safetensors (config.json,
 * vocab.txt, the tokenizer files tokenizer_config.json,
 * special_tokens_map.json and tokenizer.json, and a model card README.md),
 * the names of the heads a model without model.nsp lacks, and a freshly
 * initialized model on the host. */
#ifndef BT_HF_FILES_H
#define BT_HF_FILES_H

#include "model/bert.h"
#include "data/vocab.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The pooler and NSP head: absent from a model trained without model.nsp. */
extern const char *const HF_NSP_TENSORS[4];

/* A CPU model of shape mc with its parameters initialized from seed (as a
 * training run with that seed initializes them), copied to the host in
 * *host; NULL after printing why. The caller frees the model, its backend
 * *be and *host. */
bert_model *hf_host_model(const bert_config *mc, uint64_t seed, bt_backend **be, float **host);

/* Write dir/name through a temporary file, fsync and a rename: never half
 * written. false after printing why. */
bool hf_write_atomic(const char *dir, const char *name, const char *data, size_t n);

/* hf_write_atomic of obj as indented JSON. */
bool hf_write_json(const char *dir, const char *name, const cJSON *obj);

/* transformers' config.json of a BertForPreTraining of shape mc. */
cJSON *hf_config_json(const bert_config *mc, int pad_id);

/* tokenizer_config.json and special_tokens_map.json (BertTokenizer), and
 * tokenizer.json: BertNormalizer (lower: lowercase and strip accents),
 * BertPreTokenizer, WordPiece over v, the [CLS] A [SEP] (B [SEP]) template,
 * so that AutoTokenizer loads the fast tokenizer without converting vocab.txt.
 * false after printing why. */
bool hf_write_tokenizer_files(const char *dir, const bt_vocab *v, bool lower, int max_len);

/* What the model card says about the export. */
typedef struct {
    const char *ckpt;        /* the checkpoint exported */
    const cJSON *state;      /* its state.json */
    const bert_config *mc;   /* the exported shape (after --keep-layers) */
    int vocab_tokens;        /* tokens in vocab.txt */
    const char *keep_layers; /* --keep-layers, or NULL */
    const char *pooler;      /* "trained", "initialized" or "carried" (from an import) */
    const char *nsp_head;    /* the same for the NSP head */
} hf_card;

/* README.md: a model card with the shape, the training (config, steps,
 * samples seen), the held-out metrics recorded at the checkpoint's step, the
 * state of the heads, and how to use it. false after printing why. */
bool hf_write_model_card(const char *dir, const hf_card *card);

/* The mark of a complete export, written after every other file. */
#define HF_EXPORT_MARK "bertrain_export.json"

/* Write dir/HF_EXPORT_MARK: the checkpoint exported and the size and CRC-32
 * of each file the export wrote. Last, so that a directory without it is an
 * export that was interrupted. false after printing why. */
bool hf_write_export_mark(const char *dir, const char *ckpt);

/* Import's check of an HF directory whose model.safetensors has metadata
 * bertrain_export `marked` (NULL: none): an export's must carry the mark of a
 * complete export, every file it lists, and model.safetensors and vocab.txt
 * as the export wrote them. A directory from anywhere else (transformers'
 * save_pretrained keeps no such metadata) passes. false with the reason in
 * err. */
bool hf_check_export(const char *dir, const char *marked, char *err, size_t errlen);

#endif
