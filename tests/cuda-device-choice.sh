#!/bin/sh
# Which CUDA device a rank gets, and a card the build has no code for, on the
# emulated CUDA device (tests/cuda_emu) posing as a V100 (CUDA_EMU_ARCH=70)
# whose binary holds code for sm_80 and sm_90 only (CUDA_EMU_BUILT_FOR):
#  1. train and bench on it stop at start-up with exit 2 and one line naming
#     the card, sm_70, what the build has code for and how to rebuild (the
#     README section it names exists); with sm_70 code the same bench runs;
#  2. auto skips such a card with one line saying why and trains on the
#     CPU (or an OpenCL GPU), and takes the card when it has code (a CUDA
#     build: auto tries only the real plugin, so BERTRAIN_CUDA_PLUGIN names
#     the emulated one);
#  3. 3 MPI ranks on one node, 2 devices: a bare cuda-emu is device
#     local rank modulo 2, cuda-emu:N is device N (devices
#     ["cuda-emu:1", "cuda-emu", "cuda-emu"]: 1, 1, 0); in a CUDA build the
#     same for cuda and auto (["cuda:1", "cuda", "auto"]);
#  4. a CUDA build's plugin holds the list the line names, configure's
#     reading of CUDA_ARCH;
#  5. TF32: fp32 GEMMs on TF32 tensor cores by default on an A100 (bench
#     says so, and training's start-up line), exact fp32 with tf32 false or
#     BERTRAIN_CUDA_TF32=0, and never on a V100, which has none;
#  6. free memory: on a card whose memory other processes hold
#     (CUDA_EMU_HELD_MB: 2036 of 2048 MiB, of the rest the context takes
#     its own, cuBLASLt's 4 MiB workspace among it), train refuses a
#     micro-batch that does not fit what is free, before allocating, in one
#     line naming the card, the need and the free memory; with the memory
#     free the same run trains.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
use_cuda_emu
export OMP_NUM_THREADS=1 CUDA_EMU_WORKERS=1
unset BERTRAIN_CUDA_TF32 BERTRAIN_DEVICE BERTRAIN_CUDA_PLUGIN CUDA_EMU_ARCH CUDA_EMU_BUILT_FOR CUDA_EMU_DEVICES
cuda_built=no
"$BERTRAIN" version | grep -q "backends:.* cuda" && cuda_built=yes
small="--set train_steps=1 --set data.seq_len=16 --set train_batch_size=2
       --set train_micro_batch_size_per_gpu=2 --set data.valid=\"\""
bench="bench --preset tiny --seq 16 --batch 2 --steps 1 --warmup 0 --backend"
v100='cuda:0 \(Tesla V100-SXM2-16GB \(cuda-emu 0\), sm_70\): this build has no code for sm_70 \(built for: sm_80 sm_90\); rebuild with CUDA 12 or 11\.8 \(CUDA 13 has no sm_70\) and CUDA_ARCH including -gencode arch=compute_70,code=sm_70 \(README, "NVIDIA GPUs"\)$'

# ---- 1. no code for the card: one line at start-up ----
no_code_train() {
    # shellcheck disable=SC2086
    expect_refusal "train on sm_70" "^bertrain: rank 0: $v100" \
        env CUDA_EMU_ARCH=70 CUDA_EMU_BUILT_FOR="80 90" "$BERTRAIN" train tests/fixtures/base.json $small --set device='"cuda-emu"' \
        --set output_dir="\"$tmpdir/v100\""
    [ ! -s "$tmpdir/refusal.out" ] || { cat "$tmpdir/refusal.out"; fail "train printed more than the line"; }
    echo "ok   train: $(cat "$tmpdir/refusal.err")"
}
no_code_bench() {
    # shellcheck disable=SC2086
    expect_refusal "bench on sm_70" "^bertrain: rank 0: $v100" \
        env CUDA_EMU_ARCH=70 CUDA_EMU_BUILT_FOR="80 90" "$BERTRAIN" $bench cuda-emu
    echo "ok   bench: exit 2, the same line"
    # shellcheck disable=SC2086
    CUDA_EMU_ARCH=70 CUDA_EMU_BUILT_FOR="70 80 90" "$BERTRAIN" $bench cuda-emu > "$tmpdir/code.log" 2>&1 ||
        { cat "$tmpdir/code.log"; fail "bench on sm_70 with sm_70 code failed"; }
    echo "ok   bench with sm_70 code in the build runs"
    grep -q '^## NVIDIA GPUs$' README.md || fail "README has no section \"NVIDIA GPUs\", which the line names"
}
run_case no-code-train no_code_train
run_case no-code-bench no_code_bench

