#!/bin/sh
# WordPiece ids against Hugging Face tokenizers: the committed fixture, and the
# expected ids regenerated live by `tokenizers` (the test environment of
# scripts/deps.sh, or TOKENIZERS_PYTHON) from the same inputs, with BERT's
# uncased vocab and with the demo vocab. Without tokenizers the live part is
# reported as skipped.
. "$(dirname "$0")/lib.sh"
fixtures="$top_srcdir/tests/fixtures"
vocab="$fixtures/bert-uncased-vocab.txt"
"$top_builddir/tests/c/test_tokenizer" "$vocab" "$fixtures/tokenizer_cases.txt" ||
    fail "ids differ from the committed fixture"
if [ -n "${TOKENIZERS_PYTHON:-}" ]; then PY=$TOKENIZERS_PYTHON; else find_python tokenizers; fi
if [ -n "$PY" ]; then
    echo "regenerating the expected ids with $PY (tokenizers $("$PY" -c 'import tokenizers; print(tokenizers.__version__)'))"
    "$PY" "$top_srcdir/tests/python/tokenizer_cases.py" --vocab "$vocab" --out "$tmpdir/cases.txt" ||
        fail "tokenizer_cases.py failed"
    "$top_builddir/tests/c/test_tokenizer" "$vocab" "$tmpdir/cases.txt" ||
        fail "ids differ from live tokenizers"
    "$PY" "$top_srcdir/tests/python/tokenizer_cases.py" --vocab "$top_srcdir/data/demo/vocab.txt" \
        --out "$tmpdir/demo-cases.txt" || fail "tokenizer_cases.py failed"
    "$top_builddir/tests/c/test_tokenizer" "$top_srcdir/data/demo/vocab.txt" \
        "$tmpdir/demo-cases.txt" ||
        fail "ids differ from live tokenizers (demo vocab)"
else
    skip_part "the live comparison (no python imports tokenizers; scripts/deps.sh test makes venv/)"
fi
finish "WordPiece ids match Hugging Face tokenizers"
