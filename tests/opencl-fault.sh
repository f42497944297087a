#!/bin/sh
# The conformance suite catches a broken OpenCL kernel. tests/c/conformance_clfault
# is the suite linked with a test-only build of the OpenCL host code that
# compiles BERTRAIN_CL_FAULT=NAME into the kernels as -DBT_FAULT_NAME:
#   bias_add_off_by_one  bias_add adds the bias of the next column
#   gelu_tanh_approx     gelu_fwd uses the tanh approximation (|err| ~ 1e-3)
# Each fault must fail its op, and no op but it and the fused ops whose
# unfused sequence contains it (their rows compare with that sequence bit for
# bit, or OpenCL composes them of it: gemm16_bias); without a fault every
# op passes. A compiler that rejects work-groups
# above 64 (the fault wg_above_64) makes the backend build again at half the
# size, saying so in one line a try, and every op then passes. Skips (77)
# without an OpenCL build or device.
. "$(dirname "$0")/lib.sh"
spec=${BERTRAIN_TEST_OPENCL_DEVICE:-opencl:0:0}
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=2}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT
suite="$top_builddir/tests/c/conformance_clfault"
[ -x "$suite" ] || skip "bertrain was built without OpenCL (configure --with-opencl)"

rc=0
"$suite" --backend "$spec" --quick > "$tmpdir/clean" 2>&1 || rc=$?
[ "$rc" -eq 77 ] && skip "no OpenCL device $spec"
[ "$rc" -eq 0 ] || { cat "$tmpdir/clean"; fail "the fault build fails without a fault"; }
echo "no fault: $(tail -1 "$tmpdir/clean")"

for case in bias_add_off_by_one:bias_add:bias_gelu_fwd,bias_dropout_add,residual_layernorm_fwd,gemm16_bias \
    gelu_tanh_approx:gelu_fwd:bias_gelu_fwd; do
    fault=${case%%:*} rest=${case#*:}
    op=${rest%%:*} fused=$(echo "${rest#*:}" | tr , '|')
    rc=0
    BERTRAIN_CL_FAULT=$fault "$suite" --backend "$spec" --quick > "$tmpdir/$fault" 2>&1 || rc=$?
    grep " FAIL" "$tmpdir/$fault" | sed "s/^/  /"
    [ "$rc" -eq 1 ] || { cat "$tmpdir/$fault"; fail "$fault: the suite exited $rc, not 1"; }
    grep -q "^$op .* FAIL" "$tmpdir/$fault" || fail "$fault: no FAIL row for $op"
    others=$(grep " FAIL" "$tmpdir/$fault" | grep -v "^$op " | grep -Ev "^($fused) " || true)
    [ -z "$others" ] || fail "$fault: other ops failed too"
    echo "$fault: $op FAILs as it must; $(tail -1 "$tmpdir/$fault")"
done
rc=0
BERTRAIN_CL_FAULT=wg_above_64 "$suite" --backend "$spec" --quick > "$tmpdir/wg" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { cat "$tmpdir/wg"; fail "wg_above_64: the suite exited $rc: no retry at a smaller work-group size"; }
retries=$(grep -c "^bertrain: opencl: .*: the kernels did not build with work-groups of [0-9]*; retrying with [0-9]*$" "$tmpdir/wg")
grep -q "work-groups of 128; retrying with 64$" "$tmpdir/wg" && ! grep -q "retrying with 32$" "$tmpdir/wg" ||
    { cat "$tmpdir/wg"; fail "wg_above_64: the build did not step down to 64 and stop there"; }
echo "wg_above_64: $retries retries, one line each ($(grep -m1 'retrying' "$tmpdir/wg" | sed 's/^bertrain: opencl: [^:]*: //')), then $(tail -1 "$tmpdir/wg")"
echo "PASS: the suite catches both injected kernel faults; a rejected work-group size is retried at half"
