/* The model's ops: backend ops and the storing of what they write (16-bit
 * rounding and the stash of mixed precision; see bert_ops.h). */
#include "bert_ops.h"

#include <stdio.h>
#include <stdlib.h>

/* n values from activation offset off are complete: stored as the model
 * stores activations (bert_act_store16). */
static void store(bert_run *r, size_t off, size_t n) {
    bert_act_store16(r->m, r->tape, r->layer, off, n);
}

/* The same for values a fused op has rounded to the storage dtype itself
 * (bert_act_stored16: the stash copy, no rounding pass). */
static void store_rounded(bert_run *r, size_t off, size_t n) {
    bert_act_stored16(r->m, r->layer, off, n);
}

void op_linear_nobias(bert_run *r, size_t out, size_t in, size_t w, int rows, int in_f,
                      int out_f) {
    const bert_model *m = r->m;
    unsigned s16 = 0;
    const bt_ptr x = act_operand(r, in, BT_GEMM_A16, &s16);
    mm_weight(m, rows, out_f, in_f, x, s16, w, true, in_f, 0.0f, act(m, out));
}

/* out16 (rows, out_f) = x W^T + bias in 16 bits with one rounding of each
 * sum: the bias broadcast in 16 bits (bias_add of a zero y), then gemm16
 * adding its product onto it (16-bit C, beta 1): no fp32 output and no
 * pass reading one back, the arithmetic of a GEMM whose epilogue adds a
 * 16-bit bias (cuBLASLt's for a bf16 output). gemm16 only. */
static void linear16_biased(bert_run *r, bt_ptr out16, bt_ptr x, unsigned s16, size_t w,
                            size_t b, int rows, int in_f, int out_f) {
    const bert_model *m = r->m;
    if (fused(m, BERT_FUSE_EPILOGUE)) { /* the same sums, the bias in the GEMM's epilogue */
        m->be->gemm16_bias(m->be, (bt_dtype)m->cfg.storage, s16 | BT_GEMM_B16, rows, out_f, in_f,
                           x, (bt_ptr){m->params16, w * 2}, par(m, b),
                           (bt_ptr){m->params16, b * 2}, out16);
        return;
    }
    m->be->bias_add(m->be, BT_NO_PTR, par(m, b), rows, out_f, (bt_dtype)m->cfg.storage, out16,
                    false);
    mm_weight(m, rows, out_f, in_f, x, s16 | BT_GEMM_C16, w, true, in_f, 1.0f, out16);
}

void op_linear(bert_run *r, size_t out, size_t in, size_t w, size_t b, int rows, int in_f,
               int out_f) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    if (rows == 0) return;
    unsigned s16 = 0;
    const bt_ptr x = act_operand(r, in, BT_GEMM_A16, &s16);
    if (m->cfg.storage == BT_F32) { /* the bias first, the GEMM onto it (beta 1) */
        be->gather_rows(be, act(m, out), par(m, b), ints(m, m->act->zero_rows), rows, out_f);
        mm_weight(m, rows, out_f, in_f, x, s16, w, true, in_f, 1.0f, act(m, out));
        return;
    }
    /* 16-bit storage: the bias joins the store's pass (its rounding, and the
     * stash copy where the layer keeps one); fp32 values that only GEMMs
     * read, from the copy, are not written: on 16-bit GEMMs not computed
     * at all, the GEMM writing the copy (linear16_biased) */
    const bt_ptr slot = bert_act_slot16(m, r->tape, r->layer, out, true);
    const bool kept = !slot.buf || !bert_act_slot16(m, r->tape, r->layer, out, false).buf;
    if (m->gemm16 && !kept) {
        linear16_biased(r, slot, x, s16, w, b, rows, in_f, out_f);
        return;
    }
    if (m->gemm16) { /* in fp32 too: linear16_biased's values, so its bits */
        const size_t n = (size_t)rows * out_f;
        be->gather_rows(be, act(m, out), par(m, b), ints(m, m->act->zero_rows), rows, out_f);
        be->round16(be, act(m, out), (bt_dtype)m->cfg.storage, n);
        mm_weight(m, rows, out_f, in_f, x, s16, w, true, in_f, 1.0f, act(m, out));
        store(r, out, n);
        return;
    }
    mm_weight(m, rows, out_f, in_f, x, s16, w, true, in_f, 0.0f, act(m, out));
    be->bias_add(be, act(m, out), par(m, b), rows, out_f, (bt_dtype)m->cfg.storage, slot, kept);
}

