#!/bin/sh
# The CUDA backend (backends/cuda, kernels_cu) run on the emulated CUDA device
# (tests/cuda_emu, device cuda-emu): the code a GPU build compiles, executed
# in every CI run.
#  0. the emulation's own checks (tests/cuda_emu/emu_selftest): launch limits,
#     stream order, NaN-filled new memory, copy checks, a race at a missing
#     barrier, a divergent barrier, cuBLAS statuses and numerics, and the
#     faults that must be reported naming the kernel, cuBLAS call or host
#     code (a GEMM whose C overlaps A among them);
#  1. bertrain-conformance on cuda-emu posing as an A100 (every op, every
#     shape, the other backends' thresholds), and with --quick as a V100
#     (sm_70: fp16 tensor cores, no bf16 ones; gemm16 in bf16 must fall back
#     to rounded fp32 operands) and as an H100 (the poses differ in the
#     GEMMs' tensor-core paths, which the quick shapes reach; the V100 pose
#     takes 20 s with --quick, 209 s in full);
#  2. 20 training steps on the CPU and on cuda-emu (tests/train-vs-cpu.sh:
#     fp32 within 1e-4, bf16 and fp16 on the emulated tensor cores within
#     2e-2), at 8 sequences of 32 tokens;
#  3. bit-exact resume on cuda-emu (20 steps = 10 + 10);
#  4. a 2-rank MPI run, CPU + cuda-emu, equal to one CPU rank (1e-4), with
#     gradient buckets of 0.1 MB (several a step: each copied to the host
#     without a wait, its sum copied back in order with the ops);
#  5. tests/c/test_cuda_emu: ops on two devices with another library's
#     cudaSetDevice between them land on their own device; a kernel's write
#     past its buffer is reported at the next synchronisation, and at the
#     launch itself with BERTRAIN_CUDA_SYNC=1; uploads and asynchronous
#     downloads neither block nor deliver early or wrong values;
#  6. tests/c/test_stash16 on the emulated A100: the model's 16-bit GEMMs on
#     tensor cores, with a backward operand cast once for two GEMMs and a
#     layer's input read from the stash, give the fp32 GEMMs' bits when every
#     operand holds 16-bit values (bf16 and fp16, Post-LN and Pre-LN, a
#     layer skipped): a copy read from the wrong place or stale fails it.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
use_cuda_emu
export OMP_NUM_THREADS=1 CUDA_EMU_WORKERS=2
CONF="$top_builddir/bertrain-conformance"

