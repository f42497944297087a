#!/bin/sh
# BERT's phase 2 (examples/phase2.json): a phase-1 checkpoint at seq 64
# continues at seq 512 with max_predictions 80 and its own learning-rate
# warm-up (scheduler.start: the schedule starts over at phase 1's last step):
#  - phase 2's first step has the warm-up's first learning rate (0), and the
#    warm-up's last step the peak, where without scheduler.start the decay of
#    a schedule already past its warm-up would be in force;
#  - a phase 2 stopped and resumed (--resume auto) inside the phase ends with
#    the weights and optimizer state of an uninterrupted one (cmp);
#  - the held-out MLM loss at seq 512 falls over phase 2;
#  - on OpenCL and the emulated CUDA device, a shorter phase 2 at seq 512
#    stopped and resumed inside the phase ends as the straight one (cmp).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
export OMP_NUM_THREADS=1
tiny="--set model.preset=\"tiny\" --set model.vocab_size=8000 --set model.max_position_embeddings=512"
# phase 1: 30 steps at seq 64
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $tiny --set train_steps=30 --set data.valid='""' \
    --set scheduler.params.total_num_steps=30 --set scheduler.params.warmup_num_steps=5 \
    --set output_dir="\"$tmpdir/a\"" > "$tmpdir/p1.log" 2>&1 || { cat "$tmpdir/p1.log"; fail "phase 1 failed"; }
cp -r "$tmpdir/a" "$tmpdir/b"
# phase 2, the example scaled down: 20 steps of 8 sequences, warm-up 4 steps
p2="$tiny --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8 --set steps_per_print=1
    --set scheduler.params.warmup_num_steps=4 --set scheduler.params.total_num_steps=20
    --set scheduler.start=30 --set optimizer.params.lr=1e-3 --set eval.max_samples=64"
held_out() { # CKPT: the held-out MLM loss at seq 512
    # shellcheck disable=SC2086
    "$BERTRAIN" eval examples/phase2.json $p2 --checkpoint "$1" > "$tmpdir/eval.log" 2>&1 ||
        { cat "$tmpdir/eval.log"; fail "eval of $1 failed"; }
    sed -n 's/.*mlm_loss \([0-9.]*\).*/\1/p' "$tmpdir/eval.log" | tail -1
}
loss1=$(held_out "$tmpdir/a/ckpt-00000030")
# shellcheck disable=SC2086
"$BERTRAIN" train examples/phase2.json $p2 --set train_steps=50 --set output_dir="\"$tmpdir/a\"" \
    --resume auto > "$tmpdir/p2.log" 2>&1 || { cat "$tmpdir/p2.log"; fail "phase 2 failed"; }
grep -q "^resume: from .*a/ckpt-00000030 (step 30" "$tmpdir/p2.log" ||
    { head -20 "$tmpdir/p2.log"; fail "phase 2 did not continue phase 1's checkpoint"; }
grep -q "^resume: data.seq_len 64 -> 512" "$tmpdir/p2.log" || { head -20 "$tmpdir/p2.log"; fail "phase 2 is not at seq 512"; }
lr_at() { sed -n "s/^{\"step\": $1, .*\"lr\": \([^,]*\),.*/\1/p" "$tmpdir/a/metrics.jsonl"; }
# WarmupDecayLR over s = step - 31: 0, 2.5e-4, 5e-4, 7.5e-4, then the peak 1e-3
awk -v a="$(lr_at 31)" -v b="$(lr_at 33)" -v c="$(lr_at 35)" 'function near(x, y) { return x - y < 1e-9 && y - x < 1e-9 }
    BEGIN { exit !(a != "" && near(a, 0) && near(b, 5e-4) && near(c, 1e-3)) }' ||
    fail "phase 2's warm-up did not start over: lr at steps 31, 33, 35: '$(lr_at 31)', '$(lr_at 33)', '$(lr_at 35)' (want 0, 5e-4, 1e-3)"
