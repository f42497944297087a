/* The composed fallbacks of the fused ops (backends/common/composed.c): on
 * every backend here (the CPU, and OpenCL's first device when built and
 * present), each of the seven fused ops, its slot emptied and filled by
 * bt_compose_missing, gives the bits of the backend's own fused op on the
 * same inputs: every output, including the inputs a fused op updates (y of
 * bias_gelu_fwd, dbias, its 16-bit copies and 16-bit inputs), with dropout
 * on and the in-place forms (bias_gelu_fwd's second form: y absent, its
 * pre-activation given in 16 bits), residual_layernorm_fwd again with its
 * residual in 16 bits, and add_dropout with b in 16 bits. */
#include "backends/common/composed.h"
#include "backends/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* rows a whole number of dropout samples (5 rows and 7 rows), as backend.h's
 * dropout asks */
enum { ROWS = 35, COLS = 19, B = 2, H = 3, T = 11, NT = 10 };
static int failures;

/* The tensors of one case: host values in, device buffers, host values out. */
typedef struct {
    size_t n[NT];
    float *host[NT];
    bt_buffer *buf[NT];
} tensors;

static float uniform(uint64_t *s) { /* xorshift64*: the test's own inputs */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (float)((double)((*s * 2685821657736338717ull) >> 11) / 9007199254740992.0) * 2 - 1;
}

static void setup(bt_backend *be, tensors *t, const size_t *n, int nt, int int_tensor) {
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < nt; i++) {
        t->n[i] = n[i];
        t->host[i] = malloc(n[i] * 4);
        for (size_t j = 0; j < n[i]; j++) t->host[i][j] = uniform(&s);
        if (i == int_tensor) /* a key mask: ones, a few zeros */
            for (size_t j = 0; j < n[i]; j++) ((int32_t *)t->host[i])[j] = j % 5 != 3;
        t->buf[i] = be->alloc(be, n[i] * 4);
        be->upload(be, (bt_ptr){t->buf[i], 0}, t->host[i], n[i] * 4);
    }
}

/* Download every tensor into out (one block) and free the case. */
static unsigned char *finish(bt_backend *be, tensors *t, int nt, size_t *bytes) {
    size_t total = 0;
    for (int i = 0; i < nt; i++) total += t->n[i] * 4;
    unsigned char *out = malloc(total), *at = out;
    be->sync(be);
    for (int i = 0; i < nt; i++) {
        be->download(be, at, (bt_ptr){t->buf[i], 0}, t->n[i] * 4);
        at += t->n[i] * 4;
        be->free(be, t->buf[i]);
        free(t->host[i]);
    }
    *bytes = total;
    return out;
}

#define P(i) ((bt_ptr){t.buf[i], 0})

/* One run of fused op `op` (0..5; 6: residual_layernorm_fwd with a 16-bit
 * residual; 7: add_dropout) on be as its table is now. */
