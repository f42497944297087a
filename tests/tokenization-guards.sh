#!/bin/sh
# Tokenization guards: text and vocab that do not fit are caught before
# training on mostly [UNK]:
#  - prep warns when more than 1% of the tokens are [UNK], and says that an
#    uncased vocab wants --lowercase;
#  - train refuses (exit 2, one line) shards whose lowercasing differs from
#    the vocab's casing, from the validation shards', or from the checkpoint
#    it resumes;
#  - import warns when tokenizer_config.json's do_lower_case contradicts the
#    vocab's casing, --lowercase/--no-lowercase say which is right, and train
#    says of such an import what is true (imported so; no shards fit both);
#  - a vocab with a token on two lines is an error naming both lines;
#  - the start-up line names a preset only when the config keeps its shape.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
export OMP_NUM_THREADS=1
vocab=data/demo/vocab.txt text=data/corpus/austen-persuasion.txt
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set steps_per_print=1 --set train_steps=1"

expect2() { # NAME WHAT COMMAND...: exit 2 and one line on stderr containing WHAT
    name=$1 what=$2
    shift 2
    "$@" > "$tmpdir/out" 2> "$tmpdir/err"
    rc=$?
    [ "$rc" -eq 2 ] && [ "$(wc -l < "$tmpdir/err")" -eq 1 ] && grep -q -e "$what" "$tmpdir/err" ||
        { cat "$tmpdir/out" "$tmpdir/err"; fail "$name: expected exit 2 and one line with '$what', got exit $rc"; }
    echo "ok   $name: $(sed "s|$tmpdir/||g" "$tmpdir/err")"
}

# prep: [UNK] share and the --lowercase hint
"$BERTRAIN" prep --vocab $vocab --out "$tmpdir/cased" $text > "$tmpdir/prep.out" 2> "$tmpdir/prep.err" ||
    { cat "$tmpdir/prep.err"; fail "prep without --lowercase failed"; }
grep -q "warning: [0-9]* of [0-9]* tokens ([0-9.]*%) are \[UNK\]" "$tmpdir/prep.err" &&
    grep -q "uncased.*wants --lowercase" "$tmpdir/prep.err" ||
    { cat "$tmpdir/prep.err"; fail "prep did not warn about [UNK] and --lowercase"; }
echo "ok   prep without --lowercase: $(head -1 "$tmpdir/prep.err")"
"$BERTRAIN" prep --vocab $vocab --lowercase --out "$tmpdir/lower" $text > "$tmpdir/prep2.out" 2> "$tmpdir/prep2.err" ||
    fail "prep --lowercase failed"
[ ! -s "$tmpdir/prep2.err" ] || { cat "$tmpdir/prep2.err"; fail "prep --lowercase warned"; }
echo "ok   prep --lowercase: no warning ($(grep UNK "$tmpdir/prep2.out"))"

# train: shards against the vocab, the validation shards, the checkpoint
# shellcheck disable=SC2086
expect2 "train on uncased vocab, cased shards" "data.train .*cased/train.shard was made without --lowercase, but the vocab .* is uncased" \
    "$BERTRAIN" train tests/fixtures/base.json $small --set data.train="\"$tmpdir/cased/train.shard\"" \
    --set data.valid='""' --set output_dir="\"$tmpdir/r1\""
# shellcheck disable=SC2086
expect2 "train with valid shards made differently" "data.valid .*cased/valid.shard was made without --lowercase and data.train" \
    "$BERTRAIN" train tests/fixtures/base.json $small --set data.train="\"$tmpdir/lower/train.shard\"" \
    --set data.valid="\"$tmpdir/cased/valid.shard\"" --set output_dir="\"$tmpdir/r2\""
# a checkpoint imported from a Hugging Face model whose tokenizer does not lowercase
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set data.valid='""' --set output_dir="\"$tmpdir/run\"" \
    > "$tmpdir/run.log" 2>&1 || { cat "$tmpdir/run.log"; fail "training failed"; }
"$BERTRAIN" export "$tmpdir/run" "$tmpdir/hf" > /dev/null || fail "export failed"
sed 's/"do_lower_case":[[:space:]]*true/"do_lower_case": false/' "$tmpdir/hf/tokenizer_config.json" \
    > "$tmpdir/tc" && mv "$tmpdir/tc" "$tmpdir/hf/tokenizer_config.json"
grep -q '"do_lower_case": false' "$tmpdir/hf/tokenizer_config.json" || fail "could not edit tokenizer_config.json"
# import says that do_lower_case contradicts the vocab (one warning line), and
# what train then says is true: no shards fit that checkpoint, cased or not
"$BERTRAIN" import "$tmpdir/hf" "$tmpdir/cased-ckpt" > "$tmpdir/imp.out" 2> "$tmpdir/imp.err" ||
    { cat "$tmpdir/imp.out" "$tmpdir/imp.err"; fail "import failed"; }
