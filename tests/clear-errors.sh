#!/bin/sh
# The smaller unclear messages: each case is one exact line and exit 2.
#  - an import config.json field of the wrong type (not "missing");
#  - vocab_size 2^40 in an import config.json (not -2147483648);
#  - the layer limit is stated one way: [1, 256];
#  - a bad device is exit 2 (not 1);
#  - --resume of a directory that does not exist;
#  - import without vocab.txt fails (the export would fail later);
#  - a config.json with more layers than the weights (not random layers);
#  - a changed vocab on resume (not only a logged key change).
# (prep and vocab on a directory: tests/data-cli.sh.)
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
find_python json || skip "no python3 to edit config.json"
py=$PY
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=1 --set train_steps=1"
failures=0
# expect NAME REGEX CMD...: exit 2 and exactly one stderr line matching REGEX
expect() {
    name=$1 regex=$2
    shift 2
    "$@" > "$tmpdir/out" 2> "$tmpdir/err"
    rc=$?
    if [ "$rc" -eq 2 ] && [ "$(wc -l < "$tmpdir/err")" -eq 1 ] && grep -Eq "$regex" "$tmpdir/err"; then
        echo "ok   $name: $(cat "$tmpdir/err")"
    else
        echo "FAIL $name: exit $rc, wanted 2 and one line matching '$regex'; got:"
        cat "$tmpdir/err"
        failures=$((failures + 1))
    fi
}
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$tmpdir/run\"" > "$tmpdir/run.log" 2>&1 ||
    { cat "$tmpdir/run.log"; fail "training failed"; }
"$BERTRAIN" export "$tmpdir/run" "$tmpdir/hf" > /dev/null 2>&1 || fail "export failed"

# hf_variant NAME KEY JSON: a copy of the export with config.json's KEY set to JSON
hf_variant() {
    mkdir -p "$tmpdir/$1" && cp "$tmpdir/hf/"* "$tmpdir/$1/"
    "$py" - "$tmpdir/$1/config.json" "$2" "$3" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c[sys.argv[2]] = json.loads(sys.argv[3])
json.dump(c, open(sys.argv[1], "w"))
EOF
}
hf_variant strtype hidden_size '"128"'
expect "import: field of the wrong type" 'config.json: hidden_size is "128"; it must be an integer' \
    "$BERTRAIN" import "$tmpdir/strtype" "$tmpdir/o1"
hf_variant huge vocab_size 1099511627776
expect "import: vocab_size 2^40" "config.json: vocab_size is 1099511627776; it must be an integer in \[-2\^31, 2\^31\)" \
    "$BERTRAIN" import "$tmpdir/huge" "$tmpdir/o2"
hf_variant deeper num_hidden_layers 3
expect "import: more layers than the weights" "16 tensors of the encoder that config.json describes are missing \(the first: bert.encoder.layer.2.*num_hidden_layers 3" \
    "$BERTRAIN" import "$tmpdir/deeper" "$tmpdir/o3"
[ ! -e "$tmpdir/o3" ] || fail "the refused import wrote $tmpdir/o3"
# a model directory from elsewhere (no export mark) without vocab.txt
mkdir -p "$tmpdir/novocab" && cp "$tmpdir/hf/config.json" "$tmpdir/novocab/" &&
    "$py" tests/python/st_tool.py rename "$tmpdir/hf/model.safetensors" "$tmpdir/novocab/model.safetensors" plain ||
    fail "cannot make novocab"
expect "import without vocab.txt" "novocab/vocab.txt.*bertrain needs the model's WordPiece vocab.txt" \
    "$BERTRAIN" import "$tmpdir/novocab" "$tmpdir/o4"
expect "layer limit, config" "model.num_hidden_layers: 300 is out of range \[1, 256\]" \
    "$BERTRAIN" train tests/fixtures/base.json --set model.num_hidden_layers=300
hf_variant manylayers num_hidden_layers 300
expect "layer limit, import" "model.num_hidden_layers: must be in \[1, 256\] \(got 300\)" \
    "$BERTRAIN" import "$tmpdir/manylayers" "$tmpdir/o5"
# shellcheck disable=SC2086
expect "a bad device" "nosuchdevice" \
    "$BERTRAIN" train tests/fixtures/base.json $small --set device='"nosuchdevice"' --set output_dir="\"$tmpdir/dev\""
# shellcheck disable=SC2086
expect "--resume of nothing" "resume: $tmpdir/nothing: no such checkpoint directory" \
    "$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$tmpdir/r1\"" --resume "$tmpdir/nothing"
sed "200s/.*/zzzchanged/" data/demo/vocab.txt > "$tmpdir/vocab2.txt"
# shellcheck disable=SC2086
expect "a changed vocab on resume" "resume: data.vocab $tmpdir/vocab2.txt \(8000 tokens\) is not the vocab the checkpoint was trained with \(.*run/ckpt-00000001/vocab.txt, 8000 tokens; they differ from line 200\)" \
    "$BERTRAIN" train tests/fixtures/base.json $small --set train_steps=2 --set data.vocab="\"$tmpdir/vocab2.txt\"" \
    --set output_dir="\"$tmpdir/r2\"" --resume "$tmpdir/run/ckpt-00000001"
[ "$failures" -eq 0 ] || fail "$failures case(s)"
echo "PASS: the smaller error cases are one exact line and exit 2"
