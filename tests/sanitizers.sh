#!/bin/sh
# A sanitized build (./configure --enable-sanitizers: AddressSanitizer and
# UndefinedBehaviorSanitizer, any report fatal) of a copy of this tree, and
# over it: the C unit tests, the bad-input tests (bad-config, data-cli,
# clear-errors, checkpoint-checks), the fuzz replay, and a short training run
# with a resume, an export, an import and a prediction. Any sanitizer report
# fails the test. (CPU backend, no MPI: the sanitizers watch bertrain's code.)
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
printf 'int main(void) { return 0; }\n' > "$tmpdir/probe.c"
${CC:-cc} -fsanitize=address,undefined "$tmpdir/probe.c" -o "$tmpdir/probe" 2> /dev/null && "$tmpdir/probe" ||
    skip "the C compiler cannot build with -fsanitize=address,undefined here"
is_git_checkout "$top_srcdir" || skip "not a git tree (the copy is made from git's file list)"

# a copy of the tracked and new files, built with the sanitizers
src="$tmpdir/src"
mkdir -p "$src"
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$src" 2> /dev/null
cd "$src" || fail "no copy"
( autoreconf -fi && ./configure --enable-sanitizers --without-mpi CFLAGS="-O1 -g" ) > "$tmpdir/configure.log" 2>&1 ||
    { tail -20 "$tmpdir/configure.log"; fail "configure --enable-sanitizers failed"; }
grep -q "sanitizers: *yes" "$tmpdir/configure.log" || fail "configure did not enable the sanitizers"
progs="bertrain tests/c/bertrain_test tests/c/test_shards tests/c/test_loss_scale tests/c/test_layerdrop tests/c/test_stash16 tests/c/test_cpu_simd tests/c/test_composed tests/c/test_heads tests/c/st_compare
       tests/fuzz/fuzz_config tests/fuzz/fuzz_shard tests/fuzz/fuzz_safetensors tests/fuzz/fuzz_state
       tests/fuzz/fuzz_vocab tests/fuzz/fuzz_tokenizer tests/fuzz/fuzz_sizes tests/fuzz/fuzz_optim
       tests/fuzz/fuzz_import"
# shellcheck disable=SC2086
make -j2 $progs > "$tmpdir/make.log" 2>&1 || { tail -30 "$tmpdir/make.log"; fail "the sanitized build failed"; }
export ASAN_OPTIONS=abort_on_error=0:halt_on_error=1:detect_leaks=1:exitcode=99
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=99
export top_srcdir="$src" top_builddir="$src" OMP_NUM_THREADS=2

reports() { grep -l "ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:" "$@" 2> /dev/null; }
for t in test_shards test_loss_scale test_layerdrop test_stash16 test_cpu_simd test_composed test_heads; do
    "tests/c/$t" > "$tmpdir/$t.log" 2>&1 || { tail -30 "$tmpdir/$t.log"; fail "sanitized $t failed"; }
done
echo "ok   C unit tests under ASan+UBSan"
for t in bad-config data-cli clear-errors checkpoint-checks write-failures fuzz-replay; do
    sh "tests/$t.sh" > "$tmpdir/$t.log" 2>&1
    rc=$?
    bad=$(reports "$tmpdir/$t.log")
    [ -z "$bad" ] || { grep -m5 -A12 "ERROR: \|runtime error" "$tmpdir/$t.log"; fail "sanitizer report in $t.sh"; }
    [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || { tail -20 "$tmpdir/$t.log"; fail "sanitized $t.sh failed (exit $rc)"; }
done
echo "ok   bad-config, data-cli, clear-errors, checkpoint-checks, write-failures and the fuzz replay under ASan+UBSan"
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set steps_per_print=5 --set eval.interval=10 --set checkpoint.interval=10"
# shellcheck disable=SC2086
{ ./bertrain train tests/fixtures/base.json $small --set train_steps=10 --set output_dir="\"$tmpdir/run\"" &&
  ./bertrain train tests/fixtures/base.json $small --set train_steps=20 --set output_dir="\"$tmpdir/run\"" --resume auto &&
  ./bertrain export "$tmpdir/run" "$tmpdir/hf" && ./bertrain import "$tmpdir/hf" "$tmpdir/imp" &&
  ./bertrain predict "$tmpdir/imp" "the [MASK] of the house"; } > "$tmpdir/train.log" 2>&1 ||
    { tail -30 "$tmpdir/train.log"; fail "the sanitized training run failed"; }
[ -z "$(reports "$tmpdir/train.log")" ] || { grep -m3 -A12 "ERROR: \|runtime error" "$tmpdir/train.log"; fail "sanitizer report in training"; }
grep -q "^step     20" "$tmpdir/train.log" || fail "the sanitized run did not reach step 20"
echo "ok   20 steps with an evaluation, a resume, export, import and predict under ASan+UBSan"
echo "PASS: no AddressSanitizer or UndefinedBehaviorSanitizer report in the unit, bad-input, fuzz-replay and training runs"
