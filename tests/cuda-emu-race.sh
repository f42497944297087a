#!/bin/sh
# Data races between the threads of a block, on the emulated CUDA device: the
# kernels (kernels/, through kernels_cu/) compiled with g++ -fsanitize=thread
# into a plugin whose every load and store is seen by tests/cuda_emu/race.cpp;
# a byte written by one thread and read or written by another between two
# barriers is reported and fails the launch, in whatever order the threads ran.
#  1. the conformance suite (--quick) on that plugin: every kernel race-free;
#  2. wg_sum (in sum_partial) with every thread adding into red[0] (a
#     non-atomic accumulation in shared memory, which the uninstrumented
#     emulator, running the threads one after another, notices only when two
#     runs round differently): reported as a race;
#  3. wg_sum leaving red[0] unwritten (its tree then reads what an earlier
#     block or nothing left in shared memory): reported as a stale read.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
[ -f "$top_builddir/tests/cuda_emu/bertrain-cuda-emu.so" ] ||
    skip "the emulated CUDA device is not built (configure found no C++17 compiler)"
CONF="$top_builddir/bertrain-conformance"
FLAGS="-std=c++17 -O1 -fPIC -ffp-contract=off -w -D_GNU_SOURCE -fsanitize=thread"
KERNELS="elementwise reduce layernorm softmax embedding xent optim cast fused attention"
export OMP_NUM_THREADS=1 CUDA_EMU_WORKERS=2

# ---- 1. every kernel race-free ----
mkdir -p "$tmpdir/clean" && cp -R backends kernels kernels_cu "$tmpdir/clean/"
# shellcheck disable=SC2086
emu_plugin "$tmpdir/race.so" "$tmpdir/clean" "$FLAGS" $KERNELS
nm -D "$tmpdir/race.so" | grep -q ' T __tsan_write4' || fail "the plugin has no race hooks"
rc=0
BERTRAIN_CUDA_EMU="$tmpdir/race.so" "$CONF" --backend cuda-emu --quick > "$tmpdir/clean.log" 2>&1 || rc=$?
grep -m5 'data race' "$tmpdir/clean.log"
[ $rc -eq 0 ] || { tail -5 "$tmpdir/clean.log"; fail "the conformance suite failed on the instrumented plugin (exit $rc)"; }
echo "ok   every kernel, instrumented: $(tail -1 "$tmpdir/clean.log"), no race"

# planted NAME PERL-EXPRESSION REPORT: kernels/common.cl changed by the
# expression, the reductions (kernels/reduce.cl, through cu/reduce.cpp) built
# instrumented with it (the other kernels, which the run does not launch, as
# the emulator has them); the conformance run of sum (sum_partial, a wg_sum)
# on it must fail with a line matching REPORT.
planted() {
    name=$1 expr=$2 want=$3 src="$tmpdir/$(echo "$1" | tr " " -)"
    mkdir -p "$src" && cp -R backends kernels kernels_cu "$src/"
    perl -0pi -e "$expr" "$src/kernels/common.cl"
    cmp -s kernels/common.cl "$src/kernels/common.cl" && fail "$name no longer applies to kernels/common.cl: update this test"
    emu_plugin "$src.so" "$src" "$FLAGS" reduce
    rc=0
    BERTRAIN_CUDA_EMU="$src.so" "$CONF" --backend cuda-emu --quick --op sum > "$src.log" 2>&1 || rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && grep -q "kernel bt_sum_partial.*$want" "$src.log" ||
        { tail -5 "$src.log"; fail "$name was not reported (exit $rc)"; }
    echo "ok   $name caught: $(grep -m1 "$want" "$src.log")"
}

# ---- 2. a planted race is reported ----
planted "planted race" 's|    red\[lid\] = v;\n    barrier\(CLK_LOCAL_MEM_FENCE\);\n|    red[lid] = 0.0f;\n    barrier(CLK_LOCAL_MEM_FENCE);\n    red[0] += v;\n    barrier(CLK_LOCAL_MEM_FENCE);\n|' \
    'a data race on .* between two barriers'

# ---- 3. a read of shared memory the block never wrote is reported ----
planted "planted stale read" 's|    red\[lid\] = v;\n|    if (lid > 0) red[lid] = v;\n|' \
    'reads shared memory at .* that no thread of the block wrote'
echo "PASS: the kernels are free of races and stale shared-memory reads within a block; planted ones are reported"
