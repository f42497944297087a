#!/bin/sh
# A global batch of 32 as 1x32, 4x8 and 32x1 gives the same parameters.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
# test_split's own exit status decides; its log is kept whole for a failure
status=0
"$top_builddir/tests/c/test_split" tests/fixtures/base.json "$tmpdir/out" > "$tmpdir/log" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
    cat "$tmpdir/log"
    fail "test_split exited with status $status"
fi
grep -v '^step\|^bertrain\|^eval\|^checkpoint' "$tmpdir/log"
exit 0
