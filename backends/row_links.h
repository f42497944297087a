/* The segments of equal indices that a scatter follows (scatter_rows and
 * embed_bwd's word rows in backend.h): built on the host, where the indices
 * of a batch are made, once per table, so that no device searches for them
 * and no work-item chases a chain of pointers. Above and below backend.h
 * alike: the model builds them, the backends read them. */
#ifndef BT_ROW_LINKS_H
#define BT_ROW_LINKS_H

#include <stddef.h>
#include <stdint.h>

/* links (2n int32) of idx (n), the tokens grouped by index:
 *   links[0 .. n)   order: the tokens, group after group, a group's tokens in
 *                   increasing position, groups in the order their indices
 *                   first appear; then -1 for the tokens in no group;
 *   links[n + g]    the end in order of group g (its start: the end of
 *                   group g - 1, or 0); past the last group, the number of
 *                   grouped tokens (empty groups).
 * A token whose index equals skip (skip >= 0: embed_bwd's pad id) is in no
 * group. One pass through a hash table of the indices and two over the
 * tokens: O(n) for any range of indices. The table and the tokens' group
 * numbers live in *work, kept between calls and grown on demand, so that a
 * batch's segments allocate nothing once the largest table has been seen.
 * Returns 0, or -1 when out of host memory (links unchanged). */
typedef struct {
    int32_t *key, *slot_group; /* the table's slots: an index, its group + 1 (0: empty) */
    size_t slots;
    int32_t *group; /* each token's group, -1 for none */
    size_t n_group;
} bt_row_links_work;
int bt_row_links(const int32_t *idx, int n, int32_t skip, int32_t *links, bt_row_links_work *work);

/* Free a bt_row_links_work's table (it is zeroed: usable again). */
void bt_row_links_free(bt_row_links_work *work);

#endif
