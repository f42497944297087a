#!/bin/sh
# The backend conformance suite on the OpenCL backend: every op against the
# float64 references, guard bands, NaN propagation, bit-identical reruns.
# Machines without a GPU run it on PoCL's CPU device, so the device is an
# explicit platform:device (auto means "first GPU"); BERTRAIN_TEST_OPENCL_DEVICE
# picks another. Skips (77) without an OpenCL build or device.
. "$(dirname "$0")/lib.sh"
spec=${BERTRAIN_TEST_OPENCL_DEVICE:-opencl:0:0}
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=2}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT
"$BERTRAIN" version | grep -q "opencl" || skip "bertrain was built without OpenCL (configure --with-opencl)"
rc=0
"$top_builddir/bertrain-conformance" --backend "$spec" > "$tmpdir/out" 2>&1 || rc=$?
cat "$tmpdir/out"
[ "$rc" -eq 77 ] && skip "no OpenCL device $spec: $(grep '^SKIP' "$tmpdir/out")"
exit "$rc"
