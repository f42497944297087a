#!/bin/sh
# scripts/bench-project-extrapolate.sh: the projection of L layers x K
# micro-batches from runs of 3 and 4 layers x 1 and 2 micro-batches equals
# the projection of the configuration itself. On the counting emulated
# device, the tiny model at seq 32, batch 4, bf16, 6 layers x 3 micro-batches:
#  - every op's calls and launches a step are the full run's exactly, and
#    so is the profiler's count of kernel launches a step;
#  - each card's step time is within 0.5% of the full run's, and the GEMM
#    GFLOP and the model's GFLOP (without padding) within 2% (the bench draws new samples each micro-batch: the
#    number of masked tokens, the top layer's rows, changes with them);
#  - the extrapolation with its (L-3)(K-1) term left out (a planted fault)
#    is more than 0.5% off, so the comparison can tell;
#  - other options in a folder that holds runs are refused in one line.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
use_cuda_emu
export top_builddir OMP_NUM_THREADS=1 CUDA_EMU_WORKERS=2
CARDS=h100-sxm,a100-sxm-80gb
BENCH="--preset tiny --seq 32 --batch 4 --precision bf16"

# shellcheck disable=SC2086
JOBS=2 sh scripts/bench-project-extrapolate.sh "$tmpdir/x" "$CARDS" 6 3 $BENCH \
    > "$tmpdir/x.out" 2>&1 || { tail -20 "$tmpdir/x.out"; fail "bench-project-extrapolate.sh failed"; }
grep -q '^extrapolated on h100-sxm: [0-9.]* ms a step, MFU' "$tmpdir/x.out" ||
    { cat "$tmpdir/x.out"; fail "no extrapolated step for h100-sxm"; }
# runs of other options in the same folder are refused, in one line
# shellcheck disable=SC2086
sh scripts/bench-project-extrapolate.sh "$tmpdir/x" "$CARDS" 6 3 $BENCH --seq 16 \
    > "$tmpdir/other.out" 2> "$tmpdir/other.err" && fail "other options in $tmpdir/x were not refused"
[ "$(wc -l < "$tmpdir/other.err")" -eq 1 ] && grep -q "holds runs of .*give another OUT_DIR" "$tmpdir/other.err" ||
    { cat "$tmpdir/other.err"; fail "other options in the same folder: not one line naming the runs it holds"; }
echo "ok   other options in the same folder: $(cat "$tmpdir/other.err")"
mkdir -p "$tmpdir/full"
cp "$tmpdir/x/plugin/count.so" "$tmpdir/full/"
# shellcheck disable=SC2086
sh scripts/bench-project.sh "$tmpdir/full" "$CARDS" $BENCH --layers 6 --accum 3 \
    > "$tmpdir/full.log" 2>&1 || { tail -20 "$tmpdir/full.log"; fail "the full run (6 layers x 3) failed"; }

# compare EXTRAPOLATED_OUTPUT: exit 1 with the differences, 0 when it matches the full run
compare() {
    python3 - "$1" "$tmpdir/full.log" <<'EOF'
import sys
sys.path.insert(0, "scripts")
import project_extrapolate as px
cards, full_ops, full_gflop, _, full_steps, full_per_step, full_model = px.parse(sys.argv[2])
ops, steps, gflop, model, launches, bad = {}, {}, None, None, None, []
for s in open(sys.argv[1]).read().splitlines():
    t = s.split()
    if s.startswith("step: GEMM GFLOP"):
        gflop = float(t[3])
    elif s.startswith("step: model GFLOP"):
        model = float(t[3])
    elif s.startswith("extrapolated on "):
        steps[t[2].rstrip(":")] = float(t[3])
    elif s.startswith("per step: "):
        launches = float(t[5])
    elif len(t) > len(cards) + 5 and not s.startswith(("op ", "extrapolated", "  run")):
        name = " ".join(t[:len(t) - len(cards) - 5])
        ops[name] = t[len(t) - len(cards) - 5:]
for name, row in full_ops.items():
    if "calls" not in row:
        continue
    got = ops.get(name)
    if got is None or abs(float(got[0]) - row["calls"]) > 1e-6 or abs(float(got[1]) - row["launches"]) > 1e-6:
        bad.append(f"{name}: calls/launches {got and got[:2]}, the full run {row['calls']} {row['launches']}")
for c in cards:
    if abs(steps[c] - full_steps[c]) > 0.005 * full_steps[c]:
        bad.append(f"{c}: {steps[c]:.3f} ms a step, the full run {full_steps[c]:.3f}")
if launches != full_per_step["kernel launches"]:
    bad.append(f"{launches} kernel launches a step, the full run {full_per_step['kernel launches']}")
if abs(gflop - full_gflop) > 0.02 * full_gflop:
    bad.append(f"GEMM GFLOP {gflop:.3f}, the full run {full_gflop:.3f}")
if full_model is None or model is None or abs(model - full_model) > 0.02 * full_model:
    bad.append(f"model GFLOP {model}, the full run {full_model}")
print("\n".join(bad) if bad else
      ", ".join(f"{c} {steps[c]:.3f} ms (full run {full_steps[c]:.3f})" for c in cards)
      + f", GEMM GFLOP {gflop:.3f} ({full_gflop:.3f}), model GFLOP {model:.3f} ({full_model:.3f})"
      + f", {launches:.0f} kernel launches")
sys.exit(1 if bad else 0)
EOF
}

r=$(compare "$tmpdir/x.out") || { echo "$r"; fail "the extrapolation differs from the full run"; }
echo "ok   6 layers x 3 micro-batches extrapolated: $r; every op's calls and launches exact"

# the planted fault: the bilinear term dropped
mkdir -p "$tmpdir/broken/scripts"
sed 's/ + dl \* dk \* (q42 - q41 - q32 + q31)//' scripts/project_extrapolate.py > "$tmpdir/broken/scripts/project_extrapolate.py"
cmp -s scripts/project_extrapolate.py "$tmpdir/broken/scripts/project_extrapolate.py" &&
    fail "the planted fault no longer applies to scripts/project_extrapolate.py: update this test"
python3 "$tmpdir/broken/scripts/project_extrapolate.py" "$tmpdir/x" 6 3 > "$tmpdir/broken.out" 2>&1 ||
    { cat "$tmpdir/broken.out"; fail "the broken extrapolation did not run"; }
r=$(compare "$tmpdir/broken.out") && fail "the extrapolation without its (L-3)(K-1) term passed the comparison: $r"
echo "ok   without the (L-3)(K-1) term it is told apart: $(echo "$r" | head -1)"
finish "a projection extrapolated from 3 and 4 layers x 1 and 2 micro-batches is the full run's"
