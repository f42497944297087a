#!/bin/sh
# A projection (scripts/bench-project.sh) of a configuration too large to run
# on the emulator in an afternoon, from four small runs of the same
# configuration: 3 and 4 layers, 1 and 2 micro-batches a step. Every figure
# of the per-op table is a sum over the step's launches (docs/PERFORMANCE.md,
# "Projection"), and in a step of L layers and K micro-batches
#   from 3 layers on, one more layer adds the same launches to every
#   micro-batch (a middle layer's: the bottom and the top layer and the one
#   under the top each work in their own way);
#   every micro-batch after the first launches the same work;
# so each figure q is exactly bilinear in (L, K):
#   q(L, K) = q31 + (L-3)(q41 - q31) + (K-1)(q32 - q31)
#             + (L-3)(K-1)(q42 - q41 - q32 + q31)
# where qLK is the run of L layers and K micro-batches. What is not exact:
# the bench draws new samples for every micro-batch, and the number of masked
# tokens (the top layer's rows) changes with them; the extrapolation gives
# every micro-batch after the first the second's. docs/PERFORMANCE.md
# ("Larger configurations, extrapolated") measures the error against a full
# run; tests/project-extrapolate.sh checks it on a small model.
#   sh scripts/bench-project-extrapolate.sh OUT_DIR CARDS LAYERS ACCUM BENCH-OPTIONS...
# e.g. sh scripts/bench-project-extrapolate.sh /tmp/large h100-sxm,a100-sxm-80gb 24 4 \
#          --preset large --seq 128 --batch 64 --precision bf16
# JOBS=2 runs two of the four at a time (the emulator uses one core a run).
# A run whose log ends with a projection is not run again: OUT_DIR/options
# keeps the cards and options, and another set is refused. LAYERS >= 3,
# ACCUM >= 1; BENCH-OPTIONS must not hold --layers or --accum.
set -eu
[ $# -ge 4 ] || { sed -n '2,26p' "$0"; exit 2; }
out=$1 cards=$2 layers=$3 accum=$4
shift 4
case "$layers$accum" in '' | *[!0-9]*) echo "bench-project-extrapolate: LAYERS and ACCUM must be numbers" >&2; exit 2 ;; esac
if [ "$layers" -lt 3 ] || [ "$accum" -lt 1 ]; then
    echo "bench-project-extrapolate: LAYERS >= 3 and ACCUM >= 1" >&2
    exit 2
fi
for a in "$@"; do
    case $a in --layers | --accum) echo "bench-project-extrapolate: $a is the script's own (LAYERS, ACCUM)" >&2; exit 2 ;; esac
done
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
# the runs in OUT_DIR are of these cards and options, or of none yet
options="$cards $*"
if [ -f "$out/options" ] && [ "$(cat "$out/options")" != "$options" ]; then
    echo "bench-project-extrapolate: $out holds runs of '$(cat "$out/options")', not of '$options': give another OUT_DIR" >&2
    exit 2
fi
printf '%s\n' "$options" > "$out/options"

# the counting plugin, built once (bench-project.sh builds it where missing)
[ -f "$out/plugin/count.so" ] || BUILD_ONLY=1 sh "$here/bench-project.sh" "$out/plugin" "$cards"

# corner L K: one run of L layers and K micro-batches into $out/lLkK.log
corner() {
    l=$1 k=$2
    shift 2
    log="$out/l${l}k$k.log"
    if [ -f "$log" ] && grep -q '^projected on ' "$log"; then return 0; fi
    mkdir -p "$out/l${l}k$k"
    cp "$out/plugin/count.so" "$out/l${l}k$k/count.so"
    sh "$here/bench-project.sh" "$out/l${l}k$k" "$cards" "$@" --layers "$l" --accum "$k" \
        > "$log.part" 2>&1 || {
        tail -5 "$log.part" >&2
        echo "bench-project-extrapolate: the run of $l layers x $k micro-batches failed ($log.part)" >&2
        return 1
    }
    mv "$log.part" "$log"
}
# pair L1 K1 L2 K2 OPTIONS...: two corners side by side
pair() {
    l1=$1 k1=$2 l2=$3 k2=$4
    shift 4
    corner "$l1" "$k1" "$@" & p1=$!
    corner "$l2" "$k2" "$@" & p2=$!
    st=0
    wait $p1 || st=1
    wait $p2 || st=1
    return $st
}
if [ "${JOBS:-1}" -ge 2 ]; then
    pair 4 2 3 2 "$@"
    pair 4 1 3 1 "$@"
else
    corner 4 2 "$@"
    corner 3 2 "$@"
    corner 4 1 "$@"
    corner 3 1 "$@"
fi
exec python3 "$here/project_extrapolate.py" "$out" "$layers" "$accum"
