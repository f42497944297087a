#!/bin/sh
# Hugging Face interchange:
#  - `bertrain export` writes model.safetensors whose names, dtypes and shapes
#    are exactly BertForPreTraining's state_dict (tests/fixtures/export_names.txt),
#    config.json, vocab.txt, the tokenizer files and a model card (README.md:
#    steps, samples seen, config, the held-out metrics of metrics.jsonl);
#  - an imported pooler and NSP head are kept without model.nsp: unchanged
#    through import, training and export;
#  - tokenizer.json tokenizes like vocab.txt (tokenizers, transformers'
#    AutoTokenizer), lowercased and cased;
#  - import(export(x)) == x byte for byte (model.safetensors, cmp), also with
#    old LayerNorm gamma/beta names and with BertForMaskedLM keys; BertModel
#    keys (no "bert." prefix, no heads) import with the MLM head initialized
#    and reported; predict warns, and the card says, while it is untrained;
#    the base model's licence (its card's front matter) and the initialized
#    tensors carry through training into every later card;
#  - `train --resume` continues from an imported checkpoint; a config of
#    another shape is refused naming the key;
#  - with transformers (the test environment of scripts/deps.sh, with Debian's
#    torch): BertForPreTraining.from_pretrained loads the export
#    without missing or unexpected keys, and its MLM (and NSP) logits on a
#    fixed batch match bertrain's (tests/c/hf_logits) within 1e-4 relative, and
#    a transformers save_pretrained of it imports (--no-nsp) as x again.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
export OMP_NUM_THREADS=1
PY=""
for p in python3 /usr/bin/python3; do command -v "$p" > /dev/null 2>&1 && PY=$p && break; done
[ -n "$PY" ] || skip "no python3 (tests/python/st_tool.py reads safetensors headers with it)"
ST="$PY tests/python/st_tool.py"
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=5 --set train_steps=5"
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$tmpdir/run\"" > "$tmpdir/run.log" 2>&1 ||
    { cat "$tmpdir/run.log"; fail "training failed"; }
x="$tmpdir/run/ckpt-00000005"

"$BERTRAIN" export "$tmpdir/run" "$tmpdir/hf" > "$tmpdir/export.log" 2>&1 ||
    { cat "$tmpdir/export.log"; fail "export failed"; }
echo "ok   $(sed "s|$tmpdir/||g" "$tmpdir/export.log")"
for f in model.safetensors config.json vocab.txt tokenizer.json tokenizer_config.json special_tokens_map.json README.md; do
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
printf -- '---\nlanguage: en\nlicense: apache-2.0\ntags:\n- bert\n---\n\n# A base model\n' > "$tmpdir/bertmodel/README.md"
"$BERTRAIN" import "$tmpdir/bertmodel" "$tmpdir/imp-bm" > "$tmpdir/bm.log" 2>&1 ||
    { cat "$tmpdir/bm.log"; fail "import of BertModel keys failed"; }
grep -q "^import: 5 tensors not in .*initialized (seed 42): cls.predictions.transform.dense.weight" "$tmpdir/bm.log" ||
    { cat "$tmpdir/bm.log"; fail "BertModel import: the missing MLM head was not reported"; }
$ST same "$x/model.safetensors" "$tmpdir/imp-bm/model.safetensors" bert. > "$tmpdir/same.txt" ||
    { cat "$tmpdir/same.txt"; fail "BertModel import: encoder tensors differ"; }
echo "ok   BertModel keys: encoder $(cat "$tmpdir/same.txt"); $(grep -m1 'tensors not in' "$tmpdir/bm.log" | sed "s|$tmpdir/||; s/: cls.*/: the MLM head/")"

# the base model: the import's untrained MLM head is said by predict and the
# card; the initialized tensors and the card's licence carry through training
# into every later checkpoint's card
card_has() { # CARD WHAT...: the card has every WHAT (grep -F)
    card=$1
    shift
    for want in "$@"; do
        grep -q -F -e "$want" "$card" || { cat "$card"; fail "$card lacks: $want"; }
    done
}
"$BERTRAIN" predict "$tmpdir/imp-bm" "the [MASK] was here" > "$tmpdir/bm-pred.out" 2> "$tmpdir/bm-pred.err" ||
    { cat "$tmpdir/bm-pred.err"; fail "predict on the BertModel import failed"; }
grep -q "^bertrain predict: warning: .*imp-bm: the MLM head is untrained (freshly initialized by \`bertrain import\`: the base model .*bertmodel has none)" "$tmpdir/bm-pred.err" ||
    { cat "$tmpdir/bm-pred.err"; fail "predict did not warn that the imported MLM head is untrained"; }
