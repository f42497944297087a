/* Helpers shared by the kernels (the one source of kernels/, see
 * dialect_opencl.cl): work-group trees, GELU's values, a LayerNorm row and a
 * masked softmax row. */

/* The smaller of two sizes. */
BT_FN size_t bt_min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Sum of v over the work-group by a fixed tree in red[BT_WG]; every
 * work-item gets the total. Must be reached by all work-items. */
BT_FN float wg_sum(float v, BT_LOCAL_PTR float *red) {
    const int lid = get_local_id(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
#ifdef BT_WARP
    /* down to one warp in local memory, then the warp's levels by shuffles:
     * the same additions in the same order, so the same bits, with fewer
     * barriers (lanes at or past s add values no lane below s reads) */
    for (int s = BT_WG / 2; s >= BT_WARP; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid < BT_WARP) {
        float x = red[lid];
        for (int s = BT_WARP / 2; s > 0; s >>= 1) x += bt_shfl_down(x, s);
        if (lid == 0) red[0] = x;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#else
    for (int s = BT_WG / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif
    const float total = red[0];
    barrier(CLK_LOCAL_MEM_FENCE); /* red may be reused right away */
    return total;
}

/* The column tiles of the column reductions (constants.h, BT_COL_SLAB). */
#define BT_SLAB BT_COL_SLAB(BT_WG)
#define BT_LANES (BT_WG / BT_SLAB)

/* Where a work-item sits in the column tiles of `cols` columns: *chunk, the
 * work-group's row chunk (0 in a one-pass kernel); *col, its column (may be
 * >= cols in the last slab); *lane, its row lane. Work-groups run slabs
 * fastest, so neighbouring groups read neighbouring columns. */
BT_FN void col_tile(size_t cols, size_t *chunk, size_t *col, int *lane) {
    const size_t slabs = (cols + BT_SLAB - 1) / BT_SLAB, grp = get_group_id(0);
    const int lid = get_local_id(0);
    *chunk = grp / slabs;
    *col = grp % slabs * BT_SLAB + (size_t)(lid % BT_SLAB);
    *lane = lid / BT_SLAB;
}

/* The sum over the row lanes of a column tile, in lane order, of each
 * work-item's v, by way of red[BT_WG]: row lane 0 gets its column's total
 * (the other lanes get their own v back). Must be reached by all
 * work-items. */
BT_FN float col_lanes_sum(float v, BT_LOCAL_PTR float *red) {
    const int lid = get_local_id(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < BT_SLAB)
        for (int j = 1; j < BT_LANES; j++) v += red[j * BT_SLAB + lid];
    barrier(CLK_LOCAL_MEM_FENCE); /* red may be reused right away */
    return v;
}

/* Maximum of v over the work-group (NaN-ignoring as `a > b`); every work-item
 * gets it. */
BT_FN float wg_max(float v, BT_LOCAL_PTR float *red) {
    const int lid = get_local_id(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = BT_WG / 2; s > 0; s >>= 1) {
        if (lid < s && red[lid + s] > red[lid]) red[lid] = red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float m = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return m;
}

/* The exact-erf GELU and its derivative, shared by gelu_fwd/bwd and the
 * fused kernels so that both round alike. */
BT_FN float gelu_value(float x) { return 0.5f * x * (1.0f + erf(x * M_SQRT1_2_F)); }
BT_FN float gelu_grad_value(float x) {
    const float cdf = 0.5f * (1.0f + erf(x * M_SQRT1_2_F));
    const float pdf = 0.3989422804014327f * exp(-0.5f * x * x);
    return cdf + x * pdf;
}

/* Row kernels: a row belongs to BT_ROW_LANES consecutive work-items, its
 * lanes; lane l owns the keys 4l .. 4l+3, then those BT_ROW_LANES * 4 further
 * on, and so on, so that four keys share a Philox block where the row allows
 * it. */
#define ROW_KEYS_FOR(j, lane, T)                                                   \
    for (int j##_0 = 4 * (lane); j##_0 < (T); j##_0 += 4 * BT_ROW_LANES)           \
        for (int j = j##_0; j < j##_0 + 4 && j < (T); j++)

/* The row of this work-item's lanes, and its key count: T, or 0 past the
 * last of `rows` rows (those lanes still join the row trees). */
BT_FN int row_of(void) {
    return get_group_id(0) * (BT_WG / BT_ROW_LANES) + get_local_id(0) / BT_ROW_LANES;
}
BT_FN int row_keys(int r, int rows, int T) { return r < rows ? T : 0; }

/* Sum of v over the lanes of a row by a fixed tree in red[BT_WG]; every lane
 * of the row gets the total. Every work-item of the work-group must reach it. */
BT_FN float row_sum(float v, BT_LOCAL_PTR float *red) {
    const int lid = get_local_id(0), lane = lid % BT_ROW_LANES;
#if defined(BT_WARP) && BT_ROW_LANES == BT_WARP
    /* the lanes are a warp: the tree's additions in its order by shuffles */
    for (int s = BT_ROW_LANES / 2; s > 0; s >>= 1) v += bt_shfl_down(v, s);
    if (lane == 0) red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
#else
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = BT_ROW_LANES / 2; s > 0; s >>= 1) {
        if (lane < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif
    const float total = red[lid - lane];
    barrier(CLK_LOCAL_MEM_FENCE); /* red may be reused right away */
    return total;
}

/* Maximum of v over the lanes of a row (NaN-ignoring as `a > b`), as row_sum. */
BT_FN float row_max(float v, BT_LOCAL_PTR float *red) {
    const int lid = get_local_id(0), lane = lid % BT_ROW_LANES;
#if defined(BT_WARP) && BT_ROW_LANES == BT_WARP
    for (int s = BT_ROW_LANES / 2; s > 0; s >>= 1) {
        const float o = bt_shfl_down(v, s);
        if (o > v) v = o;
    }
    if (lane == 0) red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
#else
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = BT_ROW_LANES / 2; s > 0; s >>= 1) {
        if (lane < s && red[lid + s] > red[lid]) red[lid] = red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif
    const float m = red[lid - lane];
    barrier(CLK_LOCAL_MEM_FENCE);
    return m;
}

/* One row of the masked softmax by its lanes: p[j] = softmax_j(scale * s[j])
 * over keys with km[j] != 0 (masked keys 0, no key: all 0), each lane on its
 * keys (ROW_KEYS_FOR; p may be s). T = 0 for a lane past the last row, which
 * must still come for the trees. Shared by softmax_fwd and
 * softmax_dropout_fwd. */
BT_FN void softmax_row(__global float *p, __global const float *s, __global const int *km,
                       int T, float scale, BT_LOCAL_PTR float *red) {
    const int lane = get_local_id(0) % BT_ROW_LANES;
    float mx = -INFINITY;
    ROW_KEYS_FOR(j, lane, T) if (km[j] && scale * s[j] > mx) mx = scale * s[j];
    mx = row_max(mx, red);
    float sum = 0.0f;
    ROW_KEYS_FOR(j, lane, T) {
        const float e = km[j] ? exp(scale * s[j] - mx) : 0.0f;
        p[j] = e;
        sum += e;
    }
    sum = row_sum(sum, red);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    ROW_KEYS_FOR(j, lane, T) p[j] *= inv;
}

/* ---- 16-bit values: conversions between f32, bf16 and f16, round to
 * nearest even, by integer arithmetic on the bits (the CPU backend's
 * functions, backends/common/half.h): no half-precision support needed, and
 * fp32 denormals never pass through float registers. ---- */

/* bits of a float -> bf16 bits */
BT_FN ushort f32_to_bf16(uint x) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (ushort)(x >> 16);
}

/* bf16 bits -> bits of a float */
BT_FN uint bf16_to_f32(ushort h) { return (uint)h << 16; }

/* bits of a float -> f16 bits */
BT_FN ushort f32_to_f16(uint x) {
    const uint sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (ushort)(sign | 0x7e00u);  /* NaN */
    if (ax >= 0x477ff000u) return (ushort)(sign | 0x7c00u); /* overflow to Inf */
    if (ax < 0x38800000u) /* subnormal or 0: a * 2^24 rounded to nearest even */
        return (ushort)(sign | (uint)rint(as_float(ax) * 16777216.0f));
    const uint mant = ax & 0x7fffffu, exp = (ax >> 23) - 112u;
    uint h = (exp << 10) | (mant >> 13);
    const uint rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (ushort)(sign | h);
}

/* f16 bits -> bits of a float */
BT_FN uint f16_to_f32(ushort h) {
    const uint sign = (uint)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) /* subnormal or 0: mant * 2^-24 is a normal float (or 0) */
        return sign | as_uint((float)mant * 0x1p-24f);
    return exp == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112u) << 23) | (mant << 13);
}

/* bits of x in the 16-bit storage kind (BT_KIND16_BF16 or _F16) */
BT_FN ushort f32_to_kind16(float x, int kind) {
    return kind == BT_KIND16_BF16 ? f32_to_bf16(as_uint(x)) : f32_to_f16(as_uint(x));
}

/* The value of 16-bit bits h of the storage kind (BT_KIND16_BF16 or _F16). */
BT_FN float kind16_value(ushort h, int kind) {
    return as_float(kind == BT_KIND16_BF16 ? bf16_to_f32(h) : f16_to_f32(h));
}

/* x rounded to the 16-bit storage kind's nearest value (kernels/cast.cl's
 * round16), or x itself for BT_KIND16_NONE. */
BT_FN float round_kind16(float x, int kind) {
    if (kind == BT_KIND16_NONE) return x;
    const ushort h = f32_to_kind16(x, kind);
    return as_float(kind == BT_KIND16_BF16 ? bf16_to_f32(h) : f16_to_f32(h));
}

/* The sum of dy[r, c] over the rows r = r0 + lane, r0 + lane + BT_LANES,
 * ... below r1, in order (dy points at column c), each rounded to the
 * storage kind kind16 as it is read (BT_KIND16_NONE: as it is): a row
 * lane's share of a column tile. */
BT_FN float col_rows_sum(__global const float *dy, size_t r0, size_t r1, size_t cols, int lane,
                         int kind16) {
    float acc = 0.0f;
    for (size_t r = r0 + (size_t)lane; r < r1; r += BT_LANES)
        acc += round_kind16(dy[r * cols], kind16);
    return acc;
}

/* One row of LayerNorm by its lanes (every work-item of the work-group must
 * call it; cols = 0 for lanes past the last row): out = (x - mean) * rstd *
 * gamma + beta, rounded to the storage kind kind16 (BT_KIND16_NONE: not
 * rounded), lane l owning columns l, l + BT_ROW_LANES, ... (a warp reads
 * adjacent columns); mean and variance by row_sum's fixed trees; returns
 * rstd and sets *mean; out16 (0: none) takes out's values in kind16 too, and
 * out 0 is not written (out16 then holds the row).
 * Shared by layernorm_fwd and residual_layernorm_fwd. */
BT_FN float layernorm_row(__global float *out, __global ushort *out16, __global const float *x,
                          __global const float *gamma, __global const float *beta, int cols,
                          float eps, int kind16, BT_LOCAL_PTR float *red, float *mean) {
    const int lane = get_local_id(0) % BT_ROW_LANES;
    float s = 0.0f;
    for (int c = lane; c < cols; c += BT_ROW_LANES) s += x[c];
    const float m = row_sum(s, red) / cols;
    float v = 0.0f;
    for (int c = lane; c < cols; c += BT_ROW_LANES) v += (x[c] - m) * (x[c] - m);
    const float rs = 1.0f / sqrt(row_sum(v, red) / cols + eps);
    for (int c = lane; c < cols; c += BT_ROW_LANES) {
        const float o = round_kind16((x[c] - m) * rs * gamma[c] + beta[c], kind16);
        if (out) out[c] = o;
        if (out16) out16[c] = f32_to_kind16(o, kind16);
    }
    *mean = m;
    return rs;
}

/* The columns of a LayerNorm row that a lane keeps in registers where the
 * dialect defines BT_ROW_CACHE (GPUs): a row of up to BT_ROW_LANES *
 * BT_LN_LANE_COLS columns (1,024 with 32 lanes, BERT-large's width) is read
 * once (layernorm_row_cached); a wider one, or any on a CPU device, takes
 * layernorm_row, which reads it again for each pass. BT_LN_CACHED is of the
 * kernel's column count, the same for every work-item, so that the row trees'
 * barriers are met by all. */
#ifdef BT_ROW_CACHE
#define BT_LN_CACHED(cols) ((cols) <= BT_LN_ROW_MAX_OF(BT_WG))
#else
#define BT_LN_CACHED(cols) 0 /* dialect_opencl.cl: CPU devices re-read */
#endif

/* Column c of this lane's k-th register (columns lane, lane + BT_ROW_LANES,
 * ..., as layernorm_row's lanes own them). */
BT_FN int ln_lane_col(int k) { return get_local_id(0) % BT_ROW_LANES + k * BT_ROW_LANES; }

/* xv[k] = x[ln_lane_col(k)] for the columns below cols, 0 past them. */
BT_FN void ln_lane_load(float *xv, __global const float *x, int cols) {
    BT_UNROLL for (int k = 0; k < BT_LN_LANE_COLS; k++) xv[k] = ln_lane_col(k) < cols ? x[ln_lane_col(k)] : 0.0f;
}

/* The floats of a LayerNorm parameter vector that a work-group keeps in
 * local memory where its rows fit in registers (BT_LN_CACHED). */
#define BT_LN_ROW_MAX BT_LN_ROW_MAX_OF(BT_WG)

/* dst[0 .. n) = src[0 .. n) by the work-group's work-items, then a barrier:
 * a per-column vector read once by a work-group for all its rows instead of
 * once a row. Must be reached by all work-items of the group. */
BT_FN void stage_vector(BT_LOCAL_PTR float *dst, __global const float *src, int n) {
    for (int i = get_local_id(0); i < n; i += BT_WG) dst[i] = src[i];
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* layernorm_row on the row's values already in registers (xv: this lane's,
 * as ln_lane_load puts them) and gamma and beta staged in local memory
 * (stage_vector): the same arithmetic in the same order, so the same bits,
 * without reading x again; out 0 as layernorm_row's. */
BT_FN float layernorm_row_cached(__global float *out, __global ushort *out16, const float *xv,
                                 BT_LOCAL_PTR const float *gamma, BT_LOCAL_PTR const float *beta,
                                 int cols, float eps, int kind16, BT_LOCAL_PTR float *red,
                                 float *mean) {
    float s = 0.0f;
    BT_UNROLL for (int k = 0; k < BT_LN_LANE_COLS; k++)
        if (ln_lane_col(k) < cols) s += xv[k];
    const float m = row_sum(s, red) / cols;
    float v = 0.0f;
    BT_UNROLL for (int k = 0; k < BT_LN_LANE_COLS; k++)
        if (ln_lane_col(k) < cols) v += (xv[k] - m) * (xv[k] - m);
    const float rs = 1.0f / sqrt(row_sum(v, red) / cols + eps);
    BT_UNROLL for (int k = 0; k < BT_LN_LANE_COLS; k++) {
        const int c = ln_lane_col(k);
        if (c < cols) {
            const float o = round_kind16((xv[k] - m) * rs * gamma[c] + beta[c], kind16);
            if (out) out[c] = o;
            if (out16) out16[c] = f32_to_kind16(o, kind16);
        }
    }
    *mean = m;
    return rs;
}

/* The keys of a softmax row that a lane keeps in registers: rows of up to
 * BT_ROW_LANES * BT_SM_LANE_KEYS keys (512 with 32 lanes) are read once
 * (softmax_row_cached and the kernels' cached branches); longer ones take
 * softmax_row. BT_SM_CACHED is of the kernel's T, the same for every
 * work-item, so that the row trees' barriers are met by all. Register k of a
 * lane holds key sm_lane_key(k): ROW_KEYS_FOR's keys, in its order. */
#define BT_SM_LANE_KEYS 16
#ifdef BT_ROW_CACHE
#define BT_SM_CACHED(T) ((T) <= BT_ROW_LANES * BT_SM_LANE_KEYS)
#else
#define BT_SM_CACHED(T) 0
#endif
BT_FN int sm_lane_key(int k) {
    return 4 * (get_local_id(0) % BT_ROW_LANES) + (k / 4) * 4 * BT_ROW_LANES + k % 4;
}

/* The key mask of a work-group's rows, T <= BT_ROW_LANES * BT_SM_LANE_KEYS
 * ints of key_mask (B, T), staged into lkm where all its rows (of `rows`,
 * HT = H * T a sample) are of one sample, and whether they are: read once a
 * work-group instead of once a row. Must be reached by all work-items of
 * the group (the answer is the same for all). */
BT_FN bool stage_key_mask(BT_LOCAL_PTR int *lkm, __global const int *key_mask, int rows, int HT,
                          int T) {
    const int first = get_group_id(0) * (BT_WG / BT_ROW_LANES), end = first + BT_WG / BT_ROW_LANES;
    const int last = (end < rows ? end : rows) - 1;
    if (first / HT != last / HT) return false;
    __global const int *km = key_mask + (size_t)(first / HT) * T;
    for (int j = get_local_id(0); j < T; j += BT_WG) lkm[j] = km[j];
    barrier(CLK_LOCAL_MEM_FENCE);
    return true;
}

/* softmax_row with the row read once: v[k] gets key sm_lane_key(k)'s
 * probability, rounded to the storage kind kind16 (BT_KIND16_NONE: not
 * rounded), and p (0: none) gets the same values: softmax_row's arithmetic
 * in its order, so its bits (and round16's after it), written once. The
 * mask from lkm where `staged` (stage_key_mask), else from km. */
BT_FN void softmax_row_cached(__global float *p, __global const float *s,
                              __global const int *km, BT_LOCAL_PTR const int *lkm, bool staged,
                              int T, float scale, int kind16, BT_LOCAL_PTR float *red, float *v) {
    uint keep = 0; /* bit k: key sm_lane_key(k) is not masked */
    float mx = -INFINITY;
    BT_UNROLL for (int k = 0; k < BT_SM_LANE_KEYS; k++) {
        const int j = sm_lane_key(k);
        v[k] = 0.0f;
        if (j >= T) continue;
        v[k] = scale * s[j];
        if (staged ? lkm[j] : km[j]) {
            keep |= 1u << k;
            if (v[k] > mx) mx = v[k];
        }
    }
    mx = row_max(mx, red);
    float sum = 0.0f;
    BT_UNROLL for (int k = 0; k < BT_SM_LANE_KEYS; k++) {
        if (sm_lane_key(k) >= T) continue;
        v[k] = keep >> k & 1u ? exp(v[k] - mx) : 0.0f;
        sum += v[k];
    }
    sum = row_sum(sum, red);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    BT_UNROLL for (int k = 0; k < BT_SM_LANE_KEYS; k++) {
        const int j = sm_lane_key(k);
        if (j >= T) continue;
        v[k] = round_kind16(v[k] * inv, kind16);
        if (p) p[j] = v[k];
    }
}
