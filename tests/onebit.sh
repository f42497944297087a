#!/bin/sh
# 1-bit Adam (optimizer.type "OneBitAdam"), MPI on one machine:
#  - the dist layer's compressed exchange over 3 ranks with uneven chunks
#    equals its definition bit for bit, also after its errors were gathered
#    to a file and loaded back (tests/c/test_dist onebit; the compression's
#    own checks are tests/c/test_onebit);
#  - 2 ranks train with freeze_step 4: the step lines say fp32 before the
#    freeze and 1-bit after it, with at least 20x fewer bytes; the loss falls;
#    a second run gives the same bits;
#  - stopped at step 6 (a checkpoint with onebit.bin) and resumed, the run
#    ends with the model, optim.bin and onebit.bin of one that was not (cmp);
#  - the step-6 checkpoint resumed on 4 ranks (the rule: each rank starts
#    from the mean worker error) and on 1 rank (no exchange: the errors are
#    not used) says so and trains on with a finite falling loss;
#  - uneven shares (12 and 4 sequences) and auto shares with rebalancing
#    train; each rank sends the same bytes whatever its share;
#  - 1-bit LAMB ("OneBitLamb"): its warm-up gives LAMB's weights bit for bit
#    (cmp at the freeze), it sends 1-bit after, its loss falls, and stopped
#    at step 6 and resumed it ends with the bits of one that was not (model,
#    optim.bin, onebit.bin, onebit_lamb.bin);
#  - 1-bit LAMB's arithmetic against numpy (tests/python/onebit_lamb_ref.py)
#    on one rank's consecutive checkpoints: the warm-up's EMA of trust ratios,
#    and at two compressed steps v frozen, v_fresh, each tensor's factor and
#    the weights (weight decay 1 and factor_threshold 0.9, so that the
#    factor's mixing and bounds show).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
mpi_setup
$MPI -n 3 "$top_builddir/tests/c/test_dist" onebit 1003 "$tmpdir/unit.bin" > "$tmpdir/unit.log" 2>&1 ||
    { cat "$tmpdir/unit.log"; fail "the 1-bit exchange differs from its definition"; }
[ "$(grep -c 'equal the simulation bit for bit' "$tmpdir/unit.log")" -eq 3 ] ||
    { cat "$tmpdir/unit.log"; fail "not every rank checked its exchange"; }
echo "ok   $(grep -m1 'rank 0' "$tmpdir/unit.log")"

small="--set data.seq_len=32 --set train_batch_size=16 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=1 --set optimizer.type=\"OneBitAdam\"
       --set optimizer.params.freeze_step=4 --set checkpoint.interval=6"
train() { # RANKS OUT STEPS ARGS...
    n=$1 out=$2 steps=$3
    shift 3
    # shellcheck disable=SC2086
    $MPI -n "$n" "$BERTRAIN" train tests/fixtures/base.json $small --set train_steps="$steps" \
        --set output_dir="\"$tmpdir/$out\"" "$@" > "$tmpdir/$out.$steps.log" 2>&1 ||
        { cat "$tmpdir/$out.$steps.log"; fail "$out: $n ranks to step $steps failed"; }
}
sent() { sed -n "s/^step *$2 | .* | sent \([0-9.]*\) MB \([a-z0-9-]*\) .*/\1 \2/p" "$1"; }
loss() { sed -n "s/^{\"step\": $2, \"loss\": \([^,]*\),.*/\1/p" "$1/metrics.jsonl"; }

train 2 straight 12
train 2 again 12
set -- $(sent "$tmpdir/straight.12.log" 4) $(sent "$tmpdir/straight.12.log" 5)
[ "$#" -eq 4 ] && [ "$2" = fp32 ] && [ "$4" = 1-bit ] ||
    { grep '^step' "$tmpdir/straight.12.log"; fail "the step lines do not say fp32 before the freeze and 1-bit after it"; }
awk -v a="$1" -v b="$3" 'BEGIN { exit !(b > 0 && a / b >= 20) }' ||
    fail "1-bit Adam sent $3 MB a step after the freeze, not 20x less than the $1 MB before"
first=$(loss "$tmpdir/straight" 1) last=$(loss "$tmpdir/straight" 12)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || fail "the loss did not fall: $first -> $last"
echo "ok   sent a step by rank 0: $1 MB fp32 in the warm-up, $3 MB 1-bit after; loss $first -> $last"
for f in model.safetensors optim.bin onebit.bin; do
    [ -f "$tmpdir/straight/ckpt-00000012/$f" ] || fail "the step-12 checkpoint has no $f"
    cmp -s "$tmpdir/straight/ckpt-00000012/$f" "$tmpdir/again/ckpt-00000012/$f" || fail "two runs differ in $f"
done
echo "ok   a second run: the same bits"

train 2 stop 6
train 2 stop 12 --resume auto
for f in model.safetensors optim.bin onebit.bin; do
    cmp -s "$tmpdir/straight/ckpt-00000012/$f" "$tmpdir/stop/ckpt-00000012/$f" || fail "stopped at 6 and resumed: $f differs"
done
echo "ok   stopped at step 6 and resumed: model, optim.bin and onebit.bin equal the straight run's"

