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
train() { "${TRAIN_BIN:-$BERTRAIN}" train tests/fixtures/base.json $small "$@"; }


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
# edit_state_with CKPT CODE: run python CODE on state.json's object `s` (with
# `d` the checkpoint directory, json and zlib imported), then re-sign it, as a
# forger would
edit_state_with() {
    "$py" - "$@" <<'EOF'
import json, sys, zlib
d = sys.argv[1]
s = json.load(open(d + "/state.json"))
exec(sys.argv[2])
s["state_crc32"] = "00000000"
text = json.dumps(s, indent=2)
crc = "%08x" % (zlib.crc32(text.encode()) & 0xffffffff)
open(d + "/state.json", "w").write(text.replace('"state_crc32": "00000000"', '"state_crc32": "%s"' % crc))
EOF
}
# edit_state CKPT KEY VALUE: set a top-level field and re-sign the file
edit_state() { edit_state_with "$1" "s['$2'] = json.loads(sys.argv[3])" "$3"; }
# relist CKPT FILE: state.json lists FILE as it is now (size, CRC-32), re-signed
relist() {
    edit_state_with "$1" "b = open(d + '/$2', 'rb').read(); s['files']['$2'] = {'bytes': len(b), 'crc32': '%08x' % (zlib.crc32(b) & 0xffffffff)}"
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
train --set train_steps=2 --set seed=0 --set output_dir="\"$tmpdir/r-ok\"" --resume "$tmpdir/edit" > "$tmpdir/r-ok.log" 2>&1 ||
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
    [ -f "$1/bertrain_export.json" ] || return 0
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
relist "$tmpdir/inf" model.safetensors || fail "cannot re-sign the checkpoint"
expect_refusal "resume of an Inf tensor" "tensor bert.embeddings.LayerNorm.weight holds 1 NaN or infinite value \(the first at element 3: inf\)" \
    train --set train_steps=2 --set seed=0 --set output_dir="\"$tmpdir/r-inf\"" --resume "$tmpdir/inf"
echo "ok   NaN in an import and Inf in a checkpoint (valid checksums) are refused, naming the tensor"

# ---- a run started from an import, rolled back before its first checkpoint ----
"$BERTRAIN" export "$tmpdir/zero" "$tmpdir/hf2" > /dev/null 2>&1 &&
    "$BERTRAIN" import "$tmpdir/hf2" "$tmpdir/imp" > /dev/null 2>&1 || fail "export and import failed"
rc=0
need_test_build
TRAIN_BIN=$BERTRAIN_T BERTRAIN_TEST_NAN_SAMPLES=$(seq -s, 16 8 400) train --set train_steps=20 --set guard.max_bad_steps=2 \
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

# ---- optim.bin's values, what state.json says of sizes, changes of the data order ----
# forge_optim CKPT KIND: change optim.bin (step: the step in its header; vneg, vnan,
# minf: one moment of the first tensor) and re-sign state.json, as a forger would
forge_optim() {
    "$py" - "$@" <<'EOF'
import json, struct, sys, zlib
d, kind = sys.argv[1], sys.argv[2]
b = bytearray(open(d + "/optim.bin", "rb").read())
table = struct.unpack_from("<I", b, 28)[0]
name_len = struct.unpack_from("<H", b, 32)[0]
numel = struct.unpack_from("<Q", b, 34 + name_len)[0]
data = 32 + table
if kind == "step":
    struct.pack_into("<Q", b, 16, 2**40)
elif kind == "vneg":
    struct.pack_into("<f", b, data + 4 * numel + 12, -1e-3)
elif kind == "vnan":
    struct.pack_into("<f", b, data + 4 * numel + 12, float("nan"))
elif kind == "minf":
    struct.pack_into("<f", b, data + 12, float("inf"))
open(d + "/optim.bin", "wb").write(b)
EOF
    relist "$1" optim.bin
}

optim_values() {
    for case in "step:optimizer step 1099511627776; state.json says 1: the file is damaged" \
                "vneg:its second moment holds -0.001 at element 3; a second moment is finite and >= 0" \
                "vnan:its second moment holds nan at element 3" \
                "minf:its first moment holds inf at element 3; a first moment is finite"; do
        kind=${case%%:*} want=${case#*:}
        rm -rf "$tmpdir/o-$kind" && mkdir -p "$tmpdir/o-$kind" &&
            cp -r "$tmpdir/zero/ckpt-00000001" "$tmpdir/o-$kind/ckpt-00000001" &&
            forge_optim "$tmpdir/o-$kind/ckpt-00000001" "$kind" || fail "cannot forge optim.bin ($kind)"
        before=$(ls "$tmpdir/o-$kind")
        # --resume auto: refused, and never a fresh start over the run
        expect_refusal "optim.bin $kind" "resume: .*o-$kind/ckpt-00000001/optim.bin: .*$want" \
            train --set train_steps=3 --set seed=0 --set output_dir="\"$tmpdir/o-$kind\"" --resume auto
        [ "$(ls "$tmpdir/o-$kind")" = "$before" ] || { ls "$tmpdir/o-$kind"; fail "the refused resume ($kind) wrote into the run"; }
    done
    rm -rf "$tmpdir/o-ahead" && cp -r "$tmpdir/zero/ckpt-00000001" "$tmpdir/o-ahead"
    edit_state_with "$tmpdir/o-ahead" "s['optimizer']['step'] = 5" || fail "cannot edit optimizer.step"
    expect_refusal "optimizer.step past step" "o-ahead: state.json: optimizer.step 5 exceeds step 1" \
        train --set train_steps=3 --set seed=0 --set output_dir="\"$tmpdir/r-ahead\"" --resume "$tmpdir/o-ahead"
    echo "ok   optim.bin with a valid checksum: a step past state.json's, a negative or NaN second moment, an infinite first moment refused"
}

size_messages() {
    rm -rf "$tmpdir/big" && cp -r "$tmpdir/zero/ckpt-00000001" "$tmpdir/big"
    edit_state_with "$tmpdir/big" "s['files']['optim.bin']['bytes'] = 2.0**64" || fail "cannot edit files.optim.bin.bytes"
    expect_refusal "a size of 2^64" "big: state.json: files.optim.bin.bytes is 1.8446744073709552e\+19; a size is a whole number of bytes" \
        train --set train_steps=3 --set seed=0 --set output_dir="\"$tmpdir/r-big\"" --resume "$tmpdir/big"
    [ -f "$tmpdir/hf2/model.safetensors" ] || fail "no export hf2"
    mkdir -p "$tmpdir/far" && cp "$tmpdir/hf2/config.json" "$tmpdir/hf2/vocab.txt" "$tmpdir/far/"
    "$py" - "$tmpdir/hf2/model.safetensors" "$tmpdir/far/model.safetensors" <<'EOF' || fail "cannot write far"
import json, struct, sys
blob = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", blob[:8])
h = json.loads(blob[8:8 + n])
h.pop("__metadata__", None)
h["bert.pooler.dense.bias"]["data_offsets"] = [2**64 - 16, 2**64 - 16]
text = json.dumps(h).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + blob[8 + n:])
EOF
    expect_refusal "data_offsets near 2^64" "tensor bert.pooler.dense.bias: data_offsets \[1.8446744073709552e\+19,1.8446744073709552e\+19\] outside the" \
        "$BERTRAIN" import "$tmpdir/far" "$tmpdir/imp-far"
    echo "ok   a size of 2^64 in state.json and data_offsets near 2^64 are said as they are"
}

data_order_change() {
    cp data/demo/train.shard "$tmpdir/same.shard"
    expect_refusal "seed changed on resume" "resume: .*zero/ckpt-00000001: seed is 0 in the checkpoint and 8 in the config; the samples of the current epoch would repeat or be skipped: pass --allow-data-change" \
        train --set train_steps=2 --set seed=8 --set output_dir="\"$tmpdir/dc1\"" --resume "$tmpdir/zero/ckpt-00000001"
    expect_refusal "data.train changed on resume" "resume: .*: data.train is \"data/demo/train.shard\" in the checkpoint and \"$tmpdir/same.shard\" in the config; .*--allow-data-change" \
        train --set train_steps=2 --set seed=0 --set data.train="\"$tmpdir/same.shard\"" --set output_dir="\"$tmpdir/dc2\"" \
        --resume "$tmpdir/zero/ckpt-00000001"
    train --set train_steps=2 --set seed=8 --set output_dir="\"$tmpdir/dc3\"" --resume "$tmpdir/zero/ckpt-00000001" \
        --allow-data-change > "$tmpdir/dc3.log" 2>&1 || { cat "$tmpdir/dc3.log"; fail "--allow-data-change was refused"; }
    grep -q "^resume: seed 0 -> 8$" "$tmpdir/dc3.log" || { cat "$tmpdir/dc3.log"; fail "the allowed change was not logged"; }
    echo "ok   seed or data.train changed on resume: refused without --allow-data-change, logged with it"
}

run_case optim-values optim_values
run_case size-messages size_messages
run_case data-order data_order_change
cases_done "seeds exact, state.json and optim.bin range-checked, NaN/Inf weights refused, rollback messages true, sizes said as they are, the data order kept on resume"
