/* The CPU backend's GEMM: single-threaded BLAS calls on a grid of tasks that
 * OpenMP spreads over the threads. The grid follows from the shapes alone, so
 * the bits of C never depend on the thread count (DESIGN-NOTES.md, note 9). */
#include "cpu_internal.h"

#include <cblas.h>

/* OpenBLAS splits a GEMM by its own thread count, and the bits of C change
 * with the split (and with a tile's shape). So BLAS runs single-threaded
 * (bt_cpu_backend_create) on a grid of C tiles. Each tile repacks its panels
 * of A and B, so large tiles pay: up to 512 x 1024, each dimension split into
 * equal parts (a 512 + 256 split of 768 columns, or a 36-row tail of 164, ran
 * 10-50% slower: docs/PERFORMANCE.md).
 *
 * A GEMM with fewer than GEMM_MIN_TILES tiles first splits k into equal parts
 * of at least GEMM_K_PART_MIN (the weight gradients: a small C summed over
 * many tokens), so each task keeps its large tile: part 0 goes into C with
 * beta, the others into partial buffers that are added onto C in part order.
 * Only then does it halve the longer side of its tiles until many threads can
 * share it. */
enum { GEMM_TILE_ROWS = 512, GEMM_TILE_COLS = 1024, GEMM_MIN_TILES = 8, GEMM_K_PART_MIN = 1024 };

/* The tasks of one GEMM: tiles of rows x cols of C, and k in parts of k_part
 * (the last one shorter). */
typedef struct {
    int rows, cols, k_part;
    long row_tiles, col_tiles, k_parts, per_part; /* per_part: tiles over the batch */
} gemm_grid;

static long tile_count(int m, int n, int batch, int rows, int cols) {
    return (long)((m + rows - 1) / rows) * ((n + cols - 1) / cols) * batch;
}

/* The tile side that splits len into equal parts of at most max, rounded up
 * to a multiple of 16 (the GEMM kernels' widest unroll). */
static int even_split(int len, int max) {
    const int parts = (len + max - 1) / max;
    return ((len + parts - 1) / parts + 15) / 16 * 16;
}

/* The grid of an m x n x k GEMM repeated batch times. */
static gemm_grid gemm_plan(int m, int n, int k, int batch) {
    gemm_grid g = {.rows = even_split(m, GEMM_TILE_ROWS), .cols = even_split(n, GEMM_TILE_COLS)};
    int parts = 1;
    while (tile_count(m, n, batch, g.rows, g.cols) * parts < GEMM_MIN_TILES &&
           k / (2 * parts) >= GEMM_K_PART_MIN)
        parts *= 2;
    g.k_part = even_split(k, (k + parts - 1) / parts);
    g.k_parts = (k + g.k_part - 1) / g.k_part;
    while (tile_count(m, n, batch, g.rows, g.cols) * g.k_parts < GEMM_MIN_TILES) {
        if (g.cols >= g.rows && g.cols > 128)
            g.cols = even_split(n, g.cols / 2);
        else if (g.rows > 32)
            g.rows = even_split(m, g.rows / 2);
        else
            break;
    }
    g.row_tiles = (m + g.rows - 1) / g.rows;
    g.col_tiles = (n + g.cols - 1) / g.cols;
    g.per_part = g.row_tiles * g.col_tiles * batch;
    return g;
}

/* C (+)= the partial products of k parts 1.. (part p of matrix i at
 * part + ((p - 1) * batch + i) * m * n, rows of n), added in part order. */
static void gemm_add_parts(const gemm_grid *g, int m, int n, const float *part, float *C,
                           int ldc, long sc, int batch) {
    const long rows = (long)batch * m;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        float *c = C + r / m * sc + r % m * (long)ldc;
        for (long p = 1; p < g->k_parts; p++) {
            const float *s = part + ((p - 1) * rows + r) * n;
#pragma omp simd
            for (int j = 0; j < n; j++) c[j] += s[j];
        }
    }
}

void cpu_gemm(bt_backend *be, bool ta, bool tb, int m, int n, int k, float alpha, bt_ptr a,
              int lda, long sa, bt_ptr b, int ldb, long sb, float beta, bt_ptr c, int ldc,
              long sc, int batch) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    cpu_govern_threads(be->ctx); /* the GEMMs come often enough to look from here */
    if (k <= 0) {
        bt_gemm_k0(be, m, n, beta, c, ldc, sc, batch);
        return;
    }
    const float *A = cpu_f32(a), *B = cpu_f32(b);
    float *C = cpu_f32(c);
    const gemm_grid g = gemm_plan(m, n, k, batch);
    float *part = g.k_parts > 1 ? bt_partials_reserve(&((cpu_ctx *)be->ctx)->gemm_part,
                                                      (size_t)(g.k_parts - 1) * batch * m * n,
                                                      "cpu backend")
                                : NULL;
    const long tasks = g.per_part * g.k_parts;
#pragma omp parallel for schedule(static) if (tasks > 1)
    for (long t = 0; t < tasks; t++) {
        const long p = t / g.per_part, i = t % g.per_part / (g.row_tiles * g.col_tiles),
                   tile = t % (g.row_tiles * g.col_tiles);
        const int r0 = (int)(tile / g.col_tiles) * g.rows, c0 = (int)(tile % g.col_tiles) * g.cols,
                  k0 = (int)p * g.k_part;
        const int rows = m - r0 < g.rows ? m - r0 : g.rows, cols = n - c0 < g.cols ? n - c0 : g.cols,
                  ks = k - k0 < g.k_part ? k - k0 : g.k_part;
        /* rows r0.. and columns k0.. of op(A); rows k0.. and columns c0.. of op(B) */
        const float *a_tile = A + i * sa + (ta ? (long)k0 * lda + r0 : (long)r0 * lda + k0),
                    *b_tile = B + i * sb + (tb ? (long)c0 * ldb + k0 : (long)k0 * ldb + c0);
        float *c_tile = p == 0 ? C + i * sc + (long)r0 * ldc + c0
                               : part + (((p - 1) * batch + i) * m + r0) * (long)n + c0;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    rows, cols, ks, alpha, a_tile, lda, b_tile, ldb, p == 0 ? beta : 0.0f, c_tile,
                    p == 0 ? ldc : n);
    }
    if (part) gemm_add_parts(&g, m, n, part, C, ldc, sc, batch);
}
