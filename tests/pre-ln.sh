#!/bin/sh
# Pre-LN end to end (the model itself is checked against PyTorch by
# tests/torch-ref.sh, fixture torch_ref_pre): 5 training steps, dropout on,
# agree between the CPU and OpenCL backends within 1e-4 relative L2 (when
# OpenCL is built and has a device), and `bertrain export` refuses a Pre-LN
# checkpoint with one line instead of writing a Post-LN model that is wrong.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=2}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT
train() { # DEVICE NAME
    "$BERTRAIN" train tests/fixtures/base.json --set model.norm=pre --set train_steps=5 \
        --set steps_per_print=1 --set data.valid='""' --set device="\"$1\"" \
        --set output_dir="\"$tmpdir/$2\"" > "$tmpdir/$2.log" 2>&1 ||
        { cat "$tmpdir/$2.log"; fail "Pre-LN training on $1 failed"; }
}
train cpu cpu
grep -q '"norm":[[:space:]]*"pre"' "$tmpdir/cpu/ckpt-00000005/state.json" || fail "state.json does not record model.norm pre"
echo "ok   5 Pre-LN steps on the CPU: loss $(grep '"step": 5,' "$tmpdir/cpu/metrics.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/')"

rc=0
"$BERTRAIN" export "$tmpdir/cpu/ckpt-00000005" "$tmpdir/hf" > "$tmpdir/export.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$(wc -l < "$tmpdir/export.log")" -eq 1 ] &&
    grep -q "is a Pre-LN model" "$tmpdir/export.log" && [ ! -e "$tmpdir/hf/model.safetensors" ] ||
    { cat "$tmpdir/export.log"; fail "export of a Pre-LN checkpoint must fail with one line and write nothing"; }
echo "ok   export refuses: $(cat "$tmpdir/export.log")"

spec=${BERTRAIN_TEST_OPENCL_DEVICE:-opencl:0:0}
if "$BERTRAIN" version | grep -q "opencl" &&
    "$BERTRAIN" bench --preset tiny --seq 16 --batch 1 --steps 1 --warmup 0 --backend "$spec" \
        > "$tmpdir/probe" 2>&1; then
    train "$spec" opencl
    "$top_builddir/tests/c/st_compare" "$tmpdir/cpu/ckpt-00000005/model.safetensors" \
        "$tmpdir/opencl/ckpt-00000005/model.safetensors" 1e-4 ||
        fail "Pre-LN on $spec differs from the CPU backend"
    echo "ok   5 Pre-LN steps on $spec match the CPU backend"
else
    skip_part "the CPU-vs-OpenCL Pre-LN check (no OpenCL build or device)"
fi
finish "Pre-LN trains, matches across backends, and is not exported as Post-LN"
