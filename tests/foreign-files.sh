#!/bin/sh
# bertrain never deletes, replaces or writes into what it did not write
# (round 3; nothing-lost.sh has the rounds before):
# - rotation: a checkpoint holding a file bertrain did not write is kept,
#   with a warning naming the file, and so is one that a resumed run would
#   replace; train, export, import, prep and vocab refuse an output inside a
#   checkpoint;
# - prep refuses to replace a train.shard, valid.shard or train/ shard that
#   is not an earlier prep's shard, and replaces its own;
# - export marks a complete export; import refuses an export without the
#   mark (one killed before it), with a file it lists missing, or with its
#   weights or vocab changed; a killed import's leftover is removed by the
#   next import, unless its writer still holds it or a foreign file is in it;
# - the run lock survives its file being deleted: a second run is refused and
#   the first writes the lock file again;
# - output_dir, prep --out and the outputs of export and import may not be
#   "/", a system directory or the home directory itself.
# Each refusal: exit 2 and one line; what was there is unchanged.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
need_test_build
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=1"
# shellcheck disable=SC2086
train() { "$BERTRAIN" train tests/fixtures/base.json $small "$@"; }
# A listing of every file under $1 with its checksum, for "unchanged".
tree_sum() { (cd "$1" && find . -type f ! -name .bertrain.lock -exec md5sum {} + | sort); }

rotation_keeps_foreign() {
    A=$tmpdir/rot
    train --set train_steps=2 --set checkpoint.interval=1 --set checkpoint.keep=1 \
        --set output_dir="\"$A\"" > "$tmpdir/rot.log" 2>&1 || { cat "$tmpdir/rot.log"; fail "run rot failed"; }
    c=$A/ckpt-00000002
    expect_refusal "train inside a checkpoint" "output_dir $c/B is inside the bertrain checkpoint .*ckpt-00000002: train never writes into a checkpoint" \
        train --set train_steps=1 --set output_dir="\"$c/B\""
    expect_refusal "export inside a checkpoint" "$c/my-export is inside the bertrain checkpoint" \
        "$BERTRAIN" export "$c" "$c/my-export"
    expect_refusal "import inside a checkpoint" "$c/imp is inside the bertrain checkpoint" \
        "$BERTRAIN" import "$tmpdir/nowhere" "$c/imp"
    expect_refusal "prep inside a checkpoint" "prep: --out $c/p/q is inside the bertrain checkpoint" \
        "$BERTRAIN" prep --vocab data/demo/vocab.txt --out "$c/p/q" data/corpus/austen-persuasion.txt
    expect_refusal "vocab inside a checkpoint" "$c/v.txt is inside the bertrain checkpoint" \
        "$BERTRAIN" vocab --size 100 --out "$c/v.txt" data/corpus/austen-persuasion.txt
    [ "$(ls "$c")" = "$(printf 'model.safetensors\noptim.bin\nstate.json\nvocab.txt')" ] ||
        { ls -R "$c"; fail "a refused command wrote into the checkpoint"; }
    echo "my notes" > "$c/notes.txt"
    before=$(tree_sum "$c")
    train --set train_steps=4 --set checkpoint.interval=1 --set checkpoint.keep=1 \
        --set output_dir="\"$A\"" --resume auto > "$tmpdir/rot2.log" 2>&1 || { cat "$tmpdir/rot2.log"; fail "resuming rot failed"; }
    [ "$(tree_sum "$c")" = "$before" ] || { ls "$c"; fail "rotation changed the checkpoint holding notes.txt"; }
    grep -q "warning: $c holds notes.txt, which bertrain did not write: not removing it (checkpoint.keep)" "$tmpdir/rot2.log" ||
        { cat "$tmpdir/rot2.log"; fail "no warning naming notes.txt"; }
    [ ! -e "$A/ckpt-00000003" ] && [ -f "$A/ckpt-00000004/state.json" ] ||
        { ls "$A"; fail "rotation did not keep exactly the newest of its own checkpoints"; }
    echo "ok   rotation keeps a checkpoint holding notes.txt (warned); outputs inside a checkpoint refused"
}

