#!/bin/sh
# WordPiece ids against Hugging Face tokenizers. With a python3 that imports
# `tokenizers` (TOKENIZERS_PYTHON, default python3), the expected ids are
# regenerated live from the same inputs; the committed fixture is always checked.
. "$(dirname "$0")/lib.sh"
fixtures="$top_srcdir/tests/fixtures"
vocab="$fixtures/bert-uncased-vocab.txt"
"$top_builddir/tests/test_tokenizer" "$vocab" "$fixtures/tokenizer_cases.txt" ||
    fail "ids differ from the committed fixture"
py=${TOKENIZERS_PYTHON:-python3}
if "$py" -c 'import tokenizers' >/dev/null 2>&1; then
    echo "regenerating the expected ids with $py (live tokenizers)"
    "$py" "$top_srcdir/tests/tokenizer_cases.py" --vocab "$vocab" --out "$tmpdir/cases.txt" ||
        fail "tokenizer_cases.py failed"
    "$top_builddir/tests/test_tokenizer" "$vocab" "$tmpdir/cases.txt" ||
        fail "ids differ from live tokenizers"
    "$py" "$top_srcdir/tests/tokenizer_cases.py" --vocab "$top_srcdir/data/demo/vocab.txt" \
        --out "$tmpdir/demo-cases.txt" || fail "tokenizer_cases.py failed"
    "$top_builddir/tests/test_tokenizer" "$top_srcdir/data/demo/vocab.txt" \
        "$tmpdir/demo-cases.txt" ||
        fail "ids differ from live tokenizers (demo vocab)"
else
    echo "no python with tokenizers: checked the committed fixture only"
fi
echo "PASS: WordPiece ids match Hugging Face tokenizers"
