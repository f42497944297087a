#!/bin/sh
# Hugging Face interchange:
#  - `bertrain export` writes model.safetensors whose names, dtypes and shapes
#    are exactly BertForPreTraining's state_dict (tests/fixtures/export_names.txt),
#    config.json, vocab.txt and the tokenizer files;
#  - import(export(x)) == x byte for byte (model.safetensors, cmp), also with
#    old LayerNorm gamma/beta names and with BertForMaskedLM keys; BertModel
#    keys (no "bert." prefix, no heads) import with the MLM head initialized
#    and reported;
#  - `train --resume` continues from an imported checkpoint; a config of
#    another shape is refused naming the key;
#  - with transformers (the test environment of scripts/deps.sh, with Debian's
#    torch): BertForPreTraining.from_pretrained loads the export
#    without missing or unexpected keys, and its MLM (and NSP) logits on a
#    fixed batch match bertrain's (tests/hf_logits) within 1e-4 relative, and
#    a transformers save_pretrained of it imports (--no-nsp) as x again.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
export OMP_NUM_THREADS=1
PY=""
for p in python3 /usr/bin/python3; do command -v "$p" > /dev/null 2>&1 && PY=$p && break; done
[ -n "$PY" ] || skip "no python3 (tests/st_tool.py reads safetensors headers with it)"
ST="$PY tests/st_tool.py"
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=5 --set train_steps=5"
# shellcheck disable=SC2086
"$BERTRAIN" train examples/demo.json $small --set output_dir="\"$tmpdir/run\"" > "$tmpdir/run.log" 2>&1 ||
    { cat "$tmpdir/run.log"; fail "training failed"; }
x="$tmpdir/run/ckpt-00000005"

"$BERTRAIN" export "$tmpdir/run" "$tmpdir/hf" > "$tmpdir/export.log" 2>&1 ||
    { cat "$tmpdir/export.log"; fail "export failed"; }
echo "ok   $(sed "s|$tmpdir/||g" "$tmpdir/export.log")"
for f in model.safetensors config.json vocab.txt tokenizer_config.json special_tokens_map.json; do
    [ -s "$tmpdir/hf/$f" ] || fail "export: no $f"
done
$ST names "$tmpdir/hf/model.safetensors" > "$tmpdir/names.txt" || fail "cannot read the exported header"
diff tests/fixtures/export_names.txt "$tmpdir/names.txt" ||
    fail "exported tensors differ from BertForPreTraining's (tests/fixtures/export_names.txt)"
echo "ok   exported model.safetensors: $(wc -l < "$tmpdir/names.txt") tensors, names/dtypes/shapes = BertForPreTraining state_dict (fixture)"
for kv in '"architectures":	\["BertForPreTraining"\]' '"model_type":	"bert"' '"hidden_act":	"gelu"' \
          '"pad_token_id":	0' '"vocab_size":	8000' '"layer_norm_eps":	1e-12'; do
    grep -q "$kv" "$tmpdir/hf/config.json" || { cat "$tmpdir/hf/config.json"; fail "config.json lacks $kv"; }
done
grep -q '"tokenizer_class":	"BertTokenizer"' "$tmpdir/hf/tokenizer_config.json" &&
    grep -q '"do_lower_case":	true' "$tmpdir/hf/tokenizer_config.json" || fail "tokenizer_config.json"
cmp -s data/demo/vocab.txt "$tmpdir/hf/vocab.txt" || fail "vocab.txt is not the run's vocab"
echo "ok   config.json (BertForPreTraining, bert, gelu, pad_token_id 0), tokenizer_config.json, vocab.txt"

# import(export(x)) == x
"$BERTRAIN" import "$tmpdir/hf" "$tmpdir/imp" > "$tmpdir/import.log" 2>&1 ||
    { cat "$tmpdir/import.log"; fail "import failed"; }
cmp "$x/model.safetensors" "$tmpdir/imp/model.safetensors" || fail "import(export(x)) != x"
echo "ok   import(export(x)) == x (cmp model.safetensors)"
grep -q '"step":	0' "$tmpdir/imp/state.json" || fail "imported state.json is not at step 0"

# old LayerNorm names
mkdir "$tmpdir/gamma"
cp "$tmpdir/hf/config.json" "$tmpdir/hf/vocab.txt" "$tmpdir/gamma/"
$ST rename "$tmpdir/hf/model.safetensors" "$tmpdir/gamma/model.safetensors" gamma
"$BERTRAIN" import "$tmpdir/gamma" "$tmpdir/imp-gamma" > "$tmpdir/gamma.log" 2>&1 ||
    { cat "$tmpdir/gamma.log"; fail "import with gamma/beta names failed"; }
cmp "$x/model.safetensors" "$tmpdir/imp-gamma/model.safetensors" || fail "gamma/beta import != x"
echo "ok   LayerNorm gamma/beta names: import == x (cmp)"

# BertForMaskedLM keys (no pooler, no NSP head)
mkdir "$tmpdir/maskedlm"
cp "$tmpdir/hf/config.json" "$tmpdir/hf/vocab.txt" "$tmpdir/maskedlm/"
$ST rename "$tmpdir/hf/model.safetensors" "$tmpdir/maskedlm/model.safetensors" maskedlm
"$BERTRAIN" import "$tmpdir/maskedlm" "$tmpdir/imp-mlm" > "$tmpdir/mlm.log" 2>&1 ||
    { cat "$tmpdir/mlm.log"; fail "import of BertForMaskedLM keys failed"; }
cmp "$x/model.safetensors" "$tmpdir/imp-mlm/model.safetensors" || fail "BertForMaskedLM import != x"
echo "ok   BertForMaskedLM keys: import == x (cmp)"

