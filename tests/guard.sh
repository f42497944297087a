#!/bin/sh
# Divergence guard. (1) A step whose summed gradients hold a NaN (as a NaN
# batch gives after the allreduce) is skipped and logged, the run completes,
# and the parameters are untouched: skipping step 3 of 3 leaves exactly the
# parameters of a 2-step run. (2) A 1000x loss spike is skipped by the median rule.
# (3) guard.max_bad_steps skips within guard.window roll the run back to its
# last checkpoint (or its initial state), the rejected batches are never
# trained on again and the run completes; once guard.max_rollbacks are used
# up (or with 0), the run stops with one clear line and a non-zero status.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
need_test_build
train() { # NAME STEPS [--set ...]
    name=$1 steps=$2; shift 2
    "$BERTRAIN_T" train tests/fixtures/base.json --set train_steps="$steps" --set steps_per_print=1 \
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
"$top_builddir/tests/c/st_compare" "$tmpdir/two/ckpt-00000002/model.safetensors" \
    "$tmpdir/nan/ckpt-00000003/model.safetensors" 0 ||
    fail "a skipped step changed the parameters"
echo "ok   NaN gradients at step 3: skipped, logged, parameters = those of step 2"

# the production program ignores the test build's variables: the same NaN
# (and a kill, and a checkpoint hook) asked of bertrain changes nothing
BERTRAIN_TEST_NAN_STEPS=3 BERTRAIN_TEST_DIE=0,1 BERTRAIN_TEST_CKPT="begin,0,kill" \
    "$BERTRAIN" train tests/fixtures/base.json --set train_steps=3 --set steps_per_print=1 \
    --set data.valid='""' --set output_dir="\"$tmpdir/prod\"" > "$tmpdir/prod.log" 2>&1 ||
    { cat "$tmpdir/prod.log"; fail "bertrain with BERTRAIN_TEST_* set failed"; }
grep -q "skipped\|test hook" "$tmpdir/prod.log" &&
    { cat "$tmpdir/prod.log"; fail "bertrain obeyed a BERTRAIN_TEST_* variable"; }
"$top_builddir/tests/c/st_compare" "$tmpdir/two/ckpt-00000002/model.safetensors" \
    "$tmpdir/prod/ckpt-00000003/model.safetensors" 0 &&
    fail "bertrain skipped step 3 (BERTRAIN_TEST_NAN_STEPS)"
echo "ok   bertrain ignores BERTRAIN_TEST_NAN_STEPS, _DIE and _CKPT: 3 steps applied"

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
BERTRAIN_TEST_NAN_STEPS=2,3,5 train stop 8 --set guard.max_bad_steps=3 --set guard.window=4 \
    --set guard.max_rollbacks=0 || rc=$?
[ "$rc" -ne 0 ] || fail "too many skipped steps did not stop the run"
grep -q "step 5: 3 of the last 4 steps were skipped" "$tmpdir/stop.log" ||
    { cat "$tmpdir/stop.log"; fail "no clear line for the stop"; }
grep -q "^step      6" "$tmpdir/stop.log" && fail "the run went on after the stop"
echo "ok   3 bad steps within 4 (guard.max_rollbacks 0): stopped at step 5 with status $rc"

# bad batches at run positions 200 and 230 (steps 7 and 8 of 32 samples): the
# second rejection within 3 steps rolls back to ckpt-00000004 (position 128);
# the data then passes over [192, 256), and the run completes
samples() { grep -o '"step": [0-9]*, "loss".*"samples": [0-9]*' "$1" | sed 's/"step": \([0-9]*\),.*"samples": \([0-9]*\)/\1:\2/' | tr '\n' ' '; }
BERTRAIN_TEST_NAN_SAMPLES=200,230 train rollback 12 --set checkpoint.interval=4 \
    --set guard.max_bad_steps=2 --set guard.window=3 || { cat "$tmpdir/rollback.log"; fail "the rollback run failed"; }
grep -q "^bertrain: step 8: 2 of the last 3 steps were skipped (guard.max_bad_steps, guard.window): rolling back (1 of guard.max_rollbacks 3)" \
    "$tmpdir/rollback.log" && grep -q "^resume: from $tmpdir/rollback/ckpt-00000004 (step 4, sample 128" "$tmpdir/rollback.log" &&
    grep -q "^bertrain: rolled back from step 8 to step 4; the data continues at sample 128 and never trains on samples \[192, 224), \[224, 256)$" \
    "$tmpdir/rollback.log" || { cat "$tmpdir/rollback.log"; fail "the rollback was not logged as expected"; }
grep -q '"step": 8, "rollback_to_step": 4, "skipped_samples": \[\[192, 224\], \[224, 256\]\]' "$tmpdir/rollback/metrics.jsonl" ||
    { cat "$tmpdir/rollback/metrics.jsonl"; fail "metrics.jsonl lacks the rollback"; }
got=$(samples "$tmpdir/rollback/metrics.jsonl")
want="1:32 2:64 3:96 4:128 5:160 6:192 5:160 6:192 7:288 8:320 9:352 10:384 11:416 12:448 "
[ "$got" = "$want" ] || fail "data cursor per logged step: got '$got', want '$want'"
tr -d ' \t\n' < "$tmpdir/rollback/ckpt-00000012/state.json" | grep -q '"position":448,' &&
    tr -d ' \t\n' < "$tmpdir/rollback/ckpt-00000012/state.json" | grep -q '"skipped_samples":\[\[192,224\],\[224,256\]\]' ||
    fail "the final checkpoint does not record the cursor and the skipped samples"
echo "ok   bad batches at steps 7-8: rolled back to step 4, replayed without samples [192, 256), completed 12 steps (cursor per step: $got)"

# no checkpoint yet: back to the initial state
BERTRAIN_TEST_NAN_SAMPLES=40,70 train initial 5 --set guard.max_bad_steps=2 --set guard.window=3 ||
    { cat "$tmpdir/initial.log"; fail "the rollback to the initial state failed"; }
grep -q "^bertrain: rolled back from step 3 to step 0; the data continues at sample 0 and never trains on samples \[32, 64), \[64, 96)$" \
    "$tmpdir/initial.log" || { cat "$tmpdir/initial.log"; fail "no rollback to the initial state"; }
grep -q "^rollback: no checkpoint in $tmpdir/initial yet: starting again from the initial weights (seed 42, step 0)$" \
    "$tmpdir/initial.log" && ! grep -q "no usable checkpoint" "$tmpdir/initial.log" ||
    { cat "$tmpdir/initial.log"; fail "the rollback to the initial state did not say what it reloaded"; }
got=$(samples "$tmpdir/initial/metrics.jsonl")
[ "$got" = "1:32 1:32 2:128 3:160 4:192 5:224 " ] || fail "initial-state rollback: cursor per step '$got'"
echo "ok   bad batches at steps 2-3 before any checkpoint: back to the initial state, completed (cursor per step: $got)"

# every batch from sample 64 on is bad: one rollback, then the stop
rc=0
BERTRAIN_TEST_NAN_SAMPLES=$(seq -s, 64 32 2000) train exhausted 20 --set guard.max_bad_steps=2 --set guard.window=3 \
    --set guard.max_rollbacks=1 || rc=$?
[ "$rc" -eq 3 ] && grep -q "were skipped (guard.max_bad_steps, guard.window) after guard.max_rollbacks rollbacks: stopping; no checkpoint was written; start again with a lower learning rate$" \
    "$tmpdir/exhausted.log" || { cat "$tmpdir/exhausted.log"; fail "exhausted rollbacks did not stop the run (exit $rc)"; }
echo "ok   rollbacks used up: stopped with status 3"
# (4) where the device gates the update itself (the emulated A100, which
# replays a step as one graph: step_gate), the device skips what the host
# skips, and the skipped step is not counted: NaN gradients at step 2 of 3
# are skipped with the optimizer at 2 steps after it, NaN at step 3 of 3
# leaves the parameters of the 2-step run, and a spike is skipped. The host
# stops the run should the device decide otherwise.
every_device_env
if [ -f "$BERTRAIN_CUDA_EMU" ]; then
    emu() { # NAME STEPS [--set ...]: the emulated A100, 8 x 32 tokens a step
        name=$1 steps=$2; shift 2
        CUDA_EMU_ARCH=80 train "$name" "$steps" --set device='"cuda-emu"' --set data.seq_len=32 \
            --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8 "$@"
    }
    emu emu-two 2 || { cat "$tmpdir/emu-two.log"; fail "cuda-emu: the 2-step run failed"; }
    BERTRAIN_TEST_NAN_STEPS=3 emu emu-nan 3 || { cat "$tmpdir/emu-nan.log"; fail "cuda-emu: the NaN run failed"; }
    grep -q "step 3 skipped: gradient norm is nan" "$tmpdir/emu-nan.log" ||
        { cat "$tmpdir/emu-nan.log"; fail "cuda-emu: the NaN step was not skipped"; }
    "$top_builddir/tests/c/st_compare" "$tmpdir/emu-two/ckpt-00000002/model.safetensors" \
        "$tmpdir/emu-nan/ckpt-00000003/model.safetensors" 0 ||
        fail "cuda-emu: a skipped step changed the parameters"
    BERTRAIN_TEST_NAN_STEPS=2 emu emu-mid 3 || { cat "$tmpdir/emu-mid.log"; fail "cuda-emu: the NaN-at-2 run failed"; }
    opt_steps=$(python3 -c 'import json, sys
o = json.load(open(sys.argv[1]))["optimizer"]
print(o["step"], *o["layer_steps"])' "$tmpdir/emu-mid/ckpt-00000003/state.json") ||
        fail "cuda-emu: no optimizer step count in the checkpoint"
    [ "$opt_steps" = "2 2 2" ] ||
        fail "cuda-emu: NaN at step 2 of 3: the optimizer counts '$opt_steps' steps (itself, per layer), want 2"
    BERTRAIN_TEST_SPIKE_STEPS=22 emu emu-spike 22 --set guard.loss_spike_factor=5 ||
        { cat "$tmpdir/emu-spike.log"; fail "cuda-emu: the spike run failed"; }
    grep -q "step 22 skipped: loss .* > 5 x running median" "$tmpdir/emu-spike.log" ||
        { cat "$tmpdir/emu-spike.log"; fail "cuda-emu: the spike was not skipped"; }
    echo "ok   cuda-emu (the update gated on the device): NaN at step 3 leaves step 2's parameters, NaN at step 2 leaves the optimizer at 2 steps, the spike at step 22 is skipped"
else
    skip_part "the skips gated on the device (no emulated CUDA device built)"
fi
finish "the divergence guard skips, rolls back and stops as configured; bertrain itself ignores the test variables"