"$BERTRAIN" export "$tmpdir/imp-bm" "$tmpdir/hf-bm" > /dev/null || fail "export of the BertModel import failed"
card_has "$tmpdir/hf-bm/README.md" "license: apache-2.0" "lacks 5 tensors, freshly initialized by \`bertrain import\`: \`cls.predictions.transform.dense.weight\`" \
    "They are untrained." "**The MLM head is untrained**" "(its licence: apache-2.0); bertrain has not trained it"
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set train_steps=2 --set output_dir="\"$tmpdir/bm-run\"" \
    --resume "$tmpdir/imp-bm" > "$tmpdir/bm-run.log" 2>&1 || { cat "$tmpdir/bm-run.log"; fail "training the BertModel import failed"; }
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set train_steps=4 --set output_dir="\"$tmpdir/bm-run\"" \
    --resume auto > "$tmpdir/bm-run2.log" 2>&1 || { cat "$tmpdir/bm-run2.log"; fail "resuming the trained import failed"; }
"$BERTRAIN" export "$tmpdir/bm-run" "$tmpdir/hf-bm-run" > /dev/null || fail "export of the trained import failed"
card_has "$tmpdir/hf-bm-run/README.md" "license: apache-2.0" "Continued from the Hugging Face model \`$tmpdir/bertmodel\` (its licence: apache-2.0)" \
    "lacks 5 tensors, freshly initialized" "bertrain has trained them since, with the rest of the model, for 4 steps." \
    "| optimizer steps | 4 of"
! grep -q "untrained" "$tmpdir/hf-bm-run/README.md" || fail "the trained import's card still says untrained"
"$BERTRAIN" predict "$tmpdir/bm-run" "the [MASK] was here" > /dev/null 2> "$tmpdir/bm-pred2.err" || fail "predict after training failed"
[ ! -s "$tmpdir/bm-pred2.err" ] || { cat "$tmpdir/bm-pred2.err"; fail "predict warned after the MLM head was trained"; }
echo "ok   base model: predict warns and the card says the imported MLM head is untrained; its licence and the initialized tensors carry through 2 trainings (resume of the import, then --resume auto) into the card"

# the model card states the training and the held-out metrics of the checkpoint's step
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set data.valid='"data/demo/valid.shard"' \
    --set eval.max_samples=64 --set train_steps=40 --set optimizer.params.lr=3e-3 \
    --set output_dir="\"$tmpdir/card\"" > "$tmpdir/card.log" 2>&1 ||
    { cat "$tmpdir/card.log"; fail "training with evaluation failed"; }
"$BERTRAIN" export "$tmpdir/card" "$tmpdir/hf-card" > /dev/null || fail "export (card) failed"
acc=$(grep '"eval_mlm_acc"' "$tmpdir/card/metrics.jsonl" | tail -1 | sed 's/.*"eval_mlm_acc": \([^,]*\),.*/\1/')
acc4=$(awk -v a="$acc" 'BEGIN { printf "%.4f", a }')
[ "$acc4" != "0.0000" ] || fail "no held-out accuracy to check the card against (metrics.jsonl: $acc)"
for want in "| optimizer steps | 40 of \`train_steps\` 40 |" "| samples seen | 320 sequences of up to 32 tokens" \
    "Held-out evaluation at step 40 on \`data/demo/valid.shard\`" "\*\*MLM accuracy $acc4\*\*" \
    '"train_batch_size":' 'pipeline("fill-mask"'; do
    grep -q -e "$want" "$tmpdir/hf-card/README.md" || { cat "$tmpdir/hf-card/README.md"; fail "README.md lacks: $want"; }
done
echo "ok   README.md model card: steps, samples seen, config, held-out MLM accuracy $acc4 (= metrics.jsonl)"

# a pooler and NSP head imported from a Hugging Face model are kept unchanged
# without model.nsp: through the import, training and the export (bytes)
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set model.nsp=true --set data.mode=sentence_pairs \
    --set output_dir="\"$tmpdir/nsp\"" > "$tmpdir/nsp.log" 2>&1 || { cat "$tmpdir/nsp.log"; fail "NSP training failed"; }
"$BERTRAIN" export "$tmpdir/nsp" "$tmpdir/hf-nsp" > /dev/null || fail "NSP export failed"
mkdir "$tmpdir/plain"
cp "$tmpdir/hf-nsp/config.json" "$tmpdir/hf-nsp/vocab.txt" "$tmpdir/plain/"
$ST rename "$tmpdir/hf-nsp/model.safetensors" "$tmpdir/plain/model.safetensors" plain # as transformers writes it
"$BERTRAIN" import "$tmpdir/plain" "$tmpdir/imp-pool" --no-nsp > "$tmpdir/pool.log" 2>&1 ||
    { cat "$tmpdir/pool.log"; fail "import --no-nsp of a model with a pooler failed"; }
grep -q "^import: 4 tensors of the pooler and NSP head kept unchanged" "$tmpdir/pool.log" ||
    { cat "$tmpdir/pool.log"; fail "the import did not keep the pooler and NSP head"; }
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set train_steps=2 --set output_dir="\"$tmpdir/pool-run\"" \
    --resume "$tmpdir/imp-pool" > "$tmpdir/pool-run.log" 2>&1 || { cat "$tmpdir/pool-run.log"; fail "training the import failed"; }
"$BERTRAIN" export "$tmpdir/pool-run" "$tmpdir/hf-pool" > "$tmpdir/pool-export.log" ||
    fail "export of the trained import failed"
