#!/bin/sh
# The CPU backend on a shared node: the demo config (100 steps, no eval) and
# `bench --preset mini --seq 128 --batch 16` at 1 and 2 threads, idle and
# beside 1 and 2 busy processes at normal priority (shell loops, not pinned),
# each run with the threads waiting as bertrain sets them (passively) and as
# OpenMP's default does (spin, then sleep: BERTRAIN_OMP_WAIT_SET=1 skips
# bertrain's set-up), in ROUNDS rounds that alternate the cases. Prints one
# line a run and a table of the medians (seconds for the demo, samples/s for
# mini). Run from a built tree: sh scripts/bench-shared-node.sh [ROUNDS]
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
# run WORK THREADS WAIT: one measurement (demo: seconds; mini: samples/s)
run() {
    work=$1 threads=$2 wait=$3
    envs=""
    [ "$wait" = default ] && envs="BERTRAIN_OMP_WAIT_SET=1"
    if [ "$work" = demo ]; then
        s=$(date +%s.%N)
        env $envs "$B" train "$top/examples/demo.json" --set data.train="\"$top/data/demo/train.shard\"" \
            --set data.valid='""' --set data.vocab="\"$top/data/demo/vocab.txt\"" --set train_steps=100 \
            --set eval.interval=0 --set cpu_threads=$threads --set output_dir="\"$tmp/demo-$$\"" \
            > "$tmp/log" 2>&1 || { tail -5 "$tmp/log" >&2; exit 1; }
        rm -rf "$tmp/demo-$$"
        awk -v a="$(date +%s.%N)" -v b="$s" 'BEGIN { printf "%.2f\n", a - b }'
    else
        env $envs "$B" bench --preset mini --seq 128 --batch 16 --steps 3 --warmup 1 --backend cpu \
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
                for wait in passive default; do
                    v=$(run "$work" "$threads" "$wait")
                    echo "round $r: $work, $threads thread(s), $load busy, $wait wait: $v"
                    echo "$work $threads $load $wait $v" >> "$tmp/results"
                done
            done
        done
        unbusy
    done
    r=$((r + 1))
done
echo
echo "| work | threads | busy processes | wait: passive (bertrain) | wait: OpenMP's default |"
echo "|---|---|---|---|---|"
for work in demo mini; do for threads in 1 2; do for load in 0 1 2; do
    med() { awk -v w="$work" -v t="$threads" -v l="$load" -v p="$1" '$1 == w && $2 == t && $3 == l && $4 == p { print $5 }' "$tmp/results" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
    echo "| $work | $threads | $load | $(med passive) | $(med default) |"
done; done; done
echo "(demo: seconds for 100 steps, lower is better; mini: samples/s, higher is better)"
