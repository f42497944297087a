#!/bin/sh
# LayerDrop's speed-up, measured side by side: bertrain bench of one model
# with model.layerdrop 0 and P, interleaved in rounds so that a noisy machine
# hits both alike, on the same random batches (the bench's data depends on the
# seed and step only). Prints ms/step per round, the means, and the ratio
# mean(P) / mean(0) (LayerDrop at P = 0.5 should take at most 0.6 of the time).
# Usage: scripts/bench-layerdrop.sh [PRESET] [LAYERS] [SEQ] [BATCH] [STEPS] [ROUNDS] [P] [BACKEND]
set -eu
cd "$(dirname "$0")/.."
preset=${1:-mini} layers=${2:-12} seq=${3:-128} batch=${4:-4} steps=${5:-16} rounds=${6:-3}
p=${7:-0.5} dev=${8:-cpu}
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=$(nproc)}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT
bench() { # LAYERDROP -> "ms layers_run"
    out=$(./bertrain bench --preset "$preset" --layers "$layers" --seq "$seq" --batch "$batch" \
        --steps "$steps" --warmup 1 --backend "$dev" --layerdrop "$1" 2>/dev/null)
    ms=$(echo "$out" | sed -n 's/^ms\/step: //p')
    run=$(echo "$out" | sed -n 's/^layers run per step: \([0-9.]*\) .*/\1/p')
    echo "$ms ${run:-$layers}"
}
sum0=0 sump=0 sumrun=0
for r in $(seq "$rounds"); do
    set -- $(bench 0)
    a=$1
    set -- $(bench "$p")
    b=$1 run=$2
    echo "round $r: layerdrop 0: $a ms/step | layerdrop $p: $b ms/step ($run of $layers layers run per step)"
    sum0=$(awk -v s="$sum0" -v x="$a" 'BEGIN { print s + x }')
    sump=$(awk -v s="$sump" -v x="$b" 'BEGIN { print s + x }')
    sumrun=$(awk -v s="$sumrun" -v x="$run" 'BEGIN { print s + x }')
done
awk -v a="$sum0" -v b="$sump" -v n="$rounds" -v run="$sumrun" -v L="$layers" -v p="$p" \
    -v what="$preset, $layers layers, seq $seq, batch $batch, $steps steps x $rounds rounds, $dev" 'BEGIN {
    printf "mean: layerdrop 0: %.1f ms/step | layerdrop %s: %.1f ms/step (%.2f of %d layers run)\n", a / n, p, b / n, run / n, L
    printf "ratio: %.3f (%s)\n", b / a, what }'
