#!/usr/bin/env python3
"""PyTorch baseline for `bertrain bench`: the same BERT (Post-LN, exact GELU,
MLM head at masked positions with the decoder tied to the word embeddings),
the same preset sizes, random tokens with 15% masked, dropout 0.1, AdamW.
Prints lines in bertrain bench's format; the last is `samples/s: X`.

usage: /usr/bin/python3 scripts/bench_torch.py --preset mini --seq 128 --batch 8
       [--steps N] [--warmup N] [--threads N] [--device cpu|cuda]
       [--precision fp32|tf32|bf16] [--attention eager|sdpa]
(Debian's python3-torch on the CPU; on a GPU machine, its PyTorch with
--device cuda: tf32 lets the GEMMs use TF32 tensor cores, bf16 runs the step
under torch.autocast with fp32 master weights, AdamW's fused kernel where the
PyTorch has one; --attention sdpa computes attention with
F.scaled_dot_product_attention, PyTorch 2's fused kernels, instead of the
eager softmax.)"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {"tiny": (2, 128, 2), "mini": (4, 256, 4), "small": (4, 512, 8),
           "medium": (8, 512, 8), "base": (12, 768, 12), "large": (24, 1024, 16)}


class Layer(nn.Module):
    def __init__(self, H, NH, I, p, sdpa=False):
        super().__init__()
        self.NH, self.p, self.sdpa = NH, p, sdpa
        self.qkv = nn.Linear(H, 3 * H)
        self.ao = nn.Linear(H, H)
        self.ln1 = nn.LayerNorm(H, eps=1e-12)
        self.fc1 = nn.Linear(H, I)
        self.fc2 = nn.Linear(I, H)
        self.ln2 = nn.LayerNorm(H, eps=1e-12)

    def forward(self, x, mask_add):
        B, T, H = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.NH, H // self.NH).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask_add.to(q.dtype),
                                               dropout_p=self.p if self.training else 0.0)
        else:
            s = q @ k.transpose(-1, -2) / math.sqrt(H // self.NH) + mask_add
            a = F.dropout(s.softmax(-1), self.p, self.training) @ v
        a = a.transpose(1, 2).reshape(B, T, H)
        x = self.ln1(x + F.dropout(self.ao(a), self.p, self.training))
        return self.ln2(x + F.dropout(self.fc2(F.gelu(self.fc1(x))), self.p, self.training))


class Bert(nn.Module):
    def __init__(self, V, L, H, NH, T, p=0.1, sdpa=False):
        super().__init__()
        self.wte, self.wpe, self.wtt = nn.Embedding(V, H), nn.Embedding(T, H), nn.Embedding(2, H)
        self.ln = nn.LayerNorm(H, eps=1e-12)
        self.layers = nn.ModuleList(Layer(H, NH, 4 * H, p, sdpa) for _ in range(L))
        self.head = nn.Linear(H, H)
        self.head_ln = nn.LayerNorm(H, eps=1e-12)
        self.dec_b = nn.Parameter(torch.zeros(V))
        self.p = p

    def forward(self, ids, types, att, pos, labels):
        B, T = ids.shape
        x = self.wte(ids) + self.wpe.weight[:T] + self.wtt(types)
        x = F.dropout(self.ln(x), self.p, self.training)
        mask_add = ((1.0 - att[:, None, None, :]) * -1e9)
        for layer in self.layers:
            x = layer(x, mask_add)
        h = x.reshape(B * T, -1)[pos]
        h = self.head_ln(F.gelu(self.head(h)))
        logits = h @ self.wte.weight.t() + self.dec_b
        return F.cross_entropy(logits, labels)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="mini", choices=PRESETS)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"])
    ap.add_argument("--attention", default="eager", choices=["eager", "sdpa"])
    a = ap.parse_args()
    if a.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        ap.error(f"--attention sdpa needs PyTorch 2.0 or later (this is {torch.__version__})")
    dev = torch.device(a.device)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(42)
    L, H, NH = PRESETS[a.preset]
    V, T, B = 30522, a.seq, a.batch
    model = Bert(V, L, H, NH, T, sdpa=a.attention == "sdpa").to(dev)
    fused = {"fused": True} if a.device == "cuda" else {}
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01, **fused)
    except TypeError:  # a PyTorch without fused AdamW
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(1)
    t0 = None
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            sync()
            t0 = time.perf_counter()
        ids = torch.randint(5, V, (B, T), generator=g)
        types = (torch.arange(T) >= T // 2).long().expand(B, T)
        att = torch.ones(B, T)
        masked = torch.rand(B * T, generator=g) < 0.15
        pos = masked.nonzero().flatten()
        labels = ids.flatten()[pos]
        ids, types, att, pos, labels = (t.to(dev) for t in (ids, types, att, pos, labels))
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(ids, types, att, pos, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    sync()
    dt = time.perf_counter() - t0
    where = torch.cuda.get_device_name() if a.device == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"bench: preset {a.preset}, seq {T}, batch {B}, {a.precision}, {a.attention} attention, {a.steps} steps after "
          f"{a.warmup} warm-up, pytorch {torch.__version__} ({where})")
    print(f"ms/step: {1e3 * dt / a.steps:.1f}")
    print(f"samples/s: {B * a.steps / dt:.2f}")


if __name__ == "__main__":
    main()