# ---- 0. the emulation itself ----
self="$top_builddir/tests/cuda_emu/emu_selftest"
"$self" > "$tmpdir/self.log" 2>&1 || { cat "$tmpdir/self.log"; fail "the emulation's own checks"; }
echo "ok   the emulation's own checks: $(tail -1 "$tmpdir/self.log")"
for c in "host-pointer:kernel write_index: pointer argument 1: .* is not device memory" \
         "read-past-end:kernel read_one (block (0,0,0), thread (0,0,0)): access 0 bytes past the end" \
         "host-touch:host code: read or wrote device memory" \
         "warp-mask:kernel warp_ops, block (0,0,0), thread [0-9]*: __shfl_down_sync at .*: the lane is not in its mask" \
         "gemm-overlap:cublasSgemmStridedBatched: C overlaps operand A (cuBLAS does not allow it)"; do
    case_name=${c%%:*} want=${c#*:}
    rc=0
    "$self" "$case_name" > "$tmpdir/self-$case_name.log" 2>&1 || rc=$?
    grep -q "cuda-emu: $want" "$tmpdir/self-$case_name.log" &&
        { [ "$case_name" = host-pointer ] && [ $rc -eq 0 ] || [ $rc -ne 0 ]; } ||
        { cat "$tmpdir/self-$case_name.log"; fail "$case_name: not reported as it must be (exit $rc)"; }
    echo "ok   $case_name: $(grep -m1 "cuda-emu: " "$tmpdir/self-$case_name.log")"
done

# ---- 1. conformance, three poses ----
for pose in 80 70 90; do
    quick=--quick
    [ $pose = 80 ] && quick=""
    rc=0
    CUDA_EMU_ARCH=$pose "$CONF" --backend cuda-emu $quick > "$tmpdir/conf-$pose.log" 2>&1 || rc=$?
    card=$(sed -n 's/^# cuda-emu: \([^(]*\).*/\1/p' "$tmpdir/conf-$pose.log")
    [ $rc -eq 0 ] || { grep -E "FAIL|cuda" "$tmpdir/conf-$pose.log" | head -30; fail "conformance on cuda-emu (sm_$pose) exit $rc"; }
    echo "ok   conformance on cuda-emu as ${card:-?}(sm_$pose)${quick:+ $quick}: $(tail -1 "$tmpdir/conf-$pose.log")"
done

# ---- 2. CPU vs cuda-emu, 20 steps in fp32, bf16, fp16 ----
small="--set train_batch_size=8 --set train_micro_batch_size_per_gpu=8 --set data.seq_len=32"
# shellcheck disable=SC2086
sh tests/train-vs-cpu.sh cuda-emu:0 "$tmpdir" $small > "$tmpdir/train.out" 2>&1
rc=$?
sed 's/^/     /' "$tmpdir/train.out"
[ $rc -eq 0 ] || fail "training on cuda-emu does not match the CPU"
echo "ok   20 training steps on cuda-emu match the CPU in fp32, bf16 and fp16"

# ---- 3. bit-exact resume ----
resume_exact cuda-emu cuda-emu:0 20

# ---- 4. MPI: CPU + cuda-emu = one CPU rank ----
if ! "$BERTRAIN" version | grep -q "; mpi)" || ! command -v mpiexec > /dev/null 2>&1; then
    skip_part "the MPI run (bertrain built without MPI, or no mpiexec)"
else
    mpi_setup
    common="--set train_steps=5 --set steps_per_print=1 --set data.seq_len=32 --set data.valid=\"\"
            --set train_batch_size=16 --set model.hidden_dropout_prob=0.1"
    # shellcheck disable=SC2086
    "$BERTRAIN" train tests/fixtures/base.json $common --set train_micro_batch_size_per_gpu=16 \
        --set output_dir="\"$tmpdir/one\"" > "$tmpdir/one.log" 2>&1 || fail "one CPU rank failed"
    # shellcheck disable=SC2086
    $MPI -n 2 -x BERTRAIN_CUDA_EMU -x CUDA_EMU_WORKERS "$BERTRAIN" train tests/fixtures/base.json $common \
        --set train_micro_batch_size_per_gpu=8 --set 'devices=["cpu", "cuda-emu:0"]' \
        --set distributed.bucket_mb=0.1 \
        --set output_dir="\"$tmpdir/mixed\"" > "$tmpdir/mixed.log" 2>&1 ||
        { cat "$tmpdir/mixed.log"; fail "the CPU + cuda-emu run failed"; }
    grep "^ *[01] | " "$tmpdir/mixed.log"
    grep -q "^ *1 | .* | cuda | " "$tmpdir/mixed.log" || fail "rank 1 did not run on cuda-emu"
    "$top_builddir/tests/c/st_compare" "$tmpdir/one/ckpt-00000005/model.safetensors" \
        "$tmpdir/mixed/ckpt-00000005/model.safetensors" 1e-4 ||
        fail "CPU + cuda-emu differs from one CPU rank"
    echo "ok   2 ranks, CPU + cuda-emu, equal one CPU rank"
fi

# ---- 5. device switches and fault reports ----
"$top_builddir/tests/c/test_cuda_emu" device-switch || fail "ops went to the wrong device"
"$top_builddir/tests/c/test_cuda_emu" sync-flags || fail "the CUDA backend lets a waiting host thread spin"
"$top_builddir/tests/c/test_cuda_emu" upload-async || fail "the CUDA backend's uploads block or deliver the wrong values"
"$top_builddir/tests/c/test_cuda_emu" download-async ||
    fail "the CUDA backend's asynchronous copies block, arrive early or deliver the wrong values"
for mode in default sync; do
    rc=0
    if [ $mode = sync ]; then
        BERTRAIN_CUDA_SYNC=1 "$top_builddir/tests/c/test_cuda_emu" fault > "$tmpdir/fault.log" 2>&1 || rc=$?
        where=cuda_ops.cu
    else
        "$top_builddir/tests/c/test_cuda_emu" fault > "$tmpdir/fault.log" 2>&1 || rc=$?
        where=cuda_backend.cu
    fi
    [ $rc -ne 0 ] || { cat "$tmpdir/fault.log"; fail "a write past a buffer went unnoticed ($mode)"; }
    grep -q "kernel bt_fill wrote outside a device allocation" "$tmpdir/fault.log" &&
        grep -q "cudaErrorIllegalAddress.* at .*$where:" "$tmpdir/fault.log" ||
        { cat "$tmpdir/fault.log"; fail "the fault ($mode) is not reported at $where"; }
    echo "ok   a kernel writing past its buffer ($mode): $(grep "bertrain: cuda: .* failed" "$tmpdir/fault.log")"
done

# ---- 6. the model's 16-bit GEMMs on tensor cores ----
CUDA_EMU_ARCH=80 "$top_builddir/tests/c/test_stash16" cuda-emu > "$tmpdir/stash16.log" 2>&1 ||
    { cat "$tmpdir/stash16.log"; fail "the model's 16-bit GEMMs on the emulated tensor cores"; }
echo "ok   $(tail -1 "$tmpdir/stash16.log"): $(grep -c '^ok' "$tmpdir/stash16.log") cases, bits equal to the fp32 GEMMs'"
finish "the CUDA backend passes conformance, trains like the CPU, resumes exactly and runs beside a CPU rank on the emulated device"
