/* bert_heads_distinct, which decides whether the MLM head's d hidden needs a
 * rounding pass before the heads' scatter (bert.c: its reader rounds it as it
 * reads it where each row gets one head's gradient): true where every
 * masked row is distinct and none is a [CLS] row while the NSP head runs;
 * false on a repeated masked row, a masked [CLS] row with NSP, or a row
 * outside the batch. */
#include "model/bert_internal.h"

#include <stdio.h>
#include <string.h>

static int failures;

static void check(bool got, bool want, const char *what) {
    printf("%s %s: %s\n", got == want ? "ok  " : "FAIL", what, got ? "distinct" : "not distinct");
    if (got != want) failures++;
}

/* A 3 x 8 batch with the masked rows given (flat: b T + t). */
static bool distinct(const int32_t *rows, int n, bool nsp) {
    bert_batch bt = {.B = 3, .T = 8, .n_masked = n, .mlm_positions = rows};
    unsigned char seen[24];
    memset(seen, 0xff, sizeof seen); /* scratch as the model leaves it: not zeroed */
    return bert_heads_distinct(&bt, nsp, seen);
}

int main(void) {
    const int32_t plain[] = {1, 5, 9, 17, 23}, again[] = {1, 5, 9, 5}, cls[] = {1, 16, 20},
                  past[] = {1, 24}, below[] = {-1, 3};
    check(distinct(plain, 5, true), true, "5 masked rows, none at [CLS], NSP on");
    check(distinct(plain, 0, true), true, "no masked row, NSP on");
    check(distinct(again, 4, false), false, "row 5 masked twice");
    check(distinct(cls, 3, true), false, "row 16, sample 2's [CLS], masked with NSP on");
    check(distinct(cls, 3, false), true, "the same rows with NSP off");
    check(distinct(past, 2, false), false, "row 24, past the 24 rows of the batch");
    check(distinct(below, 2, false), false, "row -1");
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
