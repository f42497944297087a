#!/bin/sh
# Every command that writes (prep --out, vocab --out, train output_dir, export,
# import) creates missing parent directories as mkdir -p does; a path that
# exists but is a file, or a directory it cannot write to, is one line naming
# it and exit 2, before any work and without touching the file.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
vocab=data/demo/vocab.txt text=data/corpus/austen-persuasion.txt
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=1 --set train_steps=1"

# missing parents are created
"$BERTRAIN" prep --vocab $vocab --lowercase --out "$tmpdir/new/a/shards" $text > "$tmpdir/prep.log" 2>&1 ||
    { cat "$tmpdir/prep.log"; fail "prep into a new nested directory"; }
[ -s "$tmpdir/new/a/shards/train.shard" ] || fail "prep wrote no train.shard under new/a/shards"
"$BERTRAIN" vocab --size 300 --out "$tmpdir/new/b/vocab.txt" $text > "$tmpdir/vocab.log" 2>&1 ||
    { cat "$tmpdir/vocab.log"; fail "vocab into a new nested directory"; }
[ "$(wc -l < "$tmpdir/new/b/vocab.txt")" -eq 300 ] || fail "vocab wrote no 300-token vocab.txt"
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$tmpdir/new/c/run\"" > "$tmpdir/train.log" 2>&1 ||
    { cat "$tmpdir/train.log"; fail "train into a new nested output_dir"; }
[ -f "$tmpdir/new/c/run/ckpt-00000001/state.json" ] || fail "train wrote no checkpoint under new/c/run"
"$BERTRAIN" export "$tmpdir/new/c/run" "$tmpdir/new/d/hf" > "$tmpdir/export.log" 2>&1 ||
    { cat "$tmpdir/export.log"; fail "export into a new nested directory"; }
[ -s "$tmpdir/new/d/hf/model.safetensors" ] || fail "export wrote no model.safetensors under new/d/hf"
"$BERTRAIN" import "$tmpdir/new/d/hf" "$tmpdir/new/e/ckpt" > "$tmpdir/import.log" 2>&1 ||
    { cat "$tmpdir/import.log"; fail "import into a new nested directory"; }
[ -f "$tmpdir/new/e/ckpt/state.json" ] || fail "import wrote no checkpoint under new/e/ckpt"
echo "ok   prep, vocab, train, export and import create missing parent directories"

# expect_refusal NAME WHAT COMMAND...: exit 2, one line naming WHAT, the file untouched
n_refusals=0
expect_refusal() {
    name=$1 what=$2
    shift 2
    n_refusals=$((n_refusals + 1))
    log="$tmpdir/refusal-$n_refusals"
    "$@" > "$log.out" 2> "$log.err"
    rc=$?
    [ "$rc" -eq 2 ] || { cat "$log.out" "$log.err"; fail "$name: exit $rc, not 2"; }
    [ "$(wc -l < "$log.err")" -eq 1 ] && grep -q "$what" "$log.err" ||
        { cat "$log.err"; fail "$name: not one line naming $what"; }
    echo "ok   $name: $(sed "s|$tmpdir/||g" "$log.err")"
}
echo "a file, not bertrain's" > "$tmpdir/file"
cp "$tmpdir/file" "$tmpdir/file.orig"
expect_refusal "prep --out FILE" "file: exists and is not a directory" \
    "$BERTRAIN" prep --vocab $vocab --lowercase --out "$tmpdir/file" $text
expect_refusal "prep --out FILE/sub" "file is a file, not a directory" \
    "$BERTRAIN" prep --vocab $vocab --lowercase --out "$tmpdir/file/sub" $text
expect_refusal "vocab --out FILE/v.txt" "file is a file, not a directory" \
    "$BERTRAIN" vocab --size 300 --out "$tmpdir/file/v.txt" $text
expect_refusal "vocab --out DIR" "is a directory" \
    "$BERTRAIN" vocab --size 300 --out "$tmpdir/new" $text
# shellcheck disable=SC2086
expect_refusal "train output_dir FILE" "output_dir .*file: exists and is not a directory" \
    "$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$tmpdir/file\""
expect_refusal "export to FILE" "file: exists and is not a directory" \
    "$BERTRAIN" export "$tmpdir/new/c/run" "$tmpdir/file"
expect_refusal "import to FILE" "file: exists and is not a directory" \
    "$BERTRAIN" import "$tmpdir/new/d/hf" "$tmpdir/file"
expect_refusal "import to FILE/ckpt" "file is a file, not a directory" \
    "$BERTRAIN" import "$tmpdir/new/d/hf" "$tmpdir/file/ckpt"
cmp -s "$tmpdir/file" "$tmpdir/file.orig" || fail "a refused command changed the file in the way"

# a directory without write permission (root may write anywhere: run as nobody)
ro="$tmpdir/ro"
mkdir "$ro" && chmod 555 "$ro"
as_user=""
if [ "$(id -u)" -eq 0 ]; then
    if command -v setpriv > /dev/null 2>&1; then
        as_user="setpriv --reuid=65534 --regid=65534 --clear-groups"
        chmod 755 "$tmpdir" # nobody needs to reach the copies below
    else
        as_user=none
    fi
fi
if [ "$as_user" = none ]; then
    skip_part "an unwritable directory (running as root without setpriv, which every directory is writable to)"
else
    cp "$BERTRAIN" "$tmpdir/bertrain" && cp $vocab "$tmpdir/vocab.txt" && cp $text "$tmpdir/text.txt" &&
        chmod 755 "$tmpdir/bertrain" && chmod 644 "$tmpdir/vocab.txt" "$tmpdir/text.txt" ||
        fail "cannot copy bertrain and its inputs"
    expect_refusal "prep --out UNWRITABLE" "ro: directory not writable" \
        $as_user "$tmpdir/bertrain" prep --vocab "$tmpdir/vocab.txt" --out "$ro" "$tmpdir/text.txt"
    expect_refusal "prep --out UNWRITABLE/sub" "ro/sub: cannot create directory" \
        $as_user "$tmpdir/bertrain" prep --vocab "$tmpdir/vocab.txt" --out "$ro/sub" "$tmpdir/text.txt"
    expect_refusal "vocab --out UNWRITABLE/v.txt" "directory .*ro not writable" \
        $as_user "$tmpdir/bertrain" vocab --size 300 --out "$ro/v.txt" "$tmpdir/text.txt"
    [ -z "$(ls -A "$ro")" ] || fail "something was written into the unwritable directory"
fi
finish "output paths: parents created; files in the way and unwritable directories refused with one line, exit 2"
