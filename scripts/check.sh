#!/bin/sh
# README command 2 (and CI): install what is missing, build, and run the whole
# test suite. Ends with one line: "N passed, N failed, N skipped".
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh test
autoreconf -fi
./configure
make -j"$(nproc)"
status=0
make -j"$(nproc)" check || status=$?
sh scripts/test-summary.sh
exit $status
