#!/bin/sh
# make check-fast's conformance run: every op's cases at their small shapes
# (--quick) on the CPU reference backend against float64, each op giving the
# same bits with 1 and 2 threads. tests/conformance-cpu.sh runs every shape.
. "$(dirname "$0")/lib.sh"
"$top_builddir/bertrain-conformance" --backend cpu --quick --threads-check
