#!/bin/sh
# Mixed precision's cost and saving, measured side by side: bertrain bench of
# one model in fp32, bf16 and fp16 storage, interleaved in rounds so that a
# noisy machine hits all alike, on the same random batches. Prints ms/step per
# round, then per precision the mean ms/step, its ratio to fp32 and the
# activation memory the bench allocated.
# Usage: scripts/bench-precision.sh [PRESET] [SEQ] [BATCH] [STEPS] [ROUNDS] [BACKEND]
set -eu
cd "$(dirname "$0")/.."
preset=${1:-mini} seq=${2:-128} batch=${3:-8} steps=${4:-4} rounds=${5:-3} dev=${6:-cpu}
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=$(nproc)}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for r in $(seq "$rounds"); do
    line="round $r:"
    for p in fp32 bf16 fp16; do
        out=$(./bertrain bench --preset "$preset" --seq "$seq" --batch "$batch" --steps "$steps" \
            --warmup 1 --backend "$dev" --precision "$p")
        ms=$(echo "$out" | sed -n 's/^ms\/step: //p')
        mb=$(echo "$out" | sed -n 's/^activations: \([0-9.]*\) MB.*/\1/p')
        echo "$p $ms $mb" >>"$results"
        line="$line $p $ms ms/step |"
    done
    echo "$line"
done
awk -v what="$preset, seq $seq, batch $batch, $steps steps x $rounds rounds, $dev" '
    { ms[$1] += $2; n[$1]++; mb[$1] = $3 }
    END {
        printf "%s\n", what
        split("fp32 bf16 fp16", order, " ")
        for (i = 1; i <= 3; i++) {
            p = order[i]
            printf "%s: %.1f ms/step (%.2fx fp32), activations %.1f MB (%.2fx fp32)\n", p,
                ms[p] / n[p], (ms[p] / n[p]) / (ms["fp32"] / n["fp32"]), mb[p], mb[p] / mb["fp32"]
        }
    }' "$results"
