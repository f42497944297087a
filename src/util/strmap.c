/* Byte-string hash map with an arena for the keys. */
#include "strmap.h"

#include <stdlib.h>
#include <string.h>

uint64_t strmap_hash(const void *key, size_t n) {
    /* 8 bytes at a time, multiply-xorshift mixing: fast on short words */
    const unsigned char *p = key;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (n * 0xff51afd7ed558ccdULL);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)p[i] << (8 * i);
    h = (h ^ w) * 0x94d049bb133111ebULL;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    return h ? h : 1;
}

bool strmap_init(bt_strmap *m, size_t expected_keys) {
    memset(m, 0, sizeof *m);
    size_t n = 16;
    while (n < 2 * expected_keys + 2) n *= 2; /* load factor <= 1/2 */
    m->slots = calloc(n, sizeof *m->slots);
    m->arena_cap = 256 + expected_keys * 8;
    m->arena = malloc(m->arena_cap);
    if (!m->slots || !m->arena) {
        strmap_free(m);
        return false;
    }
    m->n_slots = n;
    return true;
}

void strmap_free(bt_strmap *m) {
    free(m->slots);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

int64_t *strmap_find_hashed(const bt_strmap *m, const void *key, size_t n, uint64_t hash) {
    size_t mask = m->n_slots - 1;
    for (size_t i = (size_t)hash & mask;; i = (i + 1) & mask) {
        bt_strmap_slot *s = &m->slots[i];
        if (s->hash == 0) return NULL;
        if (s->hash == hash && s->key_len == n && memcmp(m->arena + s->key_off, key, n) == 0)
            return &s->value;
    }
}

int64_t *strmap_find(const bt_strmap *m, const void *key, size_t n) {
    return strmap_find_hashed(m, key, n, strmap_hash(key, n));
}

/* Double the slot array, re-placing every used slot. */
static bool grow_slots(bt_strmap *m) {
    size_t n = m->n_slots * 2, mask = n - 1;
    bt_strmap_slot *slots = calloc(n, sizeof *slots);
    if (!slots) return false;
    for (size_t i = 0; i < m->n_slots; i++) {
        if (m->slots[i].hash == 0) continue;
        size_t j = (size_t)m->slots[i].hash & mask;
        while (slots[j].hash) j = (j + 1) & mask;
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->n_slots = n;
    return true;
}

int64_t *strmap_upsert(bt_strmap *m, const void *key, size_t n, bool *inserted) {
    if (inserted) *inserted = false;
    if (n >= UINT32_MAX) return NULL;
    uint64_t hash = strmap_hash(key, n);
    int64_t *found = strmap_find_hashed(m, key, n, hash);
    if (found) return found;
    if (2 * (m->n_used + 1) > m->n_slots && !grow_slots(m)) return NULL;
    if (m->arena_len + n + 1 > m->arena_cap) {
        size_t cap = m->arena_cap * 2;
        while (cap < m->arena_len + n + 1) cap *= 2;
        char *arena = realloc(m->arena, cap);
        if (!arena) return NULL;
        m->arena = arena;
        m->arena_cap = cap;
    }
    size_t mask = m->n_slots - 1, i = (size_t)hash & mask;
    while (m->slots[i].hash) i = (i + 1) & mask;
    bt_strmap_slot *s = &m->slots[i];
    s->hash = hash;
    s->key_off = m->arena_len;
    s->key_len = (uint32_t)n;
    s->value = 0;
    memcpy(m->arena + m->arena_len, key, n);
    m->arena[m->arena_len + n] = 0;
    m->arena_len += n + 1;
    m->n_used++;
    if (inserted) *inserted = true;
    return &s->value;
}
