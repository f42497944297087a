#!/bin/sh
# Masking statistics, mask keys, epoch order and rank slicing on the demo data.
. "$(dirname "$0")/lib.sh"
"$top_builddir/tests/c/test_data" "$top_srcdir/data/demo/vocab.txt" "$top_srcdir/data/demo/valid.shard"
