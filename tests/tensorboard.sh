#!/bin/sh
# metrics.tensorboard: the TensorBoard event files hold every number of
# metrics.jsonl, read back with TensorBoard's own readers (the tensorboard
# package; tests/python/tb_check.py): each step once per tag, equal to
# metrics.jsonl's value rounded to float32. A 12-step run (checkpoint every
# 4 steps, evaluation every 3) is killed as its checkpoint of step 8 begins
# (BERTRAIN_TEST_CKPT), after the records of steps 5-8 (an evaluation among
# them), past its checkpoint at step 4; a torn record is added to the end of
# its event file and a file bertrain did not write is put beside it.
# `--resume auto` must leave each step once (the killed run's events past
# step 4 cut away, the torn record too), equal to the final metrics.jsonl,
# and the other file untouched. Under a file size limit (ulimit -f, SIGXFSZ ignored, as a full
# disk) the event writes that fail are warned about naming the event file
# (metrics.on_error "warn") and cut back: the file holds whole records only.
# A two-rank run (MPI) writes one file, with rank<i>/compute_s and the rest.
# SKIP when the build has no event writer or
# no python has the tensorboard package (scripts/deps.sh test installs it).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
need_test_build
export OMP_NUM_THREADS=1
find_python tensorboard || skip "no python with the tensorboard package (scripts/deps.sh test)"
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set steps_per_print=1 --set eval.interval=3 --set eval.max_samples=16
       --set train_steps=12 --set checkpoint.interval=4 --set metrics.tensorboard=true"
out="$tmpdir/run"

# the killed run: SIGKILL as the checkpoint of step 8 begins, past the one of step 4
# shellcheck disable=SC2086
BERTRAIN_TEST_CKPT="begin,8,kill" "$BERTRAIN_T" train tests/fixtures/base.json $small \
    --set output_dir="\"$out\"" > "$tmpdir/killed.log" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "built without the TensorBoard event writer" "$tmpdir/killed.log"; then
    skip "$(cat "$tmpdir/killed.log")"
fi
[ "$rc" -eq 137 ] || { cat "$tmpdir/killed.log"; fail "the run to be killed at its checkpoint of step 8: exit $rc, not 137"; }
if [ ! -d "$out/ckpt-00000004" ] || [ -d "$out/ckpt-00000008" ]; then
    fail "the killed run's last checkpoint is not step 4"
fi
"$PY" tests/python/tb_check.py "$out/metrics.jsonl" "$out" 4 ||
    fail "the killed run's events do not match its metrics.jsonl, or stop at its checkpoint"

# a record cut short by the kill (the start of one), and a file bertrain did not write
set -- "$out"/events.out.tfevents.*.bertrain
[ $# -eq 1 ] || fail "the killed run left $# event files, not 1"
head -c 30 "$1" > "$tmpdir/torn"
cat "$tmpdir/torn" >> "$1"
cp "$1" "$out/events.out.tfevents.1.elsewhere"
cp "$1" "$tmpdir/foreign.copy"

# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$out\"" --resume auto \
    > "$tmpdir/resumed.log" 2>&1 || { cat "$tmpdir/resumed.log"; fail "the resumed run failed"; }
grep -q "^resume: from .*ckpt-00000004" "$tmpdir/resumed.log" || fail "the run did not resume from step 4"
cmp "$out/events.out.tfevents.1.elsewhere" "$tmpdir/foreign.copy" ||
    fail "the resume changed an event file bertrain did not write"
rm "$out/events.out.tfevents.1.elsewhere" # TensorBoard's directory reader would read it too
set -- "$out"/events.out.tfevents.*.bertrain
[ $# -eq 2 ] || fail "$# event files after the resume, wanted 2 (one per run segment)"
"$PY" tests/python/tb_check.py "$out/metrics.jsonl" "$out" ||
    fail "after the resume, the events do not hold each step of metrics.jsonl once"
[ "$(grep -c '"loss"' "$out/metrics.jsonl")" -eq 12 ] || fail "metrics.jsonl does not have 12 steps"
# writes that fail: warned about, naming the file, and cut back to whole records
full="$tmpdir/full"
# shellcheck disable=SC2086
(trap '' XFSZ; ulimit -f 2; export PMIX_MCA_gds=hash; "$BERTRAIN" train tests/fixtures/base.json $small \
    --set data.valid='""' --set checkpoint.interval=0 --set metrics.on_error='"warn"' \
    --set output_dir="\"$full\"" 2>&1) | cat > "$tmpdir/full.log" # the limit is not the log's
grep -q "^bertrain: warning: step [0-9]*: $full/events\.out\.tfevents\..*\.bertrain: write failed: " \
    "$tmpdir/full.log" || { cat "$tmpdir/full.log"; fail "no warning naming the event file that could not be written"; }
"$PY" tests/python/tb_check.py "$full/metrics.jsonl" "$full" lossy ||
    fail "the event file under a file size limit holds more than whole records, or wrong ones"

# two ranks: rank 0 writes one file, with each rank's compute and communication times
if "$BERTRAIN" version | grep -q "; mpi)" && command -v mpiexec > /dev/null 2>&1; then
    two="$tmpdir/two"
    # shellcheck disable=SC2086
    (export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=
     mpiexec --oversubscribe --bind-to none -n 2 "$BERTRAIN" train tests/fixtures/base.json $small \
         --set train_micro_batch_size_per_gpu=4 --set train_steps=4 --set output_dir="\"$two\"") \
        > "$tmpdir/two.log" 2>&1 || { cat "$tmpdir/two.log"; fail "the two-rank run failed"; }
    "$PY" tests/python/tb_check.py "$two/metrics.jsonl" "$two" || fail "the two-rank run's events"
    grep -q '"ranks"' "$two/metrics.jsonl" || fail "the two-rank run's metrics.jsonl has no per-rank times"
else
    skip_part "the two-rank run (bertrain without MPI, or no mpiexec)"
fi

finish "the event files, read with TensorBoard's readers, hold metrics.jsonl's numbers once per step, also after a kill 4 steps past a checkpoint and a resume; failed writes warned about and cut back; two ranks: one file with per-rank times"