replace_keeps_foreign() {
    A=$tmpdir/rep
    train --set train_steps=4 --set checkpoint.interval=2 --set checkpoint.keep=5 \
        --set output_dir="\"$A\"" > "$tmpdir/rep.log" 2>&1 || { cat "$tmpdir/rep.log"; fail "run rep failed"; }
    echo "my notes" > "$A/ckpt-00000004/notes.txt"
    before=$(tree_sum "$A/ckpt-00000004")
    train --set train_steps=4 --set checkpoint.interval=2 --set checkpoint.keep=5 \
        --set output_dir="\"$A\"" --resume "$A/ckpt-00000002" > "$tmpdir/rep2.log" 2>&1
    rc=$?
    [ $rc -eq 1 ] || { cat "$tmpdir/rep2.log"; fail "exit $rc, not 1, when the last checkpoint could not be written"; }
    grep -q "ckpt-00000004 holds notes.txt, which bertrain did not write: not replacing it" "$tmpdir/rep2.log" ||
        { cat "$tmpdir/rep2.log"; fail "the refusal to replace ckpt-00000004 was not said"; }
    [ "$(tree_sum "$A/ckpt-00000004")" = "$before" ] || fail "the checkpoint holding notes.txt was replaced"
    echo "ok   a checkpoint holding notes.txt is not replaced by a resumed run (exit 1, said)"
}

rotation_keeps_written() {
    R=$tmpdir/branch
    train --set train_steps=4 --set checkpoint.interval=2 --set checkpoint.keep=2 \
        --set output_dir="\"$R\"" > "$tmpdir/branch.log" 2>&1 || { cat "$tmpdir/branch.log"; fail "run branch failed"; }
    # resumed from step 2 with checkpoint.keep 1: the checkpoint it writes (step 3) is the one kept
    train --set train_steps=3 --set checkpoint.interval=1 --set checkpoint.keep=1 \
        --set output_dir="\"$R\"" --resume "$R/ckpt-00000002" > "$tmpdir/branch2.log" 2>&1 ||
        { cat "$tmpdir/branch2.log"; fail "resuming branch from step 2 failed"; }
    [ -f "$R/ckpt-00000003/state.json" ] && [ "$(cat "$R/latest")" = "ckpt-00000003" ] ||
        { ls "$R"; cat "$R/latest"; fail "rotation deleted the checkpoint just written (latest names ckpt-00000003)"; }
    [ "$(ls "$R" | grep -c '^ckpt-')" -eq 1 ] || { ls "$R"; fail "checkpoint.keep 1 kept more than one"; }
    echo "ok   a run resumed from an earlier step keeps the checkpoint it writes, not the lineage's later step"
}

prep_keeps_user_files() {
    P=$tmpdir/prep
    for f in train.shard valid.shard train/train-00000.shard; do
        rm -rf "$P" && mkdir -p "$P/train" && echo "my notes" > "$P/$f"
        expect_refusal "prep over $f" "$P/$f exists and is not a bertrain shard: prep never replaces a file it did not write" \
            "$BERTRAIN" prep --vocab data/demo/vocab.txt --lowercase --out "$P" data/corpus/austen-persuasion.txt
        [ "$(cat "$P/$f")" = "my notes" ] || fail "prep changed $f"
    done
    for i in 1 2; do # the second run replaces the first's shards
        "$BERTRAIN" prep --vocab data/demo/vocab.txt --lowercase --valid-fraction 0.1 --out "$tmpdir/q" \
            data/corpus/austen-persuasion.txt > "$tmpdir/q$i.log" 2>&1 || { cat "$tmpdir/q$i.log"; fail "prep into q ($i) failed"; }
        md5sum "$tmpdir/q/train.shard" "$tmpdir/q/valid.shard" > "$tmpdir/q$i.sum" || fail "prep into q ($i) wrote no shards"
    done
    cmp "$tmpdir/q1.sum" "$tmpdir/q2.sum" || fail "prep's shards differ between two runs"
    echo "ok   prep refuses a foreign train.shard, valid.shard or train/ shard, and replaces its own"
}

# A one-step run ex and its export hf, made once for the cases that need them.
need_export() {
    [ -f "$tmpdir/hf/model.safetensors" ] && return 0
    train --set train_steps=1 --set output_dir="\"$tmpdir/ex\"" > "$tmpdir/ex.log" 2>&1 || fail "run ex failed"
    "$BERTRAIN" export "$tmpdir/ex" "$tmpdir/hf" > "$tmpdir/export.log" 2>&1 || { cat "$tmpdir/export.log"; fail "export failed"; }
}

