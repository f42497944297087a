#!/bin/sh
# The emulated CUDA device's counts of global memory traffic (tests/cuda_emu/
# count.cpp), which `bertrain bench --project` projects from: the kernels
# compiled with g++ -fsanitize=thread into a plugin whose every load and store
# is seen, and a trace (CUDA_EMU_TRACE) of what ran.
#  1. test_cuda_emu count (a fill of 2000 and of 1000 floats, an add of 1000,
#     an 8x16x32 GEMM): the fills write exactly 4 bytes an element and read
#     nothing, the add reads 8 and writes 4, each thread makes 1 or 3 global
#     accesses; the GEMM is 2*8*16*32 fp32 FLOPs;
#     None of them touches shared memory (the trace's SHARED, field 12, is
#     0: a thread's own stack is not shared memory);
#  2. the same with bt_add reading its inputs twice (a planted copy of
#     kernels/elementwise.cl): twice the bytes read, 5 accesses a thread;
#     and with bt_add passing a through shared memory: 4 bytes written and 4
#     read there a thread, 8000 bytes in all, the global counts unchanged;
#  3. the ordinary plugin (not instrumented) says counted 0 and counts nothing;
#  4. bench --project on the counting plugin prints a projection (in its
#     step, after a warm-up, attention's 12 gemm_grid calls are 12 launches:
#     their address sets were uploaded in the warm-up and found again); on
#     the ordinary one it refuses in one line; with --accum 2 the step has
#     twice the GEMMs, gemm_grid launches and uploads and one update;
#  5. in a bf16 step bias_gelu_fwd reads its 16-bit pre-activation alone:
#     no launch reads more bytes than it writes;
#  6. in that step softmax_dropout_fwd reads a sample's key mask once a
#     work-group, not once a row: no launch reads more than 1.25x the bytes
#     it writes.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
use_cuda_emu
TEST="$top_builddir/tests/c/test_cuda_emu"
[ -x "$TEST" ] || fail "$TEST is not built (make check)"
FLAGS="-std=c++17 -O1 -fPIC -ffp-contract=off -w -D_GNU_SOURCE -fsanitize=thread"
KERNELS="elementwise reduce layernorm softmax embedding xent optim cast fused attention"
export OMP_NUM_THREADS=1 CUDA_EMU_WORKERS=2

# field LINE N: the Nth field of a trace line
field() { echo "$1" | awk -v n="$2" '{ print $n }'; }

# check_counts PLUGIN NAME READ_PER_ADD MAXACC_ADD [SHARED_ADD]: run
# test_cuda_emu count on PLUGIN and check the trace's lines.
check_counts() {
    trace="$tmpdir/$2.trace"
    CUDA_EMU_TRACE="$trace" BERTRAIN_CUDA_EMU="$1" "$TEST" count > "$tmpdir/$2.log" 2>&1 ||
        { cat "$tmpdir/$2.log"; fail "$2: test_cuda_emu count failed"; }
    [ "$(head -1 "$trace")" = "cuda-emu trace counted 1" ] || { head -3 "$trace"; fail "$2: the plugin did not count"; }
    fill2=$(grep -m1 '^launch bt_fill 8 1 1 256 1 1 ' "$trace")
    fill1=$(grep -m1 '^launch bt_fill 4 1 1 256 1 1 ' "$trace")
    add=$(grep -m1 '^launch bt_add 4 1 1 256 1 1 ' "$trace")
    gemm=$(grep -m1 '^gemm ' "$trace")
    [ -n "$fill2" ] && [ -n "$fill1" ] && [ -n "$add" ] && [ -n "$gemm" ] || { cat "$trace"; fail "$2: launches missing from the trace"; }
    [ "$(field "$fill2" 9) $(field "$fill2" 10) $(field "$fill2" 11)" = "0 8000 1" ] ||
        fail "$2: fill of 2000 floats: read, written, accesses $(field "$fill2" 9) $(field "$fill2" 10) $(field "$fill2" 11), not 0 8000 1"
    [ "$(field "$fill1" 9) $(field "$fill1" 10) $(field "$fill1" 11)" = "0 4000 1" ] ||
        fail "$2: fill of 1000 floats: $(field "$fill1" 9) $(field "$fill1" 10) $(field "$fill1" 11), not 0 4000 1"
    [ "$(field "$add" 9) $(field "$add" 10) $(field "$add" 11)" = "$3 4000 $4" ] ||
        fail "$2: add of 1000 floats: read, written, accesses $(field "$add" 9) $(field "$add" 10) $(field "$add" 11), not $3 4000 $4"
    [ "$gemm" = "gemm fp32 16 8 32 1 8192" ] || fail "$2: the GEMM's line is '$gemm'"
    [ "$(field "$fill2" 12) $(field "$fill1" 12) $(field "$add" 12)" = "0 0 ${5:-0}" ] ||
        fail "$2: shared bytes of the fills and the add $(field "$fill2" 12) $(field "$fill1" 12) $(field "$add" 12), not 0 0 ${5:-0}"
    echo "ok   $2: fill 2000 -> 0/8000 B, fill 1000 -> 0/4000 B, add 1000 -> $3/4000 B ($4 accesses a thread, ${5:-0} B of shared memory), $gemm"
}