void op_linear_to16(bert_run *r, bt_ptr out16, size_t out, size_t in, size_t w, size_t b,
                    int rows, int in_f, int out_f) {
    const bert_model *m = r->m;
    if (m->cfg.storage == BT_F32) {
        fprintf(stderr, "bertrain: internal error: a 16-bit linear output in fp32 storage\n");
        exit(1);
    }
    if (rows == 0) return;
    if (m->gemm16) {
        unsigned s16 = 0;
        const bt_ptr x = act_operand(r, in, BT_GEMM_A16, &s16);
        linear16_biased(r, out16, x, s16, w, b, rows, in_f, out_f);
        return;
    }
    op_linear_nobias(r, out, in, w, rows, in_f, out_f);
    m->be->bias_add(m->be, act(m, out), par(m, b), rows, out_f, (bt_dtype)m->cfg.storage, out16,
                    false);
}

void op_linear_bwd(bert_run *r, size_t din, size_t w, size_t b, size_t dout, size_t in, int rows,
                   int in_f, int out_f) {
    if (rows == 0) return;
    op_linear_bwd_given16(r, din, w, b, dout, BT_NO_PTR, in, rows, in_f, out_f);
    store(r, din, (size_t)rows * in_f);
}

/* op_linear_bwd_given16's work, bias_grad rounding dout to bias_round16 as
 * it reads it (BT_F32: as it is); dout NO_DOUT: only d16 holds it. */
#define NO_DOUT ((size_t)-1)
static void linear_bwd(bert_run *r, size_t din, bt_ptr din16, size_t w, size_t b, size_t dout,
                       bt_ptr d16, size_t in, int rows, int in_f, int out_f,
                       bt_dtype bias_round16) {
    const bert_model *m = r->m;
    unsigned s16 = 0;
    const bt_ptr x = act_operand(r, in, BT_GEMM_B16, &s16);
    /* dout, which both GEMMs read: in 16 bits once where gemm16 would convert it twice */
    if (!d16.buf) d16 = bert_operand16(m, dout, (size_t)rows * out_f);
    const bt_ptr d = d16.buf ? d16 : act(m, dout);
    const unsigned d_a16 = d16.buf ? BT_GEMM_A16 : 0;
    /* the bias gradient in the weight gradient's GEMM where it sums d16's
     * values (as the bias_grad below would) */
    const bool epilogue = b != NO_BIAS && m->gemm16 && d16.buf && fused(m, BERT_FUSE_EPILOGUE) &&
                          (dout == NO_DOUT || bias_round16 == (bt_dtype)m->cfg.storage);
    if (epilogue) {
        m->be->gemm16_bias_grad(m->be, (bt_dtype)m->cfg.storage, s16, out_f, in_f, rows, d, x,
                                grd(m, w), grd(m, b));
    } else {
        mm(m, s16 | d_a16, true, false, out_f, in_f, rows, 1.0f, d, out_f, 0, x, in_f, 0, 1.0f,
           grd(m, w), in_f, 0, 1);
        if (b != NO_BIAS && dout == NO_DOUT)
            m->be->bias_grad(m->be, grd(m, b), d16, rows, out_f, BT_F32,
                             (bt_dtype)m->cfg.storage);
        else if (b != NO_BIAS)
            m->be->bias_grad(m->be, grd(m, b), act(m, dout), rows, out_f, bias_round16, BT_F32);
    }
    if (r->pass->between_ops) r->pass->between_ops(r->pass->grads_ready_ctx);
    if (din16.buf) /* din in 16 bits only */
        mm_weight(m, rows, in_f, out_f, d, d_a16 | BT_GEMM_C16, w, false, in_f, 0.0f, din16);
    else
        mm_weight(m, rows, in_f, out_f, d, d_a16, w, false, in_f, 0.0f, act(m, din));
    if (r->pass->between_ops) r->pass->between_ops(r->pass->grads_ready_ctx);
}

void op_linear_bwd_given16(bert_run *r, size_t din, size_t w, size_t b, size_t dout, bt_ptr d16,
                           size_t in, int rows, int in_f, int out_f) {
    if (rows == 0) return;
    linear_bwd(r, din, BT_NO_PTR, w, b, dout, d16, in, rows, in_f, out_f,
               (bt_dtype)r->m->cfg.storage);
}

