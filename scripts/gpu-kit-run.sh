#!/bin/sh
# The GPU kit's run.sh (scripts/gpu-kit.sh makes the kit and copies this file
# into it). On a machine with an NVIDIA GPU, the CUDA toolkit, a C compiler
# with OpenMP (gcc; nvcc also needs its C++ host compiler, g++) and make, and
# nothing else of ours:
#
#   sh run.sh [N]        N: the CUDA device (default 0)
#
# unpacks the kit's bertrain tarball into work/ beside this file, configures
# it against the kit's libraries (deps/: no pkg-config, no system package
# needed; the programs find them by their run path) and the CUDA toolkit of
# $NVCC, $CUDA_HOME/bin/nvcc, the nvcc on PATH or /usr/local/cuda/bin/nvcc
# (CUDA_ARCH and NVCCFLAGS pass through to configure), builds with make -j
# (JOBS=N to change; nvcc's warnings stay warnings here, NVCC_WERROR=, and
# are counted: CI's build makes them errors), and runs tests/gpu-check.sh on cuda:N: conformance,
# training against the CPU, the benches with MFU, compute-sanitizer. With no
# nvcc it builds without CUDA and runs gpu-check's CPU part instead
# (gpu-check.sh --cpu), as it does after a CUDA build that finds no device.
# Every figure goes to results.txt beside this file (RESULTS=FILE to change):
# the machine (card, driver, toolkit, compiler), configure's summary, the
# build's time, gpu-check's rows and summary and the benches' logs; the full
# logs stay in work/ (work/logs: gpu-check's). The last line of results.txt
# says what ran: "result: PASS (GPU checks on cuda:0, ...)" or "result: PASS
# (the CPU part only: ...)". Exit status: 0 when what ran passed, 1 when a
# check failed, 2 when configure or the build failed.
set -u
kit=$(cd "$(dirname "$0")" && pwd)
dev=${1:-0}
results=${RESULTS:-$kit/results.txt}
work=$kit/work
deps=$kit/deps
lib=$deps/usr/lib/x86_64-linux-gnu
case $kit in
*[[:space:]]*) echo "run.sh: the kit's path has a space in it ($kit): move the kit" >&2; exit 2 ;;
esac
: > "$results" || exit 2
say() { printf '%s\n' "$*" | tee -a "$results"; }
# section TITLE: a heading in results.txt
section() { printf '\n==== %s ====\n' "$1" | tee -a "$results"; }
now() { date +%s; }
# stage_failed STAGE RC SECONDS LOG LINES: the end of work/LOG into results.txt, exit 2
stage_failed() {
    say "$1 failed (exit $2, $3 s): the end of work/$4:"
    tail -"$5" "$work/$4" | tee -a "$results"
    say "result: FAIL ($1)"
    exit 2
}

say "bertrain GPU kit: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
section "machine"
tarball=""
for f in "$kit"/bertrain-*.tar.gz; do [ -f "$f" ] && tarball=$f; done
[ -n "$tarball" ] || { echo "run.sh: no bertrain-*.tar.gz in $kit" >&2; exit 2; }
say "kit: $kit (${tarball##*/})"
say "host: $(uname -srm)"
[ -r /etc/os-release ] && say "os: $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"')"
say "glibc: $(ldd --version 2> /dev/null | head -1)"
say "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2> /dev/null | head -1), $(nproc) cores"
say "cc: $(${CC:-gcc} --version 2> /dev/null | head -1)"
cxx=$(c++ --version 2> /dev/null | head -1)
say "c++: ${cxx:-none (nvcc needs one: g++)}"
say "make: $(make --version 2> /dev/null | head -1)"
if command -v nvidia-smi > /dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 |
        sed 's/^/gpu: /' | tee -a "$results"
else
    say "gpu: no nvidia-smi"
fi
nvcc=""
for c in "${NVCC:-}" "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" "$(command -v nvcc 2> /dev/null || true)" \
    /usr/local/cuda/bin/nvcc; do
    if [ -n "$c" ] && [ -x "$c" ]; then nvcc=$c; break; fi
done
cuda_args=--without-cuda
if [ -n "$nvcc" ]; then
    # the toolkit: above nvcc's bin/, or above the file a link named nvcc points to
    cuda=$(dirname "$(dirname "$nvcc")")
    if [ ! -f "$cuda/include/cuda_runtime_api.h" ]; then
        real=$(readlink -f "$nvcc" 2> /dev/null || echo "$nvcc")
        [ ! -f "$(dirname "$(dirname "$real")")/include/cuda_runtime_api.h" ] ||
            cuda=$(dirname "$(dirname "$real")")
    fi
    cuda_args="--with-cuda=$cuda"
    say "cuda: $cuda, nvcc $("$nvcc" --version 2> /dev/null | sed -n 's/.*release \([^,]*\),.*/\1/p') ($nvcc)"