export_marked() {
    need_export
    [ -f "$tmpdir/hf/bertrain_export.json" ] || fail "the export has no bertrain_export.json"
    # what an export killed before its last file leaves: everything but README.md and the mark
    cp -r "$tmpdir/hf" "$tmpdir/cut" && rm "$tmpdir/cut/README.md" "$tmpdir/cut/bertrain_export.json"
    expect_refusal "import of an interrupted export" "cut is an incomplete bertrain export: it has no readable bertrain_export.json" \
        "$BERTRAIN" import "$tmpdir/cut" "$tmpdir/imp-cut"
    [ ! -e "$tmpdir/imp-cut" ] || fail "the refused import wrote imp-cut"
    # killed just after its weights: model.safetensors alone
    mkdir "$tmpdir/weights" && cp "$tmpdir/hf/model.safetensors" "$tmpdir/weights/"
    expect_refusal "import of an export killed after its weights" "weights is an incomplete bertrain export" \
        "$BERTRAIN" import "$tmpdir/weights" "$tmpdir/imp-weights"
    cp -r "$tmpdir/hf" "$tmpdir/nocard" && rm "$tmpdir/nocard/README.md"
    expect_refusal "import of an export missing a file" "nocard/README.md: missing from the bertrain export" \
        "$BERTRAIN" import "$tmpdir/nocard" "$tmpdir/imp-nocard"
    cp -r "$tmpdir/hf" "$tmpdir/vocab2" && sed -i '100s/.*/zzz/' "$tmpdir/vocab2/vocab.txt"
    expect_refusal "import of an export with another vocab" "vocab2/vocab.txt: not the file the export wrote" \
        "$BERTRAIN" import "$tmpdir/vocab2" "$tmpdir/imp-vocab2"
    "$BERTRAIN" import "$tmpdir/hf" "$tmpdir/imp" > "$tmpdir/import.log" 2>&1 || { cat "$tmpdir/import.log"; fail "import of the export failed"; }
    # exports killed at random moments: whatever is left, import never takes a partial one
    for delay in 0.01 0.03 0.05 0.08 0.12; do
        rm -rf "$tmpdir/k"
        "$BERTRAIN" export "$tmpdir/ex" "$tmpdir/k" > /dev/null 2>&1 &
        pid=$!
        sleep $delay
        kill -9 $pid 2> /dev/null
        wait $pid 2> /dev/null
        [ -d "$tmpdir/k" ] || continue
        if [ -f "$tmpdir/k/bertrain_export.json" ]; then
            "$BERTRAIN" import "$tmpdir/k" "$tmpdir/k-imp-$delay" > /dev/null 2>&1 || fail "a complete export (killed after $delay s) was refused"
        elif [ ! -f "$tmpdir/k/model.safetensors" ]; then # killed before its weights were in place
            expect_refusal "import of an export killed after $delay s, before its weights" "k/model.safetensors: " \
                "$BERTRAIN" import "$tmpdir/k" "$tmpdir/k-imp-$delay"
        else
            expect_refusal "import of an export killed after $delay s" "incomplete bertrain export" \
                "$BERTRAIN" import "$tmpdir/k" "$tmpdir/k-imp-$delay"
        fi
    done
    echo "ok   import refuses an export without its mark, missing a file or with another vocab; killed exports are never taken"
}

killed_import() {
    need_export
    # what an import killed in its write leaves: OUT.tmp-PID with some of a checkpoint's files
    mkdir -p "$tmpdir/i1.tmp-99999999" && cp "$tmpdir/hf/model.safetensors" "$tmpdir/i1.tmp-99999999/"
    "$BERTRAIN" import "$tmpdir/hf" "$tmpdir/i1" > "$tmpdir/i1.log" 2>&1 || { cat "$tmpdir/i1.log"; fail "import i1 failed"; }
    [ ! -e "$tmpdir/i1.tmp-99999999" ] || fail "the killed import's leftover i1.tmp-99999999 is still there"
    grep -q "removed .*i1.tmp-99999999, left by an interrupted write" "$tmpdir/i1.log" || { cat "$tmpdir/i1.log"; fail "the removal was not said"; }
    # a leftover holding a foreign file stays; one whose writer holds it stays
    mkdir -p "$tmpdir/i2.tmp-99999998" "$tmpdir/i2.tmp-99999997" && echo "my notes" > "$tmpdir/i2.tmp-99999998/notes.txt"
    cp "$tmpdir/hf/model.safetensors" "$tmpdir/i2.tmp-99999997/"
    flock "$tmpdir/i2.tmp-99999997" sleep 30 &
    holder=$!
    n=0 # until the holder has its lock
    while flock -n "$tmpdir/i2.tmp-99999997" true; do
        n=$((n + 1))
        [ $n -lt 600 ] || { kill $holder; fail "flock never took i2.tmp-99999997"; }
        sleep 0.05
    done
    "$BERTRAIN" import "$tmpdir/hf" "$tmpdir/i2" > "$tmpdir/i2.log" 2>&1 || { cat "$tmpdir/i2.log"; kill $holder; fail "import i2 failed"; }
    kill $holder 2> /dev/null
    [ "$(cat "$tmpdir/i2.tmp-99999998/notes.txt")" = "my notes" ] || fail "a leftover holding notes.txt was removed"
    grep -q "i2.tmp-99999998 holds notes.txt, which bertrain did not write" "$tmpdir/i2.log" || { cat "$tmpdir/i2.log"; fail "no warning naming notes.txt"; }
    [ -f "$tmpdir/i2.tmp-99999997/model.safetensors" ] || fail "a leftover its writer still holds was removed"
    echo "ok   a killed import's leftover goes with the next import; one holding notes.txt or still held stays"
}