for part in bert.pooler. cls.seq_relationship.; do
    $ST same "$tmpdir/hf-nsp/model.safetensors" "$tmpdir/hf-pool/model.safetensors" "$part" > /dev/null ||
        fail "$part changed between the imported model and the export after training"
done
grep -q "| pooler, NSP head | carried, carried |" "$tmpdir/hf-pool/README.md" || fail "the card does not say the heads are carried"
"$BERTRAIN" import "$tmpdir/hf-pool" "$tmpdir/imp-pool2" > /dev/null || fail "re-import failed"
cmp "$tmpdir/pool-run/ckpt-00000002/model.safetensors" "$tmpdir/imp-pool2/model.safetensors" ||
    fail "import(export(x)) != x with carried heads"
cmp -s "$tmpdir/imp-pool/carried.safetensors" "$tmpdir/imp-pool2/carried.safetensors" ||
    fail "the carried heads changed through export and import"
echo "ok   an imported pooler and NSP head: kept through --no-nsp import, 2 training steps and export (bytes), and a re-import"

# train --resume from an imported checkpoint; another shape is refused
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set train_steps=2 --set output_dir="\"$tmpdir/cont\"" \
    --resume "$tmpdir/imp" > "$tmpdir/cont.log" 2>&1 || { cat "$tmpdir/cont.log"; fail "resume from an import"; }
grep -q "^resume: from $tmpdir/imp (step 0" "$tmpdir/cont.log" || fail "did not resume from the import"
[ -f "$tmpdir/cont/ckpt-00000002/model.safetensors" ] || fail "no checkpoint after continuing an import"
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set model.intermediate_size=256 --set output_dir="\"$tmpdir/bad\"" \
    --resume "$tmpdir/imp" > /dev/null 2> "$tmpdir/bad.err"
rc=$?
[ "$rc" -eq 2 ] && grep -q "model.intermediate_size is 512 in the checkpoint and 256 in the config" "$tmpdir/bad.err" ||
    { cat "$tmpdir/bad.err"; fail "a config of another shape was not refused (exit $rc)"; }
echo "ok   train --resume IMPORTED continues; another shape is refused: $(sed "s|$tmpdir/||" "$tmpdir/bad.err")"

# transformers
find_transformers_python
# tokenizer.json tokenizes like vocab.txt (tokenizers and transformers), lowercased and cased
find_python tokenizers transformers
if [ -n "$PY" ]; then
    "$BERTRAIN" export "$tmpdir/imp-pool" "$tmpdir/hf-cased" > /dev/null || fail "export for the cased check"
    sed 's/"do_lower_case":[[:space:]]*true/"do_lower_case": false/' "$tmpdir/hf-cased/tokenizer_config.json" > "$tmpdir/tc"
    mv "$tmpdir/tc" "$tmpdir/hf-cased/tokenizer_config.json"
    "$BERTRAIN" import "$tmpdir/hf-cased" "$tmpdir/imp-cased" > /dev/null && rm -rf "$tmpdir/hf-cased" &&
        "$BERTRAIN" export "$tmpdir/imp-cased" "$tmpdir/hf-cased" > /dev/null || fail "cased export failed"
    grep -q '"lowercase":false' "$tmpdir/hf-cased/tokenizer.json" || fail "the cased export's tokenizer.json lowercases"
    for d in hf hf-cased; do
        "$PY" tests/python/hf_tokenizer_check.py "$tmpdir/$d" data/corpus/austen-persuasion.txt ||
            fail "tokenizer.json of $d does not tokenize like vocab.txt"
    done
else
    skip_part "tokenizer.json against tokenizers and transformers (no python imports them; scripts/deps.sh test makes venv/)"
fi

[ -n "$TPY" ] || skip_part "loading the export in transformers (no python imports transformers and torch; scripts/deps.sh test makes venv/)"
[ -n "$TPY" ] || finish "export/import round trip"
"$top_builddir/tests/c/hf_logits" "$x" "$tmpdir/logits.safetensors" || fail "hf_logits failed"
"$TPY" tests/python/hf_check.py "$tmpdir/hf" "$tmpdir/logits.safetensors" || fail "transformers does not match bertrain"
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

# with the NSP head (sentence pairs; trained above)
"$top_builddir/tests/c/hf_logits" "$tmpdir/nsp/ckpt-00000005" "$tmpdir/logits-nsp.safetensors" || fail "hf_logits (NSP)"
"$TPY" tests/python/hf_check.py "$tmpdir/hf-nsp" "$tmpdir/logits-nsp.safetensors" || fail "transformers does not match bertrain (NSP)"
"$BERTRAIN" import "$tmpdir/hf-nsp" "$tmpdir/imp-nsp" > /dev/null || fail "NSP import failed"
cmp "$tmpdir/nsp/ckpt-00000005/model.safetensors" "$tmpdir/imp-nsp/model.safetensors" || fail "NSP: import(export(x)) != x"
echo "ok   with the NSP head: transformers matches, import(export(x)) == x"
finish "export loads in transformers ($("$TPY" -c 'import transformers; print("transformers", transformers.__version__)')) and matches; import round trip is exact"