# ---- 1. exact counts ----
mkdir -p "$tmpdir/clean" && cp -R backends kernels kernels_cu "$tmpdir/clean/"
# shellcheck disable=SC2086
emu_plugin "$tmpdir/count.so" "$tmpdir/clean" "$FLAGS" $KERNELS
check_counts "$tmpdir/count.so" counting 8000 3

# ---- 2. a kernel that reads twice is counted twice ----
src="$tmpdir/twice"
mkdir -p "$src" && cp -R backends kernels kernels_cu "$src/"
perl -0pi -e 's|(BT_KERNEL void bt_add\(.*?)if \(i < n\) out\[i\] = a\[i\] \+ b\[i\];|$1if (i < n) {
        const volatile float *va = a, *vb = b;
        const float a1 = va[i], b1 = vb[i], a2 = va[i], b2 = vb[i];
        out[i] = (a1 == a2 ? a1 : a2) + (b1 == b2 ? b1 : b2);
    }|s' "$src/kernels/elementwise.cl"
cmp -s kernels/elementwise.cl "$src/kernels/elementwise.cl" && fail "the planted double read no longer applies to kernels/elementwise.cl: update this test"
emu_plugin "$src.so" "$src" "$FLAGS" elementwise
check_counts "$src.so" "reads-twice" 16000 5

# ---- 2b. shared memory is counted apart from global memory ----
src="$tmpdir/staged"
mkdir -p "$src" && cp -R backends kernels kernels_cu "$src/"
perl -0pi -e 's|(BT_KERNEL void bt_add\(.*?)if \(i < n\) out\[i\] = a\[i\] \+ b\[i\];|$1__local float stage[BT_WG];
    if (i < n) {
        stage[get_local_id(0)] = a[i];
        out[i] = stage[get_local_id(0)] + b[i];
    }|s' "$src/kernels/elementwise.cl"
cmp -s kernels/elementwise.cl "$src/kernels/elementwise.cl" && fail "the planted shared stage no longer applies to kernels/elementwise.cl: update this test"
emu_plugin "$src.so" "$src" "$FLAGS" elementwise
check_counts "$src.so" "shared-stage" 8000 3 8000

# ---- 3. the ordinary plugin counts nothing and says so ----
CUDA_EMU_TRACE="$tmpdir/plain.trace" "$TEST" count > "$tmpdir/plain.log" 2>&1 || { cat "$tmpdir/plain.log"; fail "plain: test_cuda_emu count failed"; }
[ "$(head -1 "$tmpdir/plain.trace")" = "cuda-emu trace counted 0" ] || fail "the ordinary plugin claims to count"
echo "ok   the ordinary plugin's trace says counted 0"
# ---- 4. bench --project: a projection from the counts, or one line saying what is missing ----
BENCH="--preset tiny --seq 16 --batch 2 --steps 1 --warmup 1 --backend cuda-emu"
# shellcheck disable=SC2086
CUDA_EMU_TRACE="$tmpdir/bench.trace" BERTRAIN_CUDA_EMU="$tmpdir/count.so" "$BERTRAIN" bench $BENCH \
    --project h100-sxm,a100-sxm-80gb > "$tmpdir/bench.out" 2>&1 || { cat "$tmpdir/bench.out"; fail "bench --project failed on the counting plugin"; }
for want in '^gemm .* 30\.0 ' '^gemm_grid  *12\.0  *12\.0 ' '^fill ' '^adamw_multi ' '^projected on h100-sxm: [0-9.]* ms a step, MFU' \
    '^projected on a100-sxm-80gb: ' '^step: model GFLOP [0-9.]* ' \
    "^projected on h100-sxm: .*, [0-9.]*% of the model's FLOPs\$"; do
    grep -q "$want" "$tmpdir/bench.out" || { sed -n '/^projection/,$p' "$tmpdir/bench.out"; fail "bench --project: no line '$want'"; }
done
echo "ok   bench --project: $(grep '^projected on h100' "$tmpdir/bench.out")"
# a step of 2 micro-batches (--accum 2): twice the GEMMs, attention's launches
# and batch uploads in the step, one optimizer update
# shellcheck disable=SC2086
CUDA_EMU_TRACE="$tmpdir/accum.trace" BERTRAIN_CUDA_EMU="$tmpdir/count.so" "$BERTRAIN" bench $BENCH \
    --accum 2 --project h100-sxm > "$tmpdir/accum.out" 2>&1 || { cat "$tmpdir/accum.out"; fail "bench --project --accum 2 failed"; }