# ---- 5. TF32 by default where the card has it ----
gemms() { # gemms ARCH [ARGS...]: bench's "fp32 GEMMs:" line on the card posing as ARCH
    arch=$1
    shift
    # shellcheck disable=SC2086
    CUDA_EMU_ARCH=$arch "$BERTRAIN" $bench cuda-emu "$@" > "$tmpdir/tf32.log" 2>&1 ||
        { cat "$tmpdir/tf32.log"; fail "bench on sm_$arch failed"; }
    sed -n 's/^fp32 GEMMs: //p' "$tmpdir/tf32.log"
}
tf32_default() {
    [ "$(gemms 80)" = "TF32 tensor cores" ] || fail "A100: TF32 is not on by default ($(gemms 80))"
    [ "$(gemms 80 --set tf32=false)" = fp32 ] || fail "A100 with tf32 false: not exact fp32"
    [ "$(BERTRAIN_CUDA_TF32=0 gemms 80)" = fp32 ] || fail "A100 with BERTRAIN_CUDA_TF32=0: not exact fp32"
    [ "$(gemms 70)" = fp32 ] || fail "V100: TF32 on a card without it"
    # shellcheck disable=SC2086
    CUDA_EMU_ARCH=80 "$BERTRAIN" train tests/fixtures/base.json $small --set device='"cuda-emu"' \
        --set output_dir="\"$tmpdir/tf32\"" > "$tmpdir/tf32-train.log" 2>&1 ||
        { cat "$tmpdir/tf32-train.log"; fail "train on the A100 pose failed"; }
    grep -q '^bertrain: device .*; fp32 GEMMs on TF32 tensor cores' "$tmpdir/tf32-train.log" ||
        { cat "$tmpdir/tf32-train.log"; fail "training's start-up line does not say TF32 is on"; }
    echo "ok   TF32: on by default on sm_80, off with tf32 false, BERTRAIN_CUDA_TF32=0 and on sm_70"
}
run_case tf32-default tf32_default

# ---- 2. auto skips the card ----
auto_run() { # auto_run NAME BUILT_FOR: train on auto, the emulated device as the CUDA plugin
    rc=0
    # shellcheck disable=SC2086
    BERTRAIN_CUDA_PLUGIN="$BERTRAIN_CUDA_EMU" CUDA_EMU_ARCH=70 CUDA_EMU_BUILT_FOR="$2" \
        "$BERTRAIN" train tests/fixtures/base.json $small --set device='"auto"' \
        --set output_dir="\"$tmpdir/$1\"" > "$tmpdir/$1.out" 2> "$tmpdir/$1.err" || rc=$?
    [ $rc -eq 0 ] || { cat "$tmpdir/$1.out" "$tmpdir/$1.err"; fail "auto ($1): exit $rc"; }
}
auto_fallback() {
    auto_run auto-skip "80 90"
    [ "$(wc -l < "$tmpdir/auto-skip.err")" -eq 1 ] &&
        grep -Eq "^bertrain: device auto: skipping CUDA: $v100" "$tmpdir/auto-skip.err" ||
        { cat "$tmpdir/auto-skip.err"; fail "auto did not say in one line why it skipped CUDA"; }
    grep -Eq '^bertrain: device .* \((cpu|opencl)\);' "$tmpdir/auto-skip.out" ||
        { cat "$tmpdir/auto-skip.out"; fail "auto did not fall back to OpenCL or the CPU"; }
    echo "ok   $(cat "$tmpdir/auto-skip.err")"
    echo "     then $(grep '^bertrain: device' "$tmpdir/auto-skip.out")"
    auto_run auto-cuda "70 80 90"
    grep -q '^bertrain: device Tesla V100-SXM2-16GB (cuda-emu 0) (cuda);' "$tmpdir/auto-cuda.out" ||
        { cat "$tmpdir/auto-cuda.out" "$tmpdir/auto-cuda.err"; fail "auto did not take the card with sm_70 code"; }
    ! grep -q skipping "$tmpdir/auto-cuda.err" || fail "auto skipped a card it has code for"
    echo "ok   with sm_70 code auto takes it: $(grep '^bertrain: device' "$tmpdir/auto-cuda.out")"
}
if [ $cuda_built = yes ]; then
    run_case auto-fallback auto_fallback
else
    skip_part "auto's fallback (bertrain built without CUDA: auto never tries CUDA)"
fi

