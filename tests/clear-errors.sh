#!/bin/sh
# The smaller unclear messages: each case is one exact line and exit 2.
#  - an import config.json field of the wrong type (not "missing");
#  - vocab_size 2^40 in an import config.json (not -2147483648);
#  - the layer limit is stated one way: [1, 256];
#  - a bad device is exit 2 (not 1);
#  - --resume of a directory that does not exist;
#  - import without vocab.txt fails (the export would fail later);
#  - a config.json with more layers than the weights (not random layers);
#  - a changed vocab on resume (not only a logged key change);
#  - the command-line parser (src/cli/cli_args.c) of every subcommand: a number
#    with anything after it on each numeric option (--steps 5x), out of
#    range, an unknown option (with the closest name), a missing value, an
#    option given twice, an argument too many; bench --set validated as
#    train's (and a bench with --set model.num_hidden_layers=2 runs).
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
# the parser: each line exact (no file is read before the options are checked)
cfg=tests/fixtures/base.json
tb="--preset tiny --seq 16 --batch 1 --steps 1 --warmup 0 --threads 1"
expect "train --profile 3x" '^bertrain train: --profile 3x: expected an integer$' \
    "$BERTRAIN" train $cfg --profile 3x
expect "train --profile=0" '^bertrain train: --profile 0 is out of range \[1, 100000\]$' \
    "$BERTRAIN" train $cfg --profile=0
expect "train: unknown option" '^bertrain train: unknown option --resme \(did you mean --resume\?\)$' \
    "$BERTRAIN" train $cfg --resme auto
expect "train: missing value" '^bertrain train: --set needs a value \(key.path=value\)$' \
    "$BERTRAIN" train $cfg --set
expect "train: two configs" '^bertrain train: unexpected argument b.json \(takes one CONFIG.json\)$' \
    "$BERTRAIN" train $cfg b.json
expect "eval: missing value" '^bertrain eval: --checkpoint needs a value \(a checkpoint directory\)$' \
    "$BERTRAIN" eval $cfg --checkpoint
