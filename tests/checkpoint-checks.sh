#!/bin/sh
# What bertrain reads is validated, not only checksummed, and nothing is
# silently rounded:
# - seed takes the full uint64 range exactly (a string above 2^53); a JSON
#   number at or above 2^53 is refused, not rounded; 2^64-1 is not seed 0;
# - a state.json with a valid checksum but a step of 2^63-1 or -5, a world
#   size of 0 or an unknown format version is refused, naming the field;
# - NaN or Inf in an imported or resumed tensor is refused, naming it;
# - when the guard gives up on a run that started from an import and has no
#   checkpoint of its own, the rollback and the stop say what they reload and
#   which checkpoint exists to resume from.
# Each refusal: one line, exit 2.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
find_python json zlib || skip "no python3 to edit checkpoints"
py=$PY
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=1"
# shellcheck disable=SC2086
train() { "$BERTRAIN" train tests/fixtures/base.json $small "$@"; }


first_loss() { sed -n 's/^step      1 | loss \([0-9.]*\).*/\1/p' "$1"; }

# ---- exact seeds ----
train --set train_steps=1 --set seed='"18446744073709551615"' --set output_dir="\"$tmpdir/max\"" \
    > "$tmpdir/max.log" 2>&1 || { cat "$tmpdir/max.log"; fail "seed 2^64-1 as a string failed"; }
train --set train_steps=1 --set seed=0 --set output_dir="\"$tmpdir/zero\"" > "$tmpdir/zero.log" 2>&1 ||
    { cat "$tmpdir/zero.log"; fail "seed 0 failed"; }
[ -n "$(first_loss "$tmpdir/max.log")" ] && [ "$(first_loss "$tmpdir/max.log")" != "$(first_loss "$tmpdir/zero.log")" ] ||
    fail "seed 2^64-1 trains as seed 0 (loss $(first_loss "$tmpdir/max.log"))"
"$py" - "$tmpdir/max/ckpt-00000001/state.json" <<'EOF' || fail "state.json does not record seed 2^64-1 exactly"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["seed"] == "18446744073709551615" and s["config"]["seed"] == "18446744073709551615", s["seed"]
EOF
train --set train_steps=1 --set seed=9007199254740993 --set output_dir="\"$tmpdir/odd\"" > "$tmpdir/odd.log" 2>&1 ||
    { cat "$tmpdir/odd.log"; fail "--set seed=2^53+1 failed"; }
"$py" -c 'import json, sys; assert json.load(open(sys.argv[1]))["seed"] == "9007199254740993"' \
    "$tmpdir/odd/ckpt-00000001/state.json" || fail "--set seed=2^53+1 was not kept exactly"
expect_refusal "seed 2^64-1 as a JSON number" "seed: 1.8446744073709552e\+19 is 2\^53 or more, where a JSON number is not exact; write the digits as a string" \
    "$BERTRAIN" train tests/fixtures/base.json --set seed=18446744073709551615.0
expect_refusal "seed 2^64 as a string" 'seed: "18446744073709551616" is not an integer in \[0, 18446744073709551615\]' \
    "$BERTRAIN" train tests/fixtures/base.json --set seed='"18446744073709551616"'
expect_refusal "import --seed -1" "import: --seed -1: not an integer" \
    "$BERTRAIN" import "$tmpdir/nowhere" "$tmpdir/imp-bad" --seed -1
echo "ok   seeds: 2^64-1 and 2^53+1 exact, 2^64-1 is not seed 0; rounded or out-of-range seeds refused"

