#!/bin/sh
# Crash safety: one 60-step run (checkpoint every 2 steps) is killed with
# SIGKILL at 10 seeded random points: during steps (a random delay after the
# first step of the resumed run), and
# inside the checkpoint writer at each named point (the test hook
# BERTRAIN_TEST_CKPT: begin, model, optim, state, rename, latest). After every
# kill, `--resume auto` must start from a complete checkpoint (no damaged one
# is ever found, the step never goes back), and the finished run must equal
# an uninterrupted one: cmp of model.safetensors and optim.bin, same losses.
# BERTRAIN_KILL_SEED picks other points.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
need_test_build
export OMP_NUM_THREADS=1
seed=${BERTRAIN_KILL_SEED:-7}
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=1 --set train_steps=60 --set checkpoint.interval=2"
losses() { grep -o '"step": [0-9]*, "loss": [^,]*' "$1"; }

# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$tmpdir/ref\"" > "$tmpdir/ref.log" 2>&1 ||
    { cat "$tmpdir/ref.log"; fail "uninterrupted run failed"; }

# 10 kill points: the 7 kinds in a seeded order, then 3 more drawn at random
plan=$(awk -v seed="$seed" 'BEGIN {
    srand(seed); n = split("step begin model optim state rename latest", k, " ")
    for (i = n; i > 1; i--) { j = int(rand() * i) + 1; t = k[i]; k[i] = k[j]; k[j] = t }
    for (i = 1; i <= 10; i++) {
        kind = i <= n ? k[i] : k[int(rand() * n) + 1]
        printf "%s:%.2f:%d\n", kind, 0.6 * rand(), 2 * (int(rand() * 3) + 1)
    } }')
out="$tmpdir/run" last=0 i=0
for p in $plan; do
    i=$((i + 1))
    kind=${p%%:*} rest=${p#*:}
    delay=${rest%%:*} nth=${rest#*:}
    log="$tmpdir/kill$i.log"
    # the newest complete checkpoint (only complete ones have their final name)
    start=$(ls "$out" 2>/dev/null | sed -n 's/^ckpt-0*\([0-9][0-9]*\)$/\1/p' | sort -n | tail -1)
    if [ "$kind" = step ]; then
        # shellcheck disable=SC2086
        "$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$out\"" --resume auto > "$log" 2>&1 &
        pid=$!
        n=0
        while ! grep -q '^step ' "$log" 2>/dev/null && kill -0 "$pid" 2>/dev/null && [ $n -lt 1200 ]; do
            sleep 0.05
            n=$((n + 1))
        done
        sleep "$delay"
        kill -KILL "$pid" 2>/dev/null
        wait "$pid"
        rc=$?
        what="SIGKILL ${delay}s after the first step"
    else
        # the writer kills the process at that point of the checkpoint `nth` steps ahead
        at=$(( ${start:-0} + nth ))
        [ "$at" -le 60 ] || at=60
        # shellcheck disable=SC2086
        BERTRAIN_TEST_CKPT="$kind,$at,kill" "$BERTRAIN_T" train tests/fixtures/base.json $small \
            --set output_dir="\"$out\"" --resume auto > "$log" 2>&1
        rc=$?
        what="SIGKILL in the writer of checkpoint $at at '$kind'"
    fi
    grep -q "skipping damaged" "$log" && { cat "$log"; fail "kill $i: found a damaged checkpoint"; }
    from=$(sed -n 's/^resume: from .*ckpt-0*\([0-9][0-9]*\) (step.*/\1/p' "$log")
    from=${from:-0}
    [ "$from" = "${start:-0}" ] ||
        fail "kill $i: resumed from step $from; the newest complete checkpoint was ${start:-none}"
    [ "$from" -ge "$last" ] || fail "kill $i: resumed from step $from after an earlier resume from $last"
    last=$from
    done_steps=$(grep -c '^step ' "$log")
    case $rc in
    137 | 0) ;;
    *) cat "$log"; fail "kill $i ($what): exit $rc" ;;
    esac
    echo "ok   kill $i: $what: resumed from step $from, ran $done_steps step(s), exit $rc"
done
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$out\"" --resume auto > "$tmpdir/final.log" 2>&1 ||
    { cat "$tmpdir/final.log"; fail "the final resume failed"; }
grep -q "skipping damaged" "$tmpdir/final.log" && fail "final resume: found a damaged checkpoint"
echo "ok   final run: $(grep -m1 '^resume: ' "$tmpdir/final.log")"
cmp "$tmpdir/ref/ckpt-00000060/model.safetensors" "$out/ckpt-00000060/model.safetensors" ||
    fail "model.safetensors after 10 kills differs from the uninterrupted run"
cmp "$tmpdir/ref/ckpt-00000060/optim.bin" "$out/ckpt-00000060/optim.bin" ||
    fail "optim.bin after 10 kills differs from the uninterrupted run"
losses "$tmpdir/ref/metrics.jsonl" > "$tmpdir/ref.losses"
losses "$out/metrics.jsonl" > "$tmpdir/run.losses"
diff "$tmpdir/ref.losses" "$tmpdir/run.losses" > /dev/null ||
    { diff "$tmpdir/ref.losses" "$tmpdir/run.losses"; fail "per-step losses differ"; }
echo "PASS: 10 SIGKILLs (seed $seed); every resume started from a complete checkpoint; final weights and moments identical (cmp), 60 losses identical"
