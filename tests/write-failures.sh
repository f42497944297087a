#!/bin/sh
# Every write that can fail is checked, and a failure is said when it
# happens:
# - metrics.jsonl that cannot be written (a link to /dev/full) stops the run
#   with one line and a checkpoint, exit 1 (metrics.on_error "stop", the
#   default), or trains on with a warning per failure (metrics.on_error
#   "warn", exit 0); the summary line counts the records lost;
# - a record cut short by a full file system is cut back: metrics.jsonl
#   holds whole records only;
# - a background checkpoint that fails is reported at the next step
#   boundary (before the next one starts), training goes on, and the second
#   failure in a row stops the run (exit 1);
# - export and import exit 1 (a failed write), not 2, when a write fails.
# A file size limit (ulimit -f, with SIGXFSZ ignored) makes the big writes
# fail and the small ones succeed, as a full disk does.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=1"
# shellcheck disable=SC2086
train() { "$BERTRAIN" train tests/fixtures/base.json $small "$@"; }
find_python json || skip "no python3 to read metrics.jsonl"
# Open MPI's PMIx keeps its shared memory in files: under a file size limit it
# must use its hash store instead
export PMIX_MCA_gds=hash

metrics_full_stop() {
    mkdir -p "$tmpdir/m" && ln -s /dev/full "$tmpdir/m/metrics.jsonl"
    train --set train_steps=5 --set output_dir="\"$tmpdir/m\"" > "$tmpdir/m.out" 2> "$tmpdir/m.err"
    rc=$?
    [ $rc -eq 1 ] || { cat "$tmpdir/m.out" "$tmpdir/m.err"; fail "exit $rc, not 1, with metrics.jsonl on a full device"; }
    [ "$(wc -l < "$tmpdir/m.err")" -eq 1 ] || { cat "$tmpdir/m.err"; fail "not one line on stderr"; }
    grep -q "step 2: $tmpdir/m/metrics.jsonl: write failed: No space left on device (1 record not written so far); stopping with a checkpoint" "$tmpdir/m.err" ||
        { cat "$tmpdir/m.err"; fail "the failed write was not said at the next step boundary"; }
    [ -f "$tmpdir/m/ckpt-00000002/state.json" ] || { ls "$tmpdir/m"; fail "no checkpoint at the stop"; }
    grep -q "metrics in $tmpdir/m/metrics.jsonl (2 records could not be written)" "$tmpdir/m.out" ||
        { cat "$tmpdir/m.out"; fail "the summary line does not count the records lost"; }
    echo "ok   metrics.jsonl on a full device: one line at the next step boundary, a checkpoint, exit 1"
}

metrics_full_warn() {
    mkdir -p "$tmpdir/w" && ln -s /dev/full "$tmpdir/w/metrics.jsonl"
    train --set train_steps=3 --set metrics.on_error='"warn"' --set output_dir="\"$tmpdir/w\"" \
        > "$tmpdir/w.out" 2> "$tmpdir/w.err" || { cat "$tmpdir/w.out" "$tmpdir/w.err"; fail "metrics.on_error warn failed"; }
    [ "$(grep -c 'warning: step [0-9]*: .*metrics.jsonl: write failed: No space left on device' "$tmpdir/w.err")" -eq 3 ] ||
        { cat "$tmpdir/w.err"; fail "not one warning per failed record"; }
    [ -f "$tmpdir/w/ckpt-00000003/state.json" ] || fail "metrics.on_error warn did not train to the end"
    echo "ok   metrics.on_error \"warn\": a warning per failed record, trained to the end"
}

metrics_whole_records() {
    # 1 KiB: the first records fit, one is cut short and cut back, every later one fails
    (trap '' XFSZ; ulimit -f 2
     train --set train_steps=8 --set checkpoint.interval=0 --set output_dir="\"$tmpdir/h\"" \
         > "$tmpdir/h.out" 2> "$tmpdir/h.err")
    [ -s "$tmpdir/h/metrics.jsonl" ] || fail "no record was written"
    grep -q "metrics.jsonl: write failed: File too large" "$tmpdir/h.err" || { cat "$tmpdir/h.err"; fail "the cut record was not said"; }
    "$PY" - "$tmpdir/h/metrics.jsonl" <<'EOF' || fail "metrics.jsonl holds a partial record"
import json, sys
data = open(sys.argv[1]).read()
assert data.endswith("\n"), "the last line is cut short: %r" % data[-60:]
steps = [json.loads(line)["step"] for line in data.splitlines()]
assert steps == list(range(1, len(steps) + 1)), steps
print("     %d whole records, %d bytes" % (len(steps), len(data)))
EOF
    echo "ok   a record cut short by the file size limit is cut back: whole records only"
}