# ---- 3. a bare cuda under MPI: the local rank's device ----
# mpi_devices NAME DEVICES EXPECTED...: 3 ranks on 2 emulated devices; rank r
# runs on device EXPECTED[r] (the rank table's device column)
mpi_devices() {
    name=$1 devs=$2
    shift 2
    # shellcheck disable=SC2086
    CUDA_EMU_DEVICES=2 $MPI -n 3 -x BERTRAIN_CUDA_EMU -x BERTRAIN_CUDA_PLUGIN -x CUDA_EMU_DEVICES \
        -x CUDA_EMU_WORKERS "$BERTRAIN" train tests/fixtures/base.json $small \
        --set train_batch_size=3 --set train_micro_batch_size_per_gpu=1 --set "devices=$devs" \
        --set output_dir="\"$tmpdir/$name\"" > "$tmpdir/$name.log" 2>&1 ||
        { cat "$tmpdir/$name.log"; fail "$name: the 3-rank run failed"; }
    r=0
    for want in "$@"; do
        grep -q "^ *$r | .* | cuda | .*(cuda-emu $want) | " "$tmpdir/$name.log" ||
            { grep "^ *[0-9] | " "$tmpdir/$name.log"; fail "$name: rank $r is not on device $want"; }
        r=$((r + 1))
    done
    echo "ok   $devs over 3 ranks, 2 devices: devices $*"
}
if ! "$BERTRAIN" version | grep -q "; mpi)" || ! command -v mpiexec > /dev/null 2>&1; then
    skip_part "the MPI runs (bertrain built without MPI, or no mpiexec)"
else
    mpi_setup
    export BERTRAIN_CUDA_PLUGIN="$BERTRAIN_CUDA_EMU"
    run_case bare-cuda-emu mpi_devices bare-emu '["cuda-emu:1", "cuda-emu", "cuda-emu"]' 1 1 0
    if [ $cuda_built = yes ]; then
        run_case bare-cuda mpi_devices bare-cuda '["cuda:1", "cuda", "auto"]' 1 1 0
    else
        skip_part "bare cuda and auto under MPI (bertrain built without CUDA)"
    fi
    unset BERTRAIN_CUDA_PLUGIN
fi

# ---- 6. free memory ----
free_memory() {
    # shellcheck disable=SC2086
    expect_refusal "train beside another process" \
        "^bertrain: rank 0 \\([^)]*\\): tests/fixtures/base.json: train_micro_batch_size_per_gpu 2 x data.seq_len 16 \\([0-9]* masked rows\\): needs 0\\.0[0-9] GB on the device; .* \\(cuda-emu 0\\) has 0\\.01 GB free of its 2\\.15 GB now \\(other processes hold the rest\\): reduce train_micro_batch_size_per_gpu" \
        env CUDA_EMU_HELD_MB=2036 "$BERTRAIN" train tests/fixtures/base.json $small --set device='"cuda-emu"' \
        --set output_dir="\"$tmpdir/held\""
    [ ! -e "$tmpdir/held/ckpt-00000001" ] || fail "the refused run wrote a checkpoint"
    echo "ok   $(cat "$tmpdir/refusal.err")"
    # shellcheck disable=SC2086
    "$BERTRAIN" train tests/fixtures/base.json $small --set device='"cuda-emu"' --set output_dir="\"$tmpdir/free\"" \
        > "$tmpdir/free.log" 2>&1 || { cat "$tmpdir/free.log"; fail "the same run with the memory free failed"; }
    echo "ok   with the memory free the same run trains"
}
run_case free-memory free_memory

# ---- 4. the list the line names comes from configure ----
configured_list() {
    arch=$(sed -n 's/^CUDA_ARCH = //p' "$top_builddir/Makefile")
    want=$(echo " $arch" | grep -o '[ ,-]code=[^ ]*' | sed 's/^.code=//' | tr -d '\133\135\042' | tr ',' '\n' |
        awk '!seen[$0]++' | tr '\n' ' ' | sed 's/ *$//')
    [ -n "$want" ] || fail "CUDA_ARCH ($arch) names no code=: cannot tell what the list must be"
    strings "$top_builddir/bertrain-cuda.so" | grep -qxF "$want" ||
        fail "bertrain-cuda.so does not hold \"$want\", the code CUDA_ARCH builds ($arch)"
    echo "ok   bertrain-cuda.so names what it is built for: $want"
}
if [ $cuda_built = no ]; then
    skip_part "the CUDA plugin's list (bertrain built without CUDA)"
elif ! command -v strings > /dev/null 2>&1; then
    skip_part "the CUDA plugin's list (no strings: apt-get install binutils)"
else
    run_case configured-list configured_list
fi
cases_done "a card without code fails at start-up in one line, auto skips it, a bare cuda takes the local rank's GPU"
