#!/bin/sh
# model.attention_kernel fused trains as unfused does, on every device here:
# `bertrain bench` (BERT-tiny, seq 64, batch 4, 2 profiled steps) with fused
# and with unfused attention must end with the same loss and gradient norm
# up to rounding (fp32: 2e-6 relative; bf16 storage: 2e-3), the fused run
# calling attention_fwd and attention_bwd and none of the softmax, dropout of
# the probabilities or attention GEMMs, the unfused run the reverse, and the
# fused run's activations smaller (no T x T probabilities). A fused run with
# the attention-logit penalty is refused with one line naming the key. The
# ops themselves are checked against float64 by the conformance suite
# (conformance/ops_attention.c). A device that cannot run here is a SKIP with
# its reason.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
every_device_env

# bench DEVICE LABEL ARGS...: 2 profiled steps of tiny at seq 64, batch 4, exact
# fp32 GEMMs (no TF32 on the emulated card: the fused kernels compute in fp32)
bench() {
    dev=$1 label=$2
    shift 2
    "$BERTRAIN" bench --preset tiny --seq 64 --batch 4 --steps 2 --warmup 1 --backend "$dev" \
        --profile --set tf32=false "$@" > "$tmpdir/$label" 2>&1 || { tail -20 "$tmpdir/$label"; fail "$label: bench failed"; }
}
has() { grep -q "^$2 " "$tmpdir/$1"; }
# close A B TOL: |A - B| <= TOL |B|
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= t * m) }'; }
field() { sed -n "s/^last step: loss \([^,]*\), grad_norm \(.*\)$/\\$2/p" "$tmpdir/$1"; }
acts() { sed -n 's/^activations: \([0-9.]*\) MB.*/\1/p' "$tmpdir/$1"; }

check_device() {
    dev=$1 tag=${1%%:*}
    for prec in fp32 bf16; do
        tol=2e-6
        [ $prec = bf16 ] && tol=2e-3
        f=$tag-$prec-fused u=$tag-$prec-unfused
        bench "$dev" "$f" --precision $prec --set model.attention_kernel=fused
        bench "$dev" "$u" --precision $prec --set model.attention_kernel=unfused
        for k in 1 2; do
            a=$(field "$f" $k) b=$(field "$u" $k)
            [ -n "$a" ] && [ -n "$b" ] || fail "$dev $prec: no 'last step:' line"
            close "$a" "$b" $tol || fail "$dev $prec: fused $a, unfused $b (field $k, tolerance $tol)"
        done
        for op in attention_fwd attention_bwd; do
            has "$f" $op || fail "$dev $prec: the fused run never called $op"
            ! has "$u" $op || fail "$dev $prec: the unfused run called $op"
        done
        for op in softmax_fwd softmax_dropout_fwd softmax_bwd dropout_softmax_bwd gemm_grid; do
            ! has "$f" $op || fail "$dev $prec: the fused run called $op"
        done
        has "$u" gemm_grid || fail "$dev $prec: the unfused run never called gemm_grid"
        awk -v a="$(acts "$f")" -v b="$(acts "$u")" 'BEGIN { exit !(a < b) }' ||
            fail "$dev $prec: activations $(acts "$f") MB fused, $(acts "$u") MB unfused"
        echo "ok   $dev $prec: fused '$(field "$f" 1)', unfused '$(field "$u" 1)'; activations $(acts "$f") / $(acts "$u") MB"
    done
}

# the penalty needs the scores, which fused attention never forms
rc=0
"$BERTRAIN" bench --preset tiny --seq 16 --batch 1 --steps 1 --warmup 0 --backend cpu \
    --set model.attention_kernel=fused --set model.attention_logit_penalty=0.01 > "$tmpdir/penalty" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "model.attention_kernel: fused does not compute model.attention_logit_penalty" "$tmpdir/penalty" ||
    { cat "$tmpdir/penalty"; fail "fused attention with the logit penalty: want exit 2 and one line, got $rc"; }
[ "$(wc -l < "$tmpdir/penalty")" -eq 1 ] || { cat "$tmpdir/penalty"; fail "the refusal is more than one line"; }
echo "ok   fused attention with the logit penalty is refused: $(cat "$tmpdir/penalty")"

check_device cpu
if ! "$BERTRAIN" version | grep -q "opencl"; then
    skip_part "OpenCL: bertrain was built without OpenCL"
elif "$BERTRAIN" bench --preset tiny --seq 16 --batch 1 --steps 1 --warmup 0 --backend opencl:0:0 \
    > "$tmpdir/probe" 2>&1; then
    check_device opencl:0:0
else
    skip_part "OpenCL: no device opencl:0:0: $(tail -1 "$tmpdir/probe")"
fi
if [ -f "$BERTRAIN_CUDA_EMU" ]; then
    check_device cuda-emu:0
else
    skip_part "the emulated CUDA device is not built (configure found no C++17 compiler)"
fi
finish "fused attention trains as unfused attention on every device here"
