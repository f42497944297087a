/* Mixed precision's 16-bit activation stash and 16-bit GEMMs, on the CPU
 * backend and (when built and present) OpenCL:
 *  - a model whose saved activations live in the 16-bit stash between forward
 *    and backward gives the same bits as one keeping them in fp32 buffers
 *    (rounded to 16 bits alike): losses, MLM and NSP logits and accumulated
 *    gradients, for bf16 and fp16, Post-LN, Pre-LN and Admin, with dropout on,
 *    every layer or LayerDrop's skips, over two micro-batches of different
 *    shapes accumulated into one gradient;
 *  - the stash takes the memory the layout promises: (L - 1) fp32 working
 *    sets fewer, L 16-bit copies and one fp32 layer input more;
 *  - the model's GEMMs through gemm16 (as on tensor cores) give the fp32
 *    GEMMs' bits when every operand holds 16-bit values, with the weights and
 *    the stashed activations read in 16 bits;
 *  - the 16-bit weights gemm16 reads are the fp32 weights cast, bit for bit,
 *    after every AdamW and LAMB step (LayerDrop's skips included) and after
 *    the weights are written from outside the model;
 *  - a backward given a tape other than the last forward's, or run twice,
 *    stops with an internal error instead of reading overwritten
 *    activations.
 * Parameters and inputs are fresh seeded random values (no zeros).
 * `test_stash16 DEVICE` runs only the 16-bit GEMM cases on DEVICE:
 * tests/cuda-emu.sh gives it the emulated A100, whose tensor cores make
 * gemm16 the model's own choice, with its copies made once (operand16). */
#include "model/bert.h"
#include "model/bert_act.h"
#include "model/optim.h"
#include "backends/common/half.h"
#include "backends/registry.h"
#include "backends/cpu/cpu_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { BMAX = 3, TMAX = 16, MMAX = 12, L = 4, V = 300 };
static int failures;

