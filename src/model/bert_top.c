/* The top layer (see bert_tape): the last encoder layer that runs computes
 * everything after its attention (the output projection, the feed-forward
 * block and the LayerNorms) only at the S rows the heads read, the masked
 * tokens and [CLS]. Its keys and values still need every row, so the
 * attention itself runs at all B*T rows; these functions move between the
 * two and give a dropout over S rows the masks it has over all. */
#include "bert_internal.h"
#include "bert_ops.h"

#include <stdio.h>
#include <stdlib.h>

int bert_top_layer(const bert_model *m, const bert_pass *pass, int last_layer) {
    return m->dense_top || pass->admin_profile ? -1 : last_layer;
}

static int compare_i32(const void *x, const void *y) {
    const int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* Where token row `row` is among the S sorted top rows. */
static int32_t top_index(const int32_t *rows, int S, int32_t row) {
    const int32_t *at = bsearch(&row, rows, (size_t)S, sizeof *rows, compare_i32);
    return (int32_t)(at - rows);
}

/* S rows padded up to a multiple, within the batch's rows and the room. */
static int top_padded(int S, int multiple, int rows, int room) {
    const int padded = multiple > 1 ? (S + multiple - 1) / multiple * multiple : S;
    const int most = rows < room ? rows : room;
    return padded < most ? padded : S > most ? S : most;
}

/* The S sorted rows with the first rows not among them added, up to `to`,
 * sorted again. No head reads an added row: its gradient is zero, so the
 * top layer computes the same values at the heads' rows. */
static int pad_rows(int32_t *rows, int S, int to) {
    int n = S;
    for (int32_t row = 0, i = 0; n < to; row++) {
        while (i < S && rows[i] < row) i++;
        if (i < S && rows[i] == row) continue;
        rows[n++] = row;
    }
    if (n > S) qsort(rows, (size_t)n, sizeof *rows, compare_i32);
    return n;
}

int bert_top_plan(const struct bert_act_layout *a, const bert_batch *bt, bool nsp, int multiple,
                  int32_t *host, int *read) {
    int32_t *rows = host + a->top_rows;
    int n = 0, S = 0;
    for (int i = 0; i < bt->n_masked; i++) rows[n++] = bt->mlm_positions[i];
    for (int b = 0; nsp && b < bt->B; b++) rows[n++] = b * bt->T;
    qsort(rows, (size_t)n, sizeof *rows, compare_i32);
    for (int i = 0; i < n; i++)
        if (S == 0 || rows[i] != rows[S - 1]) rows[S++] = rows[i];
    *read = S;
    S = pad_rows(rows, S, top_padded(S, multiple, bt->B * bt->T, a->top_capacity));
    for (int i = 0; i < bt->n_masked; i++)
        host[a->top_mlm_pos + i] = top_index(rows, S, bt->mlm_positions[i]);
    for (int b = 0; nsp && b < bt->B; b++) host[a->top_cls + b] = top_index(rows, S, b * bt->T);
    return S;
}

void bert_top_enter(bert_run *r, size_t *ctx, size_t *resid) {
    const bert_model *m = r->m;
    const struct bert_act_layout *a = m->act;
    const int S = r->tape->n_top, H = m->cfg.hidden_size;
    m->be->gather_rows(m->be, act(m, a->top_ctx), act(m, *ctx), ints(m, a->top_rows), S, H);
    m->be->gather_rows(m->be, act(m, a->top_x), act(m, *resid), ints(m, a->top_rows), S, H);
    *ctx = a->top_ctx;
    *resid = a->top_x;
}

/* In place at the S rows, each with the mask it has among all B*T rows
 * (dropout_rows, the token rows in top_rows). */
void bert_top_dropout(bert_run *r, size_t x, int S, int H, float p, bt_rng_key key) {
    const bert_model *m = r->m;
    m->be->dropout_rows(m->be, act(m, x), ints(m, m->act->top_rows), S, H,
                        (size_t)r->bt->T * H, r->bt->first_sample, p, key);
}

/* d ctx at the heads' rows into top_x (free in the backward), then at every
 * row into dctx. Not stored (rounded) where the attention's GEMMs read it
 * through bert_operand16's cast, which rounds (the scatter into zeros
 * changes no value): as the layers below leave their d ctx. */
void bert_top_ctx_bwd(bert_run *r, const bert_layer_views *w, int S, int H) {
    const bert_model *m = r->m;
    const struct bert_act_layout *a = m->act;
    const size_t n = (size_t)r->bt->B * r->bt->T * H;
    if (!m->fused_attention && bert_operand16_room(m, 0, n).buf)
        op_linear_bwd_given16(r, a->top_x, w->ao_w, w->ao_b, a->dH, BT_NO_PTR, a->top_ctx, S, H,
                              H);
    else
        op_linear_bwd(r, a->top_x, w->ao_w, w->ao_b, a->dH, a->top_ctx, S, H, H);
    m->be->fill(m->be, act(m, a->dctx), 0.0f, n);
    m->be->scatter_rows(m->be, act(m, a->dctx), act(m, a->top_x), ints(m, a->top_rows),
                        bert_links(m, a->top_rows), S, H);
}

/* dA = omega dA at the S rows added into dH (every row), then copied back to
 * dA, which has every row from here on. With dh16 the S rows go to top_x
 * (free in the backward) and dH's 16-bit values widen into dA instead,
 * which the rows then join: one pass over the rows at 2 + 4 bytes an
 * element, where the copy took 4 + 4 and the rounding before it 4 + 4. */
void bert_top_join_grad(bert_run *r, float omega, int S, int H, bool dh16, bool stored) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    const size_t n = (size_t)r->bt->B * r->bt->T * H;
    if (omega != 1.0f) be->scale(be, act(m, a->dA), omega, (size_t)S * H);
    if (!dh16) {
        be->scatter_rows(be, act(m, a->dH), act(m, a->dA), ints(m, a->top_rows),
                         bert_links(m, a->top_rows), S, H);
        op_copy(r, a->dA, a->dH, n, stored);
        return;
    }
    if (stored) {
        fprintf(stderr, "bertrain: internal error: a stored top join gradient from 16 bits\n");
        exit(1);
    }
    be->copy(be, act(m, a->top_x), act(m, a->dA), (size_t)S * H * 4);
    be->cast(be, act(m, a->dA), BT_F32, act(m, a->dH), (bt_dtype)m->cfg.storage, n);
    be->scatter_rows(be, act(m, a->dA), act(m, a->top_x), ints(m, a->top_rows),
                     bert_links(m, a->top_rows), S, H);
}

size_t bert_top_mlm_rows(const bert_run *r) {
    return r->tape->top_layer >= 0 ? r->m->act->top_mlm_pos : r->m->act->mlm_pos;
}

size_t bert_top_cls_rows(const bert_run *r) {
    return r->tape->top_layer >= 0 ? r->m->act->top_cls : r->m->act->cls_idx;
}

int bert_top_hidden_rows(const bert_run *r) {
    return r->tape->top_layer >= 0 ? r->tape->n_top : r->bt->B * r->bt->T;
}