for o in seq:12x batch:5x accum:2x steps:5x warmup:1x threads:2x layers:2x; do
    expect "bench --${o%%:*} ${o#*:}" "^bertrain bench: --${o%%:*} ${o#*:}: expected an integer\$" \
        "$BERTRAIN" bench --${o%%:*} ${o#*:}
done
expect "bench --layerdrop 0.5x" '^bertrain bench: --layerdrop 0.5x: expected a number$' \
    "$BERTRAIN" bench --layerdrop 0.5x
expect "bench --batch 0" '^bertrain bench: --batch 0 is out of range \[1, 10000000\]$' \
    "$BERTRAIN" bench --batch 0
expect "bench --accum 0" '^bertrain bench: --accum 0 is out of range \[1, 10000000\]$' \
    "$BERTRAIN" bench --accum 0
expect "bench --accum against --set" '^bertrain: bench: train_batch_size: 3 != train_micro_batch_size_per_gpu 1 x gradient_accumulation_steps 2 x 1 ranks$' \
    "$BERTRAIN" bench $tb --accum 2 --set train_batch_size=3
expect "bench --seq=4" '^bertrain bench: --seq 4 is out of range \[8, 65536\]$' \
    "$BERTRAIN" bench --seq=4
expect "bench --steps 0" '^bertrain bench: --steps 0 is out of range \[1, 1000000000\]$' \
    "$BERTRAIN" bench --steps 0
expect "bench --layerdrop 1" '^bertrain bench: --layerdrop 1 is out of range \[0, 0.95\]$' \
    "$BERTRAIN" bench --layerdrop 1
expect "bench: unknown option" '^bertrain bench: unknown option --sq \(did you mean --seq\?\)$' \
    "$BERTRAIN" bench --sq 32
expect "bench: missing value" '^bertrain bench: --seq needs a value \(S\)$' "$BERTRAIN" bench --seq
expect "bench: given twice" '^bertrain bench: --seq given twice \(32\); it takes one value$' \
    "$BERTRAIN" bench --seq 16 --seq 32
expect "bench: an argument" '^bertrain bench: unexpected argument tiny \(takes no arguments\)$' \
    "$BERTRAIN" bench tiny
expect "bench --precision fp8" '^bertrain bench: --precision fp8: expected fp32\|bf16\|fp16$' \
    "$BERTRAIN" bench --precision fp8
# bench --set: the config loader's lines, as train's
expect "bench --set model.bogus" '^bertrain: bench: model.bogus: unknown key$' \
    "$BERTRAIN" bench $tb --set model.bogus=1
expect "train --set model.bogus" "^bertrain: $cfg: model.bogus: unknown key\$" \
    "$BERTRAIN" train $cfg --set model.bogus=1
expect "bench --set near a key" "^bertrain: bench: model.num_hidden_layer: unknown key \(did you mean 'model.num_hidden_layers'\?\)\$" \
    "$BERTRAIN" bench $tb --set model.num_hidden_layer=2
expect "bench --set layer limit" '^bertrain: bench: model.num_hidden_layers: 300 is out of range \[1, 256\]$' \
    "$BERTRAIN" bench $tb --set model.num_hidden_layers=300
expect "bench --set seq past the positions" '^bertrain: bench: data.seq_len: 1024 exceeds model.max_position_embeddings 512$' \
    "$BERTRAIN" bench $tb --set data.seq_len=1024
# shellcheck disable=SC2086
if "$BERTRAIN" bench $tb --set model.num_hidden_layers=2 > "$tmpdir/bench2" 2> "$tmpdir/err" &&
    grep -q '^bench: preset tiny (2 layers, layerdrop 0), seq 16, batch 1, 1 steps' "$tmpdir/bench2"; then
    echo "ok   bench --set model.num_hidden_layers=2: $(head -1 "$tmpdir/bench2")"
else
    echo "FAIL bench --set model.num_hidden_layers=2:"; cat "$tmpdir/bench2" "$tmpdir/err"
    failures=$((failures + 1))
fi
for o in size:5x min-frequency:2x limit-alphabet:3x; do
    expect "vocab --${o%%:*} ${o#*:}" "^bertrain vocab: --${o%%:*} ${o#*:}: expected an integer\$" \
        "$BERTRAIN" vocab --${o%%:*} ${o#*:} --out "$tmpdir/v.txt" README.md
done
expect "vocab: unknown option" '^bertrain vocab: unknown option --lowercas \(did you mean --lowercase\?\)$' \
    "$BERTRAIN" vocab --lowercas --size 100 --out "$tmpdir/v.txt" README.md
expect "prep --valid-fraction 0.5x" '^bertrain prep: --valid-fraction 0.5x: expected a number$' \
    "$BERTRAIN" prep --vocab data/demo/vocab.txt --out "$tmpdir/p" --valid-fraction 0.5x README.md
for o in seed:1x shard-tokens:9x; do
    expect "prep --${o%%:*} ${o#*:}" "^bertrain prep: --${o%%:*} ${o#*:}: not an integer in \[0, 18446744073709551615\]\$" \
        "$BERTRAIN" prep --vocab data/demo/vocab.txt --out "$tmpdir/p" --${o%%:*} ${o#*:} README.md
done
expect "prep --inspect: missing value" '^bertrain prep: --inspect needs a value \(SHARD\)$' \
    "$BERTRAIN" prep --inspect
expect "import --seed 5x" '^bertrain import: --seed 5x: not an integer in \[0, 18446744073709551615\]$' \
    "$BERTRAIN" import "$tmpdir/a" "$tmpdir/b" --seed 5x
expect "export: unknown option" '^bertrain export: unknown option --keep-layer \(did you mean --keep-layers\?\)$' \
    "$BERTRAIN" export "$tmpdir/a" "$tmpdir/b" --keep-layer 0
expect "predict --top 5x" '^bertrain predict: --top 5x: expected an integer$' \
    "$BERTRAIN" predict "$tmpdir/a" --top 5x "a [MASK]"
expect "predict --top=0" '^bertrain predict: --top 0 is out of range \[1, 1000\]$' \
    "$BERTRAIN" predict "$tmpdir/a" --top=0 "a [MASK]"
expect "devices: an argument" '^bertrain devices: unexpected argument all \(takes no arguments\)$' \
    "$BERTRAIN" devices all

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
