# Shared helpers for the shell tests (sourced). Automake runs each test with
# top_srcdir/top_builddir set; a direct run works from a built tree too.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
BERTRAIN="$top_builddir/bertrain"
tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/bertrain-test.XXXXXX")
trap 'rm -rf "$tmpdir"' EXIT

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

# TPY: a python that imports transformers and torch (Debian's /usr/bin/python3,
# python3 on PATH, or configure's TORCH_PYTHON), or "" when none does.
find_transformers_python() {
    TPY=""
    for p in /usr/bin/python3 python3 ${TORCH_PYTHON:-}; do
        if command -v "$p" > /dev/null 2>&1 && "$p" -c 'import transformers, torch' > /dev/null 2>&1; then
            TPY=$p
            return
        fi
    done
}