lock_file_deleted() {
    C=$tmpdir/lock
    # shellcheck disable=SC2086
    BERTRAIN_TEST_CKPT="begin,2,wait:$tmpdir/lock-go" "$BERTRAIN_T" train tests/fixtures/base.json $small --set train_steps=4 \
        --set checkpoint.interval=2 --set output_dir="\"$C\"" > "$tmpdir/lock.log" 2>&1 &
    first=$!
    wait_for_line "$tmpdir/lock.log" "test hook: checkpoint 2" $first "the first run never reached its checkpoint"
    rm "$C/.bertrain.lock"
    (expect_refusal "a second run after the lock file was deleted" "lock is in use by another bertrain run" \
        train --set train_steps=4 --set output_dir="\"$C\"" --resume auto)
    refused=$?
    touch "$tmpdir/lock-go" # the first run goes on from its checkpoint 2
    [ $refused -eq 0 ] || { wait $first; fail "the second run was not refused"; }
    wait $first || { cat "$tmpdir/lock.log"; fail "the first run failed"; }
    grep -q "pid $first" "$C/.bertrain.lock" || fail "the first run did not write its lock file again"
    echo "ok   with its lock file deleted the run still holds output_dir: a second run is refused, the file comes back"
}

own_directories() {
    need_export
    mkdir -p "$tmpdir/home"
    expect_refusal "output_dir /" "output_dir / is the root directory \(/\)" \
        train --set train_steps=1 --set data.train='"no-such.shard"' --set output_dir='"/"'
    expect_refusal "output_dir /usr/share" "output_dir /usr/share is a system directory" \
        train --set train_steps=1 --set data.train='"no-such.shard"' --set output_dir='"/usr/share"'
    expect_refusal "output_dir the home directory" "output_dir $tmpdir/home/ is your home directory" \
        env HOME="$tmpdir/home" "$BERTRAIN" train tests/fixtures/base.json $small --set train_steps=1 \
        --set output_dir="\"$tmpdir/home/\""
    [ ! -e "$tmpdir/home/.bertrain.lock" ] && [ ! -e "$tmpdir/home/metrics.jsonl" ] ||
        fail "a refused run wrote into the home directory"
    expect_refusal "prep --out /" "prep: --out / is the root directory" \
        "$BERTRAIN" prep --vocab data/demo/vocab.txt --out / data/corpus/austen-persuasion.txt
    expect_refusal "export into the home directory" "OUT_DIR $tmpdir/home is your home directory" \
        env HOME="$tmpdir/home" "$BERTRAIN" export "$tmpdir/ex" "$tmpdir/home"
    expect_refusal "import into /tmp" "OUT_CKPT /tmp is a system directory" \
        "$BERTRAIN" import "$tmpdir/hf" /tmp
    echo "ok   /, a system directory and the home directory are refused as outputs"
}

command -v flock > /dev/null 2>&1 || fail "no flock (util-linux) to hold a directory as a live writer does"
run_case rotation rotation_keeps_foreign
run_case replace replace_keeps_foreign
run_case rotation-newest rotation_keeps_written
run_case prep prep_keeps_user_files
run_case export-mark export_marked
run_case killed-import killed_import
run_case lock-file lock_file_deleted
run_case own-dirs own_directories
cases_done "rotation, replacement, prep, export and import leave what bertrain did not write; the lock survives its file; no output into /, system or home directories"
