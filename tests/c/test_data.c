/* Data pipeline checks on the bundled demo shards:
 *  - masking statistics: rate within 3 sigma of mask_prob, the 80/10/10 split
 *    within 3 sigma, no [CLS]/[SEP]/[PAD] ever masked, labels = original ids;
 *  - masking is identical for the same (seed, epoch, sample) and differs
 *    across epochs;
 *  - order: each epoch visits every sample exactly once, epochs differ, and
 *    for N = 1, 2, 3 ranks with uneven shares (and micro-batches) the rank
 *    slices reproduce the single-rank global batch exactly, in both modes.
 * usage: test_data VOCAB SHARD */
#include "data/dataset.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (!ok) failures++;
}

static bt_dataset *open_data(const char *shard, const bt_vocab *v, int T, bool pairs,
                             float mask_prob, int max_pred) {
    bt_data_config dc = {0};
    dc.seq_len = T;
    dc.mask_prob = mask_prob;
    dc.max_predictions = max_pred;
    dc.sentence_pairs = pairs;
    char err[512];
    bt_dataset *ds = dataset_open(shard, &dc, v, v->size, 1234, err, sizeof err);
    if (!ds) {
        fprintf(stderr, "FAIL: %s\n", err);
        exit(1);
    }
    return ds;
}

/* Fill positions [g0, g0 + n) into one buffer (micro-batches of mb). */
static void fill_range(bt_dataset *ds, uint64_t g0, int n, int mb, bt_batch_buf *out) {
    bt_batch_buf part;
    batch_buf_alloc(&part, mb, out->T, mb * out->T);
    out->n_masked = 0;
    for (int done = 0; done < n; done += mb) {
        int B = n - done < mb ? n - done : mb;
        dataset_fill(ds, g0 + (uint64_t)done, B, false, &part);
        size_t off = (size_t)done * out->T, len = (size_t)B * out->T;
        memcpy(out->input_ids + off, part.input_ids, len * 4);
        memcpy(out->token_type_ids + off, part.token_type_ids, len * 4);
        memcpy(out->attention_mask + off, part.attention_mask, len * 4);
        memcpy(out->nsp_labels + done, part.nsp_labels, (size_t)B * 4);
        for (int i = 0; i < part.n_masked; i++) { /* rows relative to the whole range */
            out->mlm_positions[out->n_masked] = part.mlm_positions[i] + done * out->T;
            out->mlm_labels[out->n_masked++] = part.mlm_labels[i];
        }
    }
    batch_buf_free(&part);
}

static bool same_batch(const bt_batch_buf *a, const bt_batch_buf *b, int n) {
    size_t len = (size_t)n * a->T * 4;
    return a->n_masked == b->n_masked && !memcmp(a->input_ids, b->input_ids, len) &&
           !memcmp(a->token_type_ids, b->token_type_ids, len) &&
           !memcmp(a->attention_mask, b->attention_mask, len) &&
           !memcmp(a->nsp_labels, b->nsp_labels, (size_t)n * 4) &&
           !memcmp(a->mlm_positions, b->mlm_positions, (size_t)a->n_masked * 4) &&
           !memcmp(a->mlm_labels, b->mlm_labels, (size_t)a->n_masked * 4);
}

