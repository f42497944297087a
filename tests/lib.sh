# Shared helpers for the shell tests (sourced). Automake runs each test with
# top_srcdir/top_builddir set; a direct run works from a built tree too.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
BERTRAIN="$top_builddir/bertrain"
# the test build of the program: the same commands with the fault injection
# that the BERTRAIN_TEST_* variables ask for (tests/c/fault_hooks.h); bertrain
# itself ignores them. make check builds it (make tests/c/bertrain_test).
BERTRAIN_T="$top_builddir/tests/c/bertrain_test"
tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/bertrain-test.XXXXXX")
trap 'rm -rf "$tmpdir"' EXIT

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
# need_test_build: fail unless the test build of the program ($BERTRAIN_T) is there.
need_test_build() {
    [ -x "$BERTRAIN_T" ] || fail "$BERTRAIN_T is not built (make check, or make tests/c/bertrain_test)"
}

# A part of the test that cannot run here: said now, and the test then ends in
# SKIP naming it (finish), never in PASS; the parts that did run still fail it.
PARTS_SKIPPED=""
# True when DIR is the top of a git checkout (not a folder inside someone
# else's checkout, as make distcheck's unpacked tarball is).
is_git_checkout() {
    command -v git > /dev/null 2>&1 || return 1
    top=$(git -C "$1" rev-parse --show-toplevel 2> /dev/null) || return 1
    [ "$(cd "$top" && pwd -P)" = "$(cd "$1" && pwd -P)" ]
}
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

# run_case NAME FUNCTION [ARGS...]: one case of a test, in a subshell: a
# `fail` in it ends that case only, is counted in CASE_FAILURES and named, and
# the next case runs, so that a broken build shows every case it breaks.
# Finish with cases_done.
CASE_FAILURES=0 CASES_FAILED=""
run_case() {
    case_name=$1
    shift
    ( "$@" )
    if [ $? -ne 0 ]; then
        echo "FAIL case $case_name"
        CASE_FAILURES=$((CASE_FAILURES + 1))
        CASES_FAILED="${CASES_FAILED:+$CASES_FAILED, }$case_name"
    fi
}
# cases_done MESSAGE: fail naming the cases that failed, else finish (PASS).
cases_done() {
    [ "$CASE_FAILURES" -eq 0 ] || fail "$CASE_FAILURES case(s) failed: $CASES_FAILED"
    finish "$@"
}

