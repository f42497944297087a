#!/bin/sh
# model.recompute changes memory and time, never a bit: training with
# "attention" (the probabilities recomputed in each layer's backward) and
# with "layer" (each layer's forward run again before its backward) ends with
# the same model.safetensors and optim.bin (cmp) as "none", on the CPU for
# Post-LN, Pre-LN and Admin, fp32, bf16 and fp16, with LayerDrop, the
# attention-logit penalty and the fused attention kernel, and on OpenCL and
# the emulated CUDA device (fp32 and bf16). The device memory peak that
# `bench --profile` counts falls from none to attention to layer. A part
# that cannot run here is a SKIP with its reason.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
every_device_env
small="--set train_steps=4 --set data.seq_len=48 --set train_batch_size=8
       --set train_micro_batch_size_per_gpu=8 --set data.valid=\"\" --set steps_per_print=1
       --set model.num_hidden_layers=3"

# same DEVICE NAME SETTINGS...: none, attention and layer train to the same bits
same() {
    dev=$1 name=$2
    shift 2
    for mode in none attention layer; do
        # shellcheck disable=SC2086
        "$BERTRAIN" train tests/fixtures/base.json $small --set device="\"$dev\"" "$@" \
            --set model.recompute="\"$mode\"" --set output_dir="\"$tmpdir/$name-$mode\"" \
            > "$tmpdir/$name-$mode.log" 2>&1 || { tail -5 "$tmpdir/$name-$mode.log"; fail "$name, recompute $mode: training failed"; }
    done
    for mode in attention layer; do
        for f in model.safetensors optim.bin; do
            cmp -s "$tmpdir/$name-none/ckpt-00000004/$f" "$tmpdir/$name-$mode/ckpt-00000004/$f" ||
                fail "$name: recompute $mode: $f differs from none"
        done
    done
    echo "ok   $name: attention and layer = none (cmp model.safetensors, optim.bin after 4 steps; last loss $(grep '^step' "$tmpdir/$name-none.log" | tail -1 | sed 's/.*loss \([0-9.]*\).*/\1/'))"
}

same cpu cpu-post
same cpu cpu-pre --set model.norm='"pre"'
same cpu cpu-admin --set model.norm='"admin"'
same cpu cpu-bf16 --set bf16.enabled=true
same cpu cpu-bf16-pre --set bf16.enabled=true --set model.norm='"pre"'
same cpu cpu-fp16 --set fp16.enabled=true
same cpu cpu-layerdrop --set model.layerdrop=0.4 --set model.num_hidden_layers=4
same cpu cpu-penalty --set model.attention_logit_penalty=0.01
same cpu cpu-fused-attention --set model.attention_kernel='"fused"'

if "$BERTRAIN" devices 2> /dev/null | grep -q "opencl:0:0"; then
    same opencl:0:0 opencl-post
    same opencl:0:0 opencl-bf16 --set bf16.enabled=true
else
    skip_part "OpenCL (no OpenCL device opencl:0:0)"
fi
if [ -f "$BERTRAIN_CUDA_EMU" ]; then
    same cuda-emu cuda-emu-post
    same cuda-emu cuda-emu-bf16 --set bf16.enabled=true
else
    skip_part "the emulated CUDA device (not built: configure found no C++17 compiler)"
fi

# the memory: bench --profile's device memory peak, none > attention > layer
for mode in none attention layer; do
    "$BERTRAIN" bench --preset tiny --seq 128 --batch 8 --steps 1 --warmup 0 --profile \
        --set model.recompute="\"$mode\"" > "$tmpdir/bench-$mode" 2>&1 || { tail -5 "$tmpdir/bench-$mode"; fail "bench, recompute $mode"; }
    sed -n 's/.*device memory peak \([0-9.]*\) MB.*/\1/p' "$tmpdir/bench-$mode" > "$tmpdir/peak-$mode"
    [ -s "$tmpdir/peak-$mode" ] || { cat "$tmpdir/bench-$mode"; fail "bench --profile printed no device memory peak"; }
done
none=$(cat "$tmpdir/peak-none") attention=$(cat "$tmpdir/peak-attention") layer=$(cat "$tmpdir/peak-layer")
awk -v n="$none" -v a="$attention" -v l="$layer" 'BEGIN { exit !(n > a && a > l) }' ||
    fail "device memory peak does not fall: none $none MB, attention $attention MB, layer $layer MB"
echo "ok   device memory peak, BERT-tiny seq 128 batch 8: none $none MB, attention $attention MB, layer $layer MB"
finish "recompute attention and layer train to the bits of none on every backend, in less memory"