# ---- state.json fields are range-checked ----
# edit_state CKPT KEY VALUE: set a top-level field and re-sign the file
edit_state() {
    "$py" - "$@" <<'EOF'
import json, re, sys, zlib
path = sys.argv[1] + "/state.json"
text = open(path).read()
s = json.loads(text)
s[sys.argv[2]] = json.loads(sys.argv[3])
s["state_crc32"] = "00000000"
text = json.dumps(s, indent=2)
crc = "%08x" % (zlib.crc32(text.encode()) & 0xffffffff)
open(path, "w").write(text.replace('"state_crc32": "00000000"', '"state_crc32": "%s"' % crc))
EOF
}
for case in "step:9223372036854775807:step is 9.2233720368547758e\+18; it must be an integer in \[0, 1099511627776\]" \
            "step:-5:step is -5; it must be an integer" \
            "world_size:0:world_size is 0; it must be an integer in \[1, 1048576\]" \
            "format_version:99:format_version is 99; it must be an integer in \[1, 2\]" \
            "seed:\"12x\":seed is not an unsigned 64-bit integer"; do
    key=${case%%:*} rest=${case#*:}
    value=${rest%%:*} want=${rest#*:}
    rm -rf "$tmpdir/edit" && cp -r "$tmpdir/zero/ckpt-00000001" "$tmpdir/edit"
    edit_state "$tmpdir/edit" "$key" "$value" || fail "cannot edit state.json"
    expect_refusal "state.json $key $value" "edit: state.json: $want" \
        train --set train_steps=2 --set output_dir="\"$tmpdir/r-$key\"" --resume "$tmpdir/edit"
done
rm -rf "$tmpdir/edit" && cp -r "$tmpdir/zero/ckpt-00000001" "$tmpdir/edit"
edit_state "$tmpdir/edit" step 1 || fail "cannot re-sign state.json"
train --set train_steps=2 --set output_dir="\"$tmpdir/r-ok\"" --resume "$tmpdir/edit" > "$tmpdir/r-ok.log" 2>&1 ||
    { cat "$tmpdir/r-ok.log"; fail "a re-signed, unchanged state.json was refused: the edit itself is wrong"; }
echo "ok   state.json with a valid checksum: step 2^63-1 and -5, world size 0, format 99, a bad seed refused"

# ---- NaN and Inf weights are refused ----
"$BERTRAIN" export "$tmpdir/zero" "$tmpdir/hf" > /dev/null 2>&1 || fail "export failed"
# poison FILE TENSOR VALUE: write VALUE (nan, inf) into element 3 of an F32 tensor
poison() {
    "$py" - "$@" <<'EOF'
import json, struct, sys
path, name, value = sys.argv[1], sys.argv[2], float(sys.argv[3])
blob = bytearray(open(path, "rb").read())
(n,) = struct.unpack("<Q", blob[:8])
begin = json.loads(blob[8:8 + n])[name]["data_offsets"][0] + 8 + n
struct.pack_into("<f", blob, begin + 12, value)
open(path, "wb").write(blob)
EOF
}
# resign EXPORT_DIR: the export's mark lists model.safetensors as it is now (an
# export of a model that holds the value)
resign() {
    "$py" - "$1" <<'EOF'
import json, os, sys, zlib
mark = os.path.join(sys.argv[1], "bertrain_export.json")
m = json.load(open(mark))
data = open(os.path.join(sys.argv[1], "model.safetensors"), "rb").read()
m["files"]["model.safetensors"] = {"bytes": len(data), "crc32": "%08x" % (zlib.crc32(data) & 0xffffffff)}
json.dump(m, open(mark, "w"), indent=2)
EOF
}
poison "$tmpdir/hf/model.safetensors" bert.encoder.layer.1.output.dense.weight nan && resign "$tmpdir/hf" ||
    fail "cannot poison"
expect_refusal "import of a NaN tensor" "tensor bert.encoder.layer.1.output.dense.weight holds 1 NaN or infinite value \(the first at element 3: nan\)" \
    "$BERTRAIN" import "$tmpdir/hf" "$tmpdir/imp-nan"
[ ! -e "$tmpdir/imp-nan" ] || fail "the refused import wrote $tmpdir/imp-nan"
rm -rf "$tmpdir/inf" && cp -r "$tmpdir/zero/ckpt-00000001" "$tmpdir/inf"
poison "$tmpdir/inf/model.safetensors" bert.embeddings.LayerNorm.weight inf || fail "cannot poison"
"$py" - "$tmpdir/inf" <<'EOF' || fail "cannot re-sign the checkpoint"
import json, sys, zlib
d = sys.argv[1]
s = json.load(open(d + "/state.json"))
blob = open(d + "/model.safetensors", "rb").read()
s["files"]["model.safetensors"]["crc32"] = "%08x" % (zlib.crc32(blob) & 0xffffffff)
s["state_crc32"] = "00000000"
text = json.dumps(s, indent=2)
crc = "%08x" % (zlib.crc32(text.encode()) & 0xffffffff)
open(d + "/state.json", "w").write(text.replace('"state_crc32": "00000000"', '"state_crc32": "%s"' % crc))
EOF
expect_refusal "resume of an Inf tensor" "tensor bert.embeddings.LayerNorm.weight holds 1 NaN or infinite value \(the first at element 3: inf\)" \
    train --set train_steps=2 --set output_dir="\"$tmpdir/r-inf\"" --resume "$tmpdir/inf"
echo "ok   NaN in an import and Inf in a checkpoint (valid checksums) are refused, naming the tensor"

# ---- a run started from an import, rolled back before its first checkpoint ----
"$BERTRAIN" export "$tmpdir/zero" "$tmpdir/hf2" > /dev/null 2>&1 &&
    "$BERTRAIN" import "$tmpdir/hf2" "$tmpdir/imp" > /dev/null 2>&1 || fail "export and import failed"
rc=0
BERTRAIN_TEST_NAN_SAMPLES=$(seq -s, 16 8 400) train --set train_steps=20 --set guard.max_bad_steps=2 \
    --set guard.window=3 --set guard.max_rollbacks=1 --set output_dir="\"$tmpdir/g\"" \
    --resume "$tmpdir/imp" > "$tmpdir/g.log" 2>&1 || rc=$?
[ "$rc" -eq 3 ] || { cat "$tmpdir/g.log"; fail "the guard did not stop the run (exit $rc)"; }
grep -q "^rollback: no checkpoint in $tmpdir/g yet: reloading $tmpdir/imp, where this run started (step 0)$" "$tmpdir/g.log" ||
    { cat "$tmpdir/g.log"; fail "the rollback did not say it reloads the import"; }
grep -q "stopping; no checkpoint was written; resume from $tmpdir/imp, where this run started (--resume $tmpdir/imp), with a lower learning rate$" "$tmpdir/g.log" ||
    { cat "$tmpdir/g.log"; fail "the stop did not name the checkpoint that exists"; }
grep -q "no usable checkpoint\|starting from step 0" "$tmpdir/g.log" &&
    { cat "$tmpdir/g.log"; fail "the rollback still says it starts from step 0"; }
echo "ok   rollback and stop after an import: they name the import they reload and resume from"
echo "PASS: seeds exact, state.json range-checked, NaN/Inf weights refused, rollback messages true"
