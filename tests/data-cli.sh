#!/bin/sh
# `bertrain vocab` and `bertrain prep` rebuild the bundled demo data byte for
# byte (scripts/make-demo-data.py made it with Python + tokenizers), and their
# errors are one line with the right exit code.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
[ -x "$BERTRAIN" ] || fail "no $BERTRAIN"

# the demo's split: documents numbered across data/corpus/*.txt in sorted
# order, document i in valid when i % 20 == 7
split_corpus() { # $1: 1 for the valid documents, 0 for train
    awk -v want="$1" '
        FNR == 1 && NR != 1 { if (indoc) { d++; indoc = 0 } }
        /^[ \t\r]*$/ { if (indoc) { d++; indoc = 0 } next }
        { if ((d % 20 == 7) == want) { if (!indoc && printed) print ""; print; printed = 1 }
          indoc = 1 }' data/corpus/*.txt
}
split_corpus 0 > "$tmpdir/train.txt"
split_corpus 1 > "$tmpdir/valid.txt"

"$BERTRAIN" vocab --size 8000 --lowercase --out "$tmpdir/vocab.txt" "$tmpdir/train.txt" ||
    fail "bertrain vocab failed"
cmp "$tmpdir/vocab.txt" data/demo/vocab.txt || fail "vocab differs from data/demo/vocab.txt"
echo "ok   vocab: identical to data/demo/vocab.txt"

for split in train valid; do
    "$BERTRAIN" prep --vocab data/demo/vocab.txt --lowercase --valid-fraction 0 \
        --out "$tmpdir/$split" "$tmpdir/$split.txt" > "$tmpdir/prep.log" ||
        fail "bertrain prep ($split) failed: $(cat "$tmpdir/prep.log")"
    cmp "$tmpdir/$split/train.shard" "data/demo/$split.shard" ||
        fail "prep's shard differs from data/demo/$split.shard"
    echo "ok   prep: identical to data/demo/$split.shard"
done
"$BERTRAIN" prep --inspect data/demo/valid.shard --vocab data/demo/vocab.txt > "$tmpdir/inspect" ||
    fail "prep --inspect failed"
grep -q "from this time captain wentworth and anne elliot" "$tmpdir/inspect" ||
    fail "prep --inspect did not decode the first sentence: $(cat "$tmpdir/inspect")"
echo "ok   prep --inspect decodes data/demo/valid.shard"

# the report of a held-out split: its documents, sentences and tokens, and a
# total that is train + valid (the README's demo figures: 7 chapters, 18,201
# tokens)
"$BERTRAIN" prep --vocab data/demo/vocab.txt --lowercase --valid-fraction 0.05 \
    --out "$tmpdir/split" data/corpus/*.txt > "$tmpdir/split.log" || fail "prep with a split failed"
valid=$(sed -n 's/^prep: valid \([0-9]*\) docs, \([0-9]*\) sentences, \([0-9]*\) tokens -> .*/\1 \3/p' "$tmpdir/split.log")
train=$(sed -n 's/^prep: train [0-9]* docs, [0-9]* sentences, \([0-9]*\) tokens -> .*/\1/p' "$tmpdir/split.log")
total=$(sed -n 's/^prep: [0-9]* \[UNK\] of \([0-9]*\) tokens.*/\1/p' "$tmpdir/split.log")
[ "$valid" = "7 18201" ] && [ -n "$train" ] && [ "$total" = $((train + 18201)) ] ||
    { cat "$tmpdir/split.log"; fail "prep's report of the held-out split is wrong"; }
echo "ok   prep --valid-fraction 0.05 reports 7 held-out documents, 18201 tokens, $total in all"

failures=0
# expect NAME WANT-EXIT STDERR-SUBSTRING bertrain-args...
expect() {
    name=$1 want_rc=$2 want=$3
    shift 3
    "$BERTRAIN" "$@" > "$tmpdir/out" 2> "$tmpdir/err"
    rc=$?
    lines=$(wc -l < "$tmpdir/err")
    if [ "$rc" -eq "$want_rc" ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" "$tmpdir/err"; then
        echo "ok   $name: $(cat "$tmpdir/err")"
    else
        echo "FAIL $name: exit $rc (want $want_rc), $lines stderr line(s), wanted '$want', got:"
        cat "$tmpdir/err"
        failures=$((failures + 1))
    fi
}
printf '\n  \n\t\n' > "$tmpdir/blank.txt"
: > "$tmpdir/empty.txt"
expect prep-empty 2 "$tmpdir/empty.txt: no text" \
    prep --vocab data/demo/vocab.txt --out "$tmpdir/e" "$tmpdir/empty.txt"
expect prep-blank 2 "$tmpdir/blank.txt: no text" \
    prep --vocab data/demo/vocab.txt --out "$tmpdir/e" "$tmpdir/blank.txt"
expect prep-missing-file 2 "$tmpdir/nope.txt: cannot open" \
    prep --vocab data/demo/vocab.txt --out "$tmpdir/e" "$tmpdir/nope.txt"
expect prep-directory 2 "$tmpdir: is a directory, not a text file" \
    prep --vocab data/demo/vocab.txt --out "$tmpdir/e" "$tmpdir"
expect vocab-directory 2 "$tmpdir: is a directory, not a text file" \
    vocab --size 100 --out "$tmpdir/v.txt" "$tmpdir"
expect prep-bad-vocab 2 "$tmpdir/nope-vocab.txt: cannot open vocab" \
    prep --vocab "$tmpdir/nope-vocab.txt" --out "$tmpdir/e" "$tmpdir/train.txt"
expect prep-fraction 2 "--valid-fraction 1.5" \
    prep --vocab data/demo/vocab.txt --out "$tmpdir/e" --valid-fraction 1.5 "$tmpdir/train.txt"
expect inspect-damaged 1 "$tmpdir/vocab.txt: not a bertrain shard" \
    prep --inspect "$tmpdir/vocab.txt"
expect vocab-empty 2 "the input holds no words" \
    vocab --size 100 --out "$tmpdir/v.txt" "$tmpdir/blank.txt"
expect vocab-size 2 "--size abc" vocab --size abc --out "$tmpdir/v.txt" "$tmpdir/train.txt"
[ ! -e "$tmpdir/e/train.shard" ] || fail "a failed prep left $tmpdir/e/train.shard"
[ ! -e "$tmpdir/v.txt" ] || fail "a failed vocab left $tmpdir/v.txt"
[ "$failures" -eq 0 ] || fail "$failures error case(s)"
echo "PASS: vocab and prep rebuild the demo data; errors are one line"
