#!/usr/bin/python3
"""Independent PyTorch (float64) reference for bertrain's BERT pretraining.

Writes two safetensors fixtures that the C tests compare against:

  torch_ref_nsp.safetensors  V=103 H=48 L=2 NH=4 I=80  P=24 TV=2 eps=1e-12, NSP head, B=4 T=20
  torch_ref_mlm.safetensors  V=61  H=32 L=3 NH=2 I=72  P=16 TV=2 eps=1e-5,  MLM only, B=3 T=13

Each file holds, for a seeded random model and batch:
  init.<param>          initial weights (HF BertForPreTraining names; decoder tied to word embeddings)
  batch.*               input_ids, token_type_ids, attention_mask, mlm_positions (flat b*T+t),
                        mlm_labels, nsp_labels (NSP file only)                          [I32]
  out.*                 mlm_logits (Nm,V), nsp_logits (B,2), loss, mlm_loss, nsp_loss
  grad.<param>          d loss / d param at the initial weights
  adamw.losses / lamb.losses      loss before each of 10 optimizer steps
  adamw.final.<param> / lamb.final.<param>   weights after the 10 steps
  __metadata__          config, batch shape, optimizer hyper-parameters (strings; floats via repr)

The model and the optimizers are written by hand with plain torch ops in float64 (no
transformers, no torch.optim), so they are an oracle independent of the C code.  All math
starts from the float32-rounded values that are stored, so the C side sees exactly the same
inputs.  Everything is stored as F32 (I32 for integer tensors).

Self-checks run every time: central finite differences on ~20 parameter entries per fixture
(including word_embeddings row 0 and LayerNorm weights) and a cross-check of the encoder
against torch.nn.TransformerEncoderLayer (Post-LN, exact gelu).

Usage: /usr/bin/python3 tests/python/torch_ref.py [--out DIR]     (default DIR: tests/fixtures)
"""
import argparse
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)  # fixed reduction order -> byte-identical output
DT = torch.float64

CONFIGS = {
    "torch_ref_nsp": dict(vocab_size=103, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=80, max_position_embeddings=24, type_vocab_size=2,
                          layer_norm_eps=1e-12, nsp=True, batch=4, seq_len=20, seed=1234),
    "torch_ref_mlm": dict(vocab_size=61, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                          intermediate_size=72, max_position_embeddings=16, type_vocab_size=2,
                          layer_norm_eps=1e-5, nsp=False, batch=3, seq_len=13, seed=5678),
    # Pre-LN (model.norm "pre"): LayerNorm before each block, one after the last layer
    "torch_ref_pre": dict(vocab_size=71, hidden_size=40, num_hidden_layers=3, num_attention_heads=5,
                          intermediate_size=56, max_position_embeddings=20, type_vocab_size=2,
                          layer_norm_eps=1e-6, nsp=True, batch=3, seq_len=17, seed=9012, norm="pre"),
    # Admin (model.norm "admin"): Post-LN with the residual scaled, LN(omega_i x + f_i(x)),
    # omega per sublayer (attention 2l, feed-forward 2l+1), distinct so an index slip shows
    "torch_ref_admin": dict(vocab_size=67, hidden_size=36, num_hidden_layers=3, num_attention_heads=3,
                            intermediate_size=60, max_position_embeddings=18, type_vocab_size=2,
                            layer_norm_eps=1e-6, nsp=True, batch=3, seq_len=15, seed=3456, norm="admin",
                            admin_omega=[1.0, 1.75, 2.375, 2.8125, 3.25, 3.5625]),
    # the extra objectives: z-loss on the MLM logits (z_loss * mean lse^2) and the
    # attention-logit penalty (attn_penalty * mean of every (QK^T/sqrt(d))^2 of every layer)
    "torch_ref_reg": dict(vocab_size=59, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=48, max_position_embeddings=16, type_vocab_size=2,
                          layer_norm_eps=1e-6, nsp=True, batch=3, seq_len=14, seed=7890,
                          z_loss=0.05, attn_penalty=0.02),
}
ADAMW = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.01, clip=1.0)
LAMB = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.01, min_coeff=0.01,
            max_coeff=10.0, clip=0.0)
