/* The config's table of keys (config_keys.c): each key's JSON path, kind,
 * place in bt_config and range. Parsing (config.c) walks a JSON object
 * through it; writing the resolved config back (config_to_cjson) reads it. */
#ifndef BT_CONFIG_KEYS_H
#define BT_CONFIG_KEYS_H

#include "config.h"

#include <cjson/cJSON.h>
#include <stddef.h>

/* K_OPT_STRING: a string, or null for none (stored as ""). */
typedef enum { K_OBJECT, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_BOOL, K_STRING, K_OPT_STRING, K_SEED,
               K_BETAS, K_CHOICE, K_SHARES, K_DEVICES, K_MASK_TEXTS } key_kind;

typedef struct {
    const char *path;
    key_kind kind;
    size_t offset;      /* into bt_config */
    double min, max;    /* numeric range, inclusive */
    const char *choices; /* K_CHOICE: "a|b|c", stored as the index (int) */
    size_t size;        /* K_STRING, K_OPT_STRING: buffer size */
} key_spec;

#define OFF(field) offsetof(bt_config, field)

/* Every key, and how many. */
extern const key_spec CONFIG_KEYS[];
extern const size_t CONFIG_N_KEYS;

/* The key at dotted path, or NULL when there is none. */
const key_spec *config_find_key(const char *path);

/* A K_CHOICE key stored as a bool (its first choice false) rather than an
 * index. */
bool config_choice_is_bool(const key_spec *k);

/* One line "bertrain: FILE: message" on stderr (rank 0 only: every rank
 * reads the same config). */
void config_fail(const bt_config *cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Apply every key of obj, whose path starts with prefix ("" at the top),
 * to cfg: an unknown key (with the closest known one), a wrong type or a
 * value out of range is one line and false. */
bool config_walk(bt_config *cfg, const cJSON *obj, const char *prefix);

#endif