void op_linear_bwd_from16(bert_run *r, size_t din, bt_ptr din16, size_t w, size_t b, bt_ptr d16,
                          size_t in, int rows, int in_f, int out_f) {
    if (rows == 0) return;
    linear_bwd(r, din, din16, w, b, NO_DOUT, d16, in, rows, in_f, out_f, BT_F32);
}

void op_linear_bwd_to16(bert_run *r, bt_ptr din16, size_t w, size_t b, size_t dout, bt_ptr d16,
                        size_t in, int rows, int in_f, int out_f) {
    if (rows == 0) return;
    linear_bwd(r, 0, din16, w, b, dout, d16, in, rows, in_f, out_f, (bt_dtype)r->m->cfg.storage);
}

void op_linear_bwd_unrounded(bert_run *r, size_t din, size_t w, size_t b, size_t dout, size_t in,
                             int rows, int in_f, int out_f) {
    const bert_model *m = r->m;
    const size_t n = (size_t)rows * out_f;
    if (rows == 0) return;
    const bt_ptr d16 = bert_operand16(m, dout, n); /* its cast rounds as it converts */
    if (!d16.buf) store(r, dout, n);               /* the GEMMs read dout: a rounding pass */
    linear_bwd(r, din, BT_NO_PTR, w, b, dout, d16, in, rows, in_f, out_f,
               d16.buf ? (bt_dtype)m->cfg.storage : BT_F32);
}

void op_layernorm(bert_run *r, size_t out, size_t mean, size_t rstd, size_t in, size_t w,
                  size_t b, int rows) {
    const bert_model *m = r->m;
    const int H = m->cfg.hidden_size;
    /* out rounded by the op as store would: no rounding pass */
    m->be->layernorm_fwd(m->be, act(m, out), act(m, mean), act(m, rstd), act(m, in), par(m, w),
                         par(m, b), rows, H, m->cfg.layer_norm_eps, (bt_dtype)m->cfg.storage);
    store_rounded(r, out, (size_t)rows * H);
}

/* layernorm_bwd with dy + dbranch for dy where dbranch is given, the
 * gradients in halves in 16 bits (op_join_layernorm_bwd), dx's dropout into
 * drop->out16 where drop is given */
static void layernorm_bwd_of(bert_run *r, size_t dx, size_t w, size_t b, size_t dy,
                             bt_ptr dbranch, unsigned halves, size_t x, size_t mean, size_t rstd,
                             int rows, const bt_ln_bwd_drop *drop) {
    const bert_model *m = r->m;
    const int H = m->cfg.hidden_size;
    /* dx rounded by the op as store would (a gradient: never stashed); x read
     * from the stash where it is there (the unstash leaves it) */
    const bt_ptr x16 = bert_act_stashed(m, r->half_layer, x);
    const bt_dtype s = (bt_dtype)m->cfg.storage;
    m->be->layernorm_bwd(m->be, act(m, dx), grd(m, w), grd(m, b), act(m, dy), dbranch,
                         x16.buf ? x16 : act(m, x), act(m, mean), act(m, rstd), par(m, w), rows, H,
                         (bt_ln_bwd_types){.round16 = s,
                                           .x = x16.buf ? s : BT_F32,
                                           .dbranch = halves & LN_DBRANCH16 ? s : BT_F32,
                                           .dout = halves & LN_DY16 ? s : BT_F32,
                                           .dx = halves & LN_DX16 ? s : BT_F32},
                         drop);
    if (!(halves & LN_DX16)) store_rounded(r, dx, (size_t)rows * H);
}

void op_layernorm_bwd(bert_run *r, size_t dx, size_t w, size_t b, size_t dy, size_t x,
                      size_t mean, size_t rstd, int rows, const bt_ln_bwd_drop *drop) {
    layernorm_bwd_of(r, dx, w, b, dy, BT_NO_PTR, 0, x, mean, rstd, rows, drop);
}

void op_join_layernorm_bwd(bert_run *r, size_t dx, size_t w, size_t b, size_t dy, size_t dbranch,
                           unsigned halves, size_t x, size_t mean, size_t rstd, int rows,
                           const bt_ln_bwd_drop *drop) {
    layernorm_bwd_of(r, dx, w, b, dy, act(r->m, dbranch), halves, x, mean, rstd, rows, drop);
}

