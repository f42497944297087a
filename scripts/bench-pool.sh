#!/bin/sh
# What a slow link costs a step, and what the bf16 wire and 1-bit Adam buy
# back: 2 ranks of 1 thread train BERT-mini at seq 128, 16 sequences a rank,
# over shared memory (plain mpiexec), then in an emulated pool at each RATE
# (scripts/pool.sh) with the fp32 and the bf16 gradient wire, and with
# OneBitAdam and OneBitLamb past a 2-step warm-up (steps 3 on exchange 1-bit
# momentum). Prints the mean step time of
# steps 3..STEPS of each run and its ratio to shared memory; the runs of one
# rate are interleaved over ROUNDS rounds with a shared-memory run each round,
# so a noisy machine hits all alike. Every run reduces its gradients in
# buckets of BUCKET_MB (default 2: BERT-mini's 21 MB of gradients make 11
# buckets, so the exchange overlaps the backward; at distributed.bucket_mb's
# default of 25 it is one bucket, sent after the backward).
# Usage: [BUCKET_MB=MB] scripts/bench-pool.sh [STEPS] [ROUNDS] RATE...   (e.g. 12 2 100mbit 200mbit 400mbit)
set -eu
cd "$(dirname "$0")/.."
steps=${1:-12} rounds=${2:-2} bucket_mb=${BUCKET_MB:-2}
shift 2 || true
[ $# -gt 0 ] || set -- 100mbit 200mbit 400mbit
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args="tests/fixtures/base.json --set model.preset=\"mini\" --set data.seq_len=128
      --set train_batch_size=32 --set train_micro_batch_size_per_gpu=16 --set data.valid=\"\"
      --set steps_per_print=1 --set train_steps=$steps --set distributed.bucket_mb=$bucket_mb"
# ms_step DIR: mean wall time of steps 3..STEPS from metrics.jsonl (32 samples / samples_per_s)
ms_step() {
    sed -n 's/^{"step": \([0-9]*\), .*"samples_per_s": \([0-9.e+]*\),.*/\1 \2/p' "$1/metrics.jsonl" |
        awk '$1 >= 3 { t += 32000 / $2; n++ } END { printf "%.1f", t / n }'
}
run() { # NAME WIRE LAUNCH...: the gradient wire fp32 or bf16, or OneBitAdam / OneBitLamb
    name=$1 wire=$2
    shift 2
    rm -rf "$out/$name"
    opt=""
    case $wire in OneBit*)
        opt="--set optimizer.type=\"$wire\" --set optimizer.params.freeze_step=2" wire=fp32 ;;
    esac
    # shellcheck disable=SC2086
    "$@" -n 2 ./bertrain train $args $opt --set distributed.grad_dtype="\"$wire\"" \
        --set output_dir="\"$out/$name\"" > "$out/$name.log" 2>&1 ||
        { tail -5 "$out/$name.log" >&2; echo "bench-pool: $name failed" >&2; exit 1; }
    ms_step "$out/$name"
}
pool_args="--oversubscribe --bind-to none -x OMP_NUM_THREADS=1"
mpi="mpiexec $pool_args"
echo "2 ranks x 1 thread, BERT-mini seq 128, 16 sequences a rank, $bucket_mb MB buckets; ms/step over steps 3-$steps"
for rate in "$@"; do
    shm=0 fp=0 bf=0 ob=0 ol=0
    for r in $(seq "$rounds"); do
        a=$(run shm fp32 $mpi)
        b=$(run fp32 fp32 sh scripts/pool.sh "$rate" 20ms -- $pool_args)
        c=$(run bf16 bf16 sh scripts/pool.sh "$rate" 20ms -- $pool_args)
        d=$(run 1bit OneBitAdam sh scripts/pool.sh "$rate" 20ms -- $pool_args)
        e=$(run 1lamb OneBitLamb sh scripts/pool.sh "$rate" 20ms -- $pool_args)
        echo "  $rate round $r: shared memory $a, fp32 wire $b, bf16 wire $c, 1-bit Adam $d, 1-bit LAMB $e ms/step"
        shm=$(echo "$shm $a" | awk '{ print $1 + $2 }')
        fp=$(echo "$fp $b" | awk '{ print $1 + $2 }')
        bf=$(echo "$bf $c" | awk '{ print $1 + $2 }')
        ob=$(echo "$ob $d" | awk '{ print $1 + $2 }')
        ol=$(echo "$ol $e" | awk '{ print $1 + $2 }')
    done
    echo "$rate $shm $fp $bf $ob $ol $rounds" | awk '{ r = $7
        printf "%s: shared memory %.1f ms, fp32 wire %.1f ms (%.2fx), bf16 wire %.1f ms (%.2fx), 1-bit Adam %.1f ms (%.2fx), 1-bit LAMB %.1f ms (%.2fx)\n",
        $1, $2 / r, $3 / r, $3 / $2, $4 / r, $4 / $2, $5 / r, $5 / $2, $6 / r, $6 / $2 }'
done
