/* Sizes the kernels and the host code that launches them agree on (C, CUDA
 * C++ and OpenCL C alike). The OpenCL backend passes BT_WG and
 * BT_REDUCE_CHUNK with -D, BT_WG possibly smaller where a device allows less. */
#ifndef BT_KERNELS_CONSTANTS_H
#define BT_KERNELS_CONSTANTS_H

/* The work-group (CUDA: block) size of every kernel. */
#ifndef BT_WG
#define BT_WG 256
#endif
/* Work-items per row of the row kernels (softmax): a warp on CUDA, so a
 * work-group holds BT_WG / BT_ROW_LANES rows. */
#define BT_ROW_LANES BT_ROW_LANES_OF(BT_WG)
/* The same for work-groups of wg (the host's view of an OpenCL build). */
#define BT_ROW_LANES_OF(wg) ((wg) < 32 ? (wg) : 32)
/* The global size of a row kernel over `rows` rows with work-groups of wg. */
#define BT_ROW_GLOBAL(rows, wg) \
    (((size_t)(rows) + (wg) / ((wg) < 32 ? (wg) : 32) - 1) / ((wg) / ((wg) < 32 ? (wg) : 32)) * (wg))
/* Elements per work-group of sum_partial / sumsq_partial (as CPU_REDUCE_CHUNK). */
#ifndef BT_REDUCE_CHUNK
#define BT_REDUCE_CHUNK 4096
#endif
/* The most blocks a sum of partials is cut into (bt_sum_blocked in
 * backends/common/partials.h; LAMB's trust ratios on the device): n partials
 * go in blocks of ceil(n / BT_SUM_BLOCKS), each added in order, then the
 * blocks' sums in order. Up to BT_SUM_BLOCKS partials that is plain order. */
#define BT_SUM_BLOCKS 256
/* Rows per work-item of the kernels that add a per-column vector (bias_add,
 * bias_gelu_fwd, bias_dropout_add): work-item i takes column i % cols of
 * rows (i / cols) BT_BIAS_ROWS, ... , so it reads the vector's element once
 * for them (adjacent work-items: adjacent columns of a row). */
#define BT_BIAS_ROWS 8
/* The work-items of such a kernel over rows x cols. */
#define BT_BIAS_ITEMS(rows, cols) \
    (((size_t)(rows) + BT_BIAS_ROWS - 1) / BT_BIAS_ROWS * (size_t)(cols))
/* The columns a row lane of the LayerNorm row kernels keeps in registers
 * (common.cl, BT_LN_CACHED): rows up to BT_ROW_LANES * BT_LN_LANE_COLS
 * columns (1,024 with 32 lanes, BERT-large's width) are read once. */
#define BT_LN_LANE_COLS 32
/* The widest row so kept with work-groups of wg. */
#define BT_LN_ROW_MAX_OF(wg) (BT_ROW_LANES_OF(wg) * BT_LN_LANE_COLS)
/* The rows of one work-group of a row kernel with work-groups of wg. */
#define BT_ROW_GROUP_ROWS(wg) ((wg) / BT_ROW_LANES_OF(wg))
/* Rows per chunk of the two-pass column reductions (bias_grad, layernorm_bwd's
 * dgamma and dbeta, bias_gelu_bwd's dbias, embed_bwd's dwtt). */
#define BT_COL_ROWS 64
/* The column tiles of those reductions: a work-group of wg work-items covers
 * BT_COL_SLAB(wg) adjacent columns (a warp's worth on CUDA, so its reads are
 * whole lines) with wg / BT_COL_SLAB(wg) row lanes; row lane j adds rows j,
 * j + lanes, ... of the rows it is given, in order, and the lanes' sums are
 * added in lane order (common.cl, col_lanes_sum). */
#define BT_COL_SLAB(wg) ((wg) < 32 ? (wg) : 32)
/* The global size of a column reduction over `groups` row chunks (1: one
 * pass) of `cols` columns with work-groups of wg. */
#define BT_COL_GLOBAL(groups, cols, wg)                                             \
    ((size_t)(groups) * (((size_t)(cols) + BT_COL_SLAB(wg) - 1) / BT_COL_SLAB(wg)) * \
     (size_t)(wg))
/* Fused attention (attention.cl): the widest head it takes, and the floats of
 * one tile of keys or queries in local memory (32 rows of a 64-wide head,
 * with a padding column). */
#define BT_ATTN_MAX_D 128
#define BT_ATTN_TILE_FLOATS 2080
/* The 16-bit storage kinds a kernel takes as an int (none: fp32), and on the
 * host the kind of a bt_dtype (backend.h) that names a storage. */
#define BT_KIND16_NONE 0
#define BT_KIND16_BF16 1
#define BT_KIND16_F16 2
/* which 16-bit copies a fused kernel writes besides its fp32 outputs (bits);
 * with BT_COPY16_OUT_ONLY (_IN_ONLY) the fp32 output that BT_COPY16_OUT's
 * (_IN's) copy mirrors is not written where the kernel needs no scratch: the
 * copy is all its readers need */
#define BT_COPY16_OUT 1
#define BT_COPY16_IN 2
#define BT_COPY16_OUT_ONLY 4
#define BT_COPY16_IN_ONLY 8
/* bias_add's y is zero and is not read (with BT_COPY16_OUT_ONLY: the bias
 * broadcast to every row of the 16-bit copy) */
#define BT_COPY16_ZERO_Y 16
/* bias_gelu_fwd's pre-activation is y16's, read as it is (bias included),
 * with BT_COPY16_IN_ONLY (y not touched) and without BT_COPY16_IN */
#define BT_COPY16_IN_GIVEN 32
#define BT_KIND16_OF(dt) \
    ((dt) == BT_F32 ? BT_KIND16_NONE : (dt) == BT_BF16 ? BT_KIND16_BF16 : BT_KIND16_F16)

#endif
