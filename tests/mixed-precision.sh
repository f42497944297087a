#!/bin/sh
# Mixed precision (fp16.enabled, bf16.enabled): activations and gradients are
# stored with 16-bit precision, master weights and moments stay fp32. The
# scaler's rules are unit-tested by tests/c/test_loss_scale; here, end to end:
#  - fp16 starting at loss scale 2^32: the scaled gradients really overflow
#    fp16's range, every such step is skipped and logged, the scale halves
#    (after the hysteresis) until it fits, then training goes on;
#  - skipped steps do not advance the learning-rate schedule (as in DeepSpeed);
#  - injected overflows at the minimum scale stop the run (exit 3) with one
#    clear message instead of skipping forever;
#  - fp16 resumes exactly: 20 steps = 10 + resume + 10 (cmp), the scaler's
#    state (scale, hysteresis, window) continues from state.json;
#  - bf16 and fp16 track fp32: the mini preset's mean loss over steps 281-300
#    (batch 4 x 32 tokens) within 2% of fp32's on the CPU, the oracle backend;
#    bf16 also on OpenCL (when built, with a device), against the same CPU fp32
#    run (OpenCL's fp32 matches the CPU's step by step: tests/train-opencl.sh).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
export OMP_NUM_THREADS=2
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=2}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=1"
train() { # NAME EXPECTED_EXIT ARGS...
    name=$1 want=$2
    shift 2
    rc=0
    # shellcheck disable=SC2086
    "${TRAIN_BIN:-$BERTRAIN}" train tests/fixtures/base.json $small --set output_dir="\"$tmpdir/$name\"" "$@" \
        > "$tmpdir/$name.log" 2>&1 || rc=$?
    [ "$rc" -eq "$want" ] || { tail -20 "$tmpdir/$name.log"; fail "$name: exit $rc, expected $want"; }
}
field() { tr -d ' \t\n' < "$1" | grep -o "\"$2\":[^,}]*" | head -1 | cut -d: -f2; }

# natural overflow from 2^32 down to a scale that fits
train overflow 0 --set fp16.enabled=true --set fp16.initial_scale_power=32 --set train_steps=30
grep "fp16 gradient overflow" "$tmpdir/overflow.log" | sed 's/.*loss scale \([0-9.e+]*\) -> \([0-9.e+]*\).*/\1 \2/' \
    > "$tmpdir/scales"
n=$(wc -l < "$tmpdir/scales")
[ "$n" -ge 10 ] || { cat "$tmpdir/overflow.log"; fail "expected at least 10 overflow skips from 2^32, got $n"; }
awk 'NR == 1 { ok = $1 == $2 }  # hysteresis 2: the first overflow keeps the scale
     NR > 1 { ok = ok && $2 * 2 == $1 } END { exit !ok }' "$tmpdir/scales" ||
    { cat "$tmpdir/scales"; fail "the scale did not follow hysteresis then halving"; }
last=$(grep '"step": 30,' "$tmpdir/overflow/metrics.jsonl")
scale=$(echo "$last" | sed 's/.*"loss_scale": \([^,}]*\).*/\1/')
loss=$(echo "$last" | sed 's/.*"loss": \([^,]*\),.*/\1/')
awk -v s="$scale" -v l="$loss" 'BEGIN { exit !(s < 4294967296 && s >= 1 && l > 0 && l < 9) }' ||
    fail "after the overflows: loss scale $scale, loss $loss"
echo "ok   fp16 from 2^32: $n steps skipped and logged (hysteresis, then halving), then trains: step 30 loss $loss at loss scale $scale"

# a skipped step does not advance the learning-rate schedule (DeepSpeed): the
# demo's WarmupDecayLR warms up linearly from 0, so after 2 skipped steps step 5
# gets the rate of schedule step 2, twice step 2's (not 4 times, as it would if
# skipped steps counted)
need_test_build
TRAIN_BIN=$BERTRAIN_T BERTRAIN_TEST_OVERFLOW_STEPS=3,4 train lrskip 0 --set fp16.enabled=true --set train_steps=6
lr_at() { grep "\"step\": $1, \"loss\"" "$tmpdir/lrskip/metrics.jsonl" | sed 's/.*"lr": \([^,]*\),.*/\1/'; }
lr2=$(lr_at 2) lr5=$(lr_at 5) lr6=$(lr_at 6)
awk -v a="$lr2" -v b="$lr5" -v c="$lr6" 'BEGIN { exit !(a > 0 && (b - 2 * a)^2 < 1e-12 * a * a && (c - 3 * a)^2 < 1e-12 * a * a) }' ||
    fail "after 2 skipped steps: lr at steps 2, 5, 6 = $lr2, $lr5, $lr6; expected r, 2r, 3r"