STEPS = 10
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4


# ----------------------------------------------------------------------------- parameters
def param_shapes(c):
    V, H, L, I = c["vocab_size"], c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
    s = {"bert.embeddings.word_embeddings.weight": (V, H),
         "bert.embeddings.position_embeddings.weight": (c["max_position_embeddings"], H),
         "bert.embeddings.token_type_embeddings.weight": (c["type_vocab_size"], H),
         "bert.embeddings.LayerNorm.weight": (H,), "bert.embeddings.LayerNorm.bias": (H,)}
    for i in range(L):
        p = f"bert.encoder.layer.{i}."
        for n in ("attention.self.query", "attention.self.key", "attention.self.value",
                  "attention.output.dense"):
            s[p + n + ".weight"], s[p + n + ".bias"] = (H, H), (H,)
        s[p + "attention.output.LayerNorm.weight"] = s[p + "attention.output.LayerNorm.bias"] = (H,)
        s[p + "intermediate.dense.weight"], s[p + "intermediate.dense.bias"] = (I, H), (I,)
        s[p + "output.dense.weight"], s[p + "output.dense.bias"] = (H, I), (H,)
        s[p + "output.LayerNorm.weight"] = s[p + "output.LayerNorm.bias"] = (H,)
    if c.get("norm") == "pre":
        s["bert.encoder.LayerNorm.weight"] = s["bert.encoder.LayerNorm.bias"] = (H,)
    if c["nsp"]:
        s["bert.pooler.dense.weight"], s["bert.pooler.dense.bias"] = (H, H), (H,)
        s["cls.seq_relationship.weight"], s["cls.seq_relationship.bias"] = (2, H), (2,)
    s["cls.predictions.transform.dense.weight"], s["cls.predictions.transform.dense.bias"] = (H, H), (H,)
    s["cls.predictions.transform.LayerNorm.weight"] = (H,)
    s["cls.predictions.transform.LayerNorm.bias"] = (H,)
    s["cls.predictions.bias"] = (V,)
    return s


def f32(t):
    """Round to float32 (what is stored / what C loads), compute in float64."""
    return t.to(torch.float32).to(DT)


def init_params(c, g):
    params = {}
    for name, shape in param_shapes(c).items():
        z = torch.randn(shape, generator=g, dtype=DT)
        if "LayerNorm.weight" in name:
            t = 1.0 + 0.1 * z
        elif "LayerNorm.bias" in name:
            t = 0.05 * z
        elif name.endswith("bias"):
            t = 0.02 * z
        else:
            t = 0.05 * z
        params[name] = f32(t)
    return params


def no_decay(name):
    return "bias" in name or "LayerNorm" in name


