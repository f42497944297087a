#!/bin/sh
# Resume across world sizes (MPI, one machine): 20 steps on 1 rank + 20
# resumed on 2 ranks, and 20 on 2 + 20 on 1, against 40 straight on 1 rank:
# the data order is the same (the run position continues), per-step losses
# agree within 1e-5 and the weights within 1e-5 relative L2. Also: SIGTERM to
# one rank stops every rank after the same step with a checkpoint, exit 0.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
mpi_setup
CMP="$top_builddir/tests/c/st_compare"
small="--set data.seq_len=32 --set train_batch_size=16 --set data.valid=\"\" --set steps_per_print=1"
one="--set train_micro_batch_size_per_gpu=16"
two="--set train_micro_batch_size_per_gpu=8"
losses() { grep -o '"step": [0-9]*, "loss": [^,]*' "$1" | sed 's/"step": //; s/, "loss": / /'; }

train() { # NRANKS OUT STEPS ARGS...
    n=$1 out=$2 steps=$3
    shift 3
    if [ "$n" -eq 1 ]; then launch=""; else launch="$MPI -n $n"; fi
    # shellcheck disable=SC2086
    $launch "$BERTRAIN" train tests/fixtures/base.json $small --set train_steps="$steps" \
        --set output_dir="\"$tmpdir/$out\"" "$@" > "$tmpdir/$out.$steps.log" 2>&1 ||
        { cat "$tmpdir/$out.$steps.log"; fail "$out: $n rank(s) to step $steps failed"; }
}

train 1 straight 40 $one
losses "$tmpdir/straight/metrics.jsonl" > "$tmpdir/straight.losses"
for pair in "1 2" "2 1"; do
    set -- $pair
    name="r$1to$2"
    if [ "$1" -eq 1 ]; then a=$one b=$two; else a=$two b=$one; fi
    train "$1" "$name" 20 $a
    train "$2" "$name" 40 $b --resume auto
    grep -q "^resume: from $tmpdir/$name/ckpt-00000020 (step 20, sample 320" "$tmpdir/$name.40.log" ||
        { cat "$tmpdir/$name.40.log"; fail "$name: did not resume from step 20 at sample 320"; }
    losses "$tmpdir/$name/metrics.jsonl" > "$tmpdir/$name.losses"
    [ "$(wc -l < "$tmpdir/$name.losses")" -eq 40 ] || fail "$name: expected 40 loss lines"
    worst=$(paste "$tmpdir/straight.losses" "$tmpdir/$name.losses" | awk '
        $1 != $3 { print "step mismatch"; exit }
        { d = $2 - $4; if (d < 0) d = -d; d /= ($2 > 0 ? $2 : 1); if (d > w) w = d }
        END { printf "%.2e", w }')
    awk -v w="$worst" 'BEGIN { exit !(w + 0 <= 1e-5) }' ||
        fail "$name: per-step losses differ by $worst (relative) from 1 rank straight"
    "$CMP" "$tmpdir/straight/ckpt-00000040/model.safetensors" \
        "$tmpdir/$name/ckpt-00000040/model.safetensors" 1e-5 > "$tmpdir/$name.cmp" ||
        { cat "$tmpdir/$name.cmp"; fail "$name: weights differ"; }
    echo "ok   $1 rank(s) to step 20, then $2 to 40: losses within $worst of 40 steps on 1 rank; weights: $(cat "$tmpdir/$name.cmp")"
done

# SIGTERM to one rank only: every rank stops after the same step, checkpoint, exit 0
# shellcheck disable=SC2086
$MPI -n 2 "$BERTRAIN" train tests/fixtures/base.json $small $two --set train_steps=100000 \
    --set output_dir="\"$tmpdir/sig\"" > "$tmpdir/sig.log" 2>&1 &
pid=$!
n=0
until grep -q '^step *3 |' "$tmpdir/sig.log" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$tmpdir/sig.log"; fail "signal run ended early"; }
    [ $n -lt 2400 ] || fail "signal run: no step 3 in 120 s"
    sleep 0.05
    n=$((n + 1))
done
ranks=$(ps -o pid= --ppid "$pid" 2>/dev/null | tr -d ' ')
victim=$(echo "$ranks" | tail -1)
if [ -z "$victim" ]; then
    kill "$pid"
    wait "$pid"
    skip_part "SIGTERM to one rank (cannot find the ranks' processes under mpiexec; is procps installed?)"
    finish "resume across world sizes"
fi
kill -TERM "$victim"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || { cat "$tmpdir/sig.log"; fail "SIGTERM to one rank: exit $rc"; }
at=$(sed -n 's/^bertrain: SIGTERM: stopped after step \([0-9]*\) .*/\1/p' "$tmpdir/sig.log")
[ -n "$at" ] && [ -f "$(printf '%s/sig/ckpt-%08d/optim.bin' "$tmpdir" "$at")" ] ||
    { cat "$tmpdir/sig.log"; fail "SIGTERM to one rank: no checkpoint"; }
echo "ok   SIGTERM to one of 2 ranks: both stopped after step $at with a checkpoint, exit 0"
finish "resume across world sizes; stops agree across ranks"