static unsigned char *run(bt_backend *be, int op, bool inplace, size_t *bytes) {
    const size_t rc = (size_t)ROWS * COLS, att = (size_t)B * H * T * T;
    const bt_rng_key key = {1234, 5};
    tensors t;
    switch (op) {
    case 0: { /* bias_gelu_fwd: out, y, bias, and out's and y's 16-bit copies */
        const size_t n[] = {rc, rc, COLS, rc, rc};
        setup(be, &t, n, 5, -1);
        /* rounded to bf16 storage (never in place: see below); the "in place"
         * run: y absent, the pre-activation given in y16 (y's values in bf16) */
        if (inplace) be->cast(be, P(4), BT_BF16, P(1), BT_F32, rc);
        be->bias_gelu_fwd(be, P(0), inplace ? BT_NO_PTR : P(1), P(2), ROWS, COLS, BT_BF16, P(3),
                          P(4), !inplace);
        return finish(be, &t, 5, bytes);
    }
    case 1: { /* bias_gelu_bwd: dx, dbias, dout, x, and x and dout in f16 (read out of
                 place) with dx's f16 copy (dout's after it) */
        const size_t n[] = {rc, COLS, rc, rc, rc, rc};
        setup(be, &t, n, 6, -1);
        const bt_ptr dout16 = {t.buf[5], rc * 2};
        be->cast(be, P(4), BT_F16, P(3), BT_F32, rc);
        be->cast(be, dout16, BT_F16, P(2), BT_F32, rc);
        be->bias_gelu_bwd(be, inplace ? P(2) : P(0), P(1), inplace ? P(2) : dout16,
                          inplace ? P(3) : P(4), ROWS, COLS, inplace ? BT_F32 : BT_F16,
                          inplace ? BT_F32 : BT_F16, inplace ? BT_F32 : BT_F16,
                          inplace ? BT_NO_PTR : P(5), true);
        return finish(be, &t, 6, bytes);
    }
    case 2: { /* bias_dropout_add: out, y, bias, resid */
        const size_t n[] = {rc, rc, COLS, rc};
        setup(be, &t, n, 4, -1);
        be->bias_dropout_add(be, inplace ? P(3) : P(0), P(1), P(2), P(3), ROWS, COLS,
                             inplace ? BT_F32 : BT_BF16, 5 * COLS, 3, 0.25f, key);
        return finish(be, &t, 4, bytes);
    }
    case 3: { /* residual_layernorm_fwd: sum, out, mean, rstd, y, bias, resid, gamma, beta,
                 and (bf16, in place) the 16-bit copies of sum and out after them */
        const size_t n[] = {rc, rc, ROWS, ROWS, rc, COLS};
        setup(be, &t, n, 6, -1);
        const size_t more_n = 2 * rc + 2 * COLS; /* resid, gamma, beta, the copies */
        bt_buffer *more = be->alloc(be, more_n * 4);
        float *h = malloc(more_n * 4);
        uint64_t s = 7;
        for (size_t j = 0; j < more_n; j++) h[j] = uniform(&s);
        be->upload(be, (bt_ptr){more, 0}, h, more_n * 4);
        const bt_ptr resid = {more, 0}, gamma = {more, rc * 4}, beta = {more, (rc + COLS) * 4},
                     sum16 = {more, (rc + 2 * COLS) * 4}, out16 = {more, (rc + 2 * COLS) * 4 + rc * 2};
        be->residual_layernorm_fwd(be, inplace ? resid : P(0), P(1), P(2), P(3), P(4), P(5), resid,
                                   gamma, beta, ROWS, COLS, 1e-5f, inplace ? BT_BF16 : BT_F32,
                                   7 * COLS, 0, 0.1f, key, inplace ? sum16 : BT_NO_PTR,
                                   inplace ? out16 : BT_NO_PTR, true, BT_F32, true);
        be->download(be, h, (bt_ptr){more, 0}, more_n * 4);
        be->free(be, more);
        size_t b;
        unsigned char *o = finish(be, &t, 6, &b), *all = malloc(b + more_n * 4);
        memcpy(all, o, b);
        memcpy(all + b, h, more_n * 4);
        free(o);
        free(h);
        *bytes = b + more_n * 4;
        return all;
    }
    case 6: { /* residual_layernorm_fwd with the residual in f16 (its values' copy, read
                 out of place) and the copies of sum and out: sum, out, mean, rstd, y,
                 bias, resid, gamma, beta, then the three 16-bit tensors */
        const size_t n[] = {rc, rc, ROWS, ROWS, rc, COLS, rc, COLS, COLS, (3 * rc + 1) / 2};
        setup(be, &t, n, 10, -1);
        const bt_ptr resid16 = P(9), sum16 = {t.buf[9], rc * 2}, out16 = {t.buf[9], rc * 4};
        be->cast(be, resid16, BT_F16, P(6), BT_F32, rc);
        be->residual_layernorm_fwd(be, P(0), P(1), P(2), P(3), P(4), P(5), resid16, P(7), P(8),
                                   ROWS, COLS, 1e-5f, BT_F16, 7 * COLS, 0, 0.1f, key, sum16,
                                   out16, true, BT_F16, true);
        return finish(be, &t, 10, bytes);
    }
    case 7: { /* add_dropout: out, a, b; bf16 storage with b in bf16 (its values' copy
                 after b) out of place, fp32 storage in place */
        const size_t n[] = {rc, rc, rc, (rc + 1) / 2};
        setup(be, &t, n, 4, -1);
        if (!inplace) be->cast(be, P(3), BT_BF16, P(2), BT_F32, rc);
        be->add_dropout(be, inplace ? P(1) : P(0), P(1), inplace ? P(2) : P(3),
                        inplace ? BT_F32 : BT_BF16, rc, 5 * COLS, 3, 0.25f, key,
                        inplace ? BT_F32 : BT_BF16);
        return finish(be, &t, 4, bytes);
    }
    case 4: { /* softmax_dropout_fwd: dropped, probs, scores, key_mask, and (bf16) the
                 16-bit copies of dropped and probs */
        const size_t n[] = {att, att, att, (size_t)B * T, att};
        setup(be, &t, n, 5, 3);
        /* rounded to bf16 storage out of place, not rounded in place */
        const bt_ptr copies = P(4), probs16 = {t.buf[4], att * 2};
        be->softmax_dropout_fwd(be, P(0), inplace ? P(2) : P(1), P(2), P(3), B, H, T, 0.3f,
                                inplace ? BT_F32 : BT_BF16, 2, 0.1f, key,
                                inplace ? BT_NO_PTR : copies, inplace ? BT_NO_PTR : probs16, true);
        return finish(be, &t, 5, bytes);
    }
    default: { /* dropout_softmax_bwd: dscores, dprobs, probs, and (bf16) probs read
                  in 16 bits and the 16-bit copy of dscores */
        const size_t n[] = {att, att, att, att};
        setup(be, &t, n, 4, -1);
        const bt_ptr probs16 = P(3), ds16 = {t.buf[3], att * 2};
        if (!inplace) be->cast(be, probs16, BT_BF16, P(2), BT_F32, att);
        be->dropout_softmax_bwd(be, inplace ? P(1) : P(0), P(1), inplace ? P(2) : probs16, B, H,
                                T, 0.3f, inplace ? BT_F32 : BT_BF16, 2, 0.1f, key,
                                inplace ? BT_F32 : BT_BF16, inplace ? BT_NO_PTR : ds16, true);
        return finish(be, &t, 4, bytes);
    }
    }
}

