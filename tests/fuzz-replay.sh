#!/bin/sh
# Every stored fuzz input (tests/fuzz/corpus/TARGET: the seed corpora;
# tests/fuzz/crashes/TARGET: every crash scripts/fuzz.sh ever found) runs
# through its target without a crash. Under tests/sanitizers.sh the same
# replay runs with AddressSanitizer and UndefinedBehaviorSanitizer.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
total=0
for t in config shard safetensors state vocab tokenizer sizes optim import; do
    bin="$top_builddir/tests/fuzz/fuzz_$t"
    [ -x "$bin" ] || fail "$bin is not built"
    [ -n "$(ls tests/fuzz/corpus/$t 2>/dev/null)" ] || fail "no seed corpus for $t"
    "$bin" "tests/fuzz/corpus/$t" "tests/fuzz/crashes/$t" > "$tmpdir/$t.log" 2>&1 ||
        { tail -30 "$tmpdir/$t.log"; fail "fuzz_$t crashed on a stored input"; }
    n=$(sed -n 's/^replay: \([0-9]*\) inputs ran$/\1/p' "$tmpdir/$t.log")
    [ -n "$n" ] || { cat "$tmpdir/$t.log"; fail "fuzz_$t did not finish"; }
    total=$((total + n))
done
echo "PASS: $total stored fuzz inputs replayed through 9 targets"