st="$tmpdir/lrskip/ckpt-00000006/state.json"
[ "$(field "$st" next_step)" = 4 ] || fail "state.json schedule.next_step $(field "$st" next_step), expected 4 (6 steps, 2 skipped)"
echo "ok   2 skipped steps do not advance the schedule: lr at steps 2, 5, 6 = $lr2, $lr5, $lr6; schedule.next_step 4"

# overflow at the minimum scale stops the run
TRAIN_BIN=$BERTRAIN_T BERTRAIN_TEST_OVERFLOW_STEPS=3,4,5,6 train atmin 3 --set fp16.enabled=true --set fp16.initial_scale_power=4 \
    --set fp16.min_loss_scale=4 --set fp16.hysteresis=1 --set train_steps=10
grep -q "^bertrain: step 5: fp16 gradient overflow at the minimum loss scale 4 (fp16.min_loss_scale)" "$tmpdir/atmin.log" ||
    { cat "$tmpdir/atmin.log"; fail "no clear stop at the minimum scale"; }
grep -q "^step      6" "$tmpdir/atmin.log" && fail "the run went on after the minimum-scale stop"
echo "ok   overflow at the minimum scale: exit 3, $(grep -o 'step 5: fp16 gradient overflow at the minimum loss scale 4' "$tmpdir/atmin.log")"

# exact resume
fp16="--set fp16.enabled=true --set fp16.initial_scale_power=20 --set fp16.loss_scale_window=4"
# shellcheck disable=SC2086
train straight 0 $fp16 --set train_steps=20
# shellcheck disable=SC2086
train resumed 0 $fp16 --set train_steps=10
# shellcheck disable=SC2086
train resumed 0 $fp16 --set train_steps=20 --resume auto
a="$tmpdir/straight/ckpt-00000020" b="$tmpdir/resumed/ckpt-00000020"
cmp "$a/model.safetensors" "$b/model.safetensors" && cmp "$a/optim.bin" "$b/optim.bin" ||
    fail "fp16: 20 steps differ from 10 + resume + 10"
for k in scale cur_hysteresis iter last_overflow skipped; do
    [ "$(field "$a/state.json" "$k")" = "$(field "$b/state.json" "$k")" ] ||
        fail "loss_scaler.$k differs after the resume"
done
grep -q "^resume: fp16 loss scale" "$tmpdir/resumed.log" || fail "the resume did not restore the loss scale"
echo "ok   fp16: 20 steps = 10 + resume + 10 (cmp); loss scaler $(field "$a/state.json" scale), $(field "$a/state.json" skipped) skipped, restored"

# 16-bit storage tracks fp32 (mini preset)
mean_tail() { grep -o '"step": [0-9]*, "loss": [^,]*' "$1" | awk -F'[:,]' '$2 > 280 { s += $4; n++ } END { if (n == 20) printf "%.5f", s / n }'; }
track() { # DEVICE PRECISIONS...: each against the CPU's fp32 run (made first, by `track cpu`)
    dev=$1 tag=$(echo "$1" | tr ':' '_')
    shift
    precisions=$*
    for p in $precisions; do
        case $p in fp32) set --;; bf16) set -- --set bf16.enabled=true;; fp16) set -- --set fp16.enabled=true;; esac
        train "$tag-$p" 0 --set model.preset=\"mini\" --set model.vocab_size=8000 --set train_steps=300 \
            --set train_batch_size=4 --set train_micro_batch_size_per_gpu=4 --set device="\"$dev\"" "$@"
    done
    ref=$(mean_tail "$tmpdir/cpu-fp32/metrics.jsonl")
    [ -n "$ref" ] || fail "cpu: no fp32 losses for steps 281-300"
    for p in $precisions; do
        [ "$p" != fp32 ] || continue
        got=$(mean_tail "$tmpdir/$tag-$p/metrics.jsonl")
        awk -v a="$ref" -v b="$got" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d; exit !(b != "" && d <= 0.02) }' ||
            fail "$dev: $p's mean loss over steps 281-300 is $got, the CPU's fp32 $ref (more than 2% apart)"
        echo "ok   $dev: mini, 300 steps: $p mean loss (steps 281-300) $got vs the CPU's fp32 $ref: $(awk -v a="$ref" -v b="$got" 'BEGIN { printf "%+.2f%%", 100 * (b - a) / a }')"
    done
}
track cpu fp32 bf16 fp16
spec=${BERTRAIN_TEST_OPENCL_DEVICE:-opencl:0:0}
if "$BERTRAIN" version | grep -q "opencl" &&
    "$BERTRAIN" bench --preset tiny --seq 16 --batch 1 --steps 1 --warmup 0 --backend "$spec" \
        > "$tmpdir/probe" 2>&1; then
    track "$spec" bf16 # fp16 is emulated the same way on every backend: the CPU run covers it
else
    skip_part "the OpenCL precision check (no OpenCL build or device)"
fi
finish "fp16 loss scaling skips, halves, stops at the minimum and resumes exactly; bf16 and fp16 track fp32"
