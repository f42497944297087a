#!/bin/sh
# The backend conformance suite on the CPU reference backend, including the
# check that every op gives the same bits with 1 and 2 threads.
. "$(dirname "$0")/lib.sh"
"$top_builddir/bertrain-conformance" --backend cpu --threads-check
