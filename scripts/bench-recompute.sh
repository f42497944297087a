#!/bin/sh
# What model.recompute costs and saves, measured side by side: bertrain bench
# --profile of one model with recompute none, attention and layer, interleaved
# in rounds so that a noisy machine hits all alike, on the same random
# batches. Prints ms/step per round, then per mode the mean ms/step, its ratio
# to none, and the device memory peak that a 1-step `bench --profile` counts
# (every buffer the model and the backend allocated), measured in round 1.
# Usage: scripts/bench-recompute.sh [PRESET] [SEQ] [BATCH] [STEPS] [ROUNDS] [PRECISION] [BACKEND]
set -eu
cd "$(dirname "$0")/.."
preset=${1:-mini} seq=${2:-128} batch=${3:-8} steps=${4:-4} rounds=${5:-3} prec=${6:-fp32}
dev=${7:-cpu}
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=$(nproc)}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for r in $(seq "$rounds"); do
    line="round $r:"
    for mode in none attention layer; do
        run() {
            ./bertrain bench --preset "$preset" --seq "$seq" --batch "$batch" --backend "$dev" \
                --precision "$prec" --set model.recompute="\"$mode\"" "$@"
        }
        out=$(run --steps "$steps" --warmup 1)
        ms=$(echo "$out" | sed -n 's/^ms\/step: //p')
        if [ "$r" -eq 1 ]; then
            peak=$(run --steps 1 --warmup 0 --profile |
                sed -n 's/.*device memory peak \([0-9.]*\) MB.*/\1/p')
            eval "peak_$mode=\${peak:-}"
        fi
        eval "mb=\$peak_$mode"
        [ -n "$ms" ] && [ -n "$mb" ] || { echo "$out" >&2; echo "bench-recompute: no ms/step or memory peak" >&2; exit 1; }
        echo "$mode $ms $mb" >>"$results"
        line="$line $mode $ms ms/step |"
    done
    echo "$line"
done
awk -v what="$preset, seq $seq, batch $batch, $prec, $steps steps x $rounds rounds, $dev" '
    { ms[$1] += $2; n[$1]++; mb[$1] = $3 }
    END {
        printf "%s\n", what
        split("none attention layer", order, " ")
        for (i = 1; i <= 3; i++) {
            p = order[i]
            printf "%s: %.1f ms/step (%.2fx none), device memory peak %.1f MB (%.2fx none)\n", p,
                ms[p] / n[p], (ms[p] / n[p]) / (ms["none"] / n["none"]), mb[p], mb[p] / mb["none"]
        }
    }' "$results"
