/* Host-built chains of equal indices (row_links.h). */
#include "row_links.h"

#include <stdlib.h>

static int compare_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int bt_row_links(const int32_t *idx, int n, int32_t skip, int32_t *links) {
    if (n <= 0) return 0;
    uint64_t *key = malloc((size_t)n * sizeof *key);
    if (!key) return -1;
    int k = 0;
    for (int i = 0; i < n; i++) {
        links[i] = -1;
        links[n + i] = 0;
        if (skip >= 0 && idx[i] == skip) continue;
        /* the index's bits with the sign flipped, so that unsigned order is
         * the indices' order, then the position: ties keep token order */
        key[k++] = (uint64_t)((uint32_t)idx[i] ^ 0x80000000u) << 32 | (uint32_t)i;
    }
    qsort(key, (size_t)k, sizeof *key, compare_u64);
    for (int j = 0; j < k; j++) {
        const int i = (int)(uint32_t)key[j];
        if (j == 0 || key[j] >> 32 != key[j - 1] >> 32)
            links[n + i] = 1;
        else
            links[(uint32_t)key[j - 1]] = i;
    }
    free(key);
    return 0;
}
