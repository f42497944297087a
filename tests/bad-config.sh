#!/bin/sh
# Every bad config gets exit 2 and exactly one stderr line naming the key,
# before any work starts.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
failures=0

# expect NAME JSON EXPECTED-SUBSTRING [extra bertrain args...]
expect() {
    name=$1 json=$2 want=$3
    shift 3
    printf '%s' "$json" > "$tmpdir/$name.json"
    "$BERTRAIN" train "$tmpdir/$name.json" "$@" > "$tmpdir/out" 2> "$tmpdir/err"
    rc=$?
    lines=$(wc -l < "$tmpdir/err")
    if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" "$tmpdir/err"; then
        echo "ok   $name: $(cat "$tmpdir/err")"
    else
        echo "FAIL $name: exit $rc, $lines stderr line(s), wanted '$want', got:"
        cat "$tmpdir/err"
        failures=$((failures + 1))
    fi
}

expect unknown-top '{"modle": {}}' "modle: unknown key (did you mean 'model'?)"
expect unknown-nested '{"model": {"hiden_size": 64}}' \
    "model.hiden_size: unknown key (did you mean 'model.hidden_size'?)"
expect unknown-far '{"zzzzzzzzzzzzzz": 1}' "zzzzzzzzzzzzzz: unknown key"
expect wrong-type '{"train_steps": "ten"}' "train_steps: expected a number, got a string"
expect wrong-type-bool '{"model": {"nsp": 1}}' "model.nsp: expected true or false, got a number"
expect bad-norm '{"model": {"norm": "sandwich"}}' "model.norm: 'sandwich' is not one of post|pre"
expect guard-window '{"guard": {"window": 0}}' "guard.window: 0 is out of range"
expect not-integer '{"train_steps": 1.5}' "train_steps: expected an integer, got 1.5"
expect out-of-range '{"data": {"mask_prob": 1.5}}' "data.mask_prob: 1.5 is out of range [0.001, 0.9]"
expect negative '{"train_micro_batch_size_per_gpu": -4}' \
    "train_micro_batch_size_per_gpu: -4 is out of range"
expect fill-mask-list '{"eval": {"fill_mask": "a [MASK]"}}' \
    "eval.fill_mask: expected a list of at most 16 sentences with [MASK]"
expect fill-mask-no-mask '{"eval": {"fill_mask": ["a [MASK]", "no mask here"]}}' \
    "eval.fill_mask: entry 1 is not a string with [MASK] in it"
expect fill-mask-too-long '{"data": {"train": "data/demo/train.shard", "vocab": "data/demo/vocab.txt", "seq_len": 8}, "eval": {"fill_mask": ["one two three four five six [MASK]"]}}' \
    "eval.fill_mask entry 0: \"one two three four five six [MASK]\" is 9 tokens with [CLS] and [SEP]; the most is 8 (data.seq_len 8)" \
    --set output_dir="\"$tmpdir/fm\""
expect syntax-error '{
  "seed": 1,
  "train_steps": 10,,
  "steps_per_print": 1
}' "JSON syntax error at line 3, column 2"
expect batch-contradiction \
    '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2}' \
    "train_batch_size: 32 != train_micro_batch_size_per_gpu 8 x gradient_accumulation_steps 2 x 1 ranks"
expect batch-indivisible '{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 8}' \
    "train_batch_size: 30 is not divisible by train_micro_batch_size_per_gpu 8"
expect bad-choice '{"optimizer": {"type": "SGD"}}' "optimizer.type: 'SGD' is not one of AdamW|Lamb"
expect bad-betas '{"optimizer": {"params": {"betas": [0.9]}}}' \
    "optimizer.params.betas: expected [beta1, beta2], got an array"
expect heads '{"model": {"hidden_size": 100, "num_attention_heads": 3}}' \
    "model.num_attention_heads: must divide hidden_size 100 (got 3)"
expect seq-too-long '{"model": {"max_position_embeddings": 64}, "data": {"seq_len": 128}}' \
    "data.seq_len: 128 exceeds model.max_position_embeddings 64"
expect bad-preset '{"model": {"preset": "huge"}}' "model.preset: expected one of tiny|mini|small|medium|base|large"
expect not-object '{"model": 3}' "model: expected an object, got a number"
expect top-array '[1, 2]' "the top level must be a JSON object"
expect set-unknown '{}' "optimizer.params.lrr: unknown key (did you mean 'optimizer.params.lr'?)" \
    --set optimizer.params.lrr=0.1
