/* A byte-string -> int64 hash map (open addressing, linear probing) whose keys
 * live in one growing arena. Used for token -> id lookups in WordPiece and for
 * word and piece counts in the vocab trainer. */
#ifndef BT_STRMAP_H
#define BT_STRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t hash;   /* full hash of the key (0 marks an empty slot) */
    size_t key_off;  /* key bytes at arena + key_off */
    uint32_t key_len;
    int64_t value;
} bt_strmap_slot;

typedef struct {
    bt_strmap_slot *slots; /* n_slots, a power of two */
    size_t n_slots, n_used;
    char *arena; /* keys, each followed by a NUL so they read as C strings */
    size_t arena_len, arena_cap;
} bt_strmap;

/* Hash of n bytes (never 0), the one the map uses; exposed so a caller can
 * hash once and probe twice. */
uint64_t strmap_hash(const void *key, size_t n);

/* An empty map sized for about expected_keys entries; false when out of memory. */
bool strmap_init(bt_strmap *m, size_t expected_keys);

/* Release the slots and keys (the map is left empty and unusable). */
void strmap_free(bt_strmap *m);

/* The value slot of key, or NULL when absent. */
int64_t *strmap_find(const bt_strmap *m, const void *key, size_t n);

/* Same as strmap_find with a hash the caller already computed. */
int64_t *strmap_find_hashed(const bt_strmap *m, const void *key, size_t n, uint64_t hash);

/* The value slot of key, inserted with value 0 when absent (*inserted says
 * which, may be NULL). NULL only when out of memory or the key is >= 4 GiB. */
int64_t *strmap_upsert(bt_strmap *m, const void *key, size_t n, bool *inserted);

/* Key bytes of a used slot (NUL-terminated). */
static inline const char *strmap_key(const bt_strmap *m, const bt_strmap_slot *s) {
    return m->arena + s->key_off;
}

#endif
