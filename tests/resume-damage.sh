#!/bin/sh
# Damaged checkpoints: a truncated, a bit-flipped and a missing file (in each
# kind of file) are found by their checksums, reported as one line naming the
# checkpoint, the file and the problem, and `--resume auto` falls back to the
# previous checkpoint (and still reaches the same weights: cmp). Two damaged
# checkpoints fall back two; none usable starts fresh and says so; an explicit
# `--resume DIR` that is damaged is an error (exit 2) naming the file.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
export OMP_NUM_THREADS=1
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=10 --set train_steps=30 --set checkpoint.interval=10"
base="$tmpdir/base"
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$base\"" > "$tmpdir/base.log" 2>&1 ||
    { cat "$tmpdir/base.log"; fail "base run failed"; }
for s in 10 20 30; do [ -d "$base/ckpt-000000$s" ] || fail "no ckpt-000000$s"; done

flip() { # FILE OFFSET: invert one byte
    b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
    printf "\\$(printf '%03o' $((255 - b)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}

# damage NAME "WHAT TO DO" EXPECTED-REPORT EXPECTED-START
damage() {
    name=$1 how=$2 want=$3 start=$4
    d="$tmpdir/$name"
    cp -r "$base" "$d"
    (cd "$d" && eval "$how") || fail "$name: could not damage"
    # shellcheck disable=SC2086
    "$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$d\"" --resume auto \
        > "$d.log" 2> "$d.err" || { cat "$d.log" "$d.err"; fail "$name: resume failed"; }
    grep -qF "$want" "$d.err" || { cat "$d.err"; fail "$name: no report '$want'"; }
    if [ "$start" = fresh ]; then
        grep -q "^resume: no usable checkpoint in $d; starting from step 0$" "$d.log" ||
            { cat "$d.log"; fail "$name: did not say that it starts fresh"; }
    else
        grep -q "^resume: from $d/ckpt-000000$start (step $start" "$d.log" ||
            { cat "$d.log"; fail "$name: did not fall back to ckpt-000000$start"; }
    fi
    cmp "$base/ckpt-00000030/model.safetensors" "$d/ckpt-00000030/model.safetensors" ||
        fail "$name: the weights after the fallback differ"
    echo "ok   $name: $(head -1 "$d.err" | sed "s|$tmpdir/||")"
    echo "     -> $(grep -m1 '^resume: ' "$d.log" | sed "s|$tmpdir/||")"
}

damage truncated-model 'truncate -s 4096 ckpt-00000030/model.safetensors' \
    "ckpt-00000030: model.safetensors: truncated (4096 of" 20
damage flipped-optim 'flip ckpt-00000030/optim.bin 70000' \
    "ckpt-00000030: optim.bin: checksum mismatch" 20
damage flipped-model 'flip ckpt-00000030/model.safetensors 1000000' \
    "ckpt-00000030: model.safetensors: checksum mismatch" 20
damage missing-state 'rm ckpt-00000030/state.json' "ckpt-00000030: state.json: missing" 20
damage missing-optim 'rm ckpt-00000030/optim.bin' "ckpt-00000030: optim.bin: missing" 20
damage flipped-state 'flip ckpt-00000030/state.json 40' "ckpt-00000030: state.json: checksum mismatch" 20
damage truncated-vocab 'truncate -s 100 ckpt-00000030/vocab.txt' "ckpt-00000030: vocab.txt: truncated (100 of" 20
damage two-damaged 'rm ckpt-00000030/model.safetensors && truncate -s 10 ckpt-00000020/optim.bin' \
    "ckpt-00000020: optim.bin: truncated (10 of" 10
damage all-damaged 'for c in ckpt-*; do rm "$c/model.safetensors"; done' \
    "ckpt-00000010: model.safetensors: missing" fresh
[ "$(wc -l < "$tmpdir/all-damaged.err")" -eq 3 ] || fail "all-damaged: expected one report per checkpoint"

# an explicit --resume DIR that is damaged is an error naming the file
cp -r "$base" "$tmpdir/explicit"
flip "$tmpdir/explicit/ckpt-00000020/model.safetensors" 500000
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$tmpdir/explicit\"" \
    --resume "$tmpdir/explicit/ckpt-00000020" > "$tmpdir/explicit.log" 2> "$tmpdir/explicit.err"
rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l < "$tmpdir/explicit.err")" -eq 1 ] &&
    grep -q "ckpt-00000020: model.safetensors: checksum mismatch" "$tmpdir/explicit.err" ||
    { cat "$tmpdir/explicit.err"; fail "explicit damaged --resume: exit $rc"; }
echo "ok   explicit --resume of a damaged checkpoint: exit 2: $(sed "s|$tmpdir/||" "$tmpdir/explicit.err")"
echo "PASS: damaged checkpoints are detected, named, and skipped"
