#!/bin/sh
# The 16-bit gradient wire (distributed.grad_dtype "bf16"), MPI on one machine:
#  - the dist layer's bf16 sum over 3 ranks equals its definition bit for bit
#    (each value rounded to bf16, summed in fp32 in rank order, rounded once;
#    uneven segments, Inf, NaN, signed zeros: tests/c/test_dist bf16);
#  - 2 ranks train with it: the step line says what a rank sent, half the
#    fp32 exchange's bytes; the weights differ from the fp32 wire's (the wire
#    is really 16-bit) but stay within 1e-2 relative L2 and the loss falls;
#  - a second run gives the same bits, and a run stopped at step 4 and
#    resumed ends with the weights and optimizer state of one that was not
#    (cmp);
#  - with 0.05 MB buckets (dozens in flight, their all-gathers started as
#    each rank sees its all-to-alls end) the run has the same bits as with
#    one bucket: the sum is element by element, and the ranks' collectives
#    stay matched.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
mpi_setup
CMP="$top_builddir/tests/c/st_compare"
$MPI -n 3 "$top_builddir/tests/c/test_dist" bf16 1003 > "$tmpdir/unit.log" 2>&1 ||
    { cat "$tmpdir/unit.log"; fail "the bf16 wire's sums differ from their definition"; }
[ "$(grep -c 'equal the definition bit for bit' "$tmpdir/unit.log")" -eq 3 ] || { cat "$tmpdir/unit.log"; fail "not every rank checked its sums"; }
echo "ok   $(grep -m1 'rank 0' "$tmpdir/unit.log")"

small="--set data.seq_len=32 --set train_batch_size=16 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=1"
train() { # OUT STEPS ARGS...: 2 ranks
    out=$1 steps=$2
    shift 2
    # shellcheck disable=SC2086
    $MPI -n 2 "$BERTRAIN" train tests/fixtures/base.json $small --set train_steps="$steps" \
        --set output_dir="\"$tmpdir/$out\"" "$@" > "$tmpdir/$out.$steps.log" 2>&1 ||
        { cat "$tmpdir/$out.$steps.log"; fail "$out: 2 ranks to step $steps failed"; }
}
train fp32 8
train bf16 8 --set distributed.grad_dtype='"bf16"'
train again 8 --set distributed.grad_dtype='"bf16"'
train buckets 8 --set distributed.grad_dtype='"bf16"' --set distributed.bucket_mb=0.05
sent() { sed -n 's/^step *8 | .* | sent \([0-9.]*\) MB \([a-z0-9]*\) .*/\1 \2/p' "$1"; }
set -- $(sent "$tmpdir/fp32.8.log") $(sent "$tmpdir/bf16.8.log")
[ "$#" -eq 4 ] && [ "$2" = fp32 ] && [ "$4" = bf16 ] ||
    { grep "^step *8" "$tmpdir/fp32.8.log" "$tmpdir/bf16.8.log"; fail "the step lines do not say what was sent"; }
awk -v a="$1" -v b="$3" 'BEGIN { exit !(b > 0 && a / b > 1.99 && a / b < 2.01) }' ||
    fail "the bf16 wire sent $3 MB a step, not half the fp32 exchange's $1 MB"
echo "ok   sent a step by rank 0: fp32 $1 MB, bf16 $3 MB"
m=ckpt-00000008/model.safetensors
! cmp -s "$tmpdir/fp32/$m" "$tmpdir/bf16/$m" || fail "the bf16 wire gave the fp32 wire's bits: it was not used"
"$CMP" "$tmpdir/fp32/$m" "$tmpdir/bf16/$m" 1e-2 > "$tmpdir/cmp.log" || { cat "$tmpdir/cmp.log"; fail "the bf16 wire's weights are far from the fp32 wire's"; }
first=$(sed -n 's/^{"step": 1, "loss": \([^,]*\),.*/\1/p' "$tmpdir/bf16/metrics.jsonl")
last=$(sed -n 's/^{"step": 8, "loss": \([^,]*\),.*/\1/p' "$tmpdir/bf16/metrics.jsonl")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || fail "the loss did not fall with the bf16 wire: $first -> $last"
echo "ok   weights vs the fp32 wire: $(cat "$tmpdir/cmp.log"); loss $first -> $last"
for f in model.safetensors optim.bin; do
    cmp -s "$tmpdir/bf16/ckpt-00000008/$f" "$tmpdir/again/ckpt-00000008/$f" || fail "two bf16-wire runs differ in $f"
    cmp -s "$tmpdir/bf16/ckpt-00000008/$f" "$tmpdir/buckets/ckpt-00000008/$f" || fail "0.05 MB buckets change $f"
done
train stop 4 --set distributed.grad_dtype='"bf16"'
train stop 8 --set distributed.grad_dtype='"bf16"' --resume auto
for f in model.safetensors optim.bin; do
    cmp -s "$tmpdir/bf16/ckpt-00000008/$f" "$tmpdir/stop/ckpt-00000008/$f" || fail "stopped at 4 and resumed: $f differs"
done
echo "PASS: the bf16 wire sums as defined, sends half the bytes, repeats its bits and resumes exactly"
