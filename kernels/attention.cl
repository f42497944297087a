/* Fused attention: the scores, mask, softmax, dropout and the product with V
 * of every head in one kernel, the T x T probabilities never stored.
 *
 * Q, K and V are the token-major QKV projection, (B T, 3H) with H = NH D:
 * head h of token t has Q at t 3H + h D, K at + H, V at + 2H; fp32, or in a
 * 16-bit storage kind (`kind`, BT_KIND16_*, read from the ushort view of the
 * same buffer). The forward keeps each query row's log-sum-exp (lse, (B, NH,
 * T)); the backward recomputes the probabilities from Q, K and lse, and
 * dropout's keep decisions from the counter RNG (drop_keep_at, element
 * (h T + i) T + j of sample b, as softmax_dropout_fwd draws them).
 *
 * Geometry of the three kernels: a work-group of BT_WG holds BT_ATTN_ROWS
 * rows (queries, or keys in dkv) of one (sequence, head), a row to
 * BT_ROW_LANES lanes; the other side (keys, or queries) goes through local
 * memory in tiles of attn_tile_rows(D) rows. Lane l owns the head's columns
 * l, l + BT_ROW_LANES, ... (at most BT_ATTN_DPL of them: D <= BT_ATTN_MAX_D)
 * and the tile's rows l, l + BT_ROW_LANES, ... Every sum has a fixed order,
 * so the same inputs give the same bits. global: B NH ceil(T / BT_ATTN_ROWS)
 * BT_WG. */

#define BT_ATTN_ROWS (BT_WG / BT_ROW_LANES)
#define BT_ATTN_DPL ((BT_ATTN_MAX_D + BT_ROW_LANES - 1) / BT_ROW_LANES)
#define BT_ATTN_TILE_MAX 32

/* Rows of a tile of head width D in local memory (row stride D + 1, so that
 * lanes reading one column of different rows hit different banks). */
BT_FN int attn_tile_rows(int D) {
    const int t = BT_ATTN_TILE_FLOATS / (D + 1);
    return t < BT_ATTN_TILE_MAX ? t : BT_ATTN_TILE_MAX;
}

/* Element i of an activation stored in fp32 (kind BT_KIND16_NONE: x32) or in
 * a 16-bit kind (x16). */
BT_FN float attn_value(__global const float *x32, __global const ushort *x16, int kind,
                       size_t i) {
    if (kind == BT_KIND16_NONE) return x32[i];
    return as_float(kind == BT_KIND16_BF16 ? bf16_to_f32(x16[i]) : f16_to_f32(x16[i]));
}

/* rows [r0, r0 + n) of one head's (T, D) slice at column `col` of a matrix
 * with row stride ld, into tile (row stride D + 1); rows from n to `rows`
 * are zeros. By the whole work-group; the caller puts barriers around it. */
BT_FN void attn_load_tile(BT_LOCAL_PTR float *tile, __global const float *x32,
                          __global const ushort *x16, int kind, size_t row0, int n, int rows,
                          int ld, int col, int D) {
    for (int idx = get_local_id(0); idx < rows * D; idx += BT_WG) {
        const int r = idx / D, c = idx % D;
        tile[r * (D + 1) + c] =
            r < n ? attn_value(x32, x16, kind, (row0 + (size_t)r) * ld + col + c) : 0.0f;
    }
}

/* The dot product of row a and row b (length D) in local memory. */
BT_FN float attn_dot(BT_LOCAL_PTR const float *a, BT_LOCAL_PTR const float *b, int D) {
    float s = 0.0f;
    for (int d = 0; d < D; d++) s += a[d] * b[d];
    return s;
}

/* Whether dropout keeps probability (i, j) of head h in sample b (thr = 0:
 * no dropout, always). */
BT_FN bool attn_keep(int b, int h, int i, int j, int T, uint first_sample, uint thr,
                     uint seed_lo, uint seed_hi, uint stream_lo, uint stream_hi) {
    if (!thr) return true;
    ulong drawn = ~(ulong)0;
    uint draw[4];
    return drop_keep_at((uint)b, ((ulong)h * T + i) * T + j, first_sample, thr, seed_lo, seed_hi,
                        stream_lo, stream_hi, &drawn, draw);
}

