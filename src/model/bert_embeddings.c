/* The embeddings (llm.c style, as bert.c's layers): word + position +
 * token type, LayerNorm and dropout, and their backward into the three
 * tables' gradients. */
#include "bert_internal.h"
#include "bert_ops.h"

#include <stdio.h>
#include <stdlib.h>

/* Embeddings: LayerNorm(word + position + type) -> dropout.  (N, H) in
 * emb_out, or with in16_only in emb16 alone (its stored values, which the
 * dropout writes as cast would: emb_out keeps the LayerNorm's output). */
void bert_embeddings_fwd(bert_run *r, bool in16_only) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    const bert_views *v = &m->v;
    const int B = r->bt->B, T = r->bt->T, H = m->cfg.hidden_size;
    const size_t n = (size_t)B * T * H;
    const float p = r->pass->train ? m->cfg.hidden_dropout_prob : 0.0f;
    const bt_rng_key key = dropout_key(r->pass, -1, SITE_EMB);
    be->embed_fwd(be, act(m, a->emb_sum), ints(m, a->ids), ints(m, a->types), par(m, v->wte),
                  par(m, v->wpe), par(m, v->wtt), B, T, H);
    op_layernorm(r, a->emb_out, a->emb_mean, a->emb_rstd, a->emb_sum, v->emb_ln_w, v->emb_ln_b,
                 B * T);
    if (!in16_only) {
        op_dropout(r, a->emb_out, n, (size_t)T * H, p, key, true);
        return;
    }
    const bt_dtype s = (bt_dtype)m->cfg.storage;
    if (p > 0.0f)
        be->dropout(be, BT_NO_PTR, act(m, a->emb_out), n, (size_t)T * H, r->bt->first_sample, p,
                    key, BT_F32, act(m, a->emb16), s);
    else
        be->cast(be, act(m, a->emb16), s, act(m, a->emb_out), BT_F32, n);
}

/* Backward of bert_embeddings_fwd: dA holds d emb_out, or with r->pending_join
 * d emb_out less the first layer's attention branch's share in dH (in 16
 * bits where r->pending_join16), which the dropout adds as it reads (one
 * op: add_dropout). Its dropout's output is not stored: the LayerNorm
 * backward, its one reader, rounds it as it reads it (the same bits). */
void bert_embeddings_bwd(bert_run *r) {
    const bert_model *m = r->m;
    const struct bert_act_layout *a = m->act;
    const bert_views *v = &m->v;
    const int B = r->bt->B, T = r->bt->T, H = m->cfg.hidden_size;
    const float p = r->pass->train ? m->cfg.hidden_dropout_prob : 0.0f;
    const size_t n = (size_t)B * T * H;
    const bt_rng_key key = dropout_key(r->pass, -1, SITE_EMB);
    if (r->pending_join) {
        if (r->dA16) { /* the model's bookkeeping gone wrong: the first layer keeps dA in fp32 */
            fprintf(stderr, "bertrain: internal error: the embeddings' join with dA in dA16\n");
            exit(1);
        }
        const bt_dtype s = (bt_dtype)m->cfg.storage;
        m->be->add_dropout(m->be, act(m, a->dA), act(m, a->dA), act(m, a->dH),
                           r->pending_join16 ? s : BT_F32, n, (size_t)T * H, r->bt->first_sample,
                           p, key, s);
        r->pending_join = false;
    } else {
        op_dropout(r, a->dA, n, (size_t)T * H, p, key, false);
    }
    op_layernorm_bwd(r, a->dA, v->emb_ln_w, v->emb_ln_b, a->dA, a->emb_sum, a->emb_mean,
                     a->emb_rstd, B * T, NULL);
    m->be->embed_bwd(m->be, grd(m, v->wte), grd(m, v->wpe), grd(m, v->wtt), act(m, a->dA),
                     ints(m, a->ids), bert_links(m, a->ids), ints(m, a->types), B, T, H,
                     m->cfg.vocab_size, m->cfg.type_vocab_size, m->cfg.pad_id);
}