# ----------------------------------------------------------------------------- batch
def make_batch(c, g):
    B, T, V = c["batch"], c["seq_len"], c["vocab_size"]
    ri = lambda lo, hi, shape=(): torch.randint(lo, hi, shape, generator=g)
    ids = ri(5, V, (B, T))
    ids[:, 0] = CLS
    # sequence 0 is full length, all others are padded at the end (>= 5 real tokens)
    lengths = [T] + [int(ri(5, T)) for _ in range(B - 1)]
    mask = torch.zeros(B, T, dtype=torch.long)
    types = torch.zeros(B, T, dtype=torch.long)
    positions = []
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
        ids[b, n:] = PAD
        types[b, (n + 1) // 2:n] = 1  # first ceil(n/2) real tokens (incl. CLS) segment 0
        k = max(1, round(0.2 * (n - 1)))  # ~20% of the real non-CLS tokens
        chosen = 1 + torch.randperm(n - 1, generator=g)[:k]
        positions += [b * T + int(t) for t in chosen]
    positions = torch.tensor(sorted(positions), dtype=torch.long)
    labels = ids.view(-1)[positions].clone()
    flat = ids.view(-1)
    flat[positions] = MASK
    for j in torch.randperm(len(positions), generator=g)[:2].tolist():  # two get a random id
        r = int(ri(5, V - 1))
        flat[positions[j]] = r if r < labels[j] else r + 1  # differs from the label
    batch = dict(input_ids=ids, token_type_ids=types, attention_mask=mask,
                 mlm_positions=positions, mlm_labels=labels)
    if c["nsp"]:
        batch["nsp_labels"] = ri(0, 2, (B,))
    return batch


# ----------------------------------------------------------------------------- model
def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased, as torch LayerNorm
    return (x - mu) / torch.sqrt(var + eps) * w + b


def linear(x, p, name):
    return x @ p[name + ".weight"].t() + p[name + ".bias"]


def encoder(p, c, batch, scores_sq=None):
    B, T = batch["input_ids"].shape
    H, NH, eps = c["hidden_size"], c["num_attention_heads"], c["layer_norm_eps"]
    d = H // NH
    word = p["bert.embeddings.word_embeddings.weight"]
    x = (F.embedding(batch["input_ids"], word, padding_idx=PAD)  # no grad to row 0 from lookup
         + p["bert.embeddings.position_embeddings.weight"][:T]
         + p["bert.embeddings.token_type_embeddings.weight"][batch["token_type_ids"]])
    x = layer_norm(x, p["bert.embeddings.LayerNorm.weight"], p["bert.embeddings.LayerNorm.bias"], eps)
    neg = torch.zeros(B, 1, 1, T, dtype=DT)
    neg[batch["attention_mask"].view(B, 1, 1, T) == 0] = torch.finfo(DT).min
    heads = lambda y: y.view(B, T, NH, d).transpose(1, 2)  # (B, NH, T, d)
    for i in range(c["num_hidden_layers"]):
        pre = f"bert.encoder.layer.{i}."
        q, k, v = (heads(linear(x, p, pre + "attention.self." + n)) for n in ("query", "key", "value"))
        if c.get("norm") == "pre":  # x + f(LN(x)) per block
            ln = lambda y, n: layer_norm(y, p[pre + n + ".weight"], p[pre + n + ".bias"], eps)
            h = ln(x, "attention.output.LayerNorm")
            q, k, v = (heads(linear(h, p, pre + "attention.self." + n)) for n in ("query", "key", "value"))
            probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + neg, dim=-1)
            x = x + linear((probs @ v).transpose(1, 2).reshape(B, T, H), p, pre + "attention.output.dense")
            x = x + linear(gelu(linear(ln(x, "output.LayerNorm"), p, pre + "intermediate.dense")), p,
                           pre + "output.dense")
            continue
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        if scores_sq is not None:
            scores_sq.append((scores ** 2).sum())
        probs = torch.softmax(scores + neg, dim=-1)
        ctx = (probs @ v).transpose(1, 2).reshape(B, T, H)
        w_attn, w_ffn = c["admin_omega"][2 * i:2 * i + 2] if c.get("norm") == "admin" else (1.0, 1.0)
        a = layer_norm(w_attn * x + linear(ctx, p, pre + "attention.output.dense"),
                       p[pre + "attention.output.LayerNorm.weight"],
                       p[pre + "attention.output.LayerNorm.bias"], eps)
        f = linear(gelu(linear(a, p, pre + "intermediate.dense")), p, pre + "output.dense")
        x = layer_norm(w_ffn * a + f, p[pre + "output.LayerNorm.weight"], p[pre + "output.LayerNorm.bias"], eps)
    if c.get("norm") == "pre":
        x = layer_norm(x, p["bert.encoder.LayerNorm.weight"], p["bert.encoder.LayerNorm.bias"], eps)
    return x