/* Where a work-item stands: lane and row slot w in its work-group, the
 * (sequence b, head h) of the work-group, and the row it owns (a query, or
 * a key in dkv: row slot w of the work-group's tile of rows). */
typedef struct {
    int lane, w, bh, h, b, row;
    size_t tok0; /* the sequence's first token */
} attn_place;

BT_FN attn_place attn_place_of(int NH, int T) {
    attn_place a;
    const int lid = get_local_id(0), tiles = (T + BT_ATTN_ROWS - 1) / BT_ATTN_ROWS;
    const int g = get_group_id(0);
    a.lane = lid % BT_ROW_LANES;
    a.w = lid / BT_ROW_LANES;
    a.bh = g / tiles;
    a.h = a.bh % NH;
    a.b = a.bh / NH;
    a.row = g % tiles * BT_ATTN_ROWS + a.w;
    a.tok0 = (size_t)a.b * T;
    return a;
}

/* K and V rows [row0, row0 + n) of head h into kt and vt (tiles of `rows`
 * rows), between barriers: by the whole work-group. */
BT_FN void attn_load_kv(BT_LOCAL_PTR float *kt, BT_LOCAL_PTR float *vt, __global const float *x32,
                        __global const ushort *x16, int kind, size_t row0, int n, int rows,
                        int H, int h, int D) {
    barrier(CLK_LOCAL_MEM_FENCE); /* the last tile's readers are done */
    attn_load_tile(kt, x32, x16, kind, row0, n, rows, 3 * H, H + h * D, D);
    attn_load_tile(vt, x32, x16, kind, row0, n, rows, 3 * H, 2 * H + h * D, D);
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* ctx = dropout(softmax(scale Q K^T over the keys with key_mask != 0)) V per
 * head, written token-major (B T, H) in fp32; lse[b, h, i] = the row's
 * log-sum-exp of the scaled scores (+Inf for a row with no key: its context
 * is 0). An online softmax: each tile of keys rescales the running sum and
 * context by exp(old max - new max). */
BT_KERNEL_WG void bt_attention_fwd(BT_OUT(float, ctx), BT_OUT(float, lse), BT_IN(float, qkv),
                                   BT_IN(ushort, qkv16), BT_IN(int, key_mask), int kind, int NH,
                                   int T, int D, float scale, uint first_sample, uint thr,
                                   float keep_scale, uint seed_lo, uint seed_hi, uint stream_lo,
                                   uint stream_hi) {
    BT_BIND(ctx);
    BT_BIND(lse);
    BT_BIND(qkv);
    BT_BIND(qkv16);
    BT_BIND(key_mask);
    __local float kt[BT_ATTN_TILE_FLOATS], vt[BT_ATTN_TILE_FLOATS];
    __local float qrow[BT_ATTN_ROWS * BT_ATTN_MAX_D], pt[BT_ATTN_ROWS * BT_ATTN_TILE_MAX];
    __local float red[BT_WG];
    const attn_place a = attn_place_of(NH, T);
    const int lane = a.lane, w = a.w, bh = a.bh, h = a.h, b = a.b, i = a.row;
    const int H = NH * D, ld = 3 * H, KT = attn_tile_rows(D), S = D + 1;
    const bool live = i < T;
    const size_t tok0 = a.tok0;
    __global const int *km = key_mask + tok0;
    BT_LOCAL_PTR float *q = qrow + w * BT_ATTN_MAX_D, *p = pt + w * BT_ATTN_TILE_MAX;
    for (int d = lane; d < D; d += BT_ROW_LANES)
        q[d] = live ? attn_value(qkv, qkv16, kind, (tok0 + i) * ld + h * D + d) : 0.0f;
    float acc[BT_ATTN_DPL];
    for (int c = 0; c < BT_ATTN_DPL; c++) acc[c] = 0.0f;
    float mx = -INFINITY, sum = 0.0f;
    for (int j0 = 0; j0 < T; j0 += KT) {
        const int nk = T - j0 < KT ? T - j0 : KT;
        attn_load_kv(kt, vt, qkv, qkv16, kind, tok0 + j0, nk, KT, H, h, D);
        float tmax = -INFINITY;
        for (int jj = lane; jj < KT; jj += BT_ROW_LANES) {
            float s = -INFINITY;
            if (live && jj < nk && km[j0 + jj]) s = scale * attn_dot(q, kt + jj * S, D);
            p[jj] = s;
            if (s > tmax) tmax = s;
        }
        tmax = row_max(tmax, red);
        const float mnew = tmax > mx ? tmax : mx;
        float tsum = 0.0f;
        for (int jj = lane; jj < KT; jj += BT_ROW_LANES) {
            const float s = p[jj];
            const float e = s == -INFINITY ? 0.0f : exp(s - mnew);
            tsum += e;
            p[jj] = attn_keep(b, h, i, j0 + jj, T, first_sample, thr, seed_lo, seed_hi,
                              stream_lo, stream_hi)
                        ? e * (thr ? keep_scale : 1.0f)
                        : 0.0f;
        }
        tsum = row_sum(tsum, red); /* its barriers publish p to the row's lanes */
        if (mnew == -INFINITY) continue; /* no key yet: nothing to add */
        const float corr = exp(mx - mnew);
        sum = sum * corr + tsum;
        mx = mnew;
        for (int c = 0; c < BT_ATTN_DPL; c++) {
            const int d = lane + c * BT_ROW_LANES;
            if (d >= D) break;
            float a = acc[c] * corr;
            for (int jj = 0; jj < nk; jj++) a += p[jj] * vt[jj * S + d];
            acc[c] = a;
        }
    }
    if (!live) return;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int c = 0; c < BT_ATTN_DPL; c++) {
        const int d = lane + c * BT_ROW_LANES;
        if (d < D) ctx[(tok0 + i) * H + h * D + d] = acc[c] * inv;
    }
    if (lane == 0) lse[(size_t)bh * T + i] = sum > 0.0f ? mx + log(sum) : INFINITY;
}

