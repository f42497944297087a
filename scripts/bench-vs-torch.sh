#!/bin/sh
# bertrain's CPU backend beside PyTorch (Debian's python3-torch) on the same
# machine in the same run: training samples/s for a preset at one sequence
# length, measured in alternating rounds, so machine noise shows. Each
# bertrain run is `bench --ceiling`: after its timed steps it replays every
# GEMM shape of the step alone, so it also gives the SGEMM ceiling at the
# model's own shapes and the step's share of it, measured in the same
# process. Then, for comparison with earlier figures, the ceiling at
# BERT-base's FFN GEMM, 1024x3072x768, on the same threads (the higher of
# bertrain's tiled GEMM, bertrain-conformance --perf, and OpenBLAS's own
# threaded SGEMM) and bertrain's training FLOP rate as a share of it.
#   scripts/bench-vs-torch.sh PRESET SEQ BATCH STEPS [THREADS [ROUNDS]]
# ROUNDS (default 2) alternating rounds; each prints one row, then the ratio
# of the two engines' mean samples/s and the median of the rounds' ratios.
set -eu
cd "$(dirname "$0")/.."
preset=$1 seq=$2 batch=$3 steps=$4 threads=${5:-$(nproc)} rounds=${6:-2}
py=${TORCH_PYTHON:-/usr/bin/python3}
echo "| round | bertrain cpu samples/s | PyTorch $("$py" -c 'import torch; print(torch.__version__)') samples/s | ratio | share of the GEMM ceiling at the model's shapes | at most x PyTorch with every other op free |"
echo "|---|---|---|---|---|---|"
rows= flops=
round=1
while [ "$round" -le "$rounds" ]; do
    out=$(OMP_NUM_THREADS=$threads ./bertrain bench --preset "$preset" --seq "$seq" --batch "$batch" \
        --steps "$steps" --warmup 1 --threads "$threads" --ceiling)
    b=$(printf '%s\n' "$out" | sed -n 's/^samples\/s: //p')
    f=$(printf '%s\n' "$out" | sed -n 's/^TFLOP\/s: //p')
    c=$(printf '%s\n' "$out" | sed -n "s/^gemm ceiling at this model's shapes: \([0-9.]*\) GFLOP\/s.*/\1/p")
    share=$(printf '%s\n' "$out" | sed -n 's/^the step: .*, \([0-9.]*%\) of that ceiling/\1/p')
    alone=$(printf '%s\n' "$out" | sed -n "s/^gemm ceiling.*GEMMs alone: \([0-9.]*\) ms.*/\1/p")
    t=$("$py" scripts/bench_torch.py --preset "$preset" --seq "$seq" --batch "$batch" \
        --steps "$steps" --warmup 1 --threads "$threads" | sed -n 's/^samples\/s: //p')
    [ -n "$b" ] && [ -n "$t" ] && [ -n "$alone" ] || { echo "bench-vs-torch: round $round gave no figure" >&2; exit 1; }
    # the most any engine on these GEMMs could gain on PyTorch: its step
    # against bertrain's GEMMs alone (every other op free)
    awk -v r="$round" -v b="$b" -v t="$t" -v c="$c" -v s="$share" -v g="$alone" -v n="$batch" 'BEGIN {
        printf "| %d | %.2f | %.2f | %.2fx | %s (of %s GFLOP/s) | %.2fx |\n", r, b, t, b / t, s, c, 1000 * n / t / g }'
    rows="$rows $b:$t" flops="$flops $f"
    round=$((round + 1))
done
median=$(printf '%s\n' $rows | awk -F: '{ printf "%.6f\n", $1 / $2 }' | sort -n |
    awk '{ r[NR] = $1 } END { printf "%.2f", NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2 }')
printf '%s\n' $rows | awk -F: -v m="$median" '{ b += $1; t += $2 } END {
    printf "mean samples/s: bertrain %.2f, PyTorch %.2f: %.2fx; median of the rounds'"'"' ratios %sx\n", b / NR, t / NR, b / t, m }'
# each probe three times, the best kept: on a shared machine one probe can
# land in a busy second (93 against 163 GFLOP/s seen)
tiled=0 openblas=0
for probe in 1 2 3; do
    t=$(OMP_NUM_THREADS=$threads ./bertrain-conformance --perf --op gemm |
        sed -n 's/.*base ffn up .* \([0-9.]*\) GFLOP\/s.*/\1/p')
    # OpenBLAS's own threaded SGEMM at the same shape (numpy over Debian's
    # libblas, which is OpenBLAS), independent of bertrain's tile grid
    o=$(OPENBLAS_NUM_THREADS=$threads "$py" -c '
import time, numpy as np
a = np.random.default_rng(1).standard_normal((1024, 768), dtype=np.float32)
b = np.random.default_rng(2).standard_normal((3072, 768), dtype=np.float32)
best = 1e9
for _ in range(6):
    t = time.perf_counter(); a @ b.T; best = min(best, time.perf_counter() - t)
print("%.2f" % (2 * 1024 * 3072 * 768 / best / 1e9))')
    tiled=$(awk -v a="$tiled" -v b="$t" 'BEGIN { print (a > b ? a : b) }')
    openblas=$(awk -v a="$openblas" -v b="$o" 'BEGIN { print (a > b ? a : b) }')
done
ceiling=$(awk -v a="$tiled" -v b="$openblas" 'BEGIN { print (a > b ? a : b) }')
echo
echo "SGEMM at 1024x3072x768, $threads threads (best of 3 probes): bertrain's tiles $tiled GFLOP/s, OpenBLAS threaded $openblas GFLOP/s"
echo "SGEMM ceiling (the higher): $ceiling GFLOP/s"
printf '%s\n' $flops | awk -v c="$ceiling" '{ f = f sprintf("%s%.1f", (NR > 1 ? " / " : ""), 1000 * $1)
    p = p sprintf("%s%.0f%%", (NR > 1 ? " / " : ""), 100000 * $1 / c) }
    END { if (c > 0) printf "bertrain training: %s GFLOP/s = %s of the ceiling\n", f, p }'