def forward(p, c, batch):
    B, T = batch["input_ids"].shape
    scores_sq = []
    hid = encoder(p, c, batch, scores_sq)
    h = hid.reshape(B * T, -1)[batch["mlm_positions"]]
    h = gelu(linear(h, p, "cls.predictions.transform.dense"))
    h = layer_norm(h, p["cls.predictions.transform.LayerNorm.weight"],
                   p["cls.predictions.transform.LayerNorm.bias"], c["layer_norm_eps"])
    mlm_logits = h @ p["bert.embeddings.word_embeddings.weight"].t() + p["cls.predictions.bias"]
    ce = lambda logits, y: -torch.log_softmax(logits, -1).gather(1, y.view(-1, 1)).mean()
    out = {"mlm_logits": mlm_logits, "mlm_loss": ce(mlm_logits, batch["mlm_labels"])}
    out["loss"] = out["mlm_loss"]
    if c.get("z_loss"):  # z-loss: z * mean over MLM rows of logsumexp^2
        out["loss"] = out["loss"] + c["z_loss"] * (torch.logsumexp(mlm_logits, -1) ** 2).mean()
    if c.get("attn_penalty"):  # mean over every score of every layer (masked keys too)
        n = c["num_hidden_layers"] * B * c["num_attention_heads"] * T * T
        out["loss"] = out["loss"] + c["attn_penalty"] * sum(scores_sq) / n
    if c["nsp"]:
        pooled = torch.tanh(linear(hid[:, 0], p, "bert.pooler.dense"))
        out["nsp_logits"] = linear(pooled, p, "cls.seq_relationship")
        out["nsp_loss"] = ce(out["nsp_logits"], batch["nsp_labels"])
        out["loss"] = out["loss"] + out["nsp_loss"]
    return out


def loss_and_grads(p, c, batch):
    leaves = {n: t.detach().clone().requires_grad_(True) for n, t in p.items()}
    out = forward(leaves, c, batch)
    out["loss"].backward()
    return out, {n: t.grad.detach() for n, t in leaves.items()}


# ----------------------------------------------------------------------------- optimizers
def clip_(grads, max_norm):
    if max_norm <= 0:
        return
    total = torch.sqrt(sum((g * g).sum() for g in grads.values()))
    coef = max_norm / (total + 1e-6)
    if coef < 1:
        for g in grads.values():
            g.mul_(coef)


def adamw_step(p, g, st, t, h):
    bc1, bc2 = 1 - h["beta1"] ** t, 1 - h["beta2"] ** t
    for n in p:
        wd = 0.0 if no_decay(n) else h["weight_decay"]
        m = st[n][0].mul_(h["beta1"]).add_((1 - h["beta1"]) * g[n])
        v = st[n][1].mul_(h["beta2"]).add_((1 - h["beta2"]) * g[n] * g[n])
        w = p[n] * (1 - h["lr"] * wd)
        p[n] = w - h["lr"] / bc1 * m / (torch.sqrt(v) / math.sqrt(bc2) + h["eps"])


def lamb_step(p, g, st, t, h):
    bc1, bc2 = 1 - h["beta1"] ** t, 1 - h["beta2"] ** t
    for n in p:
        wd = 0.0 if no_decay(n) else h["weight_decay"]
        m = st[n][0].mul_(h["beta1"]).add_((1 - h["beta1"]) * g[n])
        v = st[n][1].mul_(h["beta2"]).add_((1 - h["beta2"]) * g[n] * g[n])
        u = (m / bc1) / (torch.sqrt(v / bc2) + h["eps"]) + wd * p[n]
        wn, un = float(p[n].norm()), float(u.norm())
        trust = wn / un if wn > 0 and un > 0 else 1.0
        trust = min(max(trust, h["min_coeff"]), h["max_coeff"])
        p[n] = p[n] - h["lr"] * trust * u


def train(p0, c, batch, step_fn, h):
    p = {n: t.clone() for n, t in p0.items()}
    st = {n: (torch.zeros_like(t), torch.zeros_like(t)) for n, t in p.items()}
    losses = []
    for t in range(1, STEPS + 1):
        out, g = loss_and_grads(p, c, batch)
        losses.append(float(out["loss"]))
        clip_(g, h["clip"])
        step_fn(p, g, st, t, h)
    return torch.tensor(losses, dtype=DT), p