void op_bias_gelu(bert_run *r, size_t gelu, size_t fc1, size_t b, int rows, int cols) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    const size_t n = (size_t)rows * cols;
    /* with 16-bit storage the op rounds fc1 as store does, before GELU reads
     * it: the unfused path's bits in any storage; it writes the stash's
     * 16-bit copies itself where they are all the stores would make. GELU's
     * output with a stash slot is read by GEMMs only, from the slot: its
     * fp32 values are not written; nor need fc1's be kept, which only
     * bias_gelu_bwd reads, from the stash (bert_act.c, backward_reads_fp32) */
    if (fused(m, BERT_FUSE_GELU)) {
        const bt_ptr fc1_16 = bert_act_slot16(m, r->tape, r->layer, fc1, true),
                     gelu16 = bert_act_slot16(m, r->tape, r->layer, gelu, false);
        be->bias_gelu_fwd(be, gelu16.buf ? BT_NO_PTR : act(m, gelu), act(m, fc1), par(m, b), rows,
                          cols, (bt_dtype)m->cfg.storage, gelu16, fc1_16, !fc1_16.buf);
        if (!fc1_16.buf) store_rounded(r, fc1, n);
        if (!gelu16.buf) store_rounded(r, gelu, n); /* rounded by the op */
        return;
    }
    /* the ops bias_gelu_fwd replaces, for its bits */
    be->bias_add(be, act(m, fc1), par(m, b), rows, cols, BT_F32, BT_NO_PTR, true);
    store(r, fc1, n);
    be->gelu_fwd(be, act(m, gelu), act(m, fc1), n);
    store(r, gelu, n);
}

void op_linear_gelu(bert_run *r, size_t gelu, size_t fc1, bt_ptr fc1_home16, size_t in,
                    size_t w, size_t b, int rows, int in_f, int out_f) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    const bt_ptr slot = bert_act_slot16(m, r->tape, r->layer, fc1, true);
    const bt_ptr fc1_16 = !m->gemm16 ? BT_NO_PTR : slot.buf ? slot : fc1_home16;
    if (m->gemm16 && !fc1_16.buf && rows > 0) { /* fc1 in fp32 with the copy's values */
        op_linear(r, fc1, in, w, b, rows, in_f, out_f);
        op_gelu(r, gelu, fc1, (size_t)rows * out_f);
        return;
    }
    if (!fc1_16.buf || rows == 0) { /* fc1 in fp32 first */
        op_linear_nobias(r, fc1, in, w, rows, in_f, out_f);
        op_bias_gelu(r, gelu, fc1, b, rows, out_f);
        return;
    }
    /* fc1, with its bias, in 16 bits only: its stash copy, from the GEMM */
    unsigned s16 = 0;
    const bt_ptr x = act_operand(r, in, BT_GEMM_A16, &s16);
    linear16_biased(r, fc1_16, x, s16, w, b, rows, in_f, out_f);
    const size_t n = (size_t)rows * out_f;
    if (fused(m, BERT_FUSE_GELU)) { /* GELU of the copy's values (bias_gelu_fwd's absent y) */
        const bt_ptr gelu16 = bert_act_slot16(m, r->tape, r->layer, gelu, false);
        be->bias_gelu_fwd(be, gelu16.buf ? BT_NO_PTR : act(m, gelu), BT_NO_PTR, par(m, b), rows,
                          out_f, (bt_dtype)m->cfg.storage, gelu16, fc1_16, false);
        if (!gelu16.buf) store_rounded(r, gelu, n); /* rounded by the op */
        return;
    }
    /* the ops bias_gelu_fwd replaces, for its bits: the copy widened, gelu_fwd */
    be->cast(be, act(m, fc1), BT_F32, fc1_16, (bt_dtype)m->cfg.storage, n);
    be->gelu_fwd(be, act(m, gelu), act(m, fc1), n);
    store(r, gelu, n);
}

