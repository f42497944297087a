#!/bin/sh
# What each fused op saves: `bertrain bench` with every fusion, with all of
# them off, and with each one off alone, alternating the variants in one run
# (ROUNDS rounds) so that a noisy machine hits them alike.
#   sh scripts/bench-fusions.sh BACKEND PRESET SEQ BATCH STEPS ROUNDS [THREADS]
# e.g. sh scripts/bench-fusions.sh cpu mini 128 16 3 2 2
#      sh scripts/bench-fusions.sh opencl:0:0 mini 128 16 2 2 2
# Prints one line per run: variant, round, ms/step, samples/s; then the mean
# ms/step of each variant and its ratio to the all-fused one.
set -u
cd "$(dirname "$0")/.." || exit 2
[ $# -ge 6 ] || { echo "usage: sh scripts/bench-fusions.sh BACKEND PRESET SEQ BATCH STEPS ROUNDS [THREADS]" >&2; exit 2; }
backend=$1 preset=$2 seq=$3 batch=$4 steps=$5 rounds=$6 threads=${7:-0}
[ -x ./bertrain ] || { echo "bench-fusions: build ./bertrain first" >&2; exit 2; }
out=$(mktemp) || exit 2
trap 'rm -f "$out"' EXIT
r=1
while [ "$r" -le "$rounds" ]; do
    for variant in fused all gelu join attention; do
        set -- --preset "$preset" --seq "$seq" --batch "$batch" --steps "$steps" \
            --warmup 1 --backend "$backend" --threads "$threads"
        if [ "$variant" = fused ]; then set -- "$@" --unfused none; else set -- "$@" --unfused "$variant"; fi
        res=$(./bertrain bench "$@" 2>&1) || { echo "$res" >&2; exit 1; }
        ms=$(echo "$res" | sed -n 's/^ms\/step: //p')
        sps=$(echo "$res" | sed -n 's/^samples\/s: //p')
        printf '%-10s round %d  ms/step %10s  samples/s %8s\n' "unfused:$variant" "$r" "$ms" "$sps" |
            sed 's/unfused:fused/fused     /'
        echo "$variant $ms" >> "$out"
    done
    r=$((r + 1))
done
awk '{ s[$1] += $2; n[$1]++ }
     END { base = s["fused"] / n["fused"];
           split("fused all gelu join attention", v, " ");
           for (i = 1; i <= 5; i++)
               printf "mean %-22s ms/step %10.1f  x%.3f of fused\n",
                      (v[i] == "fused" ? "all fused" : "unfused " v[i]), s[v[i]] / n[v[i]],
                      s[v[i]] / n[v[i]] / base }' "$out"
