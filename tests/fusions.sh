#!/bin/sh
# The model's fused ops change nothing but speed: `bertrain bench` with every
# fusion and with --unfused all must end with the same loss and gradient
# norm, bit for bit (printed with 17 digits), for Post-LN and Pre-LN (whose
# second join has no LayerNorm after it: bias_dropout_add), on the CPU, on
# OpenCL and on the emulated CUDA device. The profile must show the fused ops
# called in the first run and none of them in the second, so the comparison
# is between two different code paths. With bf16 storage too (Post-LN and
# Pre-LN): there the fused ops round what the unfused ops' stores round. The
# device's own choice (fused on the CPU, not on an
# OpenCL CPU device) is checked too, and on the emulated A100 the cast
# fusion's bits and launches (check_cast) and the round16 passes of a step
# (check_round16). The GEMM epilogues (--unfused epilogue) are checked
# apart (check_epilogue): on CUDA their bias gradients are summed in
# cuBLASLt's order, so the fused runs above leave them out. A part that
# cannot run here is a SKIP with its reason.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
every_device_env

fwd_ops="bias_gelu_fwd residual_layernorm_fwd softmax_dropout_fwd"
bwd_ops="bias_gelu_bwd dropout_softmax_bwd"

# bench DEVICE LABEL ARGS...: 2 profiled steps of tiny at seq 32, batch 4
bench() { bench_steps 2 1 "$@"; }
# bench_steps STEPS WARMUP DEVICE LABEL ARGS...: as bench, STEPS steps after WARMUP
bench_steps() {
    steps=$1 warmup=$2 dev=$3 label=$4
    shift 4
    "$BERTRAIN" bench --preset tiny --seq 32 --batch 4 --steps "$steps" --warmup "$warmup" \
        --backend "$dev" --profile "$@" > "$tmpdir/$label" 2>&1 ||
        { tail -20 "$tmpdir/$label"; fail "$label: bench failed"; }
}

# has LABEL OP: the profile of run LABEL lists op OP
has() { grep -q "^$2 " "$tmpdir/$1"; }

