#!/bin/sh
# What running the top layer at the heads' rows saves: `bertrain bench` as it
# is and with --dense-top (that layer at every row), alternating in one run
# (ROUNDS rounds) so that a noisy machine hits both alike.
#   sh scripts/bench-top.sh BACKEND PRESET SEQ BATCH STEPS ROUNDS [THREADS]
# e.g. sh scripts/bench-top.sh cpu base 128 8 2 3 2
# Prints one line per run (variant, round, ms/step, samples/s, the top
# layer's rows), then each variant's mean ms/step and the ratio.
set -u
cd "$(dirname "$0")/.." || exit 2
[ $# -ge 6 ] || { echo "usage: sh scripts/bench-top.sh BACKEND PRESET SEQ BATCH STEPS ROUNDS [THREADS]" >&2; exit 2; }
backend=$1 preset=$2 seq=$3 batch=$4 steps=$5 rounds=$6 threads=${7:-0}
[ -x ./bertrain ] || { echo "bench-top: build ./bertrain first" >&2; exit 2; }
out=$(mktemp) || exit 2
trap 'rm -f "$out"' EXIT
r=1
while [ "$r" -le "$rounds" ]; do
    for variant in top dense; do
        set -- --preset "$preset" --seq "$seq" --batch "$batch" --steps "$steps" \
            --warmup 1 --backend "$backend" --threads "$threads"
        [ "$variant" = dense ] && set -- "$@" --dense-top
        res=$(./bertrain bench "$@" 2>&1) || { echo "$res" >&2; exit 1; }
        ms=$(echo "$res" | sed -n 's/^ms\/step: //p')
        sps=$(echo "$res" | sed -n 's/^samples\/s: //p')
        rows=$(echo "$res" | sed -n 's/^top layer: \([0-9.]*\) of.*/\1/p')
        printf '%-6s round %d  ms/step %10s  samples/s %8s  top layer rows/seq %6s\n' \
            "$variant" "$r" "$ms" "$sps" "$rows"
        echo "$variant $ms" >> "$out"
    done
    r=$((r + 1))
done
awk '{ s[$1] += $2; n[$1]++ }
     END { t = s["top"] / n["top"]; d = s["dense"] / n["dense"];
           printf "mean top layer at the heads rows  ms/step %10.1f\n", t;
           printf "mean --dense-top                  ms/step %10.1f  (x%.3f of the heads rows)\n", d, d / t }' "$out"