/* The backward's shared start: delta[b, h, i] = dctx_i . ctx_i (= sum_j dP_ij
 * P_ij, dropout included) for dkv, and dQ = scale dS K with dS = P (dropout'(dP)
 * - delta), P recomputed from lse, into dqkv's Q columns. ctx is read in
 * fp32 or in ctx_kind; dctx in fp32. Geometry: as bt_attention_fwd. */
BT_KERNEL_WG void bt_attention_bwd_dq(BT_OUT(float, dqkv), BT_OUT(float, delta),
                                      BT_IN(float, dctx), BT_IN(float, ctx),
                                      BT_IN(ushort, ctx16), BT_IN(float, lse),
                                      BT_IN(float, qkv), BT_IN(ushort, qkv16),
                                      BT_IN(int, key_mask), int kind, int ctx_kind, int NH,
                                      int T, int D, float scale, uint first_sample, uint thr,
                                      float keep_scale, uint seed_lo, uint seed_hi,
                                      uint stream_lo, uint stream_hi) {
    BT_BIND(dqkv);
    BT_BIND(delta);
    BT_BIND(dctx);
    BT_BIND(ctx);
    BT_BIND(ctx16);
    BT_BIND(lse);
    BT_BIND(qkv);
    BT_BIND(qkv16);
    BT_BIND(key_mask);
    __local float kt[BT_ATTN_TILE_FLOATS], vt[BT_ATTN_TILE_FLOATS];
    __local float qrow[BT_ATTN_ROWS * BT_ATTN_MAX_D], dorow[BT_ATTN_ROWS * BT_ATTN_MAX_D];
    __local float pt[BT_ATTN_ROWS * BT_ATTN_TILE_MAX], red[BT_WG];
    const attn_place a = attn_place_of(NH, T);
    const int lane = a.lane, w = a.w, bh = a.bh, h = a.h, b = a.b, i = a.row;
    const int H = NH * D, ld = 3 * H, KT = attn_tile_rows(D), S = D + 1;
    const bool live = i < T;
    const size_t tok0 = a.tok0;
    __global const int *km = key_mask + tok0;
    BT_LOCAL_PTR float *q = qrow + w * BT_ATTN_MAX_D, *dout = dorow + w * BT_ATTN_MAX_D;
    BT_LOCAL_PTR float *p = pt + w * BT_ATTN_TILE_MAX;
    float dl = 0.0f;
    for (int d = lane; d < D; d += BT_ROW_LANES) {
        const size_t o = (tok0 + i) * H + h * D + d;
        q[d] = live ? attn_value(qkv, qkv16, kind, (tok0 + i) * ld + h * D + d) : 0.0f;
        dout[d] = live ? dctx[o] : 0.0f;
        if (live) dl += dout[d] * attn_value(ctx, ctx16, ctx_kind, o);
    }
    dl = row_sum(dl, red);
    if (live && lane == 0) delta[(size_t)bh * T + i] = dl;
    const float li = live ? lse[(size_t)bh * T + i] : INFINITY;
    const float ks = thr ? keep_scale : 1.0f;
    float acc[BT_ATTN_DPL];
    for (int c = 0; c < BT_ATTN_DPL; c++) acc[c] = 0.0f;
    for (int j0 = 0; j0 < T; j0 += KT) {
        const int nk = T - j0 < KT ? T - j0 : KT;
        attn_load_kv(kt, vt, qkv, qkv16, kind, tok0 + j0, nk, KT, H, h, D);
        for (int jj = lane; jj < KT; jj += BT_ROW_LANES) {
            float ds = 0.0f;
            if (live && jj < nk && km[j0 + jj] && li != INFINITY) {
                const float pr = exp(scale * attn_dot(q, kt + jj * S, D) - li);
                const float dp = attn_keep(b, h, i, j0 + jj, T, first_sample, thr, seed_lo,
                                           seed_hi, stream_lo, stream_hi)
                                     ? attn_dot(dout, vt + jj * S, D) * ks
                                     : 0.0f;
                ds = scale * (pr * (dp - dl));
            }
            p[jj] = ds;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* p to the row's lanes */
        for (int c = 0; c < BT_ATTN_DPL; c++) {
            const int d = lane + c * BT_ROW_LANES;
            if (d >= D) break;
            float a = acc[c];
            for (int jj = 0; jj < nk; jj++) a += p[jj] * kt[jj * S + d];
            acc[c] = a;
        }
    }
    if (!live) return;
    for (int c = 0; c < BT_ATTN_DPL; c++) {
        const int d = lane + c * BT_ROW_LANES;
        if (d < D) dqkv[(tok0 + i) * ld + h * D + d] = acc[c];
    }
}

/* dK = scale dS^T Q and dV = dropout(P)^T dctx into dqkv's K and V columns,
 * a row per key: P and dS recomputed as in bt_attention_bwd_dq, whose delta
 * it reads (launched after it). Geometry: as bt_attention_fwd with keys for
 * queries; the queries, their dctx, lse and delta go through local memory. */
BT_KERNEL_WG void bt_attention_bwd_dkv(BT_OUT(float, dqkv), BT_IN(float, dctx),
                                       BT_IN(float, delta), BT_IN(float, lse),
                                       BT_IN(float, qkv), BT_IN(ushort, qkv16),
                                       BT_IN(int, key_mask), int kind, int NH, int T, int D,
                                       float scale, uint first_sample, uint thr,
                                       float keep_scale, uint seed_lo, uint seed_hi,
                                       uint stream_lo, uint stream_hi) {
    BT_BIND(dqkv);
    BT_BIND(dctx);
    BT_BIND(delta);
    BT_BIND(lse);
    BT_BIND(qkv);
    BT_BIND(qkv16);
    BT_BIND(key_mask);
    __local float qt[BT_ATTN_TILE_FLOATS], dot[BT_ATTN_TILE_FLOATS];
    __local float krow[BT_ATTN_ROWS * BT_ATTN_MAX_D], vrow[BT_ATTN_ROWS * BT_ATTN_MAX_D];
    __local float pt[BT_ATTN_ROWS * BT_ATTN_TILE_MAX], st[BT_ATTN_ROWS * BT_ATTN_TILE_MAX];
    __local float lt[BT_ATTN_TILE_MAX], dlt[BT_ATTN_TILE_MAX];
    const attn_place a = attn_place_of(NH, T);
    const int lid = get_local_id(0), lane = a.lane, w = a.w, bh = a.bh, h = a.h, b = a.b, j = a.row;
    const int H = NH * D, ld = 3 * H, QT = attn_tile_rows(D), S = D + 1;
    const size_t tok0 = a.tok0;
    const bool live = j < T, on = live && key_mask[tok0 + (live ? j : 0)];
    BT_LOCAL_PTR float *k = krow + w * BT_ATTN_MAX_D, *v = vrow + w * BT_ATTN_MAX_D;
    BT_LOCAL_PTR float *p = pt + w * BT_ATTN_TILE_MAX, *s = st + w * BT_ATTN_TILE_MAX;
    for (int d = lane; d < D; d += BT_ROW_LANES) {
        k[d] = live ? attn_value(qkv, qkv16, kind, (tok0 + j) * ld + H + h * D + d) : 0.0f;
        v[d] = live ? attn_value(qkv, qkv16, kind, (tok0 + j) * ld + 2 * H + h * D + d) : 0.0f;
    }
    const float ks = thr ? keep_scale : 1.0f;
    float acck[BT_ATTN_DPL], accv[BT_ATTN_DPL];
    for (int c = 0; c < BT_ATTN_DPL; c++) acck[c] = accv[c] = 0.0f;
    for (int i0 = 0; i0 < T; i0 += QT) {
        const int nq = T - i0 < QT ? T - i0 : QT;
        barrier(CLK_LOCAL_MEM_FENCE);
        attn_load_tile(qt, qkv, qkv16, kind, tok0 + i0, nq, QT, ld, h * D, D);
        attn_load_tile(dot, dctx, (__global const ushort *)dctx, BT_KIND16_NONE, tok0 + i0, nq, QT, H,
                       h * D, D);
        for (int r = lid; r < QT; r += BT_WG) {
            lt[r] = r < nq ? lse[(size_t)bh * T + i0 + r] : INFINITY;
            dlt[r] = r < nq ? delta[(size_t)bh * T + i0 + r] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int ii = lane; ii < QT; ii += BT_ROW_LANES) {
            float pd = 0.0f, ds = 0.0f;
            if (on && ii < nq && lt[ii] != INFINITY) {
                const float pr = exp(scale * attn_dot(qt + ii * S, k, D) - lt[ii]);
                const bool keep = attn_keep(b, h, i0 + ii, j, T, first_sample, thr, seed_lo,
                                            seed_hi, stream_lo, stream_hi);
                const float dp = keep ? attn_dot(dot + ii * S, v, D) * ks : 0.0f;
                pd = keep ? pr * ks : 0.0f;
                ds = scale * (pr * (dp - dlt[ii]));
            }
            p[ii] = pd;
            s[ii] = ds;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c = 0; c < BT_ATTN_DPL; c++) {
            const int d = lane + c * BT_ROW_LANES;
            if (d >= D) break;
            float ak = acck[c], av = accv[c];
            for (int ii = 0; ii < nq; ii++) {
                ak += s[ii] * qt[ii * S + d];
                av += p[ii] * dot[ii * S + d];
            }
            acck[c] = ak;
            accv[c] = av;
        }
    }
    if (!live) return;
    for (int c = 0; c < BT_ATTN_DPL; c++) {
        const int d = lane + c * BT_ROW_LANES;
        if (d >= D) break;
        dqkv[(tok0 + j) * ld + H + h * D + d] = acck[c];
        dqkv[(tok0 + j) * ld + 2 * H + h * D + d] = accv[c];
    }
}