static void test_masking(const bt_vocab *v) {
    const int T = 128, S = 4000;
    const float p = 0.15f;
    int32_t orig[128], ids[128], pos[128], lab[128];
    long eligible = 0, masked = 0, as_mask = 0, as_random = 0, as_kept = 0, bad = 0;
    for (int s = 0; s < S; s++) {
        for (int t = 0; t < T; t++) /* [CLS] tokens... [SEP] tokens [SEP] [PAD]... */
            orig[t] = t == 0 ? v->cls_id : t == 60 || t == 110 ? v->sep_id
                      : t > 110 ? v->pad_id : 5 + (s * 131 + t * 7) % (v->size - 5);
        memcpy(ids, orig, sizeof ids);
        int n = mask_sequence(ids, T, v, v->size, p, T, 99, 0, (uint64_t)s, 0, pos, lab);
        eligible += 108;
        masked += n;
        for (int i = 0; i < n; i++) {
            int t = pos[i];
            if (orig[t] == v->cls_id || orig[t] == v->sep_id || orig[t] == v->pad_id ||
                lab[i] != orig[t])
                bad++;
            if (ids[t] == v->mask_id) as_mask++;
            else if (ids[t] == orig[t]) as_kept++;
            else as_random++;
        }
        for (int t = 0; t < T; t++) { /* nothing else changed */
            bool is_masked = false;
            for (int i = 0; i < n; i++) is_masked |= pos[i] == t;
            if (!is_masked && ids[t] != orig[t]) bad++;
        }
    }
    double rate = (double)masked / eligible, sigma = sqrt(p * (1 - p) / eligible);
    check(fabs(rate - p) <= 3 * sigma, "mask rate %.5f vs %.2f (3 sigma = %.5f)", rate, p,
          3 * sigma);
    /* a random replacement can draw the original token: rare with 8000 ids */
    double f_mask = (double)as_mask / masked, f_rand = (double)as_random / masked,
           f_kept = (double)as_kept / masked;
    double s8 = 3 * sqrt(0.8 * 0.2 / masked), s1 = 3 * sqrt(0.1 * 0.9 / masked);
    check(fabs(f_mask - 0.8) <= s8 && fabs(f_rand - 0.1) <= s1 && fabs(f_kept - 0.1) <= s1,
          "split [MASK] %.4f / random %.4f / kept %.4f (3 sigma %.4f, %.4f)", f_mask, f_rand,
          f_kept, s8, s1);
    check(bad == 0, "no special token masked, labels are the originals (%ld violations)", bad);

    /* same key -> same masks; another epoch -> different masks */
    int32_t a[128], b[128], pa[128], pb[128], la[128], lb[128];
    memcpy(a, orig, sizeof a);
    memcpy(b, orig, sizeof b);
    int na = mask_sequence(a, T, v, v->size, p, T, 99, 3, 17, 0, pa, la);
    int nb = mask_sequence(b, T, v, v->size, p, T, 99, 3, 17, 0, pb, lb);
    check(na == nb && !memcmp(a, b, sizeof a) && !memcmp(pa, pb, (size_t)na * 4),
          "same (seed, epoch, sample) masks identically");
    int diff_epochs = 0;
    for (int e = 1; e <= 8; e++) {
        memcpy(b, orig, sizeof b);
        nb = mask_sequence(b, T, v, v->size, p, T, 99, 3 + (uint64_t)e, 17, 0, pb, lb);
        diff_epochs += nb != na || memcmp(pa, pb, (size_t)(na < nb ? na : nb) * 4) != 0;
    }
    check(diff_epochs == 8, "each of 8 other epochs masks differently (%d of 8)", diff_epochs);
}

