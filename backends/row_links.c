/* Host-built chains of equal indices (row_links.h). */
#include "row_links.h"

#include <stdlib.h>

#include <string.h>

/* Room for `slots` slots in w, the positions cleared (the keys need not be:
 * a slot's key is read only where its position is set). */
static int reserve(bt_row_links_work *w, size_t slots) {
    if (slots > w->slots) {
        int32_t *key = malloc(slots * sizeof *key), *pos = malloc(slots * sizeof *pos);
        if (!key || !pos) {
            free(key);
            free(pos);
            return -1;
        }
        bt_row_links_free(w);
        w->key = key;
        w->pos = pos;
        w->slots = slots;
    }
    memset(w->pos, 0, slots * sizeof *w->pos);
    return 0;
}

void bt_row_links_free(bt_row_links_work *w) {
    free(w->key);
    free(w->pos);
    *w = (bt_row_links_work){0};
}

int bt_row_links(const int32_t *idx, int n, int32_t skip, int32_t *links, bt_row_links_work *w) {
    if (n <= 0) return 0;
    /* an open-addressing table from index to the earliest position seen so
     * far, the tokens walked from the last: 2n slots or more, a power of 2 */
    int bits = 1;
    while (bits < 31 && ((size_t)1 << bits) < 2 * (size_t)n) bits++;
    const uint32_t mask = ((uint32_t)1 << bits) - 1;
    if (reserve(w, (size_t)mask + 1)) return -1;
    int32_t *key = w->key, *pos = w->pos; /* pos: position + 1; 0: empty */
    for (int i = n - 1; i >= 0; i--) {
        links[i] = -1;
        links[n + i] = 0;
        if (skip >= 0 && idx[i] == skip) continue;
        uint32_t h = ((uint32_t)idx[i] * 2654435761u) >> (32 - bits) & mask;
        while (pos[h] && key[h] != idx[i]) h = (h + 1) & mask;
        if (pos[h]) links[i] = pos[h] - 1; /* the next token with this index */
        key[h] = idx[i];
        pos[h] = i + 1;
    }
    for (uint32_t h = 0; h <= mask; h++) /* each index's earliest token */
        if (pos[h]) links[n + pos[h] - 1] = 1;
    return 0;
}
