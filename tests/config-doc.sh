#!/bin/sh
# docs/CONFIG.md against the config's key table (src/config/config_keys.c):
# every key has one row giving its type, the range the loader enforces and the
# default config_defaults gives it, every choice of a choice key is listed, and
# no row names a key the table lacks (tests/python/config_doc.py says how).
. "$(dirname "$0")/lib.sh"
"$top_builddir/tests/c/config_table" > "$tmpdir/keys.jsonl" || fail "tests/c/config_table failed"
python3 "$top_srcdir/tests/python/config_doc.py" "$top_srcdir/docs/CONFIG.md" "$tmpdir/keys.jsonl" ||
    fail "docs/CONFIG.md disagrees with the key table (lines above)"
finish "docs/CONFIG.md matches the key table"
