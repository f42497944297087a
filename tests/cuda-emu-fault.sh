#!/bin/sh
# The emulated CUDA device catches broken CUDA code: what tests/opencl-fault.sh
# is for the OpenCL kernels. Each case copies backends, kernels and kernels_cu,
# applies one deliberate fault, rebuilds the emulated backend from that copy
# (only the files the fault touches; the rest are the build's objects) and
# runs a check that must now fail:
#   launch-grid       grid_of launches half the blocks           conformance
#   no-syncthreads    the barrier after the first write of the
#                     block reductions (wg_sum, wg_max) removed   conformance layernorm
#                     (a race shows only where the block's threads
#                     hold different data: the full shapes)
#   half-blocks       every kernel launched in blocks of BT_WG / 2
#                     (twice the blocks): the kernels assume BT_WG conformance softmax_fwd
#   shuffle-mask      wg_sum's warp shuffles with half the warp in
#                     their mask                                  conformance layernorm_fwd
#   read-past-end     sum_partial's last chunk reads one element
#                     past the tensor (the guard band's NaN)      conformance sum
#   swapped-ld        lda and ldb swapped in the cuBLAS SGEMM      conformance gemm
#   no-download-sync  download reads before the stream is done    conformance
# and the bugs a review found on paper, each put back:
#   k0-to-cublas      k = 0 handed to cuBLAS again                conformance gemm
#   bf16-on-v100      bf16 tensor cores assumed on a V100 (sm_70) conformance gemm16
#   cached-device     the current device cached per thread again  test_cuda_emu device-switch
# The same checks pass on the unbroken build (tests/cuda-emu.sh runs them).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
emu_dir="$top_builddir/tests/cuda_emu"
[ -f "$emu_dir/bertrain-cuda-emu.so" ] || skip "the emulated CUDA device is not built (configure found no C++17 compiler)"
: "${CXX:=g++}" "${CUDA_EMU_LIBS:=-lopenblas -lpthread -ldl}"
CXXFLAGS="-std=c++17 -O1 -fPIC -ffp-contract=off -w -D_GNU_SOURCE"
CONF="$top_builddir/bertrain-conformance"
export OMP_NUM_THREADS=1 CUDA_EMU_WORKERS=2

# mutant NAME FILE PERL-EXPRESSION: a plugin built with FILE (backends/cuda/...
# or kernels/...) changed by the expression, at $tmpdir/NAME.so
mutant() {
    name=$1 file=$2 expr=$3 src="$tmpdir/$1"
    mkdir -p "$src" && cp -R backends kernels kernels_cu "$src/"
    perl -0pi -e "$expr" "$src/$file"
    cmp -s "$file" "$src/$file" && fail "$name: the fault no longer applies to $file: update this test"
    case $file in
    kernels_cu/*.cuh | kernels/common.cl | kernels/philox.cl | kernels/dialect_cuda.cuh | kernels/constants.h)
        rebuild="elementwise reduce layernorm softmax embedding xent optim cast fused" ;;
    kernels/*.cl) rebuild=$(basename "$file" .cl) ;;
    backends/cuda/*.cuh) rebuild=$(grep -l "$(basename "$file")" backends/cuda/*.cu | sed 's|.*/||; s|\.cu$||' | tr '\n' ' ') ;;
    *) rebuild=$(basename "$file" .cu) ;;
    esac
    # shellcheck disable=SC2086
    emu_plugin "$tmpdir/$name.so" "$src" "$CXXFLAGS" $rebuild
}

