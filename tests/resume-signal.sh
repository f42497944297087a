#!/bin/sh
# Clean stops: SIGTERM during a run finishes the step, saves a checkpoint and
# exits 0, and resuming from it is exact (cmp with an uninterrupted run of
# the same length); SIGUSR1 does the same; a second SIGINT aborts at once
# with 130; checkpoint.max_runtime stops by itself. Checkpoint writing runs in
# the background: with the writer paused (test hook), training goes on.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
need_test_build
export OMP_NUM_THREADS=1
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=1"

start_run() { # NAME ARGS...: start a long run in the background; pid in $pid
    name=$1
    shift
    # shellcheck disable=SC2086
    "${TRAIN_BIN:-$BERTRAIN}" train tests/fixtures/base.json $small --set train_steps=100000 \
        --set output_dir="\"$tmpdir/$name\"" "$@" > "$tmpdir/$name.log" 2>&1 &
    pid=$!
}
wait_step() { # LOG N: until the log shows step N (at most 120 s)
    n=0
    until grep -q "^step *$2 |" "$1" 2>/dev/null; do
        kill -0 "$pid" 2>/dev/null || { cat "$1"; fail "the run ended early"; }
        [ $n -lt 2400 ] || fail "no step $2 within 120 s"
        sleep 0.05
        n=$((n + 1))
    done
}

# SIGTERM: checkpoint at the step where it stopped, exit 0, exact resume
start_run term
wait_step "$tmpdir/term.log" 5
kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || { cat "$tmpdir/term.log"; fail "SIGTERM: exit $rc, wanted 0"; }
at=$(sed -n 's/^bertrain: SIGTERM: stopped after step \([0-9]*\) .*/\1/p' "$tmpdir/term.log")
[ -n "$at" ] || { cat "$tmpdir/term.log"; fail "SIGTERM: no 'stopped after step' line"; }
ck=$(printf '%s/term/ckpt-%08d' "$tmpdir" "$at")
[ -f "$ck/model.safetensors" ] || fail "SIGTERM: no checkpoint $ck"
echo "ok   SIGTERM: exit 0: $(grep '^bertrain: SIGTERM' "$tmpdir/term.log" | sed "s|$tmpdir/||")"
end=$((at + 5))
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set train_steps=$end --set output_dir="\"$tmpdir/term\"" \
    --resume auto > "$tmpdir/term2.log" 2>&1 || { cat "$tmpdir/term2.log"; fail "resume after SIGTERM"; }
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set train_steps=$end --set output_dir="\"$tmpdir/straight\"" \
    > "$tmpdir/straight.log" 2>&1 || fail "straight run failed"
f=$(printf 'ckpt-%08d' "$end")
cmp "$tmpdir/straight/$f/model.safetensors" "$tmpdir/term/$f/model.safetensors" ||
    fail "stopped by SIGTERM at $at and resumed to $end: weights differ from $end steps straight"
cmp "$tmpdir/straight/$f/optim.bin" "$tmpdir/term/$f/optim.bin" || fail "optim.bin differs"
echo "ok   SIGTERM at step $at + resume to $end = $end steps straight (cmp model.safetensors, optim.bin)"

# SIGUSR1: the same
start_run usr1
wait_step "$tmpdir/usr1.log" 3
kill -USR1 "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] && grep -q '^bertrain: SIGUSR1: stopped after step' "$tmpdir/usr1.log" ||
    { cat "$tmpdir/usr1.log"; fail "SIGUSR1: exit $rc"; }
ls "$tmpdir/usr1" | grep -q '^ckpt-' || fail "SIGUSR1: no checkpoint"
echo "ok   SIGUSR1: exit 0 with a checkpoint"

# SIGINT twice: abort now, 130 (the second one while the stop's checkpoint is
# being written, which the test hook holds until the test is done)
export BERTRAIN_TEST_CKPT="begin,0,wait:$tmpdir/int-go"
TRAIN_BIN=$BERTRAIN_T start_run int
unset BERTRAIN_TEST_CKPT
wait_step "$tmpdir/int.log" 3
kill -INT "$pid"
n=0
until grep -q "test hook" "$tmpdir/int.log" || [ $n -ge 600 ]; do sleep 0.05; n=$((n + 1)); done
kill -INT "$pid"
wait "$pid"
rc=$?
touch "$tmpdir/int-go"
[ "$rc" -eq 130 ] || { cat "$tmpdir/int.log"; fail "two SIGINTs: exit $rc, wanted 130"; }
echo "ok   two SIGINTs: exit 130: $(grep -m1 'second SIGINT' "$tmpdir/int.log")"

# checkpoint.max_runtime
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set train_steps=100000 --set checkpoint.max_runtime=1.5 \
    --set output_dir="\"$tmpdir/rt\"" > "$tmpdir/rt.log" 2>&1 || { cat "$tmpdir/rt.log"; fail "max_runtime: exit $?"; }
grep -q '^bertrain: checkpoint.max_runtime: stopped after step' "$tmpdir/rt.log" ||
    { cat "$tmpdir/rt.log"; fail "max_runtime: no stop line"; }
ls "$tmpdir/rt" | grep -q '^ckpt-' || fail "max_runtime: no checkpoint"
echo "ok   $(grep '^bertrain: checkpoint.max_runtime' "$tmpdir/rt.log" | sed "s|$tmpdir/||")"

# background writing: checkpoint 2's writer waits until the test has seen step
# 3 in the log; steps 3.. run meanwhile
# shellcheck disable=SC2086
BERTRAIN_TEST_CKPT="begin,2,wait:$tmpdir/bg-go" "$BERTRAIN_T" train tests/fixtures/base.json $small \
    --set train_steps=6 --set checkpoint.interval=2 --set output_dir="\"$tmpdir/bg\"" > "$tmpdir/bg.log" 2>&1 &
pid=$!
wait_step "$tmpdir/bg.log" 3
touch "$tmpdir/bg-go"
wait "$pid" || { cat "$tmpdir/bg.log"; fail "paused writer: run failed"; }
l3=$(grep -n '^step *3 |' "$tmpdir/bg.log" | cut -d: -f1)
lc=$(grep -n '^checkpoint step 2 ->' "$tmpdir/bg.log" | cut -d: -f1)
[ -n "$l3" ] && [ -n "$lc" ] && [ "$l3" -lt "$lc" ] ||
    { cat "$tmpdir/bg.log"; fail "training did not go on while checkpoint 2 was being written"; }
for s in 2 4 6; do [ -f "$tmpdir/bg/ckpt-0000000$s/state.json" ] || fail "bg: no checkpoint $s"; done
echo "ok   training went on while checkpoint 2 was written: $(grep '^checkpoint step 2' "$tmpdir/bg.log" | sed "s|$tmpdir/||")"
echo "PASS: signals and max_runtime stop with a checkpoint; writing is in the background"