expect set-range '{}' "model.hidden_dropout_prob: 2 is out of range" --set model.hidden_dropout_prob=2
# duplicate keys: an error naming the key's path and both places
expect dup-thrice '{
  "train_steps": 1,
  "seed": 3,
  "train_steps": 5,
  "train_steps": 7
}' 'key "train_steps" appears twice (line 2, column 3 and line 4, column 3): a key may appear once in an object'
expect dup-object '{"model": {"hidden_size": 64}, "data": {"seq_len": 8}, "model": {"preset": "mini"}}' \
    'key "model" appears twice (line 1, column 2 and line 1, column 56)'
expect dup-escaped '{"model": {"hidden_size": 64, "hidden_\u0073ize": 32}}' \
    'key "model.hidden_size" appears twice (line 1, column 12 and line 1, column 31)'
# numbers said as they are
expect set-huge '{}' "train_steps: 1000000000000000000 is out of range [1, 1000000000000]" \
    --set train_steps=1000000000000000000
expect set-seed-2-64 '{}' 'seed: "18446744073709551616" is not an integer in [0, 18446744073709551615]' \
    --set seed=18446744073709551616
expect not-integer-close '{"train_steps": 1.0000000000000002}' \
    "train_steps: expected an integer, got 1.0000000000000002"
# paths and text that are not UTF-8 (state.json records them as JSON)
expect non-utf8-path '{}' 'output_dir: "runs/a\xffb" is not valid UTF-8' \
    --set output_dir="\"runs/a$(printf '\377')b\""
# every size product in 64 bits, checked before anything is allocated: this
# config made micro-batch x max_predictions wrap in int (a heap overflow)
wrap='--set model.hidden_size=8 --set model.num_attention_heads=1 --set model.intermediate_size=8
      --set model.num_hidden_layers=1 --set data.seq_len=8 --set data.max_predictions=65026
      --set train_micro_batch_size_per_gpu=66050 --set train_batch_size=66050 --set train_steps=1'
# (the process may use 4 GB: ulimit -v, which AddressSanitizer's shadow memory cannot live with)
if [ -n "${ASAN_OPTIONS:-}" ]; then
    skip_part "int-wrap: under AddressSanitizer (tests/sanitizers.sh), which cannot run within ulimit -v"
else
    # shellcheck disable=SC2086
    (ulimit -v 4000000; expect int-wrap "$(cat tests/fixtures/base.json)" \
        "train_micro_batch_size_per_gpu 66050 x data.seq_len 8 (528400 masked rows): needs 17.47 GB on the device" \
        $wrap --set data.valid='""' --set output_dir="\"$tmpdir/wrap\""; exit $failures) || failures=$((failures + 1))
fi
# shellcheck disable=SC2086
expect rows-past-int32 "$(cat tests/fixtures/base.json)" \
    "train_micro_batch_size_per_gpu 4194304 x data.seq_len 512 (461373440 masked rows): a micro-batch of 4194304 x 512 tokens with 461373440 masked rows: the model addresses rows with int32 indices" \
    --set model.max_position_embeddings=512 --set data.seq_len=512 --set train_micro_batch_size_per_gpu=4194304 \
    --set train_batch_size=4194304 --set data.valid='""' --set output_dir="\"$tmpdir/rows\""
"$BERTRAIN" train "$tmpdir/does-not-exist.json" 2> "$tmpdir/err"
rc=$?
if [ $rc -eq 2 ] && grep -q "does-not-exist.json: cannot read" "$tmpdir/err"; then
    echo "ok   missing-file: $(cat "$tmpdir/err")"
else
    echo "FAIL missing-file: exit $rc"; failures=$((failures + 1))
fi

# data.valid: null is none, as ""
"$BERTRAIN" train tests/fixtures/base.json --set data.valid=null --set train_steps=1 \
    --set data.seq_len=32 --set train_micro_batch_size_per_gpu=8 --set train_batch_size=8 \
    --set output_dir="\"$tmpdir/null\"" > "$tmpdir/null.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q '"valid":""' "$tmpdir/null/ckpt-00000001/state.json" 2> /dev/null ||
    grep -q '"valid":	""' "$tmpdir/null/ckpt-00000001/state.json" 2> /dev/null; then
    echo "ok   data.valid null: trained without held-out data"
else
    echo "FAIL data.valid null: exit $rc"; cat "$tmpdir/null.log"; failures=$((failures + 1))
fi

[ "$failures" -eq 0 ] || fail "$failures bad-config case(s)"
finish "all bad configs rejected with exit 2 and one line"