[ "$(wc -l < "$tmpdir/imp.err")" -eq 1 ] &&
    grep -q "^bertrain: import: warning: .*hf/tokenizer_config.json says do_lower_case false, but .*hf/vocab.txt is uncased .*import again with --lowercase" "$tmpdir/imp.err" ||
    { cat "$tmpdir/imp.err"; fail "import did not warn (one line) that do_lower_case false contradicts the uncased vocab"; }
echo "ok   import, do_lower_case false and an uncased vocab: $(sed "s|$tmpdir/||g" "$tmpdir/imp.err")"
for shards in lower cased; do
    # shellcheck disable=SC2086
    expect2 "resume that import on $shards shards" "the checkpoint .*cased-ckpt was imported with do_lower_case false, but the vocab .* is uncased (no token has a capital letter): no shards fit both; import the model again with \`bertrain import --lowercase\`" \
        "$BERTRAIN" train tests/fixtures/base.json $small --set data.train="\"$tmpdir/$shards/train.shard\"" \
        --set data.valid='""' --set output_dir="\"$tmpdir/r3-$shards\"" --resume "$tmpdir/cased-ckpt"
done
# --lowercase says which is right: no warning, and the import trains on lowercased shards
"$BERTRAIN" import "$tmpdir/hf" "$tmpdir/lower-ckpt" --lowercase > "$tmpdir/imp2.out" 2> "$tmpdir/imp2.err" ||
    { cat "$tmpdir/imp2.out" "$tmpdir/imp2.err"; fail "import --lowercase failed"; }
[ ! -s "$tmpdir/imp2.err" ] || { cat "$tmpdir/imp2.err"; fail "import --lowercase warned"; }
grep -q "^import: --lowercase: the tokenizer lowercases, although .*tokenizer_config.json says do_lower_case false" "$tmpdir/imp2.out" ||
    { cat "$tmpdir/imp2.out"; fail "import --lowercase did not say it overrides tokenizer_config.json"; }
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set data.train="\"$tmpdir/lower/train.shard\"" \
    --set data.valid='""' --set output_dir="\"$tmpdir/r3-ok\"" --resume "$tmpdir/lower-ckpt" > "$tmpdir/r3.log" 2>&1 ||
    { cat "$tmpdir/r3.log"; fail "training the import --lowercase on lowercased shards failed"; }
echo "ok   import --lowercase: no warning, $(grep -c '^import: --lowercase' "$tmpdir/imp2.out") line naming the override; it trains on lowercased shards"
"$BERTRAIN" import "$tmpdir/hf" "$tmpdir/nolower-ckpt" --no-lowercase > /dev/null 2> "$tmpdir/imp3.err" ||
    fail "import --no-lowercase failed"
grep -q "^bertrain: import: warning: --no-lowercase, but .*vocab.txt is uncased" "$tmpdir/imp3.err" ||
    { cat "$tmpdir/imp3.err"; fail "import --no-lowercase with an uncased vocab did not warn"; }
expect2 "import --lowercase --no-lowercase" "contradict each other" \
    "$BERTRAIN" import "$tmpdir/hf" "$tmpdir/both-ckpt" --lowercase --no-lowercase

# a vocab with a repeated token
{ sed -n 1,100p $vocab; sed -n 60p $vocab; sed -n '101,$p' $vocab; } > "$tmpdir/dup-vocab.txt"
expect2 "prep with a repeated vocab token" "dup-vocab.txt: line 101 repeats the token \"$(sed -n 60p $vocab)\" of line 60" \
    "$BERTRAIN" prep --vocab "$tmpdir/dup-vocab.txt" --lowercase --out "$tmpdir/dup" $text
# shellcheck disable=SC2086
expect2 "train with a repeated vocab token" "dup-vocab.txt: line 101 repeats" \
    "$BERTRAIN" train tests/fixtures/base.json $small --set data.vocab="\"$tmpdir/dup-vocab.txt\"" \
    --set output_dir="\"$tmpdir/r4\""

# honest start-up lines
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set data.valid='""' --set model.hidden_size=64 \
    --set output_dir="\"$tmpdir/r5\"" > "$tmpdir/r5.log" 2>&1 || { cat "$tmpdir/r5.log"; fail "training failed"; }
grep -q "^bertrain: model tiny modified (hidden_size 64 instead of 128): 2 layers, hidden 64" "$tmpdir/r5.log" ||
    { head -3 "$tmpdir/r5.log"; fail "a modified preset is not named as modified"; }
grep -q "^bertrain: model tiny: 2 layers, hidden 128" "$tmpdir/run.log" ||
    { head -3 "$tmpdir/run.log"; fail "the unmodified preset is not named plainly"; }
echo "ok   start-up lines: $(grep -m1 '^bertrain: model' "$tmpdir/r5.log")"
echo "PASS: [UNK] warnings, casing mismatches and repeated vocab tokens are caught; model names are honest"
