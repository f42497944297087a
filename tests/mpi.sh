#!/bin/sh
# MPI data parallelism on one machine (mpiexec, oversubscribed):
#  - 2 ranks with shares 5+11, and 3 ranks with 1+7+8 and accumulation, give
#    the parameters of 1 rank with the whole batch (1e-5 relative L2), dropout on;
#  - a rank that fails (bad device) stops the job with a message naming it;
#  - a rank killed mid-run ends the job within 30 s, non-zero, naming the rank;
#  - a perturbed parameter on one rank is detected and re-synced.
# (Auto shares and mixed backends: tests/mpi-mixed.sh.)
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
mpi_setup
CMP="$top_builddir/tests/c/st_compare"
common="--set train_steps=5 --set steps_per_print=1 --set data.seq_len=32 --set data.valid=\"\"
        --set train_batch_size=16 --set model.hidden_dropout_prob=0.1"

run() { # NAME NRANKS ARGS...: train, keep the log, check every rank reported
    name=$1 n=$2
    shift 2
    # shellcheck disable=SC2086
    $MPI -n "$n" "${TRAIN_BIN:-$BERTRAIN}" train tests/fixtures/base.json $common --set output_dir="\"$tmpdir/$name\"" \
        "$@" > "$tmpdir/$name.log" 2>&1 || { cat "$tmpdir/$name.log"; fail "$name: exit $?"; }
    for r in $(seq 0 $((n - 1))); do
        grep -q "^ *$r | " "$tmpdir/$name.log" || { cat "$tmpdir/$name.log"; fail "$name: rank $r did not run"; }
    done
    [ -f "$tmpdir/$name/ckpt-00000005/model.safetensors" ] || fail "$name: no checkpoint"
}

# reference: one rank, the whole batch
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $common --set train_micro_batch_size_per_gpu=16 \
    --set output_dir="\"$tmpdir/one\"" > "$tmpdir/one.log" 2>&1 || fail "one rank failed"
ref="$tmpdir/one/ckpt-00000005/model.safetensors"

run two 2 --set 'distributed.shares=[5,11]' --set train_micro_batch_size_per_gpu=4
"$CMP" "$ref" "$tmpdir/two/ckpt-00000005/model.safetensors" 1e-5 || fail "2 ranks 5+11 differ"
run three 3 --set 'distributed.shares=[1,7,8]' --set train_micro_batch_size_per_gpu=3
"$CMP" "$ref" "$tmpdir/three/ckpt-00000005/model.safetensors" 1e-5 || fail "3 ranks 1+7+8 differ"
grep "loss" "$tmpdir/one.log" | sed 's/ | [0-9.]* samples.*//' > "$tmpdir/l1"
grep "^step" "$tmpdir/three.log" | sed 's/ | [0-9.]* samples.*//' > "$tmpdir/l3"
echo "per-step losses, 1 rank vs 3 ranks:"; paste -d'\n' "$tmpdir/l1" "$tmpdir/l3"

# a rank that fails stops the job, naming it
# shellcheck disable=SC2086
if timeout 60 $MPI -n 2 "$BERTRAIN" train tests/fixtures/base.json $common \
    --set 'devices=["cpu", "nosuchdevice"]' --set train_micro_batch_size_per_gpu=8 --set output_dir="\"$tmpdir/bad\"" > "$tmpdir/bad.log" 2>&1; then
    fail "a bad device on rank 1 did not fail the job"
fi
grep -q "rank 1.*nosuchdevice" "$tmpdir/bad.log" || { cat "$tmpdir/bad.log"; fail "bad device: rank not named"; }
echo "ok   bad device on rank 1: $(grep -m1 'rank 1' "$tmpdir/bad.log")"

# a killed rank ends the job within 30 s
start=$(date +%s)
# shellcheck disable=SC2086
need_test_build
if BERTRAIN_TEST_DIE=1,2 timeout 60 $MPI -n 2 "$BERTRAIN_T" train tests/fixtures/base.json $common \
    --set train_steps=1000 --set train_micro_batch_size_per_gpu=8 --set output_dir="\"$tmpdir/kill\"" > "$tmpdir/kill.log" 2>&1; then
    fail "a killed rank did not fail the job"
fi
took=$(( $(date +%s) - start ))
[ "$took" -le 30 ] || fail "the job took ${took}s to end after a rank was killed"
grep -q "process rank 1 " "$tmpdir/kill.log" || { cat "$tmpdir/kill.log"; fail "killed rank not named"; }
echo "ok   killed rank 1: job ended in ${took}s: $(grep -m1 'process rank 1 ' "$tmpdir/kill.log")"

# drift: a perturbed parameter on rank 1 is found and re-synced from rank 0
TRAIN_BIN=$BERTRAIN_T BERTRAIN_TEST_PERTURB=1,2 run drift 2 --set distributed.sync_check_interval=1 \
    --set train_micro_batch_size_per_gpu=8
grep -q "drift step 2 | rank 1" "$tmpdir/drift.log" || { cat "$tmpdir/drift.log"; fail "drift not detected"; }
[ "$(grep -c '^drift' "$tmpdir/drift.log")" -eq 1 ] || fail "drift not re-synced (reported again later)"
echo "ok   $(grep '^drift' "$tmpdir/drift.log")"

echo "PASS: MPI equivalence, failures and drift"
