/* The chains of equal indices that a scatter follows (scatter_rows and
 * embed_bwd's word rows in backend.h): built on the host, where the indices
 * of a batch are made, once per table, so that no device searches for them.
 * Above and below backend.h alike: the model builds them, the backends read
 * them. */
#ifndef BT_ROW_LINKS_H
#define BT_ROW_LINKS_H

#include <stddef.h>
#include <stdint.h>

/* links (2n int32) of idx (n): links[i] = the smallest j > i with idx[j] ==
 * idx[i], or -1; links[n + i] = 1 when no j < i has idx[i], else 0. An index
 * equal to skip (skip >= 0: embed_bwd's pad id) belongs to no chain: -1 and
 * 0. One pass from the last token through a hash table of the indices: O(n)
 * for any range of indices. The hash table lives in *work, kept between
 * calls and grown on demand, so that a batch's chains allocate nothing once
 * the largest table has been seen.
 * Returns 0, or -1 when out of host memory (links unchanged). */
typedef struct {
    int32_t *key, *pos; /* the table's slots: an index, its earliest position + 1 (0: empty) */
    size_t slots;
} bt_row_links_work;
int bt_row_links(const int32_t *idx, int n, int32_t skip, int32_t *links, bt_row_links_work *work);

/* Free a bt_row_links_work's table (it is zeroed: usable again). */
void bt_row_links_free(bt_row_links_work *work);

#endif
