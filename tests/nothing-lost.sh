#!/bin/sh
# Nothing lost: bertrain never deletes or overwrites what it did not write.
# - import into a non-empty directory (the source model, a README) refuses;
# - a fresh train into another run's output_dir refuses and changes nothing,
#   and --resume auto then continues that run;
# - keep-last-K deletes only the current lineage's checkpoints, and a run
#   never replaces another run's checkpoint;
# - two runs on one output_dir: the second refuses, naming host and PID; a
#   killed run's lock frees itself;
# - export onto the checkpoint itself, into a run, or into a non-empty
#   directory refuses.
# Each refusal is one line and exit 2, and the tree is byte-for-byte unchanged.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
need_test_build
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=1"

# A listing of every file under $1 with its checksum, for "unchanged".
tree_sum() { (cd "$1" && find . -type f ! -name .bertrain.lock -exec md5sum {} + | sort); }


# shellcheck disable=SC2086
train() { "$BERTRAIN" train tests/fixtures/base.json $small "$@"; }

# run A: checkpoints at steps 4 and 8
train --set train_steps=8 --set checkpoint.interval=4 --set checkpoint.keep=5 --set seed=7 \
    --set output_dir="\"$tmpdir/A\"" > "$tmpdir/A.log" 2>&1 || { cat "$tmpdir/A.log"; fail "run A failed"; }
"$BERTRAIN" export "$tmpdir/A" "$tmpdir/hf" > "$tmpdir/export.log" 2>&1 ||
    { cat "$tmpdir/export.log"; fail "export of run A failed"; }

# 1. import never writes over a non-empty directory: the source model, a README
before=$(tree_sum "$tmpdir/hf")
expect_refusal "import onto its source" "hf is not empty .*import writes only into a new or empty" \
    "$BERTRAIN" import "$tmpdir/hf" "$tmpdir/hf"
[ "$(tree_sum "$tmpdir/hf")" = "$before" ] || fail "import onto its source changed it"
mkdir -p "$tmpdir/mine" && echo "my notes" > "$tmpdir/mine/README"
expect_refusal "import into a non-empty dir" "mine is not empty \(1 entry, such as README\)" \
    "$BERTRAIN" import "$tmpdir/hf" "$tmpdir/mine"
[ "$(cat "$tmpdir/mine/README")" = "my notes" ] || fail "import touched mine/README"
expect_refusal "import into a run" "A holds a training run \(ckpt-00000008\)" \
    "$BERTRAIN" import "$tmpdir/hf" "$tmpdir/A"
mkdir -p "$tmpdir/empty"
"$BERTRAIN" import "$tmpdir/hf" "$tmpdir/empty" > "$tmpdir/import.log" 2>&1 ||
    { cat "$tmpdir/import.log"; fail "import into an empty directory failed"; }
echo "ok   import refuses the source model, a non-empty directory and a run; an empty one works"

# 2. a fresh run into run A's directory refuses and changes nothing
before=$(tree_sum "$tmpdir/A")
expect_refusal "fresh train over run A" \
    "A holds another run's checkpoints \(2: steps 4 to 8, seed 7\): continue it with --resume auto, or give this run a new output_dir" \
    train --set train_steps=4 --set checkpoint.interval=2 --set output_dir="\"$tmpdir/A\""
[ "$(tree_sum "$tmpdir/A")" = "$before" ] || fail "the refused run changed run A's directory"
train --set train_steps=12 --set checkpoint.interval=4 --set checkpoint.keep=5 --set seed=7 \
    --set output_dir="\"$tmpdir/A\"" --resume auto > "$tmpdir/A2.log" 2>&1 ||
    { cat "$tmpdir/A2.log"; fail "--resume auto of run A failed"; }
grep -q "resume: from .*A/ckpt-00000008 (step 8" "$tmpdir/A2.log" || { cat "$tmpdir/A2.log"; fail "--resume auto did not continue run A"; }
echo "ok   a fresh run refuses another run's output_dir (steps, seed, the ways on); --resume auto continues it"

# keep-last-K deletes only this lineage's checkpoints; another run's are never replaced
train --set train_steps=1 --set output_dir="\"$tmpdir/B\"" > "$tmpdir/B.log" 2>&1 ||
    { cat "$tmpdir/B.log"; fail "run B failed"; }
