#!/bin/sh
# The model's fused ops change nothing but speed: `bertrain bench` with every
# fusion and with --unfused all must end with the same loss and gradient
# norm, bit for bit (printed with 17 digits), for Post-LN and Pre-LN (whose
# second join has no LayerNorm after it: bias_dropout_add), on the CPU, on
# OpenCL and on the emulated CUDA device. The profile must show the fused ops
# called in the first run and none of them in the second, so the comparison
# is between two different code paths. With bf16 storage the backward
# fusions and softmax_dropout_fwd (which rounds the probabilities as the
# storage does) run and the other forward fusions (which would skip a
# rounding) do not; the attention fusions give the unfused bits there too
# (bias_gelu_bwd does not: it sums the bias gradient before the storage
# rounding, DESIGN-NOTES 21). The device's own choice (fused on the CPU, not on an
# OpenCL CPU device) is checked too. A part that cannot run here is a SKIP
# with its reason.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=2}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT OMP_NUM_THREADS=2 CUDA_EMU_WORKERS=2
BERTRAIN_CUDA_EMU="$top_builddir/tests/cuda_emu/bertrain-cuda-emu.so"
export BERTRAIN_CUDA_EMU

fwd_ops="bias_gelu_fwd residual_layernorm_fwd softmax_dropout_fwd"
bwd_ops="bias_gelu_bwd dropout_softmax_bwd"
fwd_ops_fp32_only="bias_gelu_fwd residual_layernorm_fwd"
ops_any_storage="softmax_dropout_fwd $bwd_ops"

# bench DEVICE LABEL ARGS...: 2 profiled steps of tiny at seq 32, batch 4
bench() {
    dev=$1 label=$2
    shift 2
    "$BERTRAIN" bench --preset tiny --seq 32 --batch 4 --steps 2 --warmup 1 --backend "$dev" \
        --profile "$@" > "$tmpdir/$label" 2>&1 || { tail -20 "$tmpdir/$label"; fail "$label: bench failed"; }
}

# has LABEL OP: the profile of run LABEL lists op OP
has() { grep -q "^$2 " "$tmpdir/$1"; }

check_device() {
    dev=$1 tag=${1%%:*}
    for norm in post pre; do
        bench "$dev" "$tag-$norm-fused" --norm "$norm" --unfused none
        bench "$dev" "$tag-$norm-unfused" --norm "$norm" --unfused all
        a=$(grep "^last step:" "$tmpdir/$tag-$norm-fused")
        b=$(grep "^last step:" "$tmpdir/$tag-$norm-unfused")
        [ -n "$a" ] || fail "$dev, $norm: bench printed no 'last step:' line"
        [ "$a" = "$b" ] || fail "$dev, $norm: fused '$a', unfused '$b'"
        want="$fwd_ops $bwd_ops"
        [ "$norm" = pre ] && want="$want bias_dropout_add"
        for op in $want; do
            has "$tag-$norm-fused" "$op" || fail "$dev, $norm: the fused run never called $op"
        done
        for op in $fwd_ops $bwd_ops bias_dropout_add; do
            ! has "$tag-$norm-unfused" "$op" || fail "$dev, $norm: --unfused all still called $op"
        done
        echo "ok   $dev, $norm-LN: fused and unfused agree ($a)"
    done
    bench "$dev" "$tag-bf16" --precision bf16 --unfused none
    bench "$dev" "$tag-bf16-attention" --precision bf16 --unfused gelu,join
    bench "$dev" "$tag-bf16-unfused" --precision bf16 --unfused all
    for op in $fwd_ops_fp32_only; do
        ! has "$tag-bf16" "$op" || fail "$dev, bf16 storage: forward fusion $op ran"
    done
    for op in $ops_any_storage; do
        has "$tag-bf16" "$op" || fail "$dev, bf16 storage: fusion $op did not run"
        ! has "$tag-bf16-unfused" "$op" || fail "$dev, bf16 storage: --unfused all still called $op"
    done
    has "$tag-bf16-attention" softmax_dropout_fwd || fail "$dev, bf16 storage: --unfused gelu,join never called softmax_dropout_fwd"
    a=$(grep "^last step:" "$tmpdir/$tag-bf16-attention")
    b=$(grep "^last step:" "$tmpdir/$tag-bf16-unfused")
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "$dev, bf16 storage: attention fused '$a', unfused '$b'"
    echo "ok   $dev, bf16 storage: softmax_dropout_fwd and the backward fusions run; the attention fusions as unfused ($a)"
    bench "$dev" "$tag-default"
    grep "^fused ops: $2\$" "$tmpdir/$tag-default" > /dev/null ||
        fail "$dev: want 'fused ops: $2' by default, got '$(grep '^fused ops' "$tmpdir/$tag-default")'"
    echo "ok   $dev: by default fused ops: $2"
}

check_device cpu all
if ! "$BERTRAIN" version | grep -q "opencl"; then
    skip_part "OpenCL: bertrain was built without OpenCL"
elif "$BERTRAIN" bench --preset tiny --seq 16 --batch 1 --steps 1 --warmup 0 --backend opencl:0:0 \
    > "$tmpdir/probe" 2>&1; then
    check_device opencl:0:0 none # PoCL: a CPU device
else
    skip_part "OpenCL: no device opencl:0:0: $(tail -1 "$tmpdir/probe")"
fi
if [ -f "$BERTRAIN_CUDA_EMU" ]; then
    check_device cuda-emu:0 all
else
    skip_part "the emulated CUDA device is not built (configure found no C++17 compiler)"
fi
finish "fused and unfused ops train to the same bits on every device here"