# expect_failure NAME CMD...: CMD (run against the mutant) must fail: exit
# non-zero, and not 77 (a skip: the mutant plugin did not load)
expect_failure() {
    name=$1
    shift
    rc=0
    BERTRAIN_CUDA_EMU="$tmpdir/$name.so" "$@" > "$tmpdir/$name.log" 2>&1 || rc=$?
    [ $rc -ne 0 ] || { tail -5 "$tmpdir/$name.log"; fail "$name: the check still passes with the fault"; }
    # 77: the suite skipped, the mutant plugin did not even load (a broken build, not a catch)
    [ $rc -ne 77 ] || { tail -5 "$tmpdir/$name.log"; fail "$name: the mutant plugin did not load"; }
    why=$(grep -m1 -E " FAIL |failed|cuda-emu: (kernel|cublas|cuda)|FAIL" "$tmpdir/$name.log")
    echo "ok   $name: caught (exit $rc): ${why:-$(tail -1 "$tmpdir/$name.log")}"
}

mutant launch-grid backends/cuda/cuda_launch.cuh 's|\(items \+ BT_WG - 1\) / BT_WG;|(items + BT_WG - 1) / (2 * BT_WG);|'
expect_failure launch-grid "$CONF" --backend cuda-emu --quick

mutant no-syncthreads kernels/common.cl 's|(red\[lid\] = v;\n)    barrier\(CLK_LOCAL_MEM_FENCE\);\n|$1|g'
expect_failure no-syncthreads "$CONF" --backend cuda-emu --op layernorm_fwd

mutant half-blocks backends/cuda/cuda_launch.cuh 's|BT_KERNEL_LAUNCH\(bt_##kernel, grid_of\(items_\), BT_WG,|BT_KERNEL_LAUNCH(bt_##kernel, 2 * grid_of(items_), BT_WG / 2,|'
expect_failure half-blocks "$CONF" --backend cuda-emu --quick --op softmax_fwd

mutant shuffle-mask kernels/dialect_cuda.cuh 's|__shfl_down_sync\(0xffffffffu, x, delta\)|__shfl_down_sync(0x0000ffffu, x, delta)|'
expect_failure shuffle-mask "$CONF" --backend cuda-emu --quick --op layernorm_fwd

mutant read-past-end kernels/reduce.cl 's|(i1 = bt_min_size\(i0 \+ BT_REDUCE_CHUNK, \(size_t\)n)\);|$1 + 1);|'
expect_failure read-past-end "$CONF" --backend cuda-emu --op sum

mutant swapped-ld backends/cuda/cuda_gemm.cu 's|B, ldb,\n(\s*)\(long long\)stride_b, A, lda,|B, lda,\n$1(long long)stride_b, A, ldb,|'
expect_failure swapped-ld "$CONF" --backend cuda-emu --quick --op gemm

mutant no-download-sync backends/cuda/cuda_backend.cu 's|(cudaMemcpyDeviceToHost,\n\s*c->stream\)\);)\n\s*CU_CHECK\(cudaStreamSynchronize\(c->stream\)\);|$1|'
expect_failure no-download-sync "$CONF" --backend cuda-emu --quick --op add

mutant k0-to-cublas backends/cuda/cuda_gemm.cu 's|    if \(k <= 0\) \{ /\* C = beta C:[^}]*\}\n||'
expect_failure k0-to-cublas "$CONF" --backend cuda-emu --quick --op gemm

mutant bf16-on-v100 backends/cuda/cuda_gemm.cu 's|const bool tensor = dt == BT_BF16 \? x->info.tensor_bf16 : x->info.tensor_f16;|const bool tensor = true;|'
export CUDA_EMU_ARCH=70 # a V100
expect_failure bf16-on-v100 "$CONF" --backend cuda-emu --quick --op gemm16
unset CUDA_EMU_ARCH

mutant cached-device backends/cuda/cuda_context.cu 's|(cudaError_t cu_use_device\(int device\) \{\n)|$1    static thread_local int cached = -1;\n    if (cached == device) return cudaSuccess;\n    cached = device;\n    return cudaSetDevice(device);\n|'
expect_failure cached-device "$top_builddir/tests/c/test_cuda_emu" device-switch

echo "PASS: the emulated device catches all 10 faults"
