#!/bin/sh
# README command 2 (and CI): install what is missing, build, and run the whole
# test suite. Ends with one line: "N passed, N failed, N skipped".
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh test
# Hugging Face tokenizers (PyPI) lets the tokenizer test compare live; without
# it the committed fixture is used and the test says so.
if ! python3 -c 'import tokenizers' >/dev/null 2>&1; then
    python3 -m pip install --quiet tokenizers ||
        echo "check: could not install tokenizers from PyPI; using committed fixtures"
fi
autoreconf -fi
./configure
make -j"$(nproc)"
status=0
make -j"$(nproc)" check || status=$?
sh scripts/test-summary.sh
exit $status