bool op_bias_gelu_bwd(bert_run *r, size_t d, bt_ptr dout16, size_t fc1, bt_ptr fc1_home16,
                      size_t b, int rows, int cols, bt_ptr *d16) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    const bool fuse = fused(m, BERT_FUSE_GELU);
    const bt_dtype s = (bt_dtype)m->cfg.storage;
    *d16 = BT_NO_PTR;
    if (fuse) { /* d *= gelu'(fc1), rounded as store does, and the bias gradient in one pass;
                 * fc1 read from the stash where it is there (the unstash leaves it) */
        const bt_ptr stashed = bert_act_stashed(m, r->half_layer, fc1),
                     fc1_16 = stashed.buf ? stashed : fc1_home16;
        *d16 = bert_operand16_room(m, 0, (size_t)rows * cols);
        /* d's fp32 values not kept where its 16-bit copy is made: the GEMMs after it read
         * only the copy, and the bias gradient is done here */
        be->bias_gelu_bwd(be, act(m, d), grd(m, b), dout16.buf ? dout16 : act(m, d),
                          fc1_16.buf ? fc1_16 : act(m, fc1), rows, cols, s,
                          fc1_16.buf ? s : BT_F32, dout16.buf ? s : BT_F32, *d16, !d16->buf);
        store_rounded(r, d, (size_t)rows * cols);
    } else {
        if (dout16.buf) {
            fprintf(stderr, "bertrain: internal error: a 16-bit dout for the unfused GELU\n");
            exit(1);
        }
        be->gelu_bwd(be, act(m, d), act(m, d), act(m, fc1), (size_t)rows * cols);
        store(r, d, (size_t)rows * cols);
    }
    return fuse;
}

void op_gelu(bert_run *r, size_t out, size_t in, size_t n) {
    r->m->be->gelu_fwd(r->m->be, act(r->m, out), act(r->m, in), n);
    store(r, out, n);
}

void op_gelu_bwd(bert_run *r, size_t dx, size_t dy, size_t x, size_t n, bool stored) {
    r->m->be->gelu_bwd(r->m->be, act(r->m, dx), act(r->m, dy), act(r->m, x), n);
    if (stored) store(r, dx, n);
}

void op_tanh(bert_run *r, size_t out, size_t in, size_t n) {
    r->m->be->tanh_fwd(r->m->be, act(r->m, out), act(r->m, in), n, BT_F32);
    store(r, out, n);
}

void op_tanh_bwd(bert_run *r, size_t dx, size_t dy, size_t y, size_t n, bool stored) {
    r->m->be->tanh_bwd(r->m->be, act(r->m, dx), act(r->m, dy), act(r->m, y), n, BT_F32);
    if (stored) store(r, dx, n);
}

void op_bias_add(bert_run *r, size_t x, size_t b, int rows, int cols) {
    /* the sums rounded by the op as store would: no rounding pass */
    r->m->be->bias_add(r->m->be, act(r->m, x), par(r->m, b), rows, cols,
                       (bt_dtype)r->m->cfg.storage, BT_NO_PTR, true);
    store_rounded(r, x, (size_t)rows * cols);
}

void op_dropout(bert_run *r, size_t x, size_t n, size_t per_sample, float p, bt_rng_key key,
                bool stored) {
    bt_backend *be = r->m->be;
    if (p > 0.0f)
        be->dropout(be, act(r->m, x), act(r->m, x), n, per_sample, r->bt->first_sample, p, key,
                    BT_F32, BT_NO_PTR, BT_F32);
    if (stored) store(r, x, n);
}

void op_residual(bert_run *r, size_t out, float omega, size_t resid, size_t branch, size_t n) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    if (omega == 1.0f) {
        be->add(be, act(m, out), act(m, branch), act(m, resid), n);
    } else {
        be->copy(be, act(m, out), act(m, branch), n * 4);
        be->axpy(be, act(m, out), omega, act(m, resid), n);
    }
    store(r, out, n);
}

void op_residual_bwd(bert_run *r, size_t d, float omega, size_t dbranch, size_t n,
                     bool stored) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    const bt_dtype s = (bt_dtype)m->cfg.storage;
    if (stored && omega == 1.0f && s != BT_F32 && fused(m, BERT_FUSE_JOIN)) {
        /* round16(d + round16(dbranch)), dbranch's rounding changing nothing: the
         * add and the store's rounding in one pass (p 0: no draw drops a value) */
        be->add_dropout(be, act(m, d), act(m, d), act(m, dbranch), BT_F32, n, n, 0, 0.0f,
                        (bt_rng_key){0, 0}, s);
        store_rounded(r, d, n);
        return;
    }
    if (omega != 1.0f) be->scale(be, act(m, d), omega, n);
    be->add(be, act(m, d), act(m, d), act(m, dbranch), n);
    if (stored) store(r, d, n);
}