static void check_backend(bt_backend *be, const char *spec) {
    static const char *const names[] = {"bias_gelu_fwd",
                                        "bias_gelu_bwd",
                                        "bias_dropout_add",
                                        "residual_layernorm_fwd",
                                        "softmax_dropout_fwd",
                                        "dropout_softmax_bwd",
                                        "residual_layernorm_fwd, residual in f16,",
                                        "add_dropout"};
    const bt_backend own = *be; /* its fused ops */
    for (int op = 0; op < 8; op++)
        for (int inplace = 0; inplace < 2; inplace++) {
            /* a 16-bit residual may not alias the sum (bias_gelu_fwd's out may
             * not alias y: its second run is the one with y given in 16 bits) */
            if (op == 6 && inplace) continue;
            size_t nf, nc;
            *be = own;
            unsigned char *fused = run(be, op, inplace, &nf);
            be->bias_gelu_fwd = NULL, be->bias_gelu_bwd = NULL, be->bias_dropout_add = NULL;
            be->residual_layernorm_fwd = NULL, be->softmax_dropout_fwd = NULL;
            be->dropout_softmax_bwd = NULL, be->add_dropout = NULL;
            const int filled = bt_compose_missing(be);
            unsigned char *composed = run(be, op, inplace, &nc);
            const bool same = filled == 7 && nf == nc && memcmp(fused, composed, nf) == 0;
            if (!same && nf == nc) /* where: the first byte that differs */
                for (size_t j = 0; j < nf; j++)
                    if (fused[j] != composed[j]) {
                        printf("     first difference at byte %zu of %zu: float %zu, %g against %g\n",
                               j, nf, j / 4, (double)((float *)fused)[j / 4],
                               (double)((float *)composed)[j / 4]);
                        size_t cnt = 0, last = 0;
                        for (size_t k = j / 4; k < nf / 4; k++)
                            if (((float *)fused)[k] != ((float *)composed)[k]) { cnt++; last = k; }
                        printf("     %zu floats differ, the last at %zu\n", cnt, last);
                        break;
                    }
            printf("%s %s: composed %s%s gives the fused op's bits (%d slots filled)\n",
                   same ? "ok  " : "FAIL", spec, names[op],
                   !inplace ? "" : op == 0 ? " (y given in bf16)" : " (in place)", filled);
            failures += !same;
            free(fused);
            free(composed);
        }
    *be = own;
}

int main(void) {
    const char *specs[] = {"cpu", "opencl:0:0"};
    int ran = 0;
    for (int i = 0; i < 2; i++) {
        char err[256];
        bool nodev = false;
        bt_backend *be = bt_backend_create(specs[i], NULL, err, sizeof err, &nodev);
        if (!be) {
            printf("skip %s: %s\n", specs[i], err);
            continue;
        }
        check_backend(be, specs[i]);
        be->destroy(be);
        ran++;
    }
    if (!ran) {
        printf("FAIL: no backend to run on\n");
        return 1;
    }
    printf("%s: %d failure(s) on %d backend(s)\n", failures ? "FAIL" : "PASS", failures, ran);
    return failures ? 1 : 0;
}