for n in 4 1; do
    train "$n" "world$n" 12 --resume "$tmpdir/straight/ckpt-00000006" \
        --set train_micro_batch_size_per_gpu=4
    case $n in
    4) grep -q "saved by 2 ranks, this job has 4: each rank starts from their mean worker error" "$tmpdir/world$n.12.log" ;;
    1) grep -q "this job has one rank, which exchanges nothing" "$tmpdir/world$n.12.log" ;;
    esac || { cat "$tmpdir/world$n.12.log"; fail "resumed on $n ranks: the rule for the errors is not said"; }
    l7=$(loss "$tmpdir/world$n" 7) l12=$(loss "$tmpdir/world$n" 12)
    awk -v a="$l7" -v b="$l12" 'BEGIN { exit !(b < a && b > 0) }' || fail "resumed on $n ranks: loss $l7 -> $l12"
    echo "ok   the 2-rank checkpoint resumed on $n rank(s): the rule said, loss $l7 -> $l12"
done
[ ! -f "$tmpdir/world1/ckpt-00000012/onebit.bin" ] || fail "a 1-rank run wrote 1-bit errors"

train 2 shares 12 --set distributed.shares='[12, 4]'
train 2 auto 12 --set distributed.shares='"auto"' --set distributed.rebalance_interval=3
s0=$(sent "$tmpdir/shares.12.log" 8)
for run in shares auto; do
    l1=$(loss "$tmpdir/$run" 1) l12=$(loss "$tmpdir/$run" 12)
    awk -v a="$l1" -v b="$l12" 'BEGIN { exit !(b < a) }' || fail "$run shares: loss $l1 -> $l12"
done
bytes=$(grep -o '"grad_sent_mb": [0-9.e+-]*' "$tmpdir/shares/metrics.jsonl" | sed -n 8p)
[ "$s0" = "$(sent "$tmpdir/straight.12.log" 8)" ] ||
    fail "rank 0 with 12 of 16 sequences sent $s0, not what it sends with an equal share"
echo "ok   uneven shares [12, 4] and auto shares train; rank 0 sends $s0 ($bytes) as with equal shares"
lamb="--set optimizer.type=\"OneBitLamb\""
train 2 lamb 12 $lamb
train 2 plain 4 --set optimizer.type='"Lamb"' --set checkpoint.interval=4
cmp -s "$tmpdir/plain/ckpt-00000004/model.safetensors" "$tmpdir/lamb/ckpt-00000006/model.safetensors" &&
    fail "the checkpoint comparison cannot tell steps 4 and 6 apart"
train 2 lamb4 4 $lamb --set checkpoint.interval=4
cmp -s "$tmpdir/plain/ckpt-00000004/model.safetensors" "$tmpdir/lamb4/ckpt-00000004/model.safetensors" ||
    fail "1-bit LAMB's warm-up differs from LAMB"
set -- $(sent "$tmpdir/lamb.12.log" 5)
[ "${2:-}" = 1-bit ] || { grep '^step' "$tmpdir/lamb.12.log"; fail "1-bit LAMB does not send 1-bit after the freeze"; }
lamb_sent=$1
first=$(loss "$tmpdir/lamb" 1) last=$(loss "$tmpdir/lamb" 12)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || fail "1-bit LAMB: the loss did not fall: $first -> $last"
train 2 lambstop 6 $lamb
train 2 lambstop 12 $lamb --resume auto
for f in model.safetensors optim.bin onebit.bin onebit_lamb.bin; do
    cmp -s "$tmpdir/lamb/ckpt-00000012/$f" "$tmpdir/lambstop/ckpt-00000012/$f" || fail "1-bit LAMB stopped at 6 and resumed: $f differs"
done
find_python numpy || fail "no python with numpy (scripts/deps.sh installs python3-numpy)"
$BERTRAIN train tests/fixtures/base.json $small --set train_steps=5 --set optimizer.type='"OneBitLamb"' \
    --set optimizer.params.freeze_step=3 --set optimizer.params.factor_threshold=0.9 \
    --set optimizer.params.weight_decay=1 --set checkpoint.interval=1 --set checkpoint.keep=10 \
    --set output_dir="\"$tmpdir/ref\"" > "$tmpdir/ref.log" 2>&1 || { cat "$tmpdir/ref.log"; fail "the reference run failed"; }
for pair in "warmup 2 3" "frozen 3 4" "frozen 4 5"; do
    set -- $pair
    lr=$(sed -n "s/^{\"step\": $3, \"loss\": .*\"lr\": \([0-9.e+-]*\),.*/\1/p" "$tmpdir/ref/metrics.jsonl")
    case $1 in warmup) extra="0.9 0.01 10" ;; frozen) extra="3 0.5 4 0.9" ;; esac
    # shellcheck disable=SC2086
    "$PY" tests/python/onebit_lamb_ref.py "$1" "$tmpdir/ref/ckpt-0000000$2" "$tmpdir/ref/ckpt-0000000$3" \
        "$lr" 0.9 0.98 1e-6 1 $extra > "$tmpdir/ref.$3.log" 2>&1 || { cat "$tmpdir/ref.$3.log"; fail "1-bit LAMB's step $3 differs from numpy"; }
    echo "ok   numpy: $(cat "$tmpdir/ref.$3.log")"
done
echo "ok   1-bit LAMB: warm-up = LAMB's bits, $lamb_sent MB 1-bit after, loss $first -> $last, resumed = straight"
echo "PASS: 1-bit Adam and LAMB exchange as defined, sends 32x fewer bytes, repeats and resumes its bits, and handles world and share changes; 1-bit LAMB warms up as LAMB and resumes exactly"
