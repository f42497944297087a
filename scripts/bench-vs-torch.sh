#!/bin/sh
# bertrain's CPU backend beside PyTorch (Debian's python3-torch) on the same
# machine in the same run: training samples/s for a preset at one sequence
# length, each measured twice, alternating, so machine noise shows. Each
# bertrain run is `bench --ceiling`: after its timed steps it replays every
# GEMM shape of the step alone, so it also gives the SGEMM ceiling at the
# model's own shapes and the step's share of it, measured in the same
# process. Then, for comparison with earlier figures, the ceiling at
# BERT-base's FFN GEMM, 1024x3072x768, on the same threads (the higher of
# bertrain's tiled GEMM, bertrain-conformance --perf, and OpenBLAS's own
# threaded SGEMM) and bertrain's training FLOP rate as a share of it.
#   scripts/bench-vs-torch.sh PRESET SEQ BATCH STEPS [THREADS]
set -eu
cd "$(dirname "$0")/.."
preset=$1 seq=$2 batch=$3 steps=$4 threads=${5:-$(nproc)}
py=${TORCH_PYTHON:-/usr/bin/python3}
echo "| preset | seq | batch | threads | engine | samples/s (run 1) | samples/s (run 2) |"
echo "|---|---|---|---|---|---|---|"
b1= b2= t1= t2= f1= f2= ceilings=
for round in 1 2; do
    out=$(OMP_NUM_THREADS=$threads ./bertrain bench --preset "$preset" --seq "$seq" --batch "$batch" \
        --steps "$steps" --warmup 1 --threads "$threads" --ceiling)
    b=$(printf '%s\n' "$out" | sed -n 's/^samples\/s: //p')
    f=$(printf '%s\n' "$out" | sed -n 's/^TFLOP\/s: //p')
    step_ms=$(printf '%s\n' "$out" | sed -n 's/^ms\/step: //p')
    c=$(printf '%s\n' "$out" | sed -n "s/^gemm ceiling at this model's shapes: \([0-9.]* GFLOP\/s\).*/\1/p")
    share=$(printf '%s\n' "$out" | sed -n 's/^the step: .*, \([0-9.]*%\) of that ceiling/\1/p')
    alone=$(printf '%s\n' "$out" | sed -n "s/^gemm ceiling.*GEMMs alone: \([0-9.]*\) ms.*/\1/p")
    t=$("$py" scripts/bench_torch.py --preset "$preset" --seq "$seq" --batch "$batch" \
        --steps "$steps" --warmup 1 --threads "$threads" | sed -n 's/^samples\/s: //p')
    # the most any engine on these GEMMs could gain on PyTorch: its step
    # against bertrain's GEMMs alone (every other op free)
    bound=$(awk -v b="$batch" -v t="$t" -v g="$alone" 'BEGIN { if (t > 0 && g > 0) printf "%.2f", 1000 * b / t / g }')
    ceilings="$ceilings
round $round: ${step_ms} ms a step; SGEMM ceiling at the model's shapes $c; the step's GEMM work at $share of it;
  its GEMMs alone $alone ms, PyTorch's step $(awk -v b="$batch" -v t="$t" 'BEGIN { printf "%.1f", 1000 * b / t }') ms: at most ${bound}x PyTorch with every other op free"
    if [ $round = 1 ]; then b1=$b t1=$t f1=$f; else b2=$b t2=$t f2=$f; fi
done
echo "| $preset | $seq | $batch | $threads | bertrain cpu | $b1 | $b2 |"
echo "| $preset | $seq | $batch | $threads | PyTorch $("$py" -c 'import torch; print(torch.__version__)') | $t1 | $t2 |"
echo "$ceilings"
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
awk -v a="$f1" -v b="$f2" -v c="$ceiling" 'BEGIN { if (c > 0)
    printf "bertrain training: %.1f / %.1f GFLOP/s = %.0f%% / %.0f%% of the ceiling\n", 1000 * a, 1000 * b, 100000 * a / c, 100000 * b / c }'
