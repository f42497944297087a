#!/bin/sh
# Bit-exact resume: 40 steps straight equal 20 steps, a stop and 20 resumed
# steps (dropout on): byte-identical model.safetensors and optim.bin (cmp) and
# the same per-step losses in metrics.jsonl (which the resumed run appends
# to). Also: a changed train_steps is logged, a changed model shape is an
# error naming the key and both values, data.seq_len may change, and a
# checkpoint that already reached train_steps is not trained further.
# Repeated on OpenCL when `bertrain version` lists it and opencl:0:0 works.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
export OMP_NUM_THREADS=1 # steady timing on a loaded machine; bits do not depend on it
small=$RESUME_SMALL

resume_exact cpu cpu 40

# the model's shape cannot change on resume; the error names the key and both values
ck="$tmpdir/cpu-resumed/ckpt-00000020"
for change in "model.hidden_size=64:model.hidden_size is 128 in the checkpoint and 64 in the config" \
              "model.max_position_embeddings=64:model.max_position_embeddings is 128 in the checkpoint and 64 in the config" \
              "model.num_hidden_layers=3:model.num_hidden_layers is 2 in the checkpoint and 3 in the config"; do
    set="${change%%:*}" want="${change#*:}"
    # shellcheck disable=SC2086
    "$BERTRAIN" train tests/fixtures/base.json $small --set "$set" --set output_dir="\"$tmpdir/shape\"" \
        --resume "$ck" > "$tmpdir/shape.out" 2> "$tmpdir/shape.err"
    rc=$?
    [ "$rc" -eq 2 ] && [ "$(wc -l < "$tmpdir/shape.err")" -eq 1 ] && grep -qF "$want" "$tmpdir/shape.err" ||
        { cat "$tmpdir/shape.err"; fail "resume with --set $set: exit $rc, wanted 2 and one line with '$want'"; }
    echo "ok   --set $set is refused: $(cat "$tmpdir/shape.err")"
done

# data.seq_len does not change a parameter's shape: allowed, and logged
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set data.seq_len=64 --set train_steps=22 \
    --set output_dir="\"$tmpdir/seq\"" --resume "$ck" > "$tmpdir/seq.log" 2>&1 ||
    { cat "$tmpdir/seq.log"; fail "resume with a longer data.seq_len failed"; }
grep -q "^resume: data.seq_len 32 -> 64$" "$tmpdir/seq.log" || fail "the data.seq_len change was not logged"
[ -f "$tmpdir/seq/ckpt-00000022/model.safetensors" ] || fail "no checkpoint after resuming with data.seq_len 64"
echo "ok   data.seq_len 32 -> 64 on resume is allowed and logged"

# a checkpoint that already reached train_steps: nothing to train
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set train_steps=40 \
    --set output_dir="\"$tmpdir/cpu-resumed\"" --resume auto > "$tmpdir/done.log" 2>&1 ||
    { cat "$tmpdir/done.log"; fail "resuming a finished run failed"; }
grep -q "already reaches train_steps 40" "$tmpdir/done.log" || fail "a finished run was not recognized"
echo "ok   resuming a finished run trains nothing: $(grep -m1 'already reaches' "$tmpdir/done.log")"

if ! "$BERTRAIN" version | grep -q "backends:[^)]*opencl"; then
    skip_part "the OpenCL resume (bertrain was built without the OpenCL backend)"
elif ! "$BERTRAIN" train tests/fixtures/base.json $small --set device='"opencl:0:0"' --set train_steps=1 \
        --set output_dir="\"$tmpdir/probe\"" > "$tmpdir/probe.log" 2>&1; then
    skip_part "the OpenCL resume (opencl:0:0 does not work here: $(grep -m1 'bertrain' "$tmpdir/probe.log"))"
else
    resume_exact opencl opencl:0:0 40
fi
finish "resume is bit-exact; shape changes refused, other changes logged"
