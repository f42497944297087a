#!/bin/sh
# Which schedule Open MPI's MPI_Iallreduce runs, and what it reaches: the
# gradient all-reduce's call (dist_iallreduce_sum_f32: fp32, in place) on MB
# megabytes, REPS times, with libnbc's algorithms: bertrain's choice (3,
# reduce-scatter plus all-gather, set by dist_init unless the environment
# names one), 1 the ring, 2 the binomial tree (libnbc's own choice for an
# in-place call). Over TCP on loopback with 2 and 4 ranks, then in an emulated
# pool at RATE (scripts/pool.sh). Prints the time and the bus bandwidth,
# 2 (W-1)/W x bytes / time.
# Usage: scripts/bench-allreduce.sh [MB] [REPS] [RATE]   (e.g. 64 5 400mbit)
set -eu
cd "$(dirname "$0")/.."
mb=${1:-64} reps=${2:-5} rate=${3:-400mbit}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args="--oversubscribe --bind-to none"
prog="tests/c/test_dist allreduce $mb $reps"
for n in 2 4; do
    for alg in default 1 2; do
        set -- $args --mca btl tcp,self
        [ "$alg" = default ] || set -- "$@" --mca coll_libnbc_iallreduce_algorithm "$alg"
        printf 'tcp loopback, algorithm %-7s: ' "$alg"
        mpiexec "$@" -n "$n" $prog
    done
done
for alg in default 2; do
    set -- $args
    [ "$alg" = default ] || set -- "$@" --mca coll_libnbc_iallreduce_algorithm "$alg"
    printf 'pool %s, algorithm %-7s: ' "$rate" "$alg"
    sh scripts/pool.sh "$rate" 20ms -- "$@" -n 2 $prog
done