echo "ok   phase 2 at seq 512 from phase 1's step 30: lr $(lr_at 31) at step 31, $(lr_at 33) at 33, $(lr_at 35) at 35 (the warm-up starts over)"
# the same phase 2, stopped at step 40 and resumed
# shellcheck disable=SC2086
"$BERTRAIN" train examples/phase2.json $p2 --set train_steps=40 --set output_dir="\"$tmpdir/b\"" \
    --resume auto > "$tmpdir/b1.log" 2>&1 || { cat "$tmpdir/b1.log"; fail "phase 2 to step 40 failed"; }
# shellcheck disable=SC2086
"$BERTRAIN" train examples/phase2.json $p2 --set train_steps=50 --set output_dir="\"$tmpdir/b\"" \
    --resume auto > "$tmpdir/b2.log" 2>&1 || { cat "$tmpdir/b2.log"; fail "phase 2 resumed at step 40 failed"; }
grep -q "^resume: from .*b/ckpt-00000040 (step 40" "$tmpdir/b2.log" || { head -20 "$tmpdir/b2.log"; fail "did not resume inside phase 2"; }
for f in model.safetensors optim.bin; do
    cmp "$tmpdir/a/ckpt-00000050/$f" "$tmpdir/b/ckpt-00000050/$f" || fail "phase 2 resumed at step 40: $f differs from the uninterrupted phase 2"
done
echo "ok   phase 2 stopped at step 40 and resumed: model.safetensors and optim.bin at step 50 = uninterrupted (cmp)"
loss2=$(held_out "$tmpdir/a/ckpt-00000050")
awk -v a="$loss1" -v b="$loss2" 'BEGIN { exit !(a > 0 && b > 0 && b < a) }' ||
    fail "the held-out MLM loss at seq 512 did not fall over phase 2: $loss1 -> $loss2"
echo "ok   held-out MLM loss at seq 512: $loss1 after phase 1, $loss2 after phase 2"

# the same phases, shorter, on OpenCL and the emulated CUDA device: phase 2 at
# seq 512 from phase 1's checkpoint, and stopped and resumed inside it = not
every_device_env
short() { # DEVICE: phase 1 (4 steps) and phase 2 (4 steps of 2 at seq 512), straight and resumed
    dev=$1 d=$tmpdir/${1%%:*}
    on="$tiny --set device=\"$dev\" --set data.valid=\"\" --set train_batch_size=2
        --set train_micro_batch_size_per_gpu=2 --set steps_per_print=1"
    # shellcheck disable=SC2086
    "$BERTRAIN" train tests/fixtures/base.json $on --set train_steps=4 --set data.seq_len=64 \
        --set output_dir="\"$d-a\"" > "$d-p1.log" 2>&1 || { tail -5 "$d-p1.log"; fail "$dev: phase 1 failed"; }
    cp -r "$d-a" "$d-b"
    for run in a:8 b:6 b:8; do
        # shellcheck disable=SC2086
        "$BERTRAIN" train examples/phase2.json $on --set scheduler.start=4 \
            --set scheduler.params.warmup_num_steps=2 --set scheduler.params.total_num_steps=4 \
            --set optimizer.params.lr=1e-3 --set train_steps="${run#*:}" \
            --set output_dir="\"$d-${run%%:*}\"" --resume auto > "$d-p2.log" 2>&1 ||
            { tail -5 "$d-p2.log"; fail "$dev: phase 2 ($run) failed"; }
    done
    for f in model.safetensors optim.bin; do
        cmp -s "$d-a/ckpt-00000008/$f" "$d-b/ckpt-00000008/$f" || fail "$dev: phase 2 resumed at step 6: $f differs"
    done
    echo "ok   $dev: phase 2 at seq 512 from phase 1's checkpoint; stopped at step 6 and resumed = straight (cmp)"
}
if "$BERTRAIN" devices 2> /dev/null | grep -q "opencl:0:0"; then
    short opencl:0:0
else
    skip_part "phase 2 on OpenCL (no OpenCL device opencl:0:0)"
fi
if [ -f "$BERTRAIN_CUDA_EMU" ]; then
    short cuda-emu
else
    skip_part "phase 2 on the emulated CUDA device (not built: configure found no C++17 compiler)"
fi
finish "phase 2 (examples/phase2.json) continues phase 1 at seq 512 with its own warm-up; resume inside it is exact (CPU, OpenCL, cuda-emu); held-out MLM loss at seq 512 $loss1 -> $loss2"