static void check(bool ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) failures++;
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double uniform01(void) { /* xorshift64*: the test's own input stream */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static bert_model *make(bt_backend *be, const bert_config *c) {
    char err[256];
    bert_model *m = bert_create(be, c, BMAX, TMAX, MMAX, err, sizeof err);
    if (!m) {
        fprintf(stderr, "FAIL: %s\n", err);
        exit(1);
    }
    return m;
}

/* One random micro-batch of B sequences of T tokens (the last padded). */
typedef struct {
    int32_t ids[BMAX * TMAX], types[BMAX * TMAX], mask[BMAX * TMAX], pos[MMAX], labels[MMAX],
        nsp[BMAX];
    bert_batch b;
} test_batch;

static void make_batch(test_batch *tb, int B, int T, int M) {
    for (int i = 0; i < B * T; i++) {
        bool real = i < (B - 1) * T || i % T < T - 3;
        tb->ids[i] = real ? 5 + (int)(uniform01() * (V - 5)) : 0;
        tb->types[i] = real && i % T >= T / 2;
        tb->mask[i] = real;
    }
    for (int k = 0; k < M; k++) {
        tb->pos[k] = (k * 5 + 1) % (B * T - 3);
        tb->labels[k] = 5 + (int)(uniform01() * (V - 5));
    }
    for (int b = 0; b < B; b++) tb->nsp[b] = uniform01() < 0.5;
    tb->b = (bert_batch){B, T, tb->ids, tb->types, tb->mask, M, tb->pos, tb->labels, tb->nsp, 0, 0};
}

/* Two micro-batches' forward and backward into one gradient; the first
 * micro-batch's MLM and NSP logits and both losses go to the outputs. */
static void run(bert_model *m, test_batch *mb, const unsigned char *skip, float *logits,
                float *nsp_logits, double loss[4]) {
    bert_zero_grads(m);
    for (int i = 0; i < 2; i++) {
        bert_pass pass = {.train = true, .seed = 11, .step = 3, .mlm_grad_scale = 0.05f,
                          .nsp_grad_scale = 0.2f, .layer_skip = skip,
                          .mlm_logits_out = i ? NULL : logits,
                          .nsp_logits_out = i ? NULL : nsp_logits};
        bert_tape tape;
        bert_stats st;
        bert_forward(m, &mb[i].b, &pass, &tape, &st);
        bert_backward(m, &mb[i].b, &pass, &tape);
        loss[2 * i] = st.mlm_loss_sum;
        loss[2 * i + 1] = st.nsp_loss_sum;
    }
}

static float *download_grads(bert_model *m) {
    float *h = malloc(m->n_params * 4);
    if (!h) exit(1);
    m->be->download(m->be, h, (bt_ptr){m->grads, 0}, m->n_params * 4);
    return h;
}

static size_t pad16(size_t n) { return (n + 15) / 16 * 16; }

static const char *norm_name(int norm) {
    return norm == BERT_NORM_PRE ? "Pre-LN" : norm == BERT_NORM_ADMIN ? "Admin" : "Post-LN";
}

/* A 4-layer model small enough to run every case on every backend. */
static bert_config small_config(int norm, bt_dtype storage, float dropout) {
    bert_config c;
    bert_preset("tiny", &c);
    c.vocab_size = V;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
    c.intermediate_size = 64;
    c.max_position_embeddings = 32;
    c.num_hidden_layers = L;
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = dropout;
    c.nsp = true;
    c.norm = norm;
    c.storage = storage;
    if (norm == BERT_NORM_ADMIN) bert_admin_closed_form(&c);
    return c;
}

static void run_case(bt_backend *be, int norm, bt_dtype storage) {
    const char *nn = norm_name(norm), *dn = storage == BT_BF16 ? "bf16" : "fp16";
    char what[256];
    bert_config c = small_config(norm, storage, 0.1f);
    bert_model *st = make(be, &c);
    c.fp32_stash = true;
    bert_model *fp = make(be, &c);
    if (!st->stash || fp->stash || st->act->stash_per_layer == 0) {
        check(false, "the stash is allocated only without fp32_stash");
        exit(1);
    }
    /* random parameters everywhere (LayerNorm and biases too) */
    float *h = malloc(st->n_params * 4);
    if (!h) exit(1);
    for (size_t i = 0; i < st->n_params; i++) h[i] = (float)(0.2 * uniform01() - 0.1);
    for (int i = 0; i < st->n_tensors; i++)
        if (strstr(st->tensors[i].name, "LayerNorm.weight"))
            for (size_t j = 0; j < st->tensors[i].numel; j++) h[st->tensors[i].offset + j] += 1.0f;
    be->upload(be, (bt_ptr){st->params, 0}, h, st->n_params * 4);
    be->upload(be, (bt_ptr){fp->params, 0}, h, st->n_params * 4);
    free(h);

    test_batch mb[2];
    make_batch(&mb[0], BMAX, TMAX, MMAX);
    make_batch(&mb[1], 2, 9, 5); /* smaller: the stash spans follow the batch */
    const unsigned char skips[3][L] = {{0, 0, 0, 0}, {0, 1, 0, 1}, {1, 0, 1, 0}};
    for (int k = 0; k < 3; k++) {
        const unsigned char *skip = k ? skips[k] : NULL;
        float ls[MMAX * V], lf[MMAX * V], ns[BMAX * 2], nf[BMAX * 2];
        double loss_s[4], loss_f[4];
        run(st, mb, skip, ls, ns, loss_s);
        run(fp, mb, skip, lf, nf, loss_f);
        float *gs = download_grads(st), *gf = download_grads(fp);
        size_t nonzero = 0;
        for (size_t i = 0; i < st->n_params; i++) nonzero += gs[i] != 0.0f;
        snprintf(what, sizeof what, "%s %s %s, skip %d%d%d%d: 16-bit stash == fp32 buffers "
                 "(bits): MLM loss %.6f, logits, NSP, %zu nonzero gradients of %zu", be->name,
                 nn, dn, skips[k][0], skips[k][1], skips[k][2], skips[k][3], loss_s[0] / MMAX,
                 nonzero, st->n_params);
        check(!memcmp(loss_s, loss_f, sizeof loss_s) && !memcmp(ls, lf, sizeof ls) &&
                  !memcmp(ns, nf, sizeof ns) && !memcmp(gs, gf, st->n_params * 4) &&
                  nonzero > st->n_params / 2,
              what);
        free(gs);
        free(gf);
    }
    /* evaluation (no backward follows: nothing is stashed, the layer inputs still
     * pass through xin) */
    for (int k = 0; k < 2; k++) {
        float ls[MMAX * V], lf[MMAX * V];
        bert_pass eval = {.mlm_logits_out = ls, .layer_skip = k ? skips[1] : NULL};
        bert_tape tape;
        bert_stats ss, sf;
        bert_forward(st, &mb[0].b, &eval, &tape, &ss);
        eval.mlm_logits_out = lf;
        bert_forward(fp, &mb[0].b, &eval, &tape, &sf);
        snprintf(what, sizeof what, "%s %s %s, evaluation%s: stash == fp32 buffers (bits), "
                 "MLM loss %.6f", be->name, nn, dn, k ? " skipping 1,3" : "",
                 ss.mlm_loss_sum / MMAX);
        check(ss.mlm_loss_sum == sf.mlm_loss_sum && !memcmp(ls, lf, sizeof ls), what);
    }
    /* memory: one working set of the big fields instead of L, L 16-bit copies, xin and
     * (not Pre-LN) emb16, the embeddings' output in 16 bits: N H 2-byte values */
    const size_t N = BMAX * TMAX, H = 32, I = 64, P = (size_t)BMAX * 4 * TMAX * TMAX;
    const size_t work = 5 * pad16(N * H) + pad16(N * 3 * H) + pad16(P) + 2 * pad16(N * I);
    const size_t bs = bert_activation_bytes(st), bf = bert_activation_bytes(fp);
    const size_t saved =
        (L - 1) * work * 4 - L * work * 2 - pad16(N * H) * 4 -
        (norm == BERT_NORM_PRE ? 0 : pad16((N * H + 1) / 2) * 4);
    snprintf(what, sizeof what, "%s %s %s: activations %zu bytes with the stash, %zu without "
             "(the layout's promise: %zu fewer)", be->name, nn, dn, bs, bf,
             saved);
    check(bf - bs == saved &&
              st->act->stash_per_layer == work,
          what);
    bert_free(st);
    bert_free(fp);
}

/* gemm16 (16-bit operands, fp32 accumulation) == the fp32 GEMMs when every
 * operand already holds 16-bit values: parameters rounded to the dtype,
 * dropout off (its output is the one operand not stored rounded). Without
 * tensor cores gemm16 is forced on: the model's plumbing of 16-bit GEMMs,
 * checkable anywhere. On a device with them (the emulated A100) it is the
 * device's own choice, with the 16-bit copies made once for two GEMMs
 * (operand16, the layer inputs from the stash), and the fp32 model's is
 * turned off. */
/* Without dropout: the model with gemm16 (auto on tensor cores, forced
 * elsewhere) gives the bits of fp32 GEMMs on the same 16-bit values. With
 * dropout, whose outputs are no 16-bit values, and only on 16-bit GEMM
 * hardware: the 16-bit copies made once (the cast fusion: operands cast
 * once, or written by the ops that make them) give the bits of gemm16
 * converting every fp32 operand itself (BERT_FUSE_CAST off). */
static void run_gemm16_case(bt_backend *be, int norm, bt_dtype storage, float dropout) {
    const char *nn = norm_name(norm), *dn = storage == BT_BF16 ? "bf16" : "fp16";
    char what[320];
    bt_device_info info;
    be->info(be, &info);
    const bool hw = storage == BT_F16 ? info.tensor_f16 : info.tensor_bf16;
    if (dropout > 0.0f && !hw) return;
    bert_config c = small_config(norm, storage, dropout);
    c.gemm16 = dropout > 0.0f ? 0 : hw ? -1 : 0; /* off, or auto: no tensor cores here */
    bert_model *plain = make(be, &c);
    if (dropout > 0.0f) plain->unfused |= BERT_FUSE_CAST;
    c.gemm16 = hw ? 0 : 1;
    bert_model *g16 = make(be, &c);
    float *h = malloc(plain->n_params * 4);
    if (!h) exit(1);
    for (size_t i = 0; i < plain->n_params; i++) h[i] = (float)(0.2 * uniform01() - 0.1);
    for (int i = 0; i < plain->n_tensors; i++)
        if (strstr(plain->tensors[i].name, "LayerNorm.weight"))
            for (size_t j = 0; j < plain->tensors[i].numel; j++) h[plain->tensors[i].offset + j] += 1.0f;
    bert_model *both[2] = {plain, g16};
    for (int k = 0; k < 2; k++) {
        be->upload(be, (bt_ptr){both[k]->params, 0}, h, plain->n_params * 4);
        be->round16(be, (bt_ptr){both[k]->params, 0}, storage, plain->n_params);
    }
    free(h);
    test_batch mb[2];
    make_batch(&mb[0], BMAX, TMAX, MMAX);
    make_batch(&mb[1], 2, 9, 5);
    const unsigned char skip[L] = {0, 1, 0, 0};
    for (int k = 0; k < 2; k++) {
        float lp[MMAX * V], lg[MMAX * V], np_[BMAX * 2], ng[BMAX * 2];
        double loss_p[4], loss_g[4];
        run(plain, mb, k ? skip : NULL, lp, np_, loss_p);
        run(g16, mb, k ? skip : NULL, lg, ng, loss_g);
        float *gp = download_grads(plain), *gg = download_grads(g16);
        const bool models = dropout > 0.0f ? plain->gemm16 && g16->gemm16 && plain->operand16 &&
                                                 g16->operand16 && !(g16->unfused & BERT_FUSE_CAST)
                                           : !plain->gemm16 && g16->gemm16 && !plain->operand16 &&
                                                 !g16->operand16 == !hw;
        snprintf(what, sizeof what, "%s %s %s%s%s: %s (bits): MLM loss %.6f, logits, NSP, "
                 "gradients; %s", be->name, nn, dn, dropout > 0.0f ? ", dropout 0.1" : "",
                 k ? ", skip 0100" : "",
                 dropout > 0.0f ? "16-bit copies made once == converted in each GEMM"
                                : "gemm16 == fp32 GEMMs on 16-bit values",
                 loss_p[0] / MMAX,
                 dropout > 0.0f ? "tensor cores, --unfused cast against the default"
                 : hw           ? "tensor cores: gemm16 off, and on with operands cast once"
                                : "gemm16 auto-off here, forced on");
        check(models && !memcmp(loss_p, loss_g, sizeof loss_p) &&
                  !memcmp(lp, lg, sizeof lp) && !memcmp(np_, ng, sizeof np_) &&
                  !memcmp(gp, gg, plain->n_params * 4),
              what);
        free(gp);
        free(gg);
    }
    bert_free(plain);
    bert_free(g16);
}

/* The model's 16-bit weights equal its fp32 weights cast to the storage dtype,
 * bit for bit: how many differ. */
static size_t stale_weights16(bert_model *m) {
    const size_t n = m->n_params;
    float *w = malloc(n * 4);
    uint16_t *h = malloc(n * 2);
    if (!w || !h) exit(1);
    m->be->download(m->be, w, (bt_ptr){m->params, 0}, n * 4);
    m->be->download(m->be, h, (bt_ptr){m->params16, 0}, n * 2);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &w[i], 4);
        bad += h[i] != (m->cfg.storage == BT_F16 ? f32_to_f16(u) : f32_to_bf16(u));
    }
    free(w);
    free(h);
    return bad;
}

