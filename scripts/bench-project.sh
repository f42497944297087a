#!/bin/sh
# `bertrain bench --project` on the emulated CUDA device built to count: the
# counting plugin (the kernels compiled with g++ -fsanitize=thread, as
# tests/cuda-emu-count.sh builds it) made once at OUT_DIR/count.so from this
# build tree, then one profiled step of the bench whose options follow,
# traced to OUT_DIR/PRESET.trace, projected onto the cards (docs/PERFORMANCE.md,
# "Projection"). Run from a configured and built tree (make, make check TESTS=).
#   sh scripts/bench-project.sh OUT_DIR CARDS BENCH-OPTIONS...
# e.g. sh scripts/bench-project.sh /tmp/proj h100-sxm,a100-sxm-80gb \
#          --preset mini --seq 128 --batch 8
# The emulator is slow: a step of BERT-base at batch 32 takes ~15 minutes on
# 2 cores; one step (no warm-up) is what it projects. WARMUP=1 runs one step
# before it: the first step alone makes the 16-bit weights (mixed precision
# on tensor cores) and uploads gemm_grid's address sets. BUILD_ONLY=1 makes
# the plugin and stops.
set -eu
[ $# -ge 2 ] || { sed -n '2,14p' "$0"; exit 2; }
out=$1 cards=$2
shift 2
top_srcdir=$(cd "$(dirname "$0")/.." && pwd)
top_builddir=${top_builddir:-$top_srcdir}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ ! -f "$out/count.so" ]; then
    (
        cd "$top_srcdir"
        # shellcheck disable=SC1091
        . tests/lib.sh
        rm -rf "$out/src" && mkdir -p "$out/src" && cp -R backends kernels kernels_cu "$out/src/"
        emu_plugin "$out/count.so" "$out/src" \
            "-std=c++17 -O1 -fPIC -ffp-contract=off -w -D_GNU_SOURCE -fsanitize=thread" \
            elementwise reduce layernorm softmax embedding xent optim cast fused attention
    )
fi
[ -z "${BUILD_ONLY:-}" ] || exit 0
export OMP_NUM_THREADS=1 BERTRAIN_CUDA_EMU="$out/count.so" CUDA_EMU_TRACE="$out/bench.trace"
: "${CUDA_EMU_MEM_MB:=12288}"
export CUDA_EMU_MEM_MB
exec "$top_builddir/bertrain" bench --backend cuda-emu --steps 1 --warmup "${WARMUP:-0}" --project "$cards" "$@"