static void test_order(const char *shard, const bt_vocab *v, bool pairs) {
    const int T = 64;
    bt_dataset *ds = open_data(shard, v, T, pairs, 0.15f, 0);
    const uint64_t n = dataset_num_samples(ds);
    const char *mode = pairs ? "sentence_pairs" : "full_sentences";
    /* every sample exactly once per epoch, identified by its content */
    bt_batch_buf all;
    batch_buf_alloc(&all, (int)n, T, (int)n * T);
    for (int e = 0; e < 2; e++) {
        fill_range(ds, (uint64_t)e * n, (int)n, 64, &all);
        uint64_t *keys = malloc(n * sizeof *keys);
        for (uint64_t i = 0; i < n; i++) { /* content hash of the unmasked sample */
            uint64_t h = 1469598103934665603ull;
            int32_t *ids = all.input_ids + i * T;
            for (int t = 0; t < T; t++) {
                int32_t id = ids[t];
                for (int k = 0; k < all.n_masked; k++) /* undo masking */
                    if (all.mlm_positions[k] == (int32_t)(i * T + t)) id = all.mlm_labels[k];
                h = (h ^ (uint64_t)id) * 1099511628211ull;
            }
            keys[i] = h;
        }
        uint64_t dup = 0;
        for (uint64_t i = 0; i < n && !pairs; i++)
            for (uint64_t j = i + 1; j < n; j++) dup += keys[i] == keys[j];
        if (!pairs) check(dup == 0, "%s epoch %d: %llu samples, each once (duplicates %llu)",
                          mode, e, (unsigned long long)n, (unsigned long long)dup);
        free(keys);
    }
    batch_buf_free(&all);
    /* consecutive epochs visit the samples in different orders */
    bt_batch_buf e0, e1;
    batch_buf_alloc(&e0, 8, T, 8 * T);
    batch_buf_alloc(&e1, 8, T, 8 * T);
    fill_range(ds, 0, 8, 8, &e0);
    fill_range(ds, n, 8, 8, &e1);
    check(memcmp(e0.attention_mask, e1.attention_mask, 8 * T * 4) != 0 ||
              memcmp(e0.input_ids, e1.input_ids, 8 * T * 4) != 0,
          "%s: epochs 0 and 1 start with different samples", mode);
    batch_buf_free(&e0);
    batch_buf_free(&e1);
    /* rank slices with uneven shares reproduce the single-rank global batch */
    const int G = 16;
    const int shares[3][3] = {{16, 0, 0}, {5, 11, 0}, {1, 7, 8}};
    const int micro[3][3] = {{4, 0, 0}, {5, 3, 0}, {1, 7, 3}};
    bt_batch_buf ref, got;
    batch_buf_alloc(&ref, G, T, G * T);
    batch_buf_alloc(&got, G, T, G * T);
    for (uint64_t step = 0; step < 3; step++) {
        uint64_t g0 = step * G + (n - 8) * (step == 2); /* step 2 straddles an epoch end */
        fill_range(ds, g0, G, G, &ref);
        for (int w = 0; w < 3; w++) {
            got.n_masked = 0;
            int offset = 0;
            for (int r = 0; r <= w; r++) { /* rank r: its slice, in its micro-batches */
                bt_batch_buf slice;
                batch_buf_alloc(&slice, shares[w][r], T, shares[w][r] * T);
                fill_range(ds, g0 + (uint64_t)offset, shares[w][r], micro[w][r], &slice);
                size_t off = (size_t)offset * T, len = (size_t)shares[w][r] * T * 4;
                memcpy(got.input_ids + off, slice.input_ids, len);
                memcpy(got.token_type_ids + off, slice.token_type_ids, len);
                memcpy(got.attention_mask + off, slice.attention_mask, len);
                memcpy(got.nsp_labels + offset, slice.nsp_labels, (size_t)shares[w][r] * 4);
                for (int i = 0; i < slice.n_masked; i++) {
                    got.mlm_positions[got.n_masked] = slice.mlm_positions[i] + offset * T;
                    got.mlm_labels[got.n_masked++] = slice.mlm_labels[i];
                }
                offset += shares[w][r];
                batch_buf_free(&slice);
            }
            check(offset == G && same_batch(&ref, &got, G),
                  "%s step %llu: %d rank(s) with shares %d+%d+%d reproduce the global batch", mode,
                  (unsigned long long)step, w + 1, shares[w][0], shares[w][1], shares[w][2]);
        }
    }
    batch_buf_free(&ref);
    batch_buf_free(&got);
    dataset_close(ds);
}

/* mask_total_bound: the masked total of a micro-batch of full sequences,
 * masked as training masks, exceeds it in almost no batch (< 1e-4 by its
 * normal approximation), and it sits far below B x the per-sequence cap. */
static void test_mask_bound(const bt_vocab *v) {
    const int B = 16, T = 128, W = T - 2, batches = 3000;
    const float p = 0.15f;
    const int cap = mask_cap_default(W, p), bound = mask_total_bound(B, W, p, cap);
    int32_t ids[128], pos[128], lab[128];
    int over = 0, most = 0;
    for (int k = 0; k < batches; k++) {
        int total = 0;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++)
                ids[t] = t == 0 ? v->cls_id : t == T - 1 ? v->sep_id : 5 + (k + t * 7) % (v->size - 5);
            total += mask_sequence(ids, T, v, v->size, p, cap, 7, 0, (uint64_t)(k * B + b), 0, pos,
                                   lab);
        }
        over += total > bound;
        if (total > most) most = total;
    }
    check(over <= 2, "%d of %d micro-batches of %d x %d tokens over the bound %d (most %d)", over,
          batches, B, W, bound, most);
    check(bound < B * cap * 3 / 4, "the bound %d well below %d x the per-sequence cap %d", bound, B,
          cap);
    check(mask_total_bound(1, W, p, W) == mask_cap_default(W, p) &&
              mask_total_bound(B, W, p, 2) == 2 * B,
          "one sequence's bound is the per-sequence cap (%d, %d); a binding cap bounds the total "
          "(%d)", mask_total_bound(1, W, p, W), mask_cap_default(W, p), mask_total_bound(B, W, p, 2));
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_data VOCAB SHARD\n");
        return 2;
    }
    bt_vocab v;
    char err[512];
    if (!vocab_load(&v, argv[1], err, sizeof err)) {
        fprintf(stderr, "FAIL: %s\n", err);
        return 1;
    }
    test_masking(&v);
    test_mask_bound(&v);
    test_order(argv[2], &v, false);
    test_order(argv[2], &v, true);
    vocab_free(&v);
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
