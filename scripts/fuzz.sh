#!/bin/sh
# Fuzz bertrain's parsers with libFuzzer under ASan+UBSan (Debian: clang,
# libclang-rt-dev, libomp-dev). Builds an instrumented copy of this tree in
# $FUZZ_WORK (default /tmp/bertrain-fuzz), then runs each target for RUNS
# executions (default 10000000 each), two at a
# time. New inputs that add coverage go to $FUZZ_WORK/corpus; a crash is
# copied to tests/fuzz/crashes/TARGET/ (replayed by make check) and fails
# the script. Prints one line per target with its executions.
#   sh scripts/fuzz.sh [RUNS] [TARGET...]
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
runs=${1:-10000000}
[ $# -gt 0 ] && shift
targets=${*:-config shard safetensors state vocab tokenizer sizes optim import}
work=${FUZZ_WORK:-/tmp/bertrain-fuzz}
command -v clang > /dev/null || { echo "fuzz: clang not found (apt-get install clang libclang-rt-dev libomp-dev)"; exit 2; }
rm -rf "$work" && mkdir -p "$work/src" "$work/corpus"
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/src"
flags="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
(cd "$work/src" && autoreconf -fi && ./configure CC=clang CFLAGS="$flags -fsanitize=fuzzer-no-link" \
    LDFLAGS="-fsanitize=address,undefined" --without-mpi && make -j2 libbertrain.a) > "$work/build.log" 2>&1 ||
    { tail -20 "$work/build.log"; echo "fuzz: the instrumented build failed"; exit 1; }
libs="$(pkg-config --libs libcjson zlib libutf8proc) -lopenblas -fopenmp -lm"
for t in $targets; do
    clang $flags -fsanitize=fuzzer -I"$work/src" -I"$work/src/src" -DFUZZ_SRCDIR="\"$top\"" -o "$work/fuzz_$t" \
        tests/fuzz/fuzz_$t.c tests/fuzz/fuzz_util.c "$work/src/libbertrain.a" $libs ||
        { echo "fuzz: linking fuzz_$t failed"; exit 1; }
done
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
run_one() {
    t=$1
    mkdir -p "$work/corpus/$t" "$work/crash-$t"
    "$work/fuzz_$t" -runs="$runs" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
        -artifact_prefix="$work/crash-$t/" "$work/corpus/$t" "tests/fuzz/corpus/$t" \
        > "$work/$t.log" 2>&1 || true
    execs=$(sed -n 's/^#\([0-9]*\).*DONE.*/\1/p' "$work/$t.log" | tail -1)
    crashes=$(ls "$work/crash-$t" | wc -l)
    echo "fuzz_$t: ${execs:-?} executions, $crashes crash(es), corpus $(ls "$work/corpus/$t" | wc -l) inputs"
    if [ "$crashes" -gt 0 ]; then
        mkdir -p "tests/fuzz/crashes/$t" && cp "$work/crash-$t"/* "tests/fuzz/crashes/$t/"
        return 1
    fi
}
set -- $targets
while [ $# -gt 0 ]; do
    a=$1; shift
    if [ $# -gt 0 ]; then
        b=$1; shift
        run_one "$a" > "$work/$a.line" & pa=$!
        run_one "$b" > "$work/$b.line" || status=1
        wait $pa || status=1
        cat "$work/$a.line" "$work/$b.line"
    else
        run_one "$a" || status=1
    fi
done
exit $status