else
    say "cuda: no nvcc (looked at \$NVCC, \$CUDA_HOME/bin, PATH, /usr/local/cuda/bin): building without CUDA"
fi
say "kit libraries: $(tr '\n' ',' < "$deps/PACKAGES" | sed 's/,$//; s/,/, /g')"

# ---- configure and build ----
section "build"
rm -rf "$work"
mkdir -p "$work"
name=${tarball##*/}
src=$work/${name%.tar.gz}
(cd "$work" && gzip -dc "$tarball" | tar -xf -)
[ -x "$src/configure" ] || { say "unpacking $tarball failed"; say "result: FAIL (unpack)"; exit 2; }
jobs=${JOBS:-$(nproc)}
t0=$(now)
(
    cd "$src" &&
        ./configure "$cuda_args" ${nvcc:+NVCC="$nvcc"} --without-mpi \
            CJSON_CFLAGS="-I$deps/usr/include" CJSON_LIBS="-L$lib -lcjson" \
            ZLIB_CFLAGS="-I$deps/usr/include" ZLIB_LIBS="-L$lib -lz" \
            UTF8PROC_CFLAGS="-I$deps/usr/include" UTF8PROC_LIBS="-L$lib -lutf8proc" \
            BLAS_CFLAGS="-I$deps/usr/include/x86_64-linux-gnu" BLAS_LIBS="-L$lib/blas -lblas" \
            LDFLAGS="-Wl,-rpath,$lib -Wl,-rpath,$lib/blas"
) > "$work/configure.log" 2>&1
rc=$?
t1=$(now)
[ $rc -eq 0 ] || stage_failed configure $rc $((t1 - t0)) configure.log 25
say "configure: $((t1 - t0)) s; its summary:"
sed -n '/^configure: *$/,$p' "$work/configure.log" | grep -v '^configure: *$' | sed '/^$/d' | tee -a "$results"
(cd "$src" && make -j"$jobs" NVCC_WERROR= all && make -j"$jobs" tests/c/st_compare) > "$work/build.log" 2>&1
rc=$?
t2=$(now)
[ $rc -eq 0 ] || stage_failed build $rc $((t2 - t1)) build.log 40
say "make -j$jobs: $((t2 - t1)) s; built: $(for f in bertrain bertrain-conformance bertrain-cuda.so tests/c/st_compare; do
    [ ! -f "$src/$f" ] || printf '%s ' "$f"; done)"
say "warnings: $(grep -c -i 'warning' "$work/build.log") lines of work/build.log"
say "$("$src/bertrain" version 2>&1 | head -1)"
say "links: $(ldd "$src/bertrain" | grep -E 'cjson|libz|utf8proc|blas' | sed 's/ (0x[0-9a-f]*)//; s/^[[:space:]]*//' | tr '\n' ';' | sed 's/;$//; s/;/; /g')"

# ---- the checks ----
# check NAME ARG: gpu-check.sh ARG, its output into results.txt; sets $rc
check() {
    section "$1"
    t0=$(now)
    {
        GPU_CHECK_LOGS="$work/logs" sh "$src/tests/gpu-check.sh" "$2"
        echo $? > "$work/gpu-check.rc"
    } 2>&1 | tee -a "$results"
    rc=$(cat "$work/gpu-check.rc")
    say "(gpu-check $2: exit $rc, $(($(now) - t0)) s)"
}
cd "$src" || exit 2
what=""
if [ -n "$nvcc" ]; then
    check "gpu-check (cuda:$dev)" "$dev"
    case $rc in
    0 | 1)
        card=$(sed -n 's/^==== gpu-check: \(.*\) ====$/\1/p' "$results" | tail -1)
        what="GPU checks on $card"
        # the benches' whole logs: every figure they print
        for f in "$work"/logs/bench-*.log; do
            [ -f "$f" ] || continue
            section "${f##*/}"
            grep -v '^[[:space:]]*$' "$f" | tee -a "$results"
        done
        ;;
    77)
        what="the CPU part only: no CUDA device cuda:$dev"
        check "gpu-check --cpu (no CUDA device)" --cpu
        ;;
    *)
        what="gpu-check exit $rc"
        rc=1
        ;;
    esac
else
    what="the CPU part only: no nvcc, built without CUDA"
    check "gpu-check --cpu (no nvcc)" --cpu
fi

section "result"
if [ "$rc" -eq 0 ]; then
    say "result: PASS ($what)"
    exit 0
fi
say "result: FAIL ($what)"
exit 1