# wait_for_line LOG REGEX PID WHAT: wait (at most 60 s) until LOG has a line
# matching REGEX (basic); otherwise kill PID and fail saying WHAT never came.
wait_for_line() {
    n=0
    until grep -q "$2" "$1" 2> /dev/null; do
        n=$((n + 1))
        [ $n -lt 300 ] || { kill -9 "$3"; fail "$4"; }
        sleep 0.2
    done
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

# The small runs of the resume checks: 8 sequences of 32 tokens, no held-out
# evaluation, every step logged.
RESUME_SMALL="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=1"

# resume_exact NAME DEVICE STEPS: STEPS straight equal STEPS/2, a stop and
# STEPS/2 resumed (dropout on) on DEVICE: byte-identical model.safetensors and
# optim.bin (cmp) and the same per-step losses in metrics.jsonl (which the
# resumed run appends to). Fails the test otherwise.
resume_exact() {
    name=$1 dev=$2 n=$3 half=$(($3 / 2))
    a="$tmpdir/$name-straight" b="$tmpdir/$name-resumed"
    last=$(printf 'ckpt-%08d' "$n") mid=$(printf 'ckpt-%08d' "$half")
    # shellcheck disable=SC2086
    "$BERTRAIN" train tests/fixtures/base.json $RESUME_SMALL --set device="\"$dev\"" --set train_steps=$n \
        --set output_dir="\"$a\"" > "$a.log" 2>&1 || { cat "$a.log"; fail "$name: straight run"; }
    # shellcheck disable=SC2086
    "$BERTRAIN" train tests/fixtures/base.json $RESUME_SMALL --set device="\"$dev\"" --set train_steps=$half \
        --set output_dir="\"$b\"" > "$b.1.log" 2>&1 || { cat "$b.1.log"; fail "$name: first half"; }
    # shellcheck disable=SC2086
    "$BERTRAIN" train tests/fixtures/base.json $RESUME_SMALL --set device="\"$dev\"" --set train_steps=$n \
        --set output_dir="\"$b\"" --resume auto > "$b.2.log" 2>&1 ||
        { cat "$b.2.log"; fail "$name: resumed half"; }
    grep -q "^resume: from $b/$mid (step $half, sample $((half * 8))" "$b.2.log" ||
        { cat "$b.2.log"; fail "$name: did not resume from $mid"; }
    grep -q "^resume: train_steps $half -> $n$" "$b.2.log" || fail "$name: the train_steps change was not logged"
    for f in model.safetensors optim.bin; do
        cmp "$a/$last/$f" "$b/$last/$f" || fail "$name: $f differs after $n steps vs $half + $half"
    done
    grep -o '"step": [0-9]*, "loss": [^,]*' "$a/metrics.jsonl" > "$a.losses"
    grep -o '"step": [0-9]*, "loss": [^,]*' "$b/metrics.jsonl" > "$b.losses"
    [ "$(wc -l < "$a.losses")" -eq "$n" ] || fail "$name: expected $n loss lines, got $(wc -l < "$a.losses")"
    diff "$a.losses" "$b.losses" > /dev/null || { diff "$a.losses" "$b.losses"; fail "$name: per-step losses differ"; }
    echo "ok   $name: $n steps = $half + resume + $half: model.safetensors and optim.bin identical (cmp), $n per-step losses identical"
    echo "     $(sed -n "${half}p" "$b.losses") | $(sed -n "$((half + 1))p" "$b.losses") (first resumed step) | $(sed -n "${n}p" "$b.losses")"
}

# use_cuda_emu: the emulated CUDA device that the suite's cuda-emu runs
# load (BERTRAIN_CUDA_EMU, exported); SKIP when it is not built.
use_cuda_emu() {
    BERTRAIN_CUDA_EMU="$top_builddir/tests/cuda_emu/bertrain-cuda-emu.so"
    export BERTRAIN_CUDA_EMU
    [ -f "$BERTRAIN_CUDA_EMU" ] ||
        skip "the emulated CUDA device is not built (configure found no C++17 compiler: apt-get install g++)"
    emu_current
}

# emu_current: fails the test when a kernel or CUDA backend source is newer
# than the emulated device's plugin. The plugin is a test program, built by
# `make check` and not by `make`, so after a change and a plain `make` a test
# would run the old kernels (and emu_plugin would link the old host code).
# selftest*.cpp and selftest.h are not in the plugin (they are emu_selftest's own).
emu_current() {
    so="$top_builddir/tests/cuda_emu/bertrain-cuda-emu.so"
    newer=$(find "$top_srcdir/kernels" "$top_srcdir/kernels_cu" "$top_srcdir/backends/cuda" \
        "$top_srcdir/tests/cuda_emu" -type f -newer "$so" ! -name 'selftest*' \
        \( -name '*.cl' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' \) | head -1)
    [ -z "$newer" ] ||
        fail "$so is older than $newer: rebuild it (make check TESTS=, or make tests/cuda_emu/bertrain-cuda-emu.so)"
}

# emu_plugin OUT SRC CXXFLAGS NAME...: the emulated CUDA device's plugin at OUT,
# with the kernel or backend files NAME (tests/cuda_emu/cu/NAME.cpp) compiled
# from the sources in SRC (a copy of backends, kernels and kernels_cu) with
# CXXFLAGS, and every other object taken from the build. Fails the test when it
# does not build.
emu_plugin() {
    out=$1 src=$2 flags=$3
    shift 3
    emu_current
    : "${CXX:=g++}" "${CUDA_EMU_LIBS:=-lopenblas -lpthread -ldl}"
    objdir="$out.objs"
    mkdir -p "$objdir"
    keep=""
    for o in $(find "$top_builddir/tests/cuda_emu" "$top_builddir/backends" -name '*bertrain_cuda_emu_so-*.o'); do
        base=${o##*bertrain_cuda_emu_so-}
        case " $* " in *" ${base%.o} "*) continue ;; esac
        keep="$keep $o"
    done
    [ -n "$keep" ] || fail "no objects of bertrain-cuda-emu.so in $top_builddir"
    for w in "$@"; do
        # shellcheck disable=SC2086
        "$CXX" $flags -I"$top_srcdir/tests/cuda_emu/include" -I"$src" -I"$top_srcdir" \
            -c "$top_srcdir/tests/cuda_emu/cu/$w.cpp" -o "$objdir/$w.o" || fail "$w.cpp does not compile ($out)"
    done
    # shellcheck disable=SC2086
    "$CXX" -shared -o "$out" $keep "$objdir"/*.o $CUDA_EMU_LIBS || fail "$out: link failed"
}

# kernel_names KEYWORD FILE...: the name of every kernel introduced by
# KEYWORD (__kernel or __global__), one a line, sorted. Comments are removed;
# attributes between the keyword and the name (__attribute__((...)),
# __launch_bounds__(...)) are skipped, so the name is the first identifier
# followed by "(" that is not an attribute.
kernel_names() {
    kw=$1
    shift
    cat "$@" | awk -v kw="$kw" '
    { sub(/\/\/.*$/, ""); text = text $0 " " }
    END {
        gsub(/\/\*([^*]|\*+[^*\/])*\*+\//, " ", text)
        n = length(text)
        pos = 1
        while ((i = index(substr(text, pos), kw)) > 0) {
            p = pos + i - 1 + length(kw)
            name = ""
            while (p <= n) {
                c = substr(text, p, 1)
                if (c ~ /[ \t]/) { p++; continue }
                if (c !~ /[A-Za-z_]/) break
                s = p
                while (p <= n && substr(text, p, 1) ~ /[A-Za-z0-9_]/) p++
                id = substr(text, s, p - s)
                q = p
                while (q <= n && substr(text, q, 1) ~ /[ \t]/) q++
                if (substr(text, q, 1) != "(") continue
                if (id == "__attribute__" || id == "__launch_bounds__") {
                    depth = 0
                    p = q
                    do {
                        c = substr(text, p, 1)
                        if (c == "(") depth++
                        else if (c == ")") depth--
                        p++
                    } while (depth > 0 && p <= n)
                    continue
                }
                name = id
                break
            }
            if (name != "") print name
            pos = p
        }
    }' | sort
}

# every_device_env: the environment of a test that runs on the CPU, PoCL and
# the emulated CUDA device alike: PoCL's kernel cache and 2 threads (unless
# set), 2 OpenMP threads, 2 emulator workers, the emulated plugin named.
every_device_env() {
    : "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=2}"
    export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT OMP_NUM_THREADS=2 CUDA_EMU_WORKERS=2
    BERTRAIN_CUDA_EMU="$top_builddir/tests/cuda_emu/bertrain-cuda-emu.so"
    export BERTRAIN_CUDA_EMU
}
