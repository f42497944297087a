#!/bin/sh
# CUDA backend parity, mostly checkable without a GPU:
#  1. every `__kernel void NAME` of kernels_cl/*.cl has a `__global__ void NAME`
#     twin in kernels_cu/*.cu, and vice versa (source only: runs in every build);
#  2. the CUDA backend fills every op slot of the dispatch table
#     (tests/c/cuda_table: fills the table as bt_cuda_backend_create does, no
#     device needed);
#  3. bertrain-conformance --backend cuda links and either runs the whole suite
#     on a GPU (and passes), or skips for exactly one reason: no CUDA device.
# Without a CUDA build, 2 and 3 cannot run: the test skips after 1, saying why.
. "$(dirname "$0")/lib.sh"

# kernel_names KEYWORD FILE...: the name of every kernel introduced by
# KEYWORD (__kernel or __global__), one a line, sorted. Comments are removed;
# attributes between the keyword and the name (__attribute__((...)),
# __launch_bounds__(...)) are skipped, so the name is the first identifier
# followed by "(" that is not an attribute.
kernel_names() {
    kw=$1
    shift
    cat "$@" | awk -v kw="$kw" '
    { sub(/\/\/.*$/, ""); text = text $0 " " }
    END {
        gsub(/\/\*([^*]|\*+[^*\/])*\*+\//, " ", text)
        n = length(text)
        pos = 1
        while ((i = index(substr(text, pos), kw)) > 0) {
            p = pos + i - 1 + length(kw)
            name = ""
            while (p <= n) {
                c = substr(text, p, 1)
                if (c ~ /[ \t]/) { p++; continue }
                if (c !~ /[A-Za-z_]/) break
                s = p
                while (p <= n && substr(text, p, 1) ~ /[A-Za-z0-9_]/) p++
                id = substr(text, s, p - s)
                q = p
                while (q <= n && substr(text, q, 1) ~ /[ \t]/) q++
                if (substr(text, q, 1) != "(") continue
                if (id == "__attribute__" || id == "__launch_bounds__") {
                    depth = 0
                    p = q
                    do {
                        c = substr(text, p, 1)
                        if (c == "(") depth++
                        else if (c == ")") depth--
                        p++
                    } while (depth > 0 && p <= n)
                    continue
                }
                name = id
                break
            }
            if (name != "") print name
            pos = p
        }
    }' | sort
}

# ---- 1. kernel names: kernels_cl/*.cl <-> kernels_cu/*.cu ----
kernel_names __kernel "$top_srcdir"/kernels_cl/*.cl > "$tmpdir/cl" || fail "cannot read kernels_cl/"
kernel_names __global__ "$top_srcdir"/kernels_cu/*.cu > "$tmpdir/cu" || fail "cannot read kernels_cu/"
ncl=$(wc -l < "$tmpdir/cl")
ncu=$(wc -l < "$tmpdir/cu")
[ "$ncl" -gt 0 ] && [ "$ncu" -gt 0 ] || fail "found $ncl OpenCL and $ncu CUDA kernels: the name scan is broken"
dups=$(cat "$tmpdir/cl" "$tmpdir/cu" | sort | uniq -c | awk '$1 > 2 { print $2 }')
[ -z "$dups" ] || fail "kernels defined more than once: $dups"
only_cl=$(comm -23 "$tmpdir/cl" "$tmpdir/cu" | tr '\n' ' ')
only_cu=$(comm -13 "$tmpdir/cl" "$tmpdir/cu" | tr '\n' ' ')
[ -z "$only_cl" ] || echo "kernels_cl/ kernels without a kernels_cu/ twin: $only_cl"
[ -z "$only_cu" ] || echo "kernels_cu/ kernels without a kernels_cl/ twin: $only_cu"
[ -z "$only_cl$only_cu" ] || fail "kernels_cl/ and kernels_cu/ disagree on kernel names"
echo "ok   $ncl kernels, each in kernels_cl/ and kernels_cu/ under the same name"

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
        finish "kernel names, dispatch table and plugin; the CUDA conformance run needs a GPU" ;;
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