check_device() {
    dev=$1 tag=${1%%:*}
    for run in post-fp32 pre-fp32 post-bf16 pre-bf16; do
        norm=${run%-*} prec=${run#*-}
        bench "$dev" "$tag-$run-fused" --norm "$norm" --precision "$prec" --unfused epilogue
        bench "$dev" "$tag-$run-unfused" --norm "$norm" --precision "$prec" --unfused all
        a=$(grep "^last step:" "$tmpdir/$tag-$run-fused")
        b=$(grep "^last step:" "$tmpdir/$tag-$run-unfused")
        [ -n "$a" ] || fail "$dev, $run: bench printed no 'last step:' line"
        [ "$a" = "$b" ] || fail "$dev, $run: fused '$a', unfused '$b'"
        want="$fwd_ops $bwd_ops"
        [ "$norm" = pre ] && want="$want bias_dropout_add"
        for op in $want; do
            has "$tag-$run-fused" "$op" || fail "$dev, $run: the fused run never called $op"
        done
        for op in $fwd_ops $bwd_ops bias_dropout_add; do
            ! has "$tag-$run-unfused" "$op" || fail "$dev, $run: --unfused all still called $op"
        done
        echo "ok   $dev, $norm-LN $prec: fused and unfused agree ($a)"
    done
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
# per_step LABEL FIELD: the profile's per-step figure before FIELD ("kernel launches")
per_step() { sed -n "s/^per step: .* \([0-9.]*\) $2,.*/\1/p" "$tmpdir/$1"; }
# calls LABEL OP: the profile's calls a step of OP
calls() { awk -v op="$2" '$1 == op { print $2 }' "$tmpdir/$1"; }

# The cast fusion (16-bit GEMMs on tensor cores: the emulated A100). Same
# bits with it and without (--unfused cast), more casts with it, and
# launches fewer by exactly (the casts it adds) + X, X counting each change
# by (launches saved) - (casts added):
#  - a backward operand that two GEMMs read is cast once into the model's
#    operand16 buffer instead of inside each gemm16: 1 - 1 = 0 each;
#  - the attention's dropped probabilities reach the context's GEMM in the
#    16-bit copy softmax_dropout_fwd writes: 1 a layer;
#  - the context's gradient, which its GEMM writes in 16 bits alone for
#    attention's two GEMMs, gets neither a rounding pass nor a cast, and
#    neither GEMM converts it: 3 for each layer below the top one; the top
#    layer's comes from its rows, scattered, and is cast once, which rounds
#    it, with no rounding pass before (without the fusion the GEMMs read it
#    in fp32, rounded by a pass): 1;
#  - in the backward, the dropout recomputed for dV writes the probabilities'
#    16-bit copy alone, which gemm_grid then does not convert (1), and
#    dropout_softmax_bwd writes dS's copy, which neither of its two GEMMs
#    converts and no cast makes (2 - 0): 3 a layer;
#  - a branch's output gradient, which the backward's dropout writes with
#    its 16-bit copy, reaches the branch's last linear layer without a cast
#    (its two GEMMs' conversions saved, no cast added: 2) in both branches of
#    each layer below the top one (the top layer's dropout is its own, on
#    its rows): 4 a layer;
#  - likewise the FFN's inner gradient, which bias_gelu_bwd writes with its
#    16-bit copy, reaches the first linear layer without a cast: 2 a layer;
#  - the attention's output gradient dqkv, which its GEMMs write in 16 bits
#    alone for the QKV projection's two GEMMs and bias_grad, gets neither a
#    rounding pass nor a cast, and neither GEMM converts it: 3 a layer;
#  - Post-LN: a layer's input, which its QKV projection reads in the forward
#    and the backward, is read from the layer before's stash copy (2), and
#    the backward's unstash of it is left out (1 - (-1) = 2): 4 for each
#    layer after the first;
#  - Post-LN: the first layer's input, the embeddings' output, is written by
#    the embeddings' dropout in 16 bits alone (emb16), in place of a
#    rounding pass (1), and the first layer's QKV projection reads it so in
#    the forward and the backward (2): 3, where the first layer is not the
#    top one;
#  - Post-LN: each LayerNorm backward before a branch (LN2's, LN1's) drops
#    out the branch's gradient into its 16-bit copy as it writes dA, where
#    the backward's dropout wrote it from dA (the copy needs the operand16
#    buffer, which the cast fusion brings): 2 for each layer below the top;
#  - the MLM logits' gradient, which the cross-entropy writes in 16 bits
#    alone, is converted by neither of the decoder's GEMMs (2), and its
#    bias_grad over a 16-bit input takes a second pass, which over these few
#    rows (at most BT_COL_ROWS) an fp32 input does not (-1); and the logits,
#    which the decoder's GEMM writes in 16 bits onto the bias broadcast by
#    bias_add, are fp32 without the fusion, onto bias rows that gather_rows
#    writes and round16 rounds (2 launches more; the store's rounding takes
#    bias_add's place): 3; and the MLM head's GELU gradient, which
#    bias_gelu_bwd writes with its 16-bit copy (rounding both), reaches its
#    dense layer's backward without a cast, where without the fusion both
#    GEMMs convert it: 2;
#  - Post-LN: the top layer's dH, which its GEMM writes in 16 bits alone
#    where the fusion gives dqkv's copy, widens into dA by a cast as the
#    heads' rows join it, where without the fusion a rounding pass comes
#    first (the same launches, one cast more): -1, where the first layer is
#    not the top one.
check_cast() {
    for run in post-bf16 post-fp16 pre-bf16; do
        norm=${run%-*} prec=${run#*-}
        bench cuda-emu:0 "cast-$run-on" --norm "$norm" --precision "$prec" --unfused epilogue
        bench cuda-emu:0 "cast-$run-off" --norm "$norm" --precision "$prec" --unfused cast,epilogue
        a=$(grep "^last step:" "$tmpdir/cast-$run-on")
        b=$(grep "^last step:" "$tmpdir/cast-$run-off")
        [ -n "$a" ] && [ "$a" = "$b" ] || fail "cuda-emu, $run: cast once '$a', in each GEMM '$b'"
        layers=$(sed -n 's/^bench: preset [a-z]* (\([0-9]*\) layers.*/\1/p' "$tmpdir/cast-$run-on")
        [ -n "$layers" ] || fail "cuda-emu, $run: no layer count in the bench's first line"
        inputs=$((layers + 3 * (layers - 1) + 1 + 3 * layers + 4 * (layers - 1) + 2 * layers + 3 * layers + 5))
        [ "$norm" = post ] && inputs=$((inputs + 4 * (layers - 1) + 2 * (layers - 1)))
        [ "$norm" = post ] && [ "$layers" -gt 1 ] && inputs=$((inputs + 3 - 1))
        l_on=$(per_step "cast-$run-on" "kernel launches")
        l_off=$(per_step "cast-$run-off" "kernel launches")
        c_on=$(calls "cast-$run-on" cast) c_off=$(calls "cast-$run-off" cast)
        [ -n "$l_on" ] && [ -n "$l_off" ] && [ -n "$c_on" ] && [ -n "$c_off" ] ||
            fail "cuda-emu, $run: no launch or cast counts in the profiles"
        awk -v lon="$l_on" -v loff="$l_off" -v con="$c_on" -v coff="$c_off" -v i="$inputs" \
            'BEGIN { exit !(con > coff && loff - lon == con - coff + i) }' ||
            fail "cuda-emu, $run: casting once: $c_on casts and $l_on launches a step, in each GEMM: $c_off and $l_off (want more casts, and launches fewer by as many plus $inputs)"
        echo "ok   cuda-emu, $run: backward operands cast once or written in 16 bits by their ops, layer inputs from the stash or emb16, dropped probabilities from the softmax: the same bits ($a), $c_on casts and $l_on launches a step against $c_off and $l_off"
    done
}

# 16-bit storage rounds a layer's activations where they are written
# (DESIGN-NOTES.md, notes 27, 35, 44, 45): on the emulated A100, Post-LN
# bf16 with every fusion, a step of L layers (1 micro-batch) makes these
# round16 passes and no others:
#  - the gradients, rounded once a step in each range that op_grads_done
#    reports: the heads', each layer's and the embeddings': L + 2;
#  - no activation's: every LayerNorm and the fused GELU round their
#    outputs themselves; the MLM head's dense layer writes its output in
#    16 bits; the top layer's dH comes in 16 bits from its GEMM and widens
#    into dA as its join adds the heads' rows; the first layer's, in 16
#    bits too, joins dA in the embeddings' dropout (add_dropout); the MLM
#    head's d hidden, scattered onto rows no other head's gradient reaches
#    (bench masks no [CLS] row), is rounded by its reader;
#  - with NSP on, none in the NSP head either: its pooler's output, tanh's
#    and the logits live in 16 bits alone, written rounded by the biased
#    16-bit GEMMs, tanh_fwd and the cross-entropy, and so do the gradients
#    between its GEMMs (tanh_bwd in 16 bits); its d hidden is rounded by
#    its reader as the MLM head's.
# So L + 2 at 2 and at 3 layers (a middle layer adds one, its gradient's),
# and with NSP at 2 layers.
# Pre-LN: L + 3 gradient ranges (the final LayerNorm's too) and 2 more: the
# embeddings' output (its first LayerNorm reads it in fp32, rounded) and
# the top layer's attention join (its S rows scattered onto dH, copied to
# dA and rounded). Each branch's dH is left to its LayerNorm's backward,
# which rounds it as it reads it, and the joins' sums are rounded as
# add_dropout (with no dropout) makes them: L + 5 at 2 and 3 layers.
check_round16() {
    for run in 2 3 2-nsp 2-pre 3-pre; do
        layers=${run%-*} want=$((${run%-*} + 2)) nsp= norm=post
        case $run in
        *-nsp) nsp="--set model.nsp=true --set data.mode=sentence_pairs" ;;
        *-pre) norm=pre want=$((layers + 5)) ;;
        esac
        # shellcheck disable=SC2086
        bench cuda-emu:0 "r16-$run" --layers "$layers" --precision bf16 --unfused epilogue --norm $norm $nsp
        n=$(calls "r16-$run" round16)
        [ -n "$n" ] || fail "cuda-emu, $run layers: no round16 count in the profile"
        awk -v n="$n" -v want="$want" 'BEGIN { exit !(n == want) }' ||
            fail "cuda-emu, $norm-LN bf16, $layers layers${nsp:+ with NSP}: $n round16 passes a step, want $want"
        echo "ok   cuda-emu, $norm-LN bf16, $layers layers${nsp:+ with NSP}: $n round16 passes a step (the gradient ranges$([ $norm = pre ] && echo ", the embeddings' output and the top layer's join"))"
    done
    # the NSP head in 16 bits (under the cast fusion) gives the bits of its
    # fp32 path with its rounding passes (without it)
    bench cuda-emu:0 "r16-2-nsp-nocast" --layers 2 --precision bf16 --unfused cast,epilogue --set model.nsp=true --set data.mode=sentence_pairs
    a=$(grep "^last step:" "$tmpdir/r16-2-nsp") b=$(grep "^last step:" "$tmpdir/r16-2-nsp-nocast")
    [ -n "$a" ] && [ "$a" = "$b" ] ||
        fail "cuda-emu, Post-LN bf16 with NSP: the NSP head in 16 bits '$a', in fp32 with passes '$b'"
    [ "$(calls r16-2-nsp tanh_fwd)" = 1.0 ] || fail "cuda-emu, with NSP: want one tanh_fwd a step"
    echo "ok   cuda-emu, Post-LN bf16 with NSP: its head in 16 bits gives the bits of its fp32 path ($a)"
}

# The GEMM epilogues (16-bit GEMMs on tensor cores: the emulated A100, and
# the V100 in fp16). A step with them (--unfused none) against one without
# (--unfused epilogue): every linear layer's forward whose output the model
# keeps in 16 bits alone takes its bias in gemm16_bias, so bias_add is
# called fewer times by as many, and its forward gives the same bits (the
# same fp32 sums, one rounding): the step's loss is equal; the weight
# gradients whose bias gradients sum the 16-bit output gradient take them
# in gemm16_bias_grad, fewer bias_grad calls by as many, and those sums in
# cuBLASLt's order (the emulation's: row by row), may differ in the last bits:
# the gradient norm agrees to 1e-6 (a sum of fp32 roundings of |g| ~ 1e-7
# relative each).
check_epilogue() {
    for run in post-bf16-80 pre-bf16-80 post-fp16-70; do
        norm=${run%%-*} rest=${run#*-} prec=${rest%-*} arch=${run##*-}
        for mode in on off; do
            unf=none
            [ $mode = off ] && unf=epilogue
            CUDA_EMU_ARCH=$arch bench_steps 1 0 cuda-emu:0 "ep-$run-$mode" --norm "$norm" \
                --precision "$prec" --unfused $unf
        done
        for op in gemm16_bias gemm16_bias_grad; do
            has "ep-$run-on" $op || fail "cuda-emu sm_$arch, $run: the step never called $op"
            ! has "ep-$run-off" $op || fail "cuda-emu sm_$arch, $run: --unfused epilogue called $op"
        done
        fw=$(calls "ep-$run-on" gemm16_bias) bw=$(calls "ep-$run-on" gemm16_bias_grad)
        ba_on=$(calls "ep-$run-on" bias_add) ba_off=$(calls "ep-$run-off" bias_add)
        bg_on=$(calls "ep-$run-on" bias_grad) bg_off=$(calls "ep-$run-off" bias_grad)
        awk -v f="$fw" -v b="$bw" -v a1="${ba_on:-0}" -v a0="$ba_off" -v g1="${bg_on:-0}" \
            -v g0="$bg_off" 'BEGIN { exit !(a0 - a1 == f && g0 - g1 == b && f > 0 && b > 0) }' ||
            fail "cuda-emu sm_$arch, $run: gemm16_bias $fw and gemm16_bias_grad $bw calls a step, bias_add ${ba_on:-0} against $ba_off, bias_grad ${bg_on:-0} against $bg_off"
        a=$(sed -n 's/^last step: loss \([^,]*\), grad_norm \(.*\)/\1 \2/p' "$tmpdir/ep-$run-on")
        b=$(sed -n 's/^last step: loss \([^,]*\), grad_norm \(.*\)/\1 \2/p' "$tmpdir/ep-$run-off")
        [ -n "$a" ] && [ -n "$b" ] || fail "cuda-emu sm_$arch, $run: no 'last step:' line"
        # shellcheck disable=SC2086
        set -- $a $b
        [ "$1" = "$3" ] || fail "cuda-emu sm_$arch, $run: the loss with the epilogues $1, without $3"
        awk -v x="$2" -v y="$4" 'BEGIN { d = x - y; if (d < 0) d = -d; exit !(d <= 1e-6 * y) }' ||
            fail "cuda-emu sm_$arch, $run: the gradient norm with the epilogues $2, without $4"
        echo "ok   cuda-emu sm_$arch, $norm-LN $prec: $fw biases in gemm16_bias (bias_add ${ba_on:-0} calls, not $ba_off), $bw bias gradients in gemm16_bias_grad (bias_grad ${bg_on:-0}, not $bg_off); loss $1 equal, gradient norm $2 against $4"
    done
}

if [ -f "$BERTRAIN_CUDA_EMU" ]; then
    check_device cuda-emu:0 all
    check_cast
    check_round16
    check_epilogue
else
    skip_part "the emulated CUDA device is not built (configure found no C++17 compiler)"
fi
finish "fused and unfused ops train to the same bits on every device here"
