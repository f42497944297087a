/* GEMM pieces every backend shares (staged_gemm.h). */
#include "staged_gemm.h"

#include <stdio.h>
#include <stdlib.h>

bt_buffer *bt_stage_reserve(bt_backend *be, bt_stage *s, size_t bytes, const char *what) {
    if (bytes > s->bytes) {
        bt_stage_release(be, s);
        s->buf = be->alloc(be, bytes);
        if (!s->buf) {
            fprintf(stderr, "bertrain: %s: out of memory staging a %.1f MB %s\n", be->name,
                    bytes / 1e6, what);
            exit(1);
        }
        s->bytes = bytes;
    }
    return s->buf;
}

void bt_stage_release(bt_backend *be, bt_stage *s) {
    if (s->buf) be->free(be, s->buf);
    s->buf = NULL;
    s->bytes = 0;
}

/* fp32 values of `span` elements from src in s, at the offset modulo 64
 * bytes that an fp32 operand in src's place would have: src's elements
 * rounded to dt, or, where src is stored in dt (half), converted exactly. */
static bt_ptr stage_rounded(bt_backend *be, bt_stage *s, bt_ptr src, size_t span, bt_dtype dt,
                            bool half) {
    const size_t lead = (half ? src.off * 2 : src.off) % 64;
    bt_ptr p = {bt_stage_reserve(be, s, lead + span * 4, "16-bit GEMM operand"), lead};
    if (half) {
        be->cast(be, p, BT_F32, src, dt, span);
    } else {
        be->copy(be, p, src, span * 4);
        be->round16(be, p, dt, span);
    }
    return p;
}

void bt_gemm16_staged(bt_backend *be, bt_stage stage[3], bt_dtype dt, unsigned stored16, bool ta,
                      bool tb, int m, int n, int k, float alpha, bt_ptr a, int lda, long sa,
                      bt_ptr b, int ldb, long sb, float beta, bt_ptr c, int ldc, long sc,
                      int batch) {
    const size_t span_a = bt_gemm_operand_span(ta ? k : m, ta ? m : k, lda, sa, batch),
                 span_b = bt_gemm_operand_span(tb ? n : k, tb ? k : n, ldb, sb, batch),
                 span_c = bt_gemm_operand_span(m, n, ldc, sc, batch);
    if (span_a) a = stage_rounded(be, &stage[0], a, span_a, dt, stored16 & BT_GEMM_A16);
    if (span_b) b = stage_rounded(be, &stage[1], b, span_b, dt, stored16 & BT_GEMM_B16);
    if (!(stored16 & BT_GEMM_C16)) {
        be->gemm(be, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
        return;
    }
    if (!span_c) return;
    const size_t lead = c.off * 2 % 64; /* as an fp32 C in its place */
    const bt_ptr wide = {bt_stage_reserve(be, &stage[2], lead + span_c * 4, "16-bit GEMM result"),
                         lead};
    be->cast(be, wide, BT_F32, c, dt, span_c);
    be->gemm(be, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, wide, ldc, sc, batch);
    be->cast(be, c, dt, wide, BT_F32, span_c);
}

/* p advanced by `count` elements of esz bytes. */
static bt_ptr advanced(bt_ptr p, long count, size_t esz) {
    p.off += (size_t)count * esz;
    return p;
}

void bt_gemm_grid_loop(bt_backend *be, bt_dtype dt, unsigned stored16, bool ta, bool tb, int m,
                       int n, int k, float alpha, bt_ptr a, int lda, bt_ptr b, int ldb,
                       float beta, bt_ptr c, int ldc, const bt_gemm_grid *g) {
    const size_t ea = stored16 & BT_GEMM_A16 ? 2 : 4, eb = stored16 & BT_GEMM_B16 ? 2 : 4,
                 ec = stored16 & BT_GEMM_C16 ? 2 : 4;
    for (int o = 0; o < g->outer; o++) {
        const bt_ptr ao = advanced(a, o * g->outer_a, ea), bo = advanced(b, o * g->outer_b, eb),
                     co = advanced(c, o * g->outer_c, ec);
        if (dt == BT_F32)
            be->gemm(be, ta, tb, m, n, k, alpha, ao, lda, g->stride_a, bo, ldb, g->stride_b, beta,
                     co, ldc, g->stride_c, g->batch);
        else
            be->gemm16(be, dt, stored16, ta, tb, m, n, k, alpha, ao, lda, g->stride_a, bo, ldb,
                       g->stride_b, beta, co, ldc, g->stride_c, g->batch);
    }
}

void bt_gemm_k0(bt_backend *be, int m, int n, float beta, bt_ptr c, int ldc, long sc, int batch) {
    for (int i = 0; i < batch; i++)
        for (int r = 0; r < m; r++) {
            bt_ptr row = bt_at(c, (size_t)i * (size_t)sc + (size_t)r * (size_t)ldc);
            if (beta == 0.0f)
                be->fill(be, row, 0.0f, (size_t)n);
            else
                be->scale(be, row, beta, (size_t)n);
        }
}
