#!/usr/bin/env python3
"""1-bit LAMB's arithmetic recomputed with numpy from two consecutive
checkpoints of a one-rank run (tests/onebit.sh), as docs/CONFIG.md states it.

  onebit_lamb_ref.py warmup A B LR B1 B2 EPS WD BETA MIN MAX
      B is the checkpoint one LAMB warm-up step after A: coeff_freeze in B is
      BETA x A's + (1 - BETA) x the trust ratio ||w_A|| / ||u||, u = (m_B/bc1)
      / (sqrt(v_B/bc2) + eps) + wd w_A, clamped to [MIN, MAX] (ratios of 1
      leave it).
  onebit_lamb_ref.py frozen A B LR B1 B2 EPS WD FREEZE FMIN FMAX FTHR
      B is one compressed step after A: v is A's; v_fresh follows the
      reconstructed gradient (m_B - b1 m_A) / (1 - b1); each tensor's factor
      is max((sqrt v + eps) / (sqrt v_fresh + eps)), mixed towards 1 by the
      update's non-decay share, bounded; the weights are w_A - lr trust
      ((m_B/bc1) / (sqrt(v)/sqrt(bc2) + eps) + wd w_A).

Prints the worst relative differences; exit 1 when one exceeds 1e-5 (the
float32 rounding of the two computations differs, the arithmetic must not).
"""
import json
import struct
import sys

import numpy as np


def safetensors(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], np.float32)
            for k, v in header.items()}


def optim(path):
    blob = open(path, "rb").read()
    step, nt, tbytes = struct.unpack("<QII", blob[16:32])
    pos, names = 32, []
    for _ in range(nt):
        (ln,) = struct.unpack("<H", blob[pos:pos + 2])
        name = blob[pos + 2:pos + 2 + ln].decode()
        (numel,) = struct.unpack("<Q", blob[pos + 2 + ln:pos + 10 + ln])
        names.append((name, numel))
        pos += 10 + ln
    m, v = {}, {}
    for name, numel in names:
        m[name] = np.frombuffer(blob[pos:pos + 4 * numel], np.float32)
        v[name] = np.frombuffer(blob[pos + 4 * numel:pos + 8 * numel], np.float32)
        pos += 8 * numel
    return step, names, m, v


def lamb1(path, names):
    blob = open(path, "rb").read()
    assert blob[:8] == b"BTLAMB1\0"
    pos, state = 24, {}
    for name, _ in names:
        cf, lf, sc = struct.unpack("<ddf", blob[pos:pos + 20])
        state[name] = [cf, lf, sc]
        pos += 20
    fresh, off = {}, pos
    for name, numel in names:
        fresh[name] = np.frombuffer(blob[off:off + 4 * numel], np.float32)
        off += 4 * numel
    return state, fresh


def weights(ckpt, names):
    st = safetensors(ckpt + "/model.safetensors")
    w = {}
    for name, numel in names:
        if name in st and st[name].size == numel:
            w[name] = st[name]
        else:  # the fused query, key, value of one layer
            parts = [st[name.replace("query", k)] for k in ("query", "key", "value")]
            w[name] = np.concatenate(parts)
    return w


def decays(name):
    return name.endswith("weight") and "LayerNorm" not in name


def bias_corr(b, t):
    return 1.0 - b ** t


def check_warmup(a, b, lr, b1, b2, eps, wd, beta, lo, hi):
    step, names, _, _ = optim(a + "/optim.bin")
    _, _, m, v = optim(b + "/optim.bin")
    w = weights(a, names)
    sa, _ = lamb1(a + "/onebit_lamb.bin", names)
    sb, _ = lamb1(b + "/onebit_lamb.bin", names)
    t = step + 1
    bc1, bc2 = np.float32(bias_corr(b1, t)), np.float32(bias_corr(b2, t))
    worst = 0.0
    for name, _ in names:
        d = np.float32(wd if decays(name) else 0.0)
        u = (m[name] / bc1) / (np.sqrt(v[name] / bc2) + np.float32(eps)) + d * w[name]
        wn, un = np.linalg.norm(w[name].astype(np.float64)), np.linalg.norm(u.astype(np.float64))
        trust = wn / un if wn > 0 and un > 0 else 1.0
        trust = min(max(trust, lo), hi)
        want = sa[name][0] if trust == 1.0 else beta * sa[name][0] + (1 - beta) * trust
        worst = max(worst, abs(sb[name][0] - want) / max(abs(want), 1e-30))
    print("warm-up step %d: coeff_freeze, worst relative difference %.3g" % (t, worst))
    return worst


def check_frozen(a, b, lr, b1, b2, eps, wd, freeze, fmin, fmax, fthr):
    step, names, ma, va = optim(a + "/optim.bin")
    _, _, mb, vb = optim(b + "/optim.bin")
    wa, wb = weights(a, names), weights(b, names)
    sa, fa = lamb1(a + "/onebit_lamb.bin", names)
    sb, fb = lamb1(b + "/onebit_lamb.bin", names)
    t = step + 1
    bc1 = bias_corr(b1, t)
    bc2 = bias_corr(b2, freeze)
    worst = {"v frozen": 0.0, "v_fresh": 0.0, "factor": 0.0, "weights": 0.0}
    for name, _ in names:
        worst["v frozen"] = max(worst["v frozen"], float(np.max(np.abs(vb[name] - va[name]))))
        g = (mb[name] - np.float32(b1) * ma[name]) / np.float32(1 - b1)
        fresh = np.float32(b2) * fa[name] + np.float32(1 - b2) * g * g
        rel = np.abs(fresh - fb[name]) / np.maximum(np.abs(fresh), 1e-30)
        worst["v_fresh"] = max(worst["v_fresh"], float(np.max(rel)))
        d = wd if decays(name) else 0.0
        v64, f64 = va[name].astype(np.float64), fb[name].astype(np.float64)
        denom = np.sqrt(v64) + eps
        factor = float(np.max(denom / (np.sqrt(f64) + eps)))
        pre = mb[name] / denom
        upd = pre + d * wa[name]
        if d > 0 and np.linalg.norm(upd) > 0:
            share = min(1.0, np.linalg.norm(pre) / np.linalg.norm(upd))
            factor = factor * share + (1 - share)
        factor = min(max(factor, fmin), fmax)
        last = sa[name][1]
        factor = min(max(factor, last * (1 - fthr)), last * (1 + fthr))
        worst["factor"] = max(worst["factor"], abs(sb[name][1] - factor) / factor)
        trust = sa[name][0] * factor
        u = (mb[name] / bc1) / (np.sqrt(v64) / np.sqrt(bc2) + eps) + d * wa[name]
        want = wa[name] - lr * trust * u
        err = np.linalg.norm(wb[name] - want) / max(np.linalg.norm(want), 1e-30)
        worst["weights"] = max(worst["weights"], float(err))
    print("compressed step %d: worst relative differences: %s" % (
        t, ", ".join("%s %.3g" % kv for kv in worst.items())))
    return max(worst.values())


def main():
    mode, a, b = sys.argv[1:4]
    x = [float(s) for s in sys.argv[4:]]
    worst = check_warmup(a, b, *x) if mode == "warmup" else check_frozen(a, b, *x)
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
