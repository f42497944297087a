#!/bin/sh
# Learning: training the tiny model on (32 sequences of) the bundled corpus
# halves the MLM loss within 100 steps. Also checks that metrics.jsonl has one
# object per logged step with the documented keys.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
"$BERTRAIN" train tests/fixtures/base.json \
    --set data.limit_samples=32 --set data.seq_len=64 --set train_steps=100 \
    --set steps_per_print=10 --set optimizer.params.lr=5e-3 \
    --set scheduler.params.warmup_num_steps=10 --set scheduler.params.total_num_steps=100 \
    --set output_dir="\"$tmpdir/run\"" > "$tmpdir/log" 2>&1 || { cat "$tmpdir/log"; fail "training failed"; }
cat "$tmpdir/log"
grep -q "effective global batch 32 = micro-batch 32 x accumulation 1 x 1 rank" "$tmpdir/log" ||
    fail "no effective-batch line"
m="$tmpdir/run/metrics.jsonl"
grep '"loss": ' "$m" > "$tmpdir/train.jsonl"
[ "$(wc -l < "$tmpdir/train.jsonl")" -eq 11 ] ||
    fail "expected 11 training metrics lines (step 1, 10, ..., 100), got $(wc -l < "$tmpdir/train.jsonl")"
grep -q '"eval_mlm_acc": ' "$m" || fail "no evaluation line in metrics.jsonl"
for key in step loss mlm_acc lr grad_norm samples_per_s tokens_per_s; do
    grep -q "\"$key\": " "$m" || fail "metrics.jsonl lacks $key"
done
first=$(head -1 "$tmpdir/train.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/')
last=$(tail -1 "$tmpdir/train.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/')
echo "MLM loss: step 1 $first, step 100 $last"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 8 && b <= a / 2) }' ||
    fail "loss did not halve (from $first to $last)"
echo "PASS: loss halved ($first -> $last)"