for want in '^gemm .* 60\.0 ' '^gemm_grid  *24\.0  *24\.0 ' '^upload  *2\.0 ' '^adamw_multi  *1\.0 ' '^projected on h100-sxm: '; do
    grep -q "$want" "$tmpdir/accum.out" || { sed -n '/^projection/,$p' "$tmpdir/accum.out"; fail "bench --project --accum 2: no line '$want'"; }
done
echo "ok   bench --project --accum 2: 60 GEMMs, 24 gemm_grid launches, 2 uploads, 1 update a step"
# shellcheck disable=SC2086
expect_refusal "bench --project without a trace" '^bertrain bench: --project: no counts of the device.s work' \
    env -u CUDA_EMU_TRACE "$BERTRAIN" bench $BENCH --project h100-sxm
# shellcheck disable=SC2086
CUDA_EMU_TRACE="$tmpdir/plain-bench.trace" "$BERTRAIN" bench $BENCH --project h100-sxm > "$tmpdir/plain.out" 2> "$tmpdir/plain.err"
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l < "$tmpdir/plain.err")" -eq 1 ] && grep -q 'has no counts of global memory' "$tmpdir/plain.err" ||
    { cat "$tmpdir/plain.err"; fail "bench --project on the ordinary plugin: exit $rc, not 1 with one line"; }
echo "ok   without counts: $(cat "$tmpdir/plain.err")"
# shellcheck disable=SC2086
"$BERTRAIN" bench --preset tiny --seq 16 --batch 2 --steps 1 --warmup 1 --project h100-sxm \
    --counts "$tmpdir/never.trace" > /dev/null 2> "$tmpdir/cpu.err"
rc=$?
[ $rc -eq 1 ] && grep -q 'was not written by this run' "$tmpdir/cpu.err" || { cat "$tmpdir/cpu.err"; fail "bench --project on the CPU: exit $rc"; }
echo "ok   on the CPU: $(cat "$tmpdir/cpu.err")"
# ---- 5. a 16-bit step's GELU reads only its 16-bit pre-activation ----
# With bf16 GEMMs fc1's GEMM writes the pre-activation in 16 bits, bias
# included, and the MLM head's dense layer too: bias_gelu_fwd reads 2 bytes
# an element and writes 2 (or 2 + 4 where the fp32 output is kept), never
# more than it writes. Reading the bias it does not add fails this.
# shellcheck disable=SC2086
CUDA_EMU_TRACE="$tmpdir/bf16.trace" BERTRAIN_CUDA_EMU="$tmpdir/count.so" "$BERTRAIN" bench $BENCH \
    --precision bf16 --project h100-sxm > "$tmpdir/bf16.out" 2>&1 || { cat "$tmpdir/bf16.out"; fail "bench --project --precision bf16 failed"; }
gelu=$(grep -c '^launch bt_bias_gelu_fwd ' "$tmpdir/bf16.trace")
[ "$gelu" -gt 0 ] || fail "bf16 bench: no bias_gelu_fwd launch in the trace"
over=$(awk '$1 == "launch" && $2 == "bt_bias_gelu_fwd" && $9 > $10' "$tmpdir/bf16.trace")
[ -z "$over" ] || { printf '%s\n' "$over"; fail "bf16 bench: bias_gelu_fwd reads more bytes than it writes (fields 9, 10: read, written): more than its 16-bit input"; }
echo "ok   bf16: $gelu bias_gelu_fwd launches, each reading no more than it writes"
# ---- 6. the attention's key mask read once a work-group ----
# softmax_dropout_fwd reads a score in fp32 (4 bytes) and writes the dropped
# and undropped probabilities in 16 bits (2 + 2); a work-group's 8 rows, of
# one sample here (2 heads x 16 tokens a sample), read the sample's key mask
# once: 4 bytes a key for 8 rows, so 4.5 bytes read a score for 4 written.
# A mask read by every row (4 bytes a score more: 2x) fails this.
sm=$(grep -c '^launch bt_softmax_dropout_fwd ' "$tmpdir/bf16.trace")
[ "$sm" -gt 0 ] || fail "bf16 bench: no softmax_dropout_fwd launch in the trace"
over=$(awk '$1 == "launch" && $2 == "bt_softmax_dropout_fwd" && $9 > 1.25 * $10' "$tmpdir/bf16.trace")
[ -z "$over" ] || { printf '%s\n' "$over"; fail "bf16 bench: softmax_dropout_fwd reads more than 1.25x what it writes (fields 9, 10: read, written): the key mask read by every row?"; }
echo "ok   bf16: $sm softmax_dropout_fwd launches, each reading at most 1.25x what it writes ($(awk '$1 == "launch" && $2 == "bt_softmax_dropout_fwd" { printf "%d / %d bytes", $9, $10; exit }' "$tmpdir/bf16.trace"))"
finish "the emulated device counts global bytes and accesses exactly; a double read counts double; a bf16 step's GELU and softmax read no more than they must"
