#!/bin/sh
# Divergence guard. (1) A step whose summed gradients hold a NaN (as a NaN
# batch gives after the allreduce) is skipped and logged, the run completes,
# and the parameters are untouched: skipping step 3 of 3 leaves exactly the
# parameters of a 2-step run. (2) A 1000x loss spike is skipped by the median rule.
# (3) guard.max_bad_steps skips within guard.window stop the run with one
# clear line and a non-zero status.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
train() { # NAME STEPS [--set ...]
    name=$1 steps=$2; shift 2
    "$BERTRAIN" train examples/demo.json --set train_steps="$steps" --set steps_per_print=1 \
        --set data.valid='""' --set output_dir="\"$tmpdir/$name\"" "$@" \
        > "$tmpdir/$name.log" 2>&1
}

# (1) NaN gradients at the last step: parameters equal those after step 2
train two 2 || { cat "$tmpdir/two.log"; fail "2-step run failed"; }
BERTRAIN_TEST_NAN_STEPS=3 train nan 3 || { cat "$tmpdir/nan.log"; fail "a NaN step stopped the run"; }
grep -q "step 3 skipped: gradient norm is nan" "$tmpdir/nan.log" ||
    { cat "$tmpdir/nan.log"; fail "the NaN step was not reported as skipped"; }
grep -q '"step": 3, "skipped": "gradient norm is nan", "samples_from": 64, "samples_to": 96' \
    "$tmpdir/nan/metrics.jsonl" || { cat "$tmpdir/nan/metrics.jsonl"; fail "metrics.jsonl lacks the skip"; }
"$top_builddir/tests/st_compare" "$tmpdir/two/ckpt-00000002/model.safetensors" \
    "$tmpdir/nan/ckpt-00000003/model.safetensors" 0 ||
    fail "a skipped step changed the parameters"
echo "ok   NaN gradients at step 3: skipped, logged, parameters = those of step 2"

# a NaN in the middle: the run goes on and learns afterwards (finite losses)
BERTRAIN_TEST_NAN_STEPS=2 train mid 5 || { cat "$tmpdir/mid.log"; fail "a NaN step stopped the run"; }
n=$(grep -c '"loss": ' "$tmpdir/mid/metrics.jsonl")
[ "$n" -eq 4 ] || fail "expected 4 applied steps logged, got $n"
grep '"loss": ' "$tmpdir/mid/metrics.jsonl" | grep -qi 'nan\|inf' && fail "a logged loss is not finite"
echo "ok   NaN at step 2 of 5: 4 steps applied, all logged losses finite"

# (2) a loss spike after the median has 20 losses: skipped by the k x median rule
BERTRAIN_TEST_SPIKE_STEPS=25 train spike 26 --set guard.loss_spike_factor=5 ||
    { cat "$tmpdir/spike.log"; fail "the spike run failed"; }
grep -q "step 25 skipped: loss .* > 5 x running median" "$tmpdir/spike.log" ||
    { cat "$tmpdir/spike.log"; fail "the spike was not skipped"; }
echo "ok   1000x loss at step 25: $(grep 'step 25 skipped' "$tmpdir/spike.log")"
# with the rule off, the same spike is applied
BERTRAIN_TEST_SPIKE_STEPS=25 train nospike 26 --set guard.loss_spike_factor=0 ||
    fail "the run without the spike rule failed"
grep -q "skipped" "$tmpdir/nospike.log" && fail "guard.loss_spike_factor=0 still skipped"
echo "ok   guard.loss_spike_factor=0 turns the spike rule off"

# (3) 3 bad steps within 4 steps: stop, non-zero, one line saying why
rc=0
BERTRAIN_TEST_NAN_STEPS=2,3,5 train stop 8 --set guard.max_bad_steps=3 --set guard.window=4 || rc=$?
[ "$rc" -ne 0 ] || fail "too many skipped steps did not stop the run"
grep -q "step 5: 3 of the last 4 steps were skipped" "$tmpdir/stop.log" ||
    { cat "$tmpdir/stop.log"; fail "no clear line for the stop"; }
grep -q "^step      6" "$tmpdir/stop.log" && fail "the run went on after the stop"
echo "ok   3 bad steps within 4: stopped at step 5 with status $rc"
