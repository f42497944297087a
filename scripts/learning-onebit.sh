#!/bin/sh
# Does 1-bit compression learn the same? 2 ranks of 1 thread train BERT-mini
# (tests/fixtures/base.json: the bundled demo corpus, seq 64, 32 sequences a
# step, WarmupDecayLR over 600 steps) with each optimizer of a PAIR and
# SEEDS seeds; a seed gives both optimizers the same initial weights and
# data order. The held-out MLM loss (eval every 100 steps, the same valid
# shard) at steps 100, 300 and 600: each seed's, the mean and the spread
# (max - min) over seeds, and whether the compressed optimizer's mean lies
# within the larger of the two spreads of the baseline's mean.
# Usage: [BERTRAIN=path] [LEARNING_ARGS='--set ...'] scripts/learning-onebit.sh [STEPS] [SEEDS] PAIR...
#   PAIR: adam (AdamW vs OneBitAdam) or lamb (Lamb vs OneBitLamb); the
#   1-bit optimizers warm up for 100 steps (freeze_step).
#   e.g. sh scripts/learning-onebit.sh 600 3 adam lamb
set -eu
cd "$(dirname "$0")/.."
steps=${1:-600} seeds=${2:-3}
shift 2 || true
[ $# -gt 0 ] || set -- adam lamb
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
out=${LEARNING_OUT:-$(mktemp -d)}
every=100 points="100 300 $steps"
[ "$steps" -ge 300 ] || points="$steps"
[ "$steps" -ge 100 ] || every=$steps
mkdir -p "$out"
args="tests/fixtures/base.json --set model.preset=\"mini\" --set train_batch_size=32
      --set train_micro_batch_size_per_gpu=16 --set steps_per_print=100 --set eval.interval=$every
      --set train_steps=$steps --set scheduler.params.total_num_steps=$steps
      --set optimizer.params.freeze_step=100 --set checkpoint.interval=0 ${LEARNING_ARGS:-}"
# loss_at DIR STEP: the held-out mlm_loss of the eval at STEP
loss_at() {
    sed -n "s/^{\"step\": $2, \"eval_mlm_loss\": \([0-9.e+-]*\),.*/\1/p" "$1/metrics.jsonl" |
        head -1
}
train() { # OPTIMIZER SEED
    dir="$out/$1-$2"
    if [ ! -f "$dir/done" ]; then
        rm -rf "$dir"
        # shellcheck disable=SC2086
        mpiexec --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -n 2 "${BERTRAIN:-./bertrain}" train $args \
            --set optimizer.type="\"$1\"" --set seed="$2" --set output_dir="\"$dir\"" \
            > "$out/$1-$2.log" 2>&1 ||
            { tail -5 "$out/$1-$2.log" >&2; echo "learning-onebit: $1 seed $2 failed" >&2; exit 1; }
        touch "$dir/done"
    fi
}
echo "2 ranks x 1 thread, BERT-mini seq 64, 32 sequences a step, $steps steps, seeds 1-$seeds;"
echo "held-out MLM loss (runs in $out)"
for pair in "$@"; do
    case $pair in
    adam) base=AdamW onebit=OneBitAdam ;;
    lamb) base=Lamb onebit=OneBitLamb ;;
    *) echo "learning-onebit: unknown pair $pair (adam or lamb)" >&2; exit 2 ;;
    esac
    for seed in $(seq "$seeds"); do
        train "$base" "$seed"
        train "$onebit" "$seed"
    done
    for at in $points; do
        for opt in "$base" "$onebit"; do
            vals=""
            for seed in $(seq "$seeds"); do vals="$vals $(loss_at "$out/$opt-$seed" "$at")"; done
            echo "$opt $at $vals"
        done | awk '{
            n = NF - 2; s = 0; lo = 1e30; hi = -1e30; v = ""
            for (i = 3; i <= NF; i++) { s += $i; if ($i < lo) lo = $i; if ($i > hi) hi = $i; v = v sprintf(" %.4f", $i) }
            mean[NR] = s / n; spread[NR] = hi - lo; name[NR] = $1; at = $2; vals[NR] = v }
            END {
            for (k = 1; k <= 2; k++)
                printf "step %4d  %-10s seeds%s  mean %.4f  spread %.4f\n", at, name[k], vals[k], mean[k], spread[k]
            d = mean[2] - mean[1]; if (d < 0) d = -d
            w = spread[1] > spread[2] ? spread[1] : spread[2]
            printf "step %4d  %s - %s: %+.4f, %s the seed spread %.4f\n", at, name[2], name[1],
                   mean[2] - mean[1], d <= w ? "within" : "OUTSIDE", w }'
    done
done