checkpoint_fails() {
    # 1 MB: metrics.jsonl fits, no checkpoint does (model.safetensors is 5.8 MB)
    (trap '' XFSZ; ulimit -f 2000
     train --set train_steps=12 --set checkpoint.interval=3 --set output_dir="\"$tmpdir/c\"" \
         > "$tmpdir/c.log" 2>&1; echo $? > "$tmpdir/c.rc")
    rc=$(cat "$tmpdir/c.rc")
    [ "$rc" -eq 1 ] || { cat "$tmpdir/c.log"; fail "exit $rc, not 1, after two failed checkpoints"; }
    first=$(grep -n "checkpoint step 3 failed: .*File too large; training goes on" "$tmpdir/c.log" | cut -d: -f1)
    step6=$(grep -n "^step      6 |" "$tmpdir/c.log" | cut -d: -f1)
    [ -n "$first" ] && [ -n "$step6" ] && [ "$first" -lt "$step6" ] ||
        { cat "$tmpdir/c.log"; fail "the failed checkpoint of step 3 was not said before step 6"; }
    grep -q "checkpoint step 6 failed: .*2 checkpoints in a row failed: stopping" "$tmpdir/c.log" ||
        { cat "$tmpdir/c.log"; fail "the second failure did not stop the run"; }
    # it stops at the step boundary where the background write is seen to have failed
    last=$(sed -n 's/^bertrain: the run ends without a checkpoint of step \([0-9]*\); no checkpoint was written; start again$/\1/p' "$tmpdir/c.log")
    [ -n "$last" ] || { cat "$tmpdir/c.log"; fail "the end does not say that no checkpoint exists"; }
    [ "$last" -gt 6 ] && [ "$last" -lt 12 ] && [ "$(grep -c '^step ' "$tmpdir/c.log")" -eq "$last" ] ||
        { cat "$tmpdir/c.log"; fail "the run did not stop soon after the second failure (step $last of 12)"; }
    [ -z "$(ls "$tmpdir/c" | grep ckpt-)" ] || { ls "$tmpdir/c"; fail "a failed checkpoint left files"; }
    echo "ok   a failed background checkpoint is said before the next step's line; two in a row stop the run (exit 1)"
}

export_import_full() {
    train --set train_steps=1 --set output_dir="\"$tmpdir/e\"" > "$tmpdir/e.log" 2>&1 || { cat "$tmpdir/e.log"; fail "run e failed"; }
    "$BERTRAIN" export "$tmpdir/e" "$tmpdir/e-hf" > /dev/null 2>&1 || fail "export e failed"
    for cmd in "export $tmpdir/e $tmpdir/e-hf2" "import $tmpdir/e-hf $tmpdir/e-imp"; do
        # shellcheck disable=SC2086
        (trap '' XFSZ; ulimit -f 2000; "$BERTRAIN" $cmd > "$tmpdir/full.out" 2> "$tmpdir/full.err"; echo $? > "$tmpdir/full.rc")
        rc=$(cat "$tmpdir/full.rc")
        [ "$rc" -eq 1 ] && [ "$(wc -l < "$tmpdir/full.err")" -eq 1 ] && grep -q "File too large" "$tmpdir/full.err" ||
            { cat "$tmpdir/full.err"; fail "${cmd%% *} on a full disk: exit $rc, not 1 with one line (a failed write)"; }
    done
    [ ! -e "$tmpdir/e-imp" ] || fail "the failed import left $tmpdir/e-imp"
    echo "ok   export and import exit 1 with one line when a write fails (the exit status table's failed write)"
}

run_case metrics-stop metrics_full_stop
run_case metrics-warn metrics_full_warn
run_case metrics-whole metrics_whole_records
run_case checkpoint-fails checkpoint_fails
run_case export-import-full export_import_full
cases_done "failed metrics and checkpoint writes are said when they happen, and stop the run as configured"