void op_join_fused(bert_run *r, size_t out, const join_norm *norm, size_t branch, size_t b,
                   size_t resid, int rows, size_t per_sample, float p, bt_rng_key key,
                   bt_ptr resid16, bool out_kept) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    const int H = m->cfg.hidden_size;
    const uint32_t first = r->bt->first_sample;
    const bt_dtype r16 = (bt_dtype)m->cfg.storage; /* the roundings the unfused ops' stores make */
    const size_t n = (size_t)rows * H;
    if (!norm) {
        be->bias_dropout_add(be, act(m, out), act(m, branch), par(m, b), act(m, resid), rows, H,
                             r16, per_sample, first, p, key);
        store_rounded(r, out, n);
        return;
    }
    /* the stash's 16-bit copies written by the op itself. The sum with a
     * stash slot is read from there alone (by layernorm_bwd), unless it is
     * the next join's residual (Pre-LN's res1): its fp32 values need not be
     * kept */
    const bt_ptr out16 = bert_act_slot16(m, r->tape, r->layer, out, true),
                 norm16 = bert_act_slot16(m, r->tape, r->layer, norm->out, true);
    const bool sum_kept = !out16.buf || m->cfg.norm == BERT_NORM_PRE;
    be->residual_layernorm_fwd(be, act(m, out), act(m, norm->out), act(m, norm->mean),
                               act(m, norm->rstd), act(m, branch), par(m, b),
                               resid16.buf ? resid16 : act(m, resid), par(m, norm->w),
                               par(m, norm->b), rows, H, m->cfg.layer_norm_eps, r16, per_sample,
                               first, p, key, out16, norm16, sum_kept,
                               resid16.buf ? r16 : BT_F32, out_kept || !norm16.buf);
    if (!out16.buf) store_rounded(r, out, n);
    if (!norm16.buf) store_rounded(r, norm->out, n);
}

void op_copy(bert_run *r, size_t dst, size_t src, size_t n, bool stored) {
    r->m->be->copy(r->m->be, act(r->m, dst), act(r->m, src), n * 4);
    if (stored) store(r, dst, n);
}

void op_gathers_bwd(bert_run *r, size_t d, size_t n, size_t a, size_t table_a, int rows_a,
                    size_t b, size_t table_b, int rows_b, int cols, bool stored) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    be->fill(be, act(m, d), 0.0f, n);
    if (rows_a > 0)
        be->scatter_rows(be, act(m, d), act(m, a), ints(m, table_a), bert_links(m, table_a),
                         rows_a, cols);
    if (rows_b > 0)
        be->scatter_rows(be, act(m, d), act(m, b), ints(m, table_b), bert_links(m, table_b),
                         rows_b, cols);
    if (stored) store(r, d, n);
}

void op_stored(bert_run *r, size_t off, size_t n) { store(r, off, n); }

bt_ptr op_softmax(bert_run *r, size_t probs, size_t dropped, size_t mask, int NH, float scale,
                  float p, bt_rng_key key) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    const int B = r->bt->B, T = r->bt->T;
    const size_t per_b = (size_t)NH * T * T, n = B * per_b;
    const uint32_t first = r->bt->first_sample;
    /* with 16-bit storage the op rounds the probabilities as store does,
     * before dropout reads them: the unfused path's bits in any storage.
     * The dropped probabilities in 16 bits are all the context's GEMM reads
     * (the backward drops them out again): then no fp32 copy. Nor need the
     * probabilities' fp32 values be kept where the stash holds them: this
     * pass drops them out, so the backward reads the stash (bert_act.c,
     * backward_reads_fp32) */
    if (p > 0.0f && fused(m, BERT_FUSE_ATTENTION)) {
        const bt_ptr probs16 = bert_act_slot16(m, r->tape, r->layer, probs, true),
                     dropped16 = r->layer >= 0 ? bert_operand16_room(m, 0, n) : BT_NO_PTR;
        be->softmax_dropout_fwd(be, dropped16.buf ? BT_NO_PTR : act(m, dropped), act(m, probs),
                                act(m, probs), ints(m, mask), B, NH, T, scale,
                                (bt_dtype)m->cfg.storage, first, p, key, dropped16, probs16,
                                !probs16.buf);
        if (!probs16.buf) store_rounded(r, probs, n);
        return dropped16;
    }
    be->softmax_fwd(be, act(m, probs), act(m, probs), ints(m, mask), B, NH, T, scale);
    store(r, probs, n);
    if (p > 0.0f) be->dropout(be, act(m, dropped), act(m, probs), n, per_b, first, p, key, BT_F32, BT_NO_PTR, BT_F32);
    return BT_NO_PTR;
}

