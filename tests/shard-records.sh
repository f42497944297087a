#!/bin/sh
# A shard is read and verified in full once, not at every start: the first
# run records the unchanged file (device, inode, size, both times, header
# checksum) with its token counts, and the next run reads only its header
# (the start-up line counts the shards read), with the same held-out
# baseline and the same weights. A byte flipped since, even with the
# modification time set back, is still found before training (exit 2); a
# damaged record is ignored, and BERTRAIN_SHARD_RECORDS=off reads everything.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
export OMP_NUM_THREADS=1 BERTRAIN_CACHE_DIR="$tmpdir/cache"
unset BERTRAIN_SHARD_RECORDS
mkdir "$tmpdir/data"
cp data/demo/train.shard data/demo/valid.shard "$tmpdir/data/"
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set steps_per_print=1 --set train_steps=2 --set data.train=\"$tmpdir/data/train.shard\"
       --set data.valid=\"$tmpdir/data/valid.shard\" --set eval.max_samples=32"
train() { # NAME [ENV...]: exit status in $rc, output in NAME.log
    name=$1
    shift
    # shellcheck disable=SC2086
    env "$@" "$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$tmpdir/$name\"" \
        > "$tmpdir/$name.log" 2>&1
    rc=$?
}
read_line() { grep -o '[0-9]* of 1 shard read and verified, [0-9]* unchanged since verified' "$tmpdir/$1.log"; }
baseline() { grep -o 'baseline_acc [0-9.]*' "$tmpdir/$1.log" | tail -1; }

train first
[ "$rc" -eq 0 ] || { cat "$tmpdir/first.log"; fail "the first run failed"; }
[ "$(read_line first)" = "1 of 1 shard read and verified, 0 unchanged since verified" ] ||
    { grep "^bertrain: data" "$tmpdir/first.log"; fail "the first run did not read its shard"; }
[ "$(ls "$tmpdir/cache"/shard-*.rec | wc -l)" -eq 2 ] || { ls -la "$tmpdir/cache"; fail "no records of the training and validation shards"; }
train second
[ "$rc" -eq 0 ] || { cat "$tmpdir/second.log"; fail "the second run failed"; }
[ "$(read_line second)" = "0 of 1 shard read and verified, 1 unchanged since verified" ] ||
    { grep "^bertrain: data" "$tmpdir/second.log"; fail "the second run read its unchanged shard again"; }
[ "$(baseline first)" = "$(baseline second)" ] && [ -n "$(baseline first)" ] ||
    fail "the recorded counts give another baseline: $(baseline first) then $(baseline second)"
cmp -s "$tmpdir/first/ckpt-00000002/model.safetensors" "$tmpdir/second/ckpt-00000002/model.safetensors" ||
    fail "the run on recorded shards trained other weights"
echo "ok   first run: $(read_line first); second: $(read_line second); $(baseline second) both; same weights (cmp)"

# a flipped byte, the modification time set back: refused before training
shard="$tmpdir/data/train.shard"
touch -r "$shard" "$tmpdir/when"
before=$(stat -c %y "$shard")
printf '\377' | dd of="$shard" bs=1 seek=5000 conv=notrunc 2> /dev/null
touch -r "$tmpdir/when" "$shard"
[ "$(stat -c %y "$shard")" = "$before" ] || fail "could not set the modification time back ($before)"
train flipped
[ "$rc" -eq 2 ] && grep -q "train.shard: payload checksum mismatch (the file is damaged)" "$tmpdir/flipped.log" ||
    { cat "$tmpdir/flipped.log"; fail "a byte flipped under an unchanged modification time was not found (exit $rc)"; }
[ ! -e "$tmpdir/flipped/ckpt-00000001" ] || fail "the damaged shard was trained on"
echo "ok   a flipped byte with the modification time set back: $(grep -o 'train.shard: payload checksum mismatch.*' "$tmpdir/flipped.log")"
cp data/demo/train.shard "$shard"

# a damaged record is ignored; records off read everything
train third
for rec in "$tmpdir/cache"/shard-*.rec; do head -c 100 "$rec" > "$rec.cut" && mv "$rec.cut" "$rec"; done
train damaged
[ "$rc" -eq 0 ] && [ "$(read_line damaged)" = "1 of 1 shard read and verified, 0 unchanged since verified" ] ||
    { cat "$tmpdir/damaged.log"; fail "a damaged record was not ignored"; }
train off BERTRAIN_SHARD_RECORDS=off
[ "$rc" -eq 0 ] && [ "$(read_line off)" = "1 of 1 shard read and verified, 0 unchanged since verified" ] ||
    { cat "$tmpdir/off.log"; fail "BERTRAIN_SHARD_RECORDS=off did not read the shard"; }
echo "PASS: shards are read once and recorded; a changed file is verified again before use"
