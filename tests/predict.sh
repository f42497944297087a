#!/bin/sh
# `bertrain predict` against transformers' fill-mask pipeline:
#  - a model bertrain trained (40 steps): predict on the checkpoint and the
#    pipeline on its export agree (top 10 per [MASK], probabilities to 2e-5);
#  - a model transformers made (BertForMaskedLM, random weights), imported:
#    predict on the import and the pipeline on the original agree;
#  - texts from stdin, one per line, give what the same texts as arguments do;
#  - a text without [MASK], or longer than the model's positions, is one line
#    naming it, exit 2; --top out of range is refused;
#  - literal [UNK], [CLS], [SEP] and [PAD] in a text are those tokens, as in
#    the pipeline (one text has them; "[unk]" in small letters is not one);
#  - eval --checkpoint takes the run directory (its latest checkpoint).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
export OMP_NUM_THREADS=1
cat > "$tmpdir/texts.txt" <<'TEXTS'
She was [MASK] to see him again.
It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a [MASK].
The [MASK] of the house was [MASK] and cold.
Mr. Darcy said nothing; Élinor smiled at her[MASK].
[MASK]
[CLS] The [UNK] of the [MASK] was here.[SEP] [PAD] and [unk] then.
TEXTS
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json --set data.seq_len=32 --set train_batch_size=16 \
    --set train_micro_batch_size_per_gpu=16 --set data.valid='""' --set steps_per_print=20 \
    --set train_steps=40 --set optimizer.params.lr=3e-3 --set output_dir="\"$tmpdir/run\"" \
    > "$tmpdir/train.log" 2>&1 || { cat "$tmpdir/train.log"; fail "training failed"; }
"$BERTRAIN" export "$tmpdir/run" "$tmpdir/hf" > /dev/null || fail "export failed"

set --
while IFS= read -r line; do set -- "$@" "$line"; done < "$tmpdir/texts.txt"
"$BERTRAIN" predict "$tmpdir/run" --json --top 10 "$@" > "$tmpdir/args.jsonl" ||
    fail "predict with texts as arguments failed"
"$BERTRAIN" predict "$tmpdir/run" --json --top 10 < "$tmpdir/texts.txt" > "$tmpdir/stdin.jsonl" ||
    fail "predict with texts on stdin failed"
cmp -s "$tmpdir/args.jsonl" "$tmpdir/stdin.jsonl" || fail "stdin and arguments give different predictions"
[ "$(wc -l < "$tmpdir/args.jsonl")" -eq 6 ] || fail "not one JSON line per text"
"$BERTRAIN" predict "$tmpdir/run" --top 3 "She was [MASK] to see him again." > "$tmpdir/text.out" ||
    fail "predict (text output) failed"
grep -q '^  \[MASK\] 1: [^ ]* 0\.[0-9]*, [^ ]* 0\.[0-9]*, [^ ]* 0\.[0-9]*$' "$tmpdir/text.out" ||
    { cat "$tmpdir/text.out"; fail "text output is not the text, then the top 3 with probabilities"; }
echo "ok   predict: $(sed -n 2p "$tmpdir/text.out" | sed 's/^ *//') (40 steps); stdin = arguments"

expect2() { # WHAT COMMAND...: exit 2 with one line containing WHAT
    what=$1
    shift
    "$@" > /dev/null 2> "$tmpdir/err"
    rc=$?
    [ "$rc" -eq 2 ] && [ "$(wc -l < "$tmpdir/err")" -eq 1 ] && grep -q -e "$what" "$tmpdir/err" ||
        { cat "$tmpdir/err"; fail "expected exit 2 and one line with '$what', got exit $rc"; }
    echo "ok   refused: $(cat "$tmpdir/err")"
}
expect2 "text 2: \"no mask here\" has no \[MASK\]" \
    "$BERTRAIN" predict "$tmpdir/run" "a [MASK] b" "no mask here"
long=$(printf 'word %.0s' $(seq 200))
expect2 "is 203 tokens with \[CLS\] and \[SEP\]; the most is 128" \
    "$BERTRAIN" predict "$tmpdir/run" "$long [MASK]"
expect2 "--top 0 is out of range \[1, 1000\]" "$BERTRAIN" predict "$tmpdir/run" --top 0 "a [MASK]"

# eval takes the run directory as predict does: its latest checkpoint
evalargs="--set data.seq_len=32 --set eval.max_samples=32"
# shellcheck disable=SC2086
"$BERTRAIN" eval tests/fixtures/base.json $evalargs --checkpoint "$tmpdir/run" > "$tmpdir/eval-run" 2>&1 ||
    { cat "$tmpdir/eval-run"; fail "eval --checkpoint RUN_DIR failed"; }
# shellcheck disable=SC2086
"$BERTRAIN" eval tests/fixtures/base.json $evalargs --checkpoint "$tmpdir/run/$(cat "$tmpdir/run/latest")" \
    > "$tmpdir/eval-ckpt" 2>&1 || { cat "$tmpdir/eval-ckpt"; fail "eval --checkpoint CHECKPOINT failed"; }
cmp -s "$tmpdir/eval-run" "$tmpdir/eval-ckpt" || { diff "$tmpdir/eval-run" "$tmpdir/eval-ckpt"; fail "eval of the run directory differs from eval of its latest checkpoint"; }
echo "ok   eval --checkpoint RUN_DIR = its latest checkpoint: $(tail -1 "$tmpdir/eval-run")"
# shellcheck disable=SC2086
expect2 "$tmpdir/nothing: cannot open" "$BERTRAIN" eval tests/fixtures/base.json $evalargs --checkpoint "$tmpdir/nothing"

find_transformers_python
if [ -z "$TPY" ]; then
    skip_part "the comparison with transformers' fill-mask pipeline (no python imports transformers and torch; scripts/deps.sh test makes venv/)"
    finish "predict runs; bad input refused"
fi
"$TPY" tests/python/predict_check.py compare "$tmpdir/hf" "$tmpdir/args.jsonl" 10 ||
    fail "bertrain predict differs from transformers' fill-mask pipeline on the export"
echo "ok   a bertrain-trained model: predict = transformers fill-mask on its export"

"$TPY" tests/python/predict_check.py make-model "$tmpdir/hfmade" data/demo/vocab.txt ||
    fail "transformers could not make a model"
"$BERTRAIN" import "$tmpdir/hfmade" "$tmpdir/imported" > "$tmpdir/import.log" 2>&1 ||
    { cat "$tmpdir/import.log"; fail "import of a transformers-made BertForMaskedLM failed"; }
"$BERTRAIN" predict "$tmpdir/imported" --json --top 10 < "$tmpdir/texts.txt" > "$tmpdir/imp.jsonl" ||
    fail "predict on the imported model failed"
"$TPY" tests/python/predict_check.py compare "$tmpdir/hfmade" "$tmpdir/imp.jsonl" 10 ||
    fail "bertrain predict on the import differs from transformers on the original"
echo "ok   a transformers-made model, imported: predict = transformers fill-mask on the original"
finish "bertrain predict agrees with transformers' fill-mask pipeline"
