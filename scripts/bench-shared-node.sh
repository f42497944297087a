#!/bin/sh
# The CPU backend on a shared node: the demo config (100 steps, no eval) and
# `bench --preset mini --seq 128 --batch 16` at 1 and 2 threads (cpu_threads,
# --threads), idle and beside 1 and 2 busy processes at normal priority
# (shell loops, not pinned), in ROUNDS rounds that alternate the cases.
# Prints one line a run and a table of the medians (seconds for the demo,
# samples/s for mini) with the ratio of 2 threads to 1. Run from a built
# tree: sh scripts/bench-shared-node.sh [ROUNDS]
set -eu
rounds=${1:-3}
top=$(cd "$(dirname "$0")/.." && pwd)
B="$top/bertrain"
[ -x "$B" ] || { echo "bench-shared-node: build bertrain first (make)" >&2; exit 2; }
tmp=$(mktemp -d)
busy_pids=""
cleanup() {
    for p in $busy_pids; do kill "$p" 2> /dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
busy() { # N: start N busy loops
    i=0
    while [ "$i" -lt "$1" ]; do
        sh -c 'while :; do :; done' &
        busy_pids="$busy_pids $!"
        i=$((i + 1))
    done
}
unbusy() {
    for p in $busy_pids; do kill "$p" 2> /dev/null || true; done
    for p in $busy_pids; do wait "$p" 2> /dev/null || true; done
    busy_pids=""
}
# run WORK THREADS: one measurement (demo: seconds; mini: samples/s)
run() {
    work=$1 threads=$2
    if [ "$work" = demo ]; then
        s=$(date +%s.%N)
        "$B" train "$top/examples/demo.json" --set data.train="\"$top/data/demo/train.shard\"" \
            --set data.valid='""' --set data.vocab="\"$top/data/demo/vocab.txt\"" --set train_steps=100 \
            --set eval.interval=0 --set cpu_threads=$threads --set output_dir="\"$tmp/demo-$$\"" \
            > "$tmp/log" 2>&1 || { tail -5 "$tmp/log" >&2; exit 1; }
        rm -rf "$tmp/demo-$$"
        awk -v a="$(date +%s.%N)" -v b="$s" 'BEGIN { printf "%.2f\n", a - b }'
    else
        "$B" bench --preset mini --seq 128 --batch 16 --steps 3 --warmup 1 --backend cpu \
            --threads "$threads" > "$tmp/log" 2>&1 || { tail -5 "$tmp/log" >&2; exit 1; }
        sed -n 's/^samples\/s: //p' "$tmp/log"
    fi
}
: > "$tmp/results"
r=1
while [ "$r" -le "$rounds" ]; do
    for load in 0 1 2; do
        busy "$load"
        for work in demo mini; do
            for threads in 1 2; do
                v=$(run "$work" "$threads")
                echo "round $r: $work, $threads thread(s), $load busy: $v"
                echo "$work $threads $load $v" >> "$tmp/results"
            done
        done
        unbusy
    done
    r=$((r + 1))
done
echo
echo "| work | busy processes | 1 thread | 2 threads | 2 threads / 1 thread (speed) |"
echo "|---|---|---|---|---|"
med() { # WORK THREADS LOAD: the median of the runs
    awk -v w="$1" -v t="$2" -v l="$3" '$1 == w && $2 == t && $3 == l { print $4 }' "$tmp/results" |
        sort -g | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'
}
for work in demo mini; do for load in 0 1 2; do
    one=$(med $work 1 $load) two=$(med $work 2 $load)
    ratio=$(awk -v a="$one" -v b="$two" -v w="$work" 'BEGIN { printf "%.2f", w == "demo" ? a / b : b / a }')
    echo "| $work | $load | $one | $two | $ratio |"
done; done
echo "(demo: seconds for 100 steps, lower is better; mini: samples/s, higher is better)"