bt_ptr op_softmax_bwd(bert_run *r, size_t dprobs, size_t probs, int NH, float scale, float p,
                      bt_rng_key key, float penalty, size_t scores) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    const int B = r->bt->B, T = r->bt->T;
    const size_t per_b = (size_t)NH * T * T, n = B * per_b;
    const uint32_t first = r->bt->first_sample;
    if (p > 0.0f && fused(m, BERT_FUSE_ATTENTION)) {
        /* rounded by the op as store would, unless the penalty's term follows */
        const bt_dtype r16 = penalty > 0.0f ? BT_F32 : (bt_dtype)m->cfg.storage;
        const bt_ptr p16 = bert_act_stashed(m, r->half_layer, probs), /* the unstash left it */
            ds16 = r16 != BT_F32 ? bert_operand16_room(m, 0, n) : BT_NO_PTR;
        be->dropout_softmax_bwd(be, act(m, dprobs), act(m, dprobs), p16.buf ? p16 : act(m, probs),
                                B, NH, T, scale, r16, first, p, key,
                                p16.buf ? (bt_dtype)m->cfg.storage : BT_F32, ds16, !ds16.buf);
        if (penalty > 0.0f) {
            be->axpy(be, act(m, dprobs), penalty, act(m, scores), n);
            store(r, dprobs, n); /* the sum rounded here */
        } else {
            store_rounded(r, dprobs, n);
        }
        return ds16;
    }
    if (p > 0.0f)
        be->dropout(be, act(m, dprobs), act(m, dprobs), n, per_b, first, p, key, BT_F32, BT_NO_PTR,
                    BT_F32);
    be->softmax_bwd(be, act(m, dprobs), act(m, dprobs), act(m, probs), B * NH * T, T, scale);
    if (penalty > 0.0f) be->axpy(be, act(m, dprobs), penalty, act(m, scores), n);
    store(r, dprobs, n);
    return BT_NO_PTR;
}

void op_xent(bert_run *r, size_t logits, size_t loss, size_t correct, size_t log_z,
             size_t labels, int rows, int classes, float grad_scale, float z_loss,
             bt_ptr dlogits16) {
    const bert_model *m = r->m;
    if (dlogits16.buf && m->cfg.storage == BT_F32) { /* the model's bookkeeping gone wrong */
        fprintf(stderr, "bertrain: internal error: a 16-bit logits gradient in fp32 storage\n");
        exit(1);
    }
    m->be->xent_fwd_bwd(m->be, act(m, logits), act(m, loss), act(m, correct), act(m, log_z),
                        act(m, logits), ints(m, labels), rows, classes, grad_scale, z_loss,
                        (bt_dtype)m->cfg.storage, dlogits16, BT_F32);
    if (!dlogits16.buf) store_rounded(r, logits, (size_t)rows * classes); /* d loss / d logits */
}

void op_xent_from16(bert_run *r, bt_ptr logits16, size_t loss, size_t correct, size_t log_z,
                    size_t labels, int rows, int classes, float grad_scale, float z_loss) {
    const bert_model *m = r->m;
    const bt_dtype s = (bt_dtype)m->cfg.storage;
    m->be->xent_fwd_bwd(m->be, BT_NO_PTR, act(m, loss), act(m, correct), act(m, log_z), logits16,
                        ints(m, labels), rows, classes, grad_scale, z_loss, s, logits16, s);
}

void op_grads_done(bert_run *r, size_t begin, size_t end) {
    if (!r->pass->grads_accumulate) bert_act_round16(r->m, grd(r->m, begin), end - begin);
    if (r->pass->grads_ready) r->pass->grads_ready(r->pass->grads_ready_ctx, begin, end);
}
