/* Host-built segments of equal indices (row_links.h). */
#include "row_links.h"

#include <stdlib.h>

#include <string.h>

/* Room in w for `slots` hash slots, their groups cleared (a slot's key is
 * read only where its group is set), and for n group numbers. */
static int reserve(bt_row_links_work *w, size_t slots, size_t n) {
    if (slots > w->slots) {
        int32_t *key = malloc(slots * sizeof *key), *slot_group = malloc(slots * sizeof *slot_group);
        if (!key || !slot_group) {
            free(key);
            free(slot_group);
            return -1;
        }
        free(w->key);
        free(w->slot_group);
        w->key = key;
        w->slot_group = slot_group;
        w->slots = slots;
    }
    if (n > w->n_group) {
        int32_t *group = malloc(n * sizeof *group);
        if (!group) return -1;
        free(w->group);
        w->group = group;
        w->n_group = n;
    }
    memset(w->slot_group, 0, slots * sizeof *w->slot_group);
    return 0;
}

void bt_row_links_free(bt_row_links_work *w) {
    free(w->key);
    free(w->slot_group);
    free(w->group);
    *w = (bt_row_links_work){0};
}

int bt_row_links(const int32_t *idx, int n, int32_t skip, int32_t *links, bt_row_links_work *w) {
    if (n <= 0) return 0;
    /* an open-addressing table from index to its group number + 1 (0:
     * empty): 2n slots or more, a power of 2 */
    int bits = 1;
    while (bits < 31 && ((size_t)1 << bits) < 2 * (size_t)n) bits++;
    const uint32_t mask = ((uint32_t)1 << bits) - 1;
    if (reserve(w, (size_t)mask + 1, (size_t)n)) return -1;
    int32_t *key = w->key, *slot_group = w->slot_group, *group = w->group;
    int32_t *order = links, *ends = links + n;
    int groups = 0;
    memset(ends, 0, (size_t)n * sizeof *ends); /* first the groups' sizes */
    for (int i = 0; i < n; i++) {
        group[i] = -1;
        if (skip >= 0 && idx[i] == skip) continue;
        uint32_t h = ((uint32_t)idx[i] * 2654435761u) >> (32 - bits) & mask;
        while (slot_group[h] && key[h] != idx[i]) h = (h + 1) & mask;
        if (!slot_group[h]) {
            key[h] = idx[i];
            slot_group[h] = ++groups;
        }
        group[i] = slot_group[h] - 1;
        ends[group[i]]++;
    }
    int32_t grouped = 0; /* sizes to starts, the tokens placed, starts to ends */
    for (int g = 0; g < groups; g++) {
        const int32_t size = ends[g];
        ends[g] = grouped;
        grouped += size;
    }
    for (int i = 0; i < n; i++)
        if (group[i] >= 0) order[ends[group[i]]++] = i;
    for (int g = groups; g < n; g++) ends[g] = grouped;
    for (int32_t s = grouped; s < n; s++) order[s] = -1;
    return 0;
}