# ----------------------------------------------------------------------------- self-checks
def fd_check(p, c, batch, grads, g, n_checks=20, eps=1e-4):
    names = sorted(p)
    # the [PAD] row (0) gets no gradient from the lookup (padding_idx) but still feeds the
    # padded positions; with the attention-logit penalty, whose mean covers padded positions
    # too, finite differences see that path, so that fixture checks row 1 instead
    pad_row = 1 if c.get("attn_penalty") else 0
    picks = [("bert.embeddings.word_embeddings.weight", (pad_row, int(torch.randint(c["hidden_size"], (1,), generator=g)))),
             ("bert.embeddings.LayerNorm.weight", (3,)),
             ("bert.encoder.layer.0.attention.output.LayerNorm.weight", (5,))]
    if c.get("norm") == "pre":
        picks.append(("bert.encoder.LayerNorm.weight", (2,)))
    while len(picks) < n_checks:
        n = names[int(torch.randint(len(names), (1,), generator=g))]
        idx = tuple(int(torch.randint(s, (1,), generator=g)) for s in p[n].shape)
        picks.append((n, idx))
    worst = 0.0
    for n, idx in picks:
        vals = []
        for s in (+1, -1):
            q = dict(p)
            q[n] = p[n].clone()
            q[n][idx] += s * eps
            with torch.no_grad():
                vals.append(float(forward(q, c, batch)["loss"]))
        fd, an = (vals[0] - vals[1]) / (2 * eps), float(grads[n][idx])
        rel = abs(fd - an) / max(abs(fd), abs(an), 1e-6)
        worst = max(worst, rel)
    return len(picks), worst


def encoder_crosscheck(p, c, batch):
    """Compare our encoder with torch.nn.TransformerEncoderLayer (exact gelu; Post-LN, or
    norm_first=True and a final torch LayerNorm for Pre-LN). Admin has no torch module: its
    residual scale is checked by the finite differences and by folding in tests/admin.sh."""
    if c.get("norm") == "admin":
        return 0.0
    pre_ln = c.get("norm") == "pre"
    H, B, T = c["hidden_size"], *batch["input_ids"].shape
    q = dict(p)
    q_emb = layer_norm(p["bert.embeddings.word_embeddings.weight"][batch["input_ids"]]
                       + p["bert.embeddings.position_embeddings.weight"][:T]
                       + p["bert.embeddings.token_type_embeddings.weight"][batch["token_type_ids"]],
                       p["bert.embeddings.LayerNorm.weight"], p["bert.embeddings.LayerNorm.bias"],
                       c["layer_norm_eps"])
    x = q_emb
    for i in range(c["num_hidden_layers"]):
        pre = f"bert.encoder.layer.{i}."
        lay = torch.nn.TransformerEncoderLayer(H, c["num_attention_heads"], c["intermediate_size"],
                                               dropout=0.0, activation="gelu", batch_first=True,
                                               layer_norm_eps=c["layer_norm_eps"], norm_first=pre_ln,
                                               dtype=DT)
        sa = pre + "attention.self."
        with torch.no_grad():
            lay.self_attn.in_proj_weight.copy_(torch.cat([q[sa + n + ".weight"] for n in ("query", "key", "value")]))
            lay.self_attn.in_proj_bias.copy_(torch.cat([q[sa + n + ".bias"] for n in ("query", "key", "value")]))
            for mod, n in ((lay.self_attn.out_proj, "attention.output.dense"), (lay.linear1, "intermediate.dense"),
                           (lay.linear2, "output.dense"), (lay.norm1, "attention.output.LayerNorm"),
                           (lay.norm2, "output.LayerNorm")):
                mod.weight.copy_(q[pre + n + ".weight"])
                mod.bias.copy_(q[pre + n + ".bias"])
            x = lay(x, src_key_padding_mask=batch["attention_mask"] == 0)
    if pre_ln:
        with torch.no_grad():
            x = F.layer_norm(x, (H,), q["bert.encoder.LayerNorm.weight"],
                             q["bert.encoder.LayerNorm.bias"], c["layer_norm_eps"])
    with torch.no_grad():
        ours = encoder(p, c, batch)
    real = batch["attention_mask"].bool()
    return float((ours - x)[real].abs().max())