/* gemm16's 16-bit weights follow the fp32 weights: written by each optimizer
 * step (AdamW or LAMB, one step with a layer skipped) and made again by the
 * first forward after the weights are written through bert_params_at. */
static void run_weights16_case(bt_backend *be, bt_optim_type type, bt_dtype storage) {
    char what[256], err[256];
    bert_config c = small_config(BERT_NORM_POST, storage, 0.1f);
    c.gemm16 = 1;
    bert_model *m = make(be, &c);
    const bt_optim_config oc = {.type = type, .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f,
                                .eps = 1e-6f, .weight_decay = 0.01f, .bias_correction = true,
                                .min_coeff = 0.01f, .max_coeff = 10.0f};
    bt_optimizer *o = optim_create(m, &oc, err, sizeof err);
    if (!o || !m->params16) {
        check(false, "optimizer and 16-bit weights allocated");
        exit(1);
    }
    bert_init_params(m, 7);
    test_batch mb[2];
    make_batch(&mb[0], BMAX, TMAX, MMAX);
    make_batch(&mb[1], 2, 9, 5);
    const unsigned char skip[L] = {0, 0, 1, 0};
    size_t bad[4];
    for (int s = 0; s < 3; s++) {
        float lg[MMAX * V], ng[BMAX * 2];
        double loss[4];
        run(m, mb, s == 1 ? skip : NULL, lg, ng, loss);
        optim_step(o, m, oc.lr, s == 1 ? skip : NULL, 0.5f, NULL);
        bad[s] = stale_weights16(m);
    }
    float *h = malloc(m->n_params * 4);
    if (!h) exit(1);
    for (size_t i = 0; i < m->n_params; i++) h[i] = (float)(0.2 * uniform01() - 0.1);
    be->upload(be, bert_params_at(m, 0), h, m->n_params * 4);
    free(h);
    float lg[MMAX * V], ng[BMAX * 2];
    double loss[4];
    run(m, mb, NULL, lg, ng, loss);
    bad[3] = stale_weights16(m);
    snprintf(what, sizeof what, "%s %s %s: 16-bit weights == fp32 weights cast after steps 1-3 "
             "(%zu, %zu, %zu differ) and after new weights (%zu)", be->name,
             type == OPT_LAMB ? "LAMB" : "AdamW", storage == BT_BF16 ? "bf16" : "fp16", bad[0],
             bad[1], bad[2], bad[3]);
    check(!bad[0] && !bad[1] && !bad[2] && !bad[3], what);
    optim_free(o, m);
    bert_free(m);
}

