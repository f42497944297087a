#!/bin/sh
# OpenCL (PoCL or any device) beside the CPU backend, measured in one run:
# bertrain bench for a preset with CLBlast's default Xgemm parameters, with the
# tuned ones (backends/opencl/tuning/), and on the CPU backend, interleaved in
# rounds so that a noisy machine hits all three alike. Prints samples/s per
# round and the best of each. Usage: scripts/bench-opencl.sh [PRESET] [SEQ]
# [BATCH] [STEPS] [ROUNDS] [DEVICE]
set -eu
cd "$(dirname "$0")/.."
preset=${1:-mini} seq=${2:-128} batch=${3:-16} steps=${4:-3} rounds=${5:-2} dev=${6:-opencl:0:0}
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=$(nproc)}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT
rate() { sed -n 's/^samples\/s: //p'; }
best_default=0 best_tuned=0 best_cpu=0
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b ? a : b) }'; }
for r in $(seq "$rounds"); do
    d=$(BERTRAIN_CLBLAST_TUNING=none ./bertrain bench --preset "$preset" --seq "$seq" --batch "$batch" \
        --steps "$steps" --warmup 1 --backend "$dev" 2>/dev/null | rate)
    t=$(./bertrain bench --preset "$preset" --seq "$seq" --batch "$batch" \
        --steps "$steps" --warmup 1 --backend "$dev" 2>/dev/null | rate)
    c=$(./bertrain bench --preset "$preset" --seq "$seq" --batch "$batch" \
        --steps "$steps" --warmup 1 --backend cpu 2>/dev/null | rate)
    echo "round $r: $dev default $d, $dev tuned $t, cpu $c samples/s"
    best_default=$(max "$best_default" "$d") best_tuned=$(max "$best_tuned" "$t") best_cpu=$(max "$best_cpu" "$c")
done
echo "best: $dev default $best_default, $dev tuned $best_tuned, cpu $best_cpu samples/s ($preset, seq $seq, batch $batch)"
