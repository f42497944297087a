#!/bin/sh
# CUDA backend parity, mostly checkable without a GPU:
#  1. one kernel source (source only: runs in every build): every kernel of
#     kernels/*.cl is named bt_*, defined once, created by the OpenCL backend
#     (OCL_KERNELS) and declared for CUDA (kernels_cu/kernels.cuh), and
#     nothing else is; kernels_cu/NAME.cu defines no kernel of its own and
#     compiles kernels/NAME.cl, for every kernels/ file that has kernels;
#  2. the CUDA backend fills every op slot of the dispatch table
#     (tests/c/cuda_table: fills the table as bt_cuda_backend_create does, no
#     device needed);
#  3. bertrain-conformance --backend cuda links and either runs the whole suite
#     on a GPU (and passes), or skips for exactly one reason: no CUDA device.
# Without a CUDA build, 2 and 3 cannot run: the test skips after 1, saying why.
. "$(dirname "$0")/lib.sh"

# ---- 1. one kernel source: kernels/*.cl, for OpenCL and CUDA ----
K=$top_srcdir/kernels
sources=$(ls "$K"/*.cl | grep -v '/dialect_opencl.cl$')
# shellcheck disable=SC2086
kernel_names BT_KERNEL $sources > "$tmpdir/kernels" || fail "cannot read kernels/"
n=$(wc -l < "$tmpdir/kernels")
[ "$n" -gt 0 ] || fail "found no kernel in kernels/: the name scan is broken"
dups=$(uniq -d "$tmpdir/kernels" | tr '\n' ' ')
[ -z "$dups" ] || fail "kernels defined more than once: $dups"
unprefixed=$(grep -v '^bt_' "$tmpdir/kernels" | tr '\n' ' ' || true)
[ -z "$unprefixed" ] || fail "kernels without the bt_ prefix: $unprefixed"
sed -n '/^#define OCL_KERNELS(X)/,/^$/p' "$top_srcdir/backends/opencl/opencl_internal.h" |
    grep -o 'X([a-z0-9_]*)' | sed 's/^X(/bt_/; s/)$//' | sort > "$tmpdir/opencl"
kernel_names __global__ "$top_srcdir/kernels_cu/kernels.cuh" > "$tmpdir/cuda"
for side in opencl cuda; do
    diff "$tmpdir/kernels" "$tmpdir/$side" > "$tmpdir/$side.diff" || {
        cat "$tmpdir/$side.diff"
        fail "the $side list of kernels differs from kernels/ (<: only in kernels/, >: only in the $side list)"
    }
done
[ -z "$(kernel_names __global__ "$top_srcdir"/kernels_cu/*.cu)" ] ||
    fail "a kernels_cu/*.cu file defines a kernel itself: write it once in kernels/"
for f in $sources; do
    name=$(basename "$f" .cl)
    [ -n "$(kernel_names BT_KERNEL "$f")" ] || continue
    grep -q "^#include \"../kernels/$name.cl\"" "$top_srcdir/kernels_cu/$name.cu" 2> /dev/null ||
        fail "kernels/$name.cl has kernels but kernels_cu/$name.cu does not compile it for CUDA"
done
echo "ok   $n kernels, each written once in kernels/ and compiled for OpenCL and CUDA"

# ---- is the CUDA backend built? ----
built=$("$BERTRAIN" version | sed -n 's/.*(backends: \([^;)]*\).*/\1/p')
case " $built " in
*" cuda "*) ;;
*) skip "CUDA backend not built (backends: ${built:-?}): configure --with-cuda, which needs nvcc and cuBLAS" ;;
esac

# ---- 2. every op slot filled ----
"$top_builddir/tests/c/cuda_table" || fail "the CUDA backend's dispatch table is incomplete"

# ---- 3. the conformance suite: runs on a GPU, or skips for want of one ----
rc=0
"$top_builddir/bertrain-conformance" --backend cuda > "$tmpdir/conf" 2>&1 || rc=$?
case $rc in
0)
    tail -1 "$tmpdir/conf"
    echo "PASS: conformance suite on the CUDA device"
    ;;
77)
    reason=$(grep '^SKIP backend cuda: ' "$tmpdir/conf" | head -1)
    echo "$reason"
    case $reason in
    "SKIP backend cuda: no CUDA device (cudaGetDeviceCount: "*")")
        skip_part "the conformance suite on a CUDA device (none here; the plugin loads and asked the driver)"
        finish "one kernel source, dispatch table and plugin; the CUDA conformance run needs a GPU" ;;
    *)
        cat "$tmpdir/conf"
        fail "bertrain-conformance --backend cuda skipped for another reason than no device" ;;
    esac
    ;;
*)
    cat "$tmpdir/conf"
    fail "bertrain-conformance --backend cuda exited with status $rc"
    ;;
esac
