#!/bin/sh
# A global batch of 32 as 1x32, 4x8 and 32x1 gives the same parameters.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
"$top_builddir/tests/test_split" examples/demo.json "$tmpdir/out" | grep -v '^step\|^bertrain'
