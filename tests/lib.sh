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