static void run_backend(bt_backend *be) {
    run_weights16_case(be, OPT_ADAMW, BT_BF16);
    run_weights16_case(be, OPT_LAMB, BT_F16);
    const int norms[3] = {BERT_NORM_POST, BERT_NORM_PRE, BERT_NORM_ADMIN};
    for (int i = 0; i < 3; i++) {
        run_case(be, norms[i], BT_BF16);
        run_case(be, norms[i], BT_F16);
        for (int d = 0; d < 2; d++) { /* without dropout, and with it (the backward's
                                          16-bit copies of dropped values) */
            run_gemm16_case(be, norms[i], BT_BF16, d ? 0.1f : 0.0f);
            run_gemm16_case(be, norms[i], BT_F16, d ? 0.1f : 0.0f);
        }
    }
}

/* In a child process: forward mb[0] and mb[1], then the backward of the
 * tape of `which` (0: the first forward's, now overwritten; 1: the last
 * one's, twice). True when the child exits 1 at the backward that must not
 * run, and not before. */
static bool misuse_stops(bt_backend *be, test_batch *mb, int which) {
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        bert_config c = small_config(BERT_NORM_POST, BT_F32, 0.0f);
        bert_model *m = make(be, &c);
        bert_pass pass = {.mlm_grad_scale = 0.05f, .nsp_grad_scale = 0.2f};
        bert_tape tape[2];
        bert_stats st;
        bert_forward(m, &mb[0].b, &pass, &tape[0], &st);
        bert_forward(m, &mb[1].b, &pass, &tape[1], &st);
        if (which == 1) bert_backward(m, &mb[1].b, &pass, &tape[1]); /* allowed once */
        bert_backward(m, &mb[which].b, &pass, &tape[which]);
        _exit(0);
    }
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 1;
}

