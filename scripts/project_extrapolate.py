#!/usr/bin/env python3
"""The bilinear extrapolation of scripts/bench-project-extrapolate.sh: reads
OUT_DIR/l{3,4}k{1,2}.log (bertrain bench --project's output for 3 and 4
layers, 1 and 2 micro-batches), prints the per-op table, the step's GEMM
GFLOP and each card's step time and MFU for LAYERS layers and ACCUM
micro-batches.

    python3 scripts/project_extrapolate.py OUT_DIR LAYERS ACCUM
"""
import re
import sys

# the columns of bench --project's per-op table, in its order, and those
# extrapolated and printed (sums over launches; the maxima are not)
COLUMNS = ["calls", "launches", "blocks", "block max", "MB read", "MB written",
           "acc/thr max", "MB shared", "GF fp32", "GF tf32", "GF 16bit"]
PRINTED = ["calls", "launches", "MB read", "MB written", "GF 16bit"]


def number(tok):
    try:
        return float(tok)
    except ValueError:
        return None


def parse(path):
    """(cards, ops, gflop, peaks, steps, per_step) of one bench --project
    log: ops maps an op's name to {column: value, card: ms}; steps maps a
    card to its step's ms; per_step holds the profiler's op calls and kernel
    launches a step."""
    with open(path) as f:
        lines = f.read().splitlines()
    head = max((i for i, s in enumerate(lines) if s.startswith("op ") and "launches" in s),
               default=None)
    if head is None:
        sys.exit(f"{path}: no per-op projection table")
    words = lines[head].split()
    cards = words[words.index("16bit") + 1:]  # the last column's title is "GF 16bit"
    ops, gflop, model, peaks, steps = {}, None, None, {}, {}
    m = next((re.match(r"per step: ([0-9.]+) op calls, ([0-9.]+) kernel launches", s)
              for s in lines if s.startswith("per step: ")), None)
    if m is None:
        sys.exit(f"{path}: no profile line (per step: ... op calls, ... kernel launches)")
    per_step = {"op calls": float(m.group(1)), "kernel launches": float(m.group(2))}
    for s in lines[head + 2:]:
        m = re.match(r"step: GEMM GFLOP ([0-9.]+)", s)
        if m:
            gflop = float(m.group(1))
            continue
        m = re.match(r"step: model GFLOP ([0-9.]+)", s)
        if m:
            model = float(m.group(1))
            continue
        m = re.match(r"projected on (\S+): ([0-9.]+) ms a step, MFU [0-9.]+% \(of ([0-9.]+) ", s)
        if m:
            steps[m.group(1)] = float(m.group(2))
            peaks[m.group(1)] = float(m.group(3))
            continue
        toks = s.split()
        first = next((i for i, t in enumerate(toks) if number(t) is not None), None)
        if first is None or gflop is not None:
            continue
        name, vals = " ".join(toks[:first]), toks[first:]
        row = dict(zip(cards, (float(v) for v in vals[-len(cards):])))
        if len(vals) == len(COLUMNS) + len(cards):
            for col, v in zip(COLUMNS, vals):
                row[col] = number(v)  # None for "-"
        ops[name] = row
    if gflop is None or set(steps) != set(cards):
        sys.exit(f"{path}: no step line or no projected step for every card")
    return cards, ops, gflop, peaks, steps, per_step, model


def bilinear(q31, q41, q32, q42, layers, accum):
    """q at (layers, accum) from q at (3, 1), (4, 1), (3, 2), (4, 2)."""
    dl, dk = layers - 3, accum - 1
    return q31 + dl * (q41 - q31) + dk * (q32 - q31) + dl * dk * (q42 - q41 - q32 + q31)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip())
    out, layers, accum = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    runs = [parse(f"{out}/l{l}k{k}.log") for l, k in ((3, 1), (4, 1), (3, 2), (4, 2))]
    cards = runs[0][0]
    if any(r[0] != cards for r in runs):
        sys.exit(f"{out}: the four runs were projected onto different cards")

    def at(get):
        return bilinear(*(get(r) for r in runs), layers, accum)

    names = []
    for r in runs:
        names += [n for n in r[1] if n not in names]
    rows = []
    for n in names:
        row = {}
        for col in PRINTED + cards:
            vals = [r[1].get(n, {}).get(col) for r in runs]
            if all(v is None for v in vals):
                row[col] = None
            else:
                row[col] = bilinear(*(v or 0.0 for v in vals), layers, accum)
        rows.append((n, row))
    rows.sort(key=lambda nr: -nr[1][cards[0]])

    print(f"extrapolated to {layers} layers x {accum} micro-batches from "
          f"{out}/l{{3,4}}k{{1,2}}.log (bilinear; docs/PERFORMANCE.md)")
    print("%-22s" % "op" + "".join("%12s" % c for c in PRINTED)
          + "".join("%16s" % c for c in cards))
    for n, row in rows:
        print("%-22s" % n + "".join("%12s" % ("-" if row[c] is None else "%.3f" % row[c])
                                      for c in PRINTED)
              + "".join("%16.3f" % row[c] for c in cards))
    gflop = at(lambda r: r[2])
    print("per step: %.1f op calls, %.1f kernel launches (the profiler's counts)"
          % (at(lambda r: r[5]["op calls"]), at(lambda r: r[5]["kernel launches"])))
    print("step: GEMM GFLOP %.3f" % gflop)
    # the model's FLOPs (without padded rows), when every run printed them
    model = at(lambda r: r[6]) if all(r[6] is not None for r in runs) else None
    if model is not None:
        print("step: model GFLOP %.3f (what the model needs, without the rows the device pads)"
              % model)
    for c in cards:
        ms = at(lambda r: r[4][c])
        total = sum(row[c] for _, row in rows)
        # the logs print ms to 0.001: each figure is off by up to 0.0005
        # times the sum of the extrapolation's |coefficients|
        dl, dk = layers - 3, accum - 1
        coef = abs((1 - dl) * (1 - dk)) + abs(dl * (1 - dk)) + abs(dk * (1 - dl)) + abs(dl * dk)
        if abs(total - ms) > 0.0005 * coef * (len(rows) + 1):
            sys.exit(f"{c}: the ops' extrapolated times add up to {total:.3f} ms, "
                     f"the step's to {ms:.3f}: a run's table is incomplete")
        peak = runs[0][3][c]
        mfu = 100.0 * gflop * 1e9 / (ms * 1e-3 * peak * 1e12)
        print("extrapolated on %s: %.3f ms a step, MFU %.1f%% (of %g dense 16-bit TFLOP/s)"
              % (c, ms, mfu, peak)
              + ("" if model is None else ", %.1f%% of the model's FLOPs"
                 % (100.0 * model * 1e9 / (ms * 1e-3 * peak * 1e12))))
    for (l, k), r in zip(((3, 1), (4, 1), (3, 2), (4, 2)), runs):
        print(f"  run of {l} layers x {k} micro-batches: "
              + ", ".join("%s %.3f ms" % (c, r[4][c]) for c in cards))


if __name__ == "__main__":
    main()