# BertModel keys: the encoder is taken, the MLM head initialized and reported
mkdir "$tmpdir/bertmodel"
cp "$tmpdir/hf/config.json" "$tmpdir/hf/vocab.txt" "$tmpdir/bertmodel/"
$ST rename "$tmpdir/hf/model.safetensors" "$tmpdir/bertmodel/model.safetensors" bertmodel
"$BERTRAIN" import "$tmpdir/bertmodel" "$tmpdir/imp-bm" > "$tmpdir/bm.log" 2>&1 ||
    { cat "$tmpdir/bm.log"; fail "import of BertModel keys failed"; }
grep -q "^import: 5 tensors not in .*initialized (seed 42): cls.predictions.transform.dense.weight" "$tmpdir/bm.log" ||
    { cat "$tmpdir/bm.log"; fail "BertModel import: the missing MLM head was not reported"; }
$ST same "$x/model.safetensors" "$tmpdir/imp-bm/model.safetensors" bert. > "$tmpdir/same.txt" ||
    { cat "$tmpdir/same.txt"; fail "BertModel import: encoder tensors differ"; }
echo "ok   BertModel keys: encoder $(cat "$tmpdir/same.txt"); $(grep -m1 'tensors not in' "$tmpdir/bm.log" | sed "s|$tmpdir/||; s/: cls.*/: the MLM head/")"

# train --resume from an imported checkpoint; another shape is refused
# shellcheck disable=SC2086
"$BERTRAIN" train examples/demo.json $small --set train_steps=2 --set output_dir="\"$tmpdir/cont\"" \
    --resume "$tmpdir/imp" > "$tmpdir/cont.log" 2>&1 || { cat "$tmpdir/cont.log"; fail "resume from an import"; }
grep -q "^resume: from $tmpdir/imp (step 0" "$tmpdir/cont.log" || fail "did not resume from the import"
[ -f "$tmpdir/cont/ckpt-00000002/model.safetensors" ] || fail "no checkpoint after continuing an import"
# shellcheck disable=SC2086
"$BERTRAIN" train examples/demo.json $small --set model.intermediate_size=256 --set output_dir="\"$tmpdir/bad\"" \
    --resume "$tmpdir/imp" > /dev/null 2> "$tmpdir/bad.err"
rc=$?
[ "$rc" -eq 2 ] && grep -q "model.intermediate_size is 512 in the checkpoint and 256 in the config" "$tmpdir/bad.err" ||
    { cat "$tmpdir/bad.err"; fail "a config of another shape was not refused (exit $rc)"; }
echo "ok   train --resume IMPORTED continues; another shape is refused: $(sed "s|$tmpdir/||" "$tmpdir/bad.err")"

# transformers
find_transformers_python
[ -n "$TPY" ] || skip_part "loading the export in transformers (no python imports transformers and torch; scripts/deps.sh test makes venv/)"
[ -n "$TPY" ] || finish "export/import round trip"
"$top_builddir/tests/hf_logits" "$x" "$tmpdir/logits.safetensors" || fail "hf_logits failed"
"$TPY" tests/hf_check.py "$tmpdir/hf" "$tmpdir/logits.safetensors" || fail "transformers does not match bertrain"
# transformers' own save_pretrained (tied tensors stored once, no bertrain metadata)
"$TPY" -c 'import sys, warnings; warnings.simplefilter("ignore")
from transformers import BertForPreTraining
BertForPreTraining.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2], safe_serialization=True)' \
    "$tmpdir/hf" "$tmpdir/saved" 2>/dev/null || fail "save_pretrained failed"
cp "$tmpdir/hf/vocab.txt" "$tmpdir/saved/"
"$BERTRAIN" import "$tmpdir/saved" "$tmpdir/imp-saved" --no-nsp > "$tmpdir/saved.log" 2>&1 ||
    { cat "$tmpdir/saved.log"; fail "import of a save_pretrained directory failed"; }
cmp "$x/model.safetensors" "$tmpdir/imp-saved/model.safetensors" || fail "import(save_pretrained(export(x))) != x"
echo "ok   transformers save_pretrained(from_pretrained(export(x))) imports (--no-nsp) as x (cmp); stored: $($ST names "$tmpdir/saved/model.safetensors" | grep -c .) tensors"

# with the NSP head (sentence pairs)
# shellcheck disable=SC2086
"$BERTRAIN" train examples/demo.json $small --set model.nsp=true --set data.mode=sentence_pairs \
    --set output_dir="\"$tmpdir/nsp\"" > "$tmpdir/nsp.log" 2>&1 || { cat "$tmpdir/nsp.log"; fail "NSP training failed"; }
"$BERTRAIN" export "$tmpdir/nsp" "$tmpdir/hf-nsp" > /dev/null || fail "NSP export failed"
"$top_builddir/tests/hf_logits" "$tmpdir/nsp/ckpt-00000005" "$tmpdir/logits-nsp.safetensors" || fail "hf_logits (NSP)"
"$TPY" tests/hf_check.py "$tmpdir/hf-nsp" "$tmpdir/logits-nsp.safetensors" || fail "transformers does not match bertrain (NSP)"
"$BERTRAIN" import "$tmpdir/hf-nsp" "$tmpdir/imp-nsp" > /dev/null || fail "NSP import failed"
cmp "$tmpdir/nsp/ckpt-00000005/model.safetensors" "$tmpdir/imp-nsp/model.safetensors" || fail "NSP: import(export(x)) != x"
echo "ok   with the NSP head: transformers matches, import(export(x)) == x"
finish "export loads in transformers ($("$TPY" -c 'import transformers; print("transformers", transformers.__version__)')) and matches; import round trip is exact"