static void check_tape_misuse(bt_backend *be) {
    test_batch mb[2];
    make_batch(&mb[0], 3, 16, 12);
    make_batch(&mb[1], 2, 9, 5);
    check(misuse_stops(be, mb, 0), "a backward with an earlier forward's tape stops");
    check(misuse_stops(be, mb, 1), "a second backward of one forward stops");
}

int main(int argc, char **argv) {
    if (argc > 1) { /* a device named: its 16-bit GEMM cases alone (the emulated A100) */
        char err[256];
        bool no_device = false;
        bt_backend *be = bt_backend_create(argv[1], NULL, err, sizeof err, &no_device);
        if (!be) {
            printf("FAIL %s: %s\n", argv[1], err);
            return 1;
        }
        const int norms[3] = {BERT_NORM_POST, BERT_NORM_PRE, BERT_NORM_ADMIN};
        for (int i = 0; i < 3; i++)
            for (int d = 0; d < 2; d++) {
                run_gemm16_case(be, norms[i], BT_BF16, d ? 0.1f : 0.0f);
                run_gemm16_case(be, norms[i], BT_F16, d ? 0.1f : 0.0f);
            }
        be->destroy(be);
        printf("%s: 16-bit GEMMs on %s (%d failures)\n", failures ? "FAIL" : "PASS", argv[1],
               failures);
        return failures != 0;
    }
    bt_backend *cpu = bt_cpu_backend_create(1, 1);
    if (!cpu) return 99;
    run_backend(cpu);
    check_tape_misuse(cpu);
    cpu->destroy(cpu);
    char err[256];
    bool no_device = false;
    bt_backend *cl = bt_backend_create("opencl:0:0", NULL, err, sizeof err, &no_device);
    if (cl) {
        run_backend(cl);
        cl->destroy(cl);
    } else {
        printf("skip OpenCL: %s\n", err);
    }
    printf("%s: 16-bit activation stash (%d failures)\n", failures ? "FAIL" : "PASS", failures);
    return failures != 0;
}
