#!/bin/sh
# Tokenization guards: text and vocab that do not fit are caught before
# training on mostly [UNK]:
#  - prep warns when more than 1% of the tokens are [UNK], and says that an
#    uncased vocab wants --lowercase;
#  - train refuses (exit 2, one line) shards whose lowercasing differs from
#    the vocab's casing, from the validation shards', or from the checkpoint
#    it resumes;
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
"$BERTRAIN" import "$tmpdir/hf" "$tmpdir/cased-ckpt" > /dev/null || fail "import failed"
# shellcheck disable=SC2086
expect2 "resume a cased checkpoint on lowercased shards" "the checkpoint .*cased-ckpt was trained on shards made without --lowercase" \
    "$BERTRAIN" train tests/fixtures/base.json $small --set data.train="\"$tmpdir/lower/train.shard\"" \
    --set data.valid='""' --set output_dir="\"$tmpdir/r3\"" --resume "$tmpdir/cased-ckpt"

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
