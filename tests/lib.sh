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

# A part of the test that cannot run here: said now, and the test then ends in
# SKIP naming it (finish), never in PASS; the parts that did run still fail it.
PARTS_SKIPPED=""
skip_part() {
    echo "SKIP part: $*"
    PARTS_SKIPPED="${PARTS_SKIPPED:+$PARTS_SKIPPED; }$*"
}

# The end of a test that got there: PASS with the message when every part ran,
# else SKIP (exit 77) with the parts that did not and what did pass.
finish() {
    if [ -n "$PARTS_SKIPPED" ]; then
        echo "SKIP: $PARTS_SKIPPED (what ran passed: $*)"
        exit 77
    fi
    echo "PASS: $*"
    exit 0
}

# PY: the first python that imports every module named, or "" when none does:
# the test environment that scripts/deps.sh test makes ($BERTRAIN_VENV, or venv/
# in the build or source tree), configure's TORCH_PYTHON, Debian's
# /usr/bin/python3, python3 on PATH.
find_python() {
    PY=""
    imports=$(echo "$@" | tr ' ' ',')
    for p in ${BERTRAIN_VENV:+$BERTRAIN_VENV/bin/python3} "$top_builddir/venv/bin/python3" \
        "$top_srcdir/venv/bin/python3" ${TORCH_PYTHON:-} /usr/bin/python3 python3; do
        if command -v "$p" > /dev/null 2>&1 && "$p" -c "import $imports" > /dev/null 2>&1; then
            PY=$p
            return 0
        fi
    done
    return 1
}

# TPY: a python that imports transformers and torch, or "".
find_transformers_python() {
    find_python transformers torch
    TPY=$PY
}

# MPI tests: skip unless bertrain has MPI and mpiexec exists; set up Open MPI
# for root, no ssh and oversubscription; $MPI starts a job.
mpi_setup() {
    "$BERTRAIN" version | grep -q "; mpi)" || skip "bertrain was built without MPI"
    command -v mpiexec > /dev/null 2>&1 || skip "no mpiexec"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=
    export OMP_NUM_THREADS=1
    MPI="mpiexec --oversubscribe --bind-to none"
}

# expect_refusal NAME REGEX CMD...: CMD exits 2 with one stderr line matching
# REGEX (extended), else the test fails showing what came.
expect_refusal() {
    name=$1 regex=$2
    shift 2
    "$@" > "$tmpdir/refusal.out" 2> "$tmpdir/refusal.err"
    rc=$?
    [ "$rc" -eq 2 ] || { cat "$tmpdir/refusal.out" "$tmpdir/refusal.err"; fail "$name: exit $rc, not 2"; }
    [ "$(wc -l < "$tmpdir/refusal.err")" -eq 1 ] || { cat "$tmpdir/refusal.err"; fail "$name: not one line"; }
    grep -Eq "$regex" "$tmpdir/refusal.err" || { cat "$tmpdir/refusal.err"; fail "$name: no '$regex'"; }
}