# ----------------------------------------------------------------------------- safetensors
def write_safetensors(path, tensors, metadata):
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype in (torch.int64, torch.int32):
            arr, dt = t.numpy().astype("<i4"), "I32"
        else:
            arr, dt = t.detach().to(torch.float32).numpy().astype("<f4"), "F32"
        data = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    hdr = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hdr += b" " * ((-(8 + len(hdr))) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)))
        f.write(hdr)
        for b in blobs:
            f.write(b)


# ----------------------------------------------------------------------------- main
def build(name, c, out_dir):
    g = torch.Generator().manual_seed(c["seed"])
    p = init_params(c, g)
    batch = make_batch(c, g)
    out, grads = loss_and_grads(p, c, batch)
    adamw_losses, adamw_final = train(p, c, batch, adamw_step, ADAMW)
    lamb_losses, lamb_final = train(p, c, batch, lamb_step, LAMB)

    T = {}
    T.update({"init." + n: t for n, t in p.items()})
    T.update({"batch." + n: t for n, t in batch.items()})
    T["out.mlm_logits"] = out["mlm_logits"]
    T["out.loss"] = out["loss"].view(1)
    T["out.mlm_loss"] = out["mlm_loss"].view(1)
    if c["nsp"]:
        T["out.nsp_logits"] = out["nsp_logits"]
        T["out.nsp_loss"] = out["nsp_loss"].view(1)
    T.update({"grad." + n: t for n, t in grads.items()})
    T["adamw.losses"], T["lamb.losses"] = adamw_losses, lamb_losses
    T.update({"adamw.final." + n: t for n, t in adamw_final.items()})
    T.update({"lamb.final." + n: t for n, t in lamb_final.items()})

    meta = {k: str(c[k]) for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                    "intermediate_size", "max_position_embeddings", "type_vocab_size")}
    meta["layer_norm_eps"] = repr(c["layer_norm_eps"])
    meta["nsp"] = "1" if c["nsp"] else "0"
    meta["norm"] = c.get("norm", "post")
    for key in ("z_loss", "attn_penalty"):
        if key in c:
            meta[key] = repr(float(c[key]))
    if "admin_omega" in c:
        meta["admin_omega"] = ",".join(repr(float(w)) for w in c["admin_omega"])
    meta["batch"], meta["seq_len"] = str(c["batch"]), str(c["seq_len"])
    for prefix, h in (("adamw", ADAMW), ("lamb", LAMB)):
        meta.update({f"{prefix}_{k}": repr(float(v)) for k, v in h.items()})
    meta["torch_version"] = torch.__version__
    path = os.path.join(out_dir, name + ".safetensors")
    write_safetensors(path, T, meta)

    n_fd, fd_err = fd_check(p, c, batch, grads, torch.Generator().manual_seed(c["seed"] + 1))
    enc_err = encoder_crosscheck(p, c, batch)
    nm = len(batch["mlm_positions"])
    real = int(batch["attention_mask"].sum()) - c["batch"]
    print(f"{path}: {len(T)} tensors, {os.path.getsize(path)} bytes; loss={float(out['loss']):.6f} "
          f"masked={nm}/{real} non-CLS real tokens")
    print(f"  adamw losses {adamw_losses[0]:.5f} -> {adamw_losses[-1]:.5f}; "
          f"lamb losses {lamb_losses[0]:.5f} -> {lamb_losses[-1]:.5f}")
    print(f"  FD check: {n_fd} entries, max rel err {fd_err:.3e}; "
          f"encoder vs nn.TransformerEncoderLayer max abs diff {enc_err:.3e}")
    assert fd_err < 1e-5 and enc_err < 1e-10, "self-check failed"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, c in CONFIGS.items():
        build(name, c, args.out)


if __name__ == "__main__":
    main()
