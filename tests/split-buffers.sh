#!/bin/sh
# Activations past a device's largest buffer: with BERTRAIN_OPENCL_MAX_BUFFER_MB
# capping OpenCL buffers (PoCL here), BERT-mini's activations (and bf16's
# 16-bit stash) are split over several buffers, no tensor across two, and
# training gives the weights and optimizer state of the unsplit run (cmp),
# in fp32 and bf16 (and bf16 with recompute "layer", whose kept outputs are
# split too); the start-up line says how many buffers. A cap below the
# parameters, or below the largest activation tensor, is refused before
# anything is allocated in one line naming the device and both sizes (exit
# 2), and a malformed cap names the variable. Skips without an OpenCL device.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=2}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT OMP_NUM_THREADS=2
unset BERTRAIN_OPENCL_MAX_BUFFER_MB
spec=${BERTRAIN_TEST_OPENCL_DEVICE:-opencl:0:0}
"$BERTRAIN" devices 2> /dev/null | grep -q "$spec" || skip "no OpenCL device $spec"
mini="--set model.preset=\"mini\" --set train_steps=3 --set data.seq_len=128 --set train_batch_size=16
      --set train_micro_batch_size_per_gpu=16 --set data.valid=\"\" --set steps_per_print=1
      --set device=\"$spec\""

# run NAME CAP_MB SETTINGS...: BERT-mini for 3 steps with buffers capped at CAP_MB ("": none)
run() {
    name=$1 cap=$2
    shift 2
    # shellcheck disable=SC2086
    BERTRAIN_OPENCL_MAX_BUFFER_MB=$cap "$BERTRAIN" train tests/fixtures/base.json $mini "$@" \
        --set output_dir="\"$tmpdir/$name\"" > "$tmpdir/$name.log" 2>&1 ||
        { tail -5 "$tmpdir/$name.log"; fail "$name: training failed"; }
}
for prec in fp32 bf16; do
    set --
    [ $prec = bf16 ] && set -- --set bf16.enabled=true
    run "$prec-one" "" "$@"
    run "$prec-split" 24 "$@"
    grep -q "^bertrain: device .*; activations [0-9.]* MB in [0-9]* buffers (the device's largest is 25.2 MB)" "$tmpdir/$prec-split.log" ||
        { grep "^bertrain: device" "$tmpdir/$prec-split.log"; fail "$prec: the start-up line does not say the activations are split"; }
    ! grep -q "buffers (the device" "$tmpdir/$prec-one.log" || fail "$prec: the unsplit run says it is split"
    for f in model.safetensors optim.bin; do
        cmp -s "$tmpdir/$prec-one/ckpt-00000003/$f" "$tmpdir/$prec-split/ckpt-00000003/$f" ||
            fail "$prec: $f of the split run differs from the unsplit run"
    done
    echo "ok   $prec: $(grep -o 'activations [0-9.]* MB in [0-9]* buffers' "$tmpdir/$prec-split.log") of at most 24 MB: weights and optimizer state = one buffer's (cmp)"
done

# recompute "layer" keeps each layer's output in the 16-bit stash: split too
run bf16-layer-split 24 --set bf16.enabled=true --set model.recompute='"layer"'
for f in model.safetensors optim.bin; do
    cmp -s "$tmpdir/bf16-one/ckpt-00000003/$f" "$tmpdir/bf16-layer-split/ckpt-00000003/$f" ||
        fail "bf16, recompute layer, split: $f differs from the unsplit run without recompute"
done
echo "ok   bf16 with recompute layer: $(grep -o 'activations [0-9.]* MB in [0-9]* buffers' "$tmpdir/bf16-layer-split.log"): = one buffer's (cmp)"

# refusals before allocating
refuse() { # NAME CAP WHAT SETTINGS...
    name=$1 cap=$2 what=$3
    shift 3
    # shellcheck disable=SC2086
    BERTRAIN_OPENCL_MAX_BUFFER_MB=$cap "$BERTRAIN" train tests/fixtures/base.json $mini "$@" \
        --set output_dir="\"$tmpdir/$name\"" > "$tmpdir/$name.out" 2> "$tmpdir/$name.err"
    rc=$?
    [ "$rc" -eq 2 ] && [ "$(wc -l < "$tmpdir/$name.err")" -eq 1 ] && grep -q -e "$what" "$tmpdir/$name.err" ||
        { cat "$tmpdir/$name.err"; fail "$name: expected exit 2 and one line with '$what', got exit $rc"; }
    [ ! -e "$tmpdir/$name/ckpt-00000001" ] || fail "$name: a refused run trained"
    echo "ok   $name: $(cat "$tmpdir/$name.err")"
}
refuse params 8 "the parameters need 0.02 GB in one buffer; .* allows 0.01 GB per buffer"
refuse tensor 24 "train_micro_batch_size_per_gpu 64 x data.seq_len 128 .*: the largest activation tensor needs 0.07 GB in one buffer; .* allows 0.03 GB per buffer" \
    --set train_batch_size=64 --set train_micro_batch_size_per_gpu=64
refuse malformed 12x "BERTRAIN_OPENCL_MAX_BUFFER_MB=12x: expected a whole number of MB from 1"
echo "PASS: split activations train to the unsplit bits; caps that cannot work are refused in one line"