train --set train_steps=3 --set checkpoint.interval=1 --set checkpoint.keep=1 \
    --set output_dir="\"$tmpdir/A\"" --resume "$tmpdir/B/ckpt-00000001" > "$tmpdir/B2.log" 2>&1 ||
    { cat "$tmpdir/B2.log"; fail "run B continued into A's directory failed"; }
for s in 00000004 00000008 00000012; do
    [ -f "$tmpdir/A/ckpt-$s/state.json" ] || fail "keep-last-K of run B deleted run A's ckpt-$s"
done
[ -f "$tmpdir/A/ckpt-00000003/state.json" ] || fail "run B's newest checkpoint is missing"
[ ! -d "$tmpdir/A/ckpt-00000002" ] || fail "keep-last-K (1) kept run B's older ckpt-00000002"
a4=$(tree_sum "$tmpdir/A/ckpt-00000004")
train --set train_steps=4 --set checkpoint.interval=1 --set checkpoint.keep=1 \
    --set output_dir="\"$tmpdir/A\"" --resume "$tmpdir/A/ckpt-00000003" > "$tmpdir/B3.log" 2>&1
grep -q "ckpt-00000004 belongs to another run" "$tmpdir/B3.log" || { cat "$tmpdir/B3.log"; fail "run B replaced run A's ckpt-00000004"; }
[ "$(tree_sum "$tmpdir/A/ckpt-00000004")" = "$a4" ] || fail "run A's ckpt-00000004 changed"
echo "ok   keep-last-K deletes only its own lineage; another run's checkpoint is never replaced"

# 3. one run per output directory; a killed run's lock frees itself
# shellcheck disable=SC2086
BERTRAIN_TEST_CKPT="begin,2,pause:30" "$BERTRAIN_T" train tests/fixtures/base.json $small --set train_steps=3 \
    --set checkpoint.interval=2 --set output_dir="\"$tmpdir/C\"" > "$tmpdir/C.log" 2>&1 &
first=$!
wait_for_line "$tmpdir/C.log" "test hook: checkpoint 2" $first "run C never reached its checkpoint"
expect_refusal "a second run on C" "C is in use by another bertrain run \(host .*, pid $first; lock .*\.bertrain\.lock\): one run per output_dir" \
    train --set train_steps=3 --set output_dir="\"$tmpdir/C\"" --resume auto
[ -d "$tmpdir/C/ckpt-00000002.tmp-$first" ] || fail "the second run deleted the first's checkpoint in progress"
kill -9 $first; wait $first 2>/dev/null
train --set train_steps=3 --set output_dir="\"$tmpdir/C\"" --resume auto > "$tmpdir/C2.log" 2>&1 ||
    { cat "$tmpdir/C2.log"; fail "after a killed run, --resume auto did not start"; }
[ ! -d "$tmpdir/C/ckpt-00000002.tmp-$first" ] || fail "the killed run's leftover was not cleaned up"
echo "ok   a second run on one output_dir refuses (host, PID); a killed run's lock frees itself"

# 4. export never writes onto a checkpoint, into a run, or into a non-empty directory
before=$(tree_sum "$tmpdir/A")
expect_refusal "export onto the checkpoint" "ckpt-00000012 is a bertrain checkpoint: export never writes into one" \
    "$BERTRAIN" export "$tmpdir/A/ckpt-00000012" "$tmpdir/A/ckpt-00000012"
expect_refusal "export into the run" "A holds a training run .*export never writes into one" \
    "$BERTRAIN" export "$tmpdir/A/ckpt-00000012" "$tmpdir/A"
expect_refusal "export into a non-empty dir" "mine is not empty" \
    "$BERTRAIN" export "$tmpdir/A/ckpt-00000012" "$tmpdir/mine"
[ "$(tree_sum "$tmpdir/A")" = "$before" ] || fail "a refused export changed run A"
[ "$(cat "$tmpdir/mine/README")" = "my notes" ] || fail "export touched mine/README"
echo "ok   export refuses the checkpoint itself, a run and a non-empty directory"
echo "PASS: nothing bertrain did not write is deleted or overwritten; one run per output_dir"
