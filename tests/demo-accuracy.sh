#!/bin/sh
# The README demo learns, as README.md says: examples/demo.json on the data
# scripts/demo.sh prepares (the bundled corpus, 5% of the chapters held out)
# ends at a held-out MLM accuracy of at least 2.5x the frequency baseline
# (always predicting the most common training token), on a held-out set large
# enough to be a measurement (at least 2000 masked tokens), and prints
# fill-mask predictions for its held-out sentences at every evaluation.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
"$BERTRAIN" prep --vocab data/demo/vocab.txt --lowercase --valid-fraction 0.05 \
    --out "$tmpdir/data" data/corpus/*.txt > "$tmpdir/prep.log" 2>&1 ||
    { cat "$tmpdir/prep.log"; fail "prep failed"; }
"$BERTRAIN" train examples/demo.json --set data.train="\"$tmpdir/data/train.shard\"" \
    --set data.valid="\"$tmpdir/data/valid.shard\"" --set output_dir="\"$tmpdir/run\"" \
    > "$tmpdir/log" 2>&1 || { cat "$tmpdir/log"; fail "demo failed"; }
grep -E '^(eval|fill-mask)|steps in' "$tmpdir/log"
line=$(grep '"eval_mlm_acc"' "$tmpdir/run/metrics.jsonl" | tail -1)
[ -n "$line" ] || fail "no evaluation in metrics.jsonl"
acc=$(echo "$line" | sed 's/.*"eval_mlm_acc": \([^,]*\),.*/\1/')
base=$(echo "$line" | sed 's/.*"eval_baseline_acc": \([^,]*\),.*/\1/')
masked=$(echo "$line" | sed 's/.*"eval_masked": \([0-9]*\).*/\1/')
echo "held-out MLM accuracy $acc, frequency baseline $base, $masked masked tokens"
[ "$masked" -ge 2000 ] || fail "the held-out set has only $masked masked tokens"
n_evals=$(grep -c '^eval step' "$tmpdir/log")
n_fill=$(grep -c '^fill-mask step' "$tmpdir/log")
n_sent=$(grep -c '\[MASK\]' examples/demo.json)
[ "$n_evals" -ge 2 ] && [ "$n_fill" -eq $((n_evals * n_sent)) ] ||
    fail "$n_fill fill-mask lines for $n_evals evaluations of $n_sent sentences"
awk -v a="$acc" -v b="$base" 'BEGIN { exit !(b > 0 && a >= 2.5 * b) }' ||
    fail "accuracy $acc is not 2.5x the baseline $base"
awk -v a="$acc" -v b="$base" 'BEGIN { printf "PASS: held-out MLM accuracy %.4f = %.2fx the baseline %.4f\n", a, a / b, b }'
