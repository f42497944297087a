#!/bin/sh
# What each fused op saves, what running the top layer at the heads' rows
# saves, and what a change saves against the build before it: `bertrain
# bench` in several variants, alternating them in one run (ROUNDS rounds) so
# that a noisy machine hits them alike.
#   sh scripts/bench-fusions.sh BACKEND PRESET SEQ BATCH STEPS ROUNDS [THREADS [VARIANTS]]
# VARIANTS (default "fused all gelu join attention"), a space-separated list:
#   fused      every fusion on (--unfused none), the top layer at the heads' rows
#   all|gelu|join|attention|cast   that fusion off (--unfused NAME)
#   dense-top  every fusion on, the top layer at every row (--dense-top)
#   build=DIR  as fused, but DIR/bertrain: another build, e.g. a git worktree
#              of the commit before a change
# e.g. sh scripts/bench-fusions.sh cpu mini 128 16 3 2 2
#      sh scripts/bench-fusions.sh opencl:0:0 mini 128 16 2 2 2
#      sh scripts/bench-fusions.sh cpu base 128 8 2 3 2 "fused dense-top"
#      sh scripts/bench-fusions.sh cpu base 128 8 2 4 2 "build=/tmp/before fused"
# PRECISION=bf16 (or fp16) in the environment runs every variant with
# --precision PRECISION (default fp32).
# Prints one line per run: variant, round, ms/step, samples/s; then the mean
# ms/step of each variant and its ratio to the first variant's.
set -u
cd "$(dirname "$0")/.." || exit 2
[ $# -ge 6 ] || { echo "usage: sh scripts/bench-fusions.sh BACKEND PRESET SEQ BATCH STEPS ROUNDS [THREADS [VARIANTS]]" >&2; exit 2; }
backend=$1 preset=$2 seq=$3 batch=$4 steps=$5 rounds=$6 threads=${7:-0}
variants=${8:-fused all gelu join attention}
# the bertrain binary a variant runs
bin_of() { case $1 in build=*) echo "${1#build=}/bertrain" ;; *) echo ./bertrain ;; esac; }
for variant in $variants; do # every variant known and built before any runs
    case $variant in
        fused | build=* | dense-top | all | gelu | join | attention | cast) ;;
        *) echo "bench-fusions: unknown variant $variant" >&2; exit 2 ;;
    esac
    bin=$(bin_of "$variant")
    [ -x "$bin" ] || { echo "bench-fusions: no $bin: build it first" >&2; exit 2; }
done
out=$(mktemp) || exit 2
trap 'rm -f "$out"' EXIT
r=1
while [ "$r" -le "$rounds" ]; do
    for variant in $variants; do
        set -- --preset "$preset" --seq "$seq" --batch "$batch" --steps "$steps" \
            --warmup 1 --backend "$backend" --threads "$threads" --precision "${PRECISION:-fp32}"
        case $variant in
            fused | build=*) set -- "$@" --unfused none ;;
            dense-top) set -- "$@" --unfused none --dense-top ;;
            *) set -- "$@" --unfused "$variant" ;; # all, gelu, join, attention, cast
        esac
        res=$("$(bin_of "$variant")" bench "$@" 2>&1) || { echo "$res" >&2; exit 1; }
        ms=$(echo "$res" | sed -n 's/^ms\/step: //p')
        sps=$(echo "$res" | sed -n 's/^samples\/s: //p')
        printf '%-10s round %d  ms/step %10s  samples/s %8s\n' "$variant" "$r" "$ms" "$sps"
        echo "$variant $ms" >> "$out"
    done
    r=$((r + 1))
done
awk -v variants="$variants" '{ s[$1] += $2; n[$1]++ }
     END { k = split(variants, v, " "); base = s[v[1]] / n[v[1]];
           for (i = 1; i <= k; i++)
               printf "mean %-12s ms/step %10.1f  x%.3f of %s\n", v[i], s[v[i]] / n[v[i]],
                      s[v[i]] / n[v[i]] / base, v[1] }' "$out"
