#!/bin/sh
# Batch-size rampup (batch_rampup.*) on 1, 2 and 3 ranks, linear and stepwise:
#  - every step's global batch is the schedule's, computed here independently
#    (awk) from the samples trained before it: unit x (a0 + floor((A - a0) c / R))
#    (stepwise: the same at the start of stage floor(stages c / R)), unit =
#    micro-batch x ranks; metrics.jsonl logs it once per step with the cursor;
#  - the samples the ranks trained on (the BERTRAIN_TEST_LOG_SAMPLES hook, one
#    line per micro-batch) tile [0, total) exactly once: none skipped, none
#    repeated, and total = the schedule's sum = state.json's data.position;
#  - with scheduler.unit "samples" every step's learning rate is WarmupLR's at
#    the samples trained before it;
#  - 2 ranks train the same parameters as 1 (same unit, so the same batches, 1e-5);
#  - a start that is not a multiple of the unit is refused naming the key.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
need_test_build
export OMP_NUM_THREADS=1
STEPS=12 START=12 TARGET=24 R=150 STAGES=2 LR=0.001 WARM=100
common="--set data.seq_len=32 --set data.valid=\"\" --set steps_per_print=1 --set train_steps=$STEPS
        --set train_batch_size=$TARGET --set batch_rampup.start_batch_size=$START
        --set batch_rampup.samples=$R --set batch_rampup.stages=$STAGES
        --set scheduler.unit=\"samples\" --set scheduler.type=\"WarmupLR\"
        --set scheduler.params.warmup_num_steps=$WARM --set optimizer.params.lr=$LR"
MPI=""
if "$BERTRAIN" version | grep -q "; mpi)" && command -v mpiexec > /dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=
    MPI="mpiexec --oversubscribe --bind-to none"
fi

run() { # NAME RANKS MICRO TYPE
    name=$1 n=$2 micro=$3 type=$4
    launch="" && [ "$n" -gt 1 ] && launch="$MPI -n $n"
    # shellcheck disable=SC2086
    BERTRAIN_TEST_LOG_SAMPLES=1 $launch "$BERTRAIN_T" train tests/fixtures/base.json $common \
        --set train_micro_batch_size_per_gpu="$micro" --set batch_rampup.type="\"$type\"" \
        --set output_dir="\"$tmpdir/$name\"" > "$tmpdir/$name.log" 2>&1 ||
        { cat "$tmpdir/$name.log"; fail "$name: training failed"; }
    for r in $(seq 0 $((n - 1))); do
        grep -q "^samples rank $r " "$tmpdir/$name.log" || fail "$name: rank $r did not train"
    done
    unit=$((micro * n))
    # the schedule, step by step, from the samples before each step
    awk -v steps="$STEPS" -v start="$START" -v target="$TARGET" -v R="$R" -v unit="$unit" \
        -v stages="$STAGES" -v type="$type" 'BEGIN {
        a0 = start / unit; A = target / unit; c = 0
        for (i = 1; i <= steps; i++) {
            if (c >= R) a = A
            else if (type == "stepwise") { k = int(stages * c / R); a = a0 + int((A - a0) * k / stages) }
            else a = a0 + int((A - a0) * c / R)
            b = unit * a; print i, b, c + b; c += b
        }
    }' > "$tmpdir/$name.want"
    grep -o '"step": [0-9]*,.*"batch_size": [0-9]*, "samples": [0-9]*' "$tmpdir/$name/metrics.jsonl" |
        sed 's/"step": \([0-9]*\),.*"batch_size": \([0-9]*\), "samples": \([0-9]*\)/\1 \2 \3/' > "$tmpdir/$name.got"
    diff "$tmpdir/$name.want" "$tmpdir/$name.got" > /dev/null ||
        { paste "$tmpdir/$name.want" "$tmpdir/$name.got"; fail "$name: batch sizes differ from the schedule (step batch cursor)"; }
    total=$(tail -1 "$tmpdir/$name.want" | cut -d' ' -f3)
    # the micro-batches of all ranks tile [0, total) once
    grep "^samples rank" "$tmpdir/$name.log" | awk '{ print $6, $7 }' | sort -n > "$tmpdir/$name.ranges"
    awk -v total="$total" 'BEGIN { at = 0 } { if ($1 != at) exit 1; at = $2 } END { exit at != total }' \
        "$tmpdir/$name.ranges" || fail "$name: the trained samples do not tile [0, $total) exactly once"
    tr -d ' \t\n' < "$tmpdir/$name/$(printf 'ckpt-%08d' "$STEPS")/state.json" | grep -q "\"position\":$total," ||
        fail "$name: state.json's data.position is not $total"
    # learning rate per step: WarmupLR in samples, at the samples before the step
    grep -o '"step": [0-9]*, .*"lr": [^,]*' "$tmpdir/$name/metrics.jsonl" | sed 's/"step": \([0-9]*\),.*"lr": \(.*\)/\1 \2/' |
        paste -d' ' - "$tmpdir/$name.want" | awk -v lr="$LR" -v w="$WARM" '{
            c = $5 - $4; want = c < w ? lr * c / w : lr
            if ((($2 - want) ^ 2) > (1e-6 * lr) ^ 2) { print "step " $1 ": lr " $2 ", want " want; bad = 1 } }
        END { exit bad }' || fail "$name: the learning rate does not follow the schedule in samples"
    echo "ok   $name ($n rank(s), micro $micro, $type): batches $(cut -d' ' -f2 "$tmpdir/$name.want" | tr '\n' ' ')= $total samples, tiled once; lr in samples"
}

run one-linear 1 4 linear
run one-stepwise 1 4 stepwise
if [ -n "$MPI" ]; then
    run two-linear 2 2 linear
    run three-stepwise 3 2 stepwise
    "$top_builddir/tests/c/st_compare" "$tmpdir/one-linear/ckpt-00000012/model.safetensors" \
        "$tmpdir/two-linear/ckpt-00000012/model.safetensors" 1e-5 ||
        fail "2 ranks with the rampup differ from 1 rank"
    echo "ok   2 ranks = 1 rank under the rampup (1e-5)"
else
    skip_part "the rampup on 2 ranks (no MPI build or mpiexec)"
fi

rc=0
"$BERTRAIN" train tests/fixtures/base.json --set train_batch_size=24 --set train_micro_batch_size_per_gpu=4 \
    --set batch_rampup.start_batch_size=10 > /dev/null 2> "$tmpdir/bad.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "batch_rampup.start_batch_size: 10 must be a multiple of" "$tmpdir/bad.err" ||
    { cat "$tmpdir/bad.err"; fail "a bad start_batch_size was not refused (exit $rc)"; }
echo "ok   refused: $(cat "$tmpdir/bad.err")"
finish "the batch follows the rampup schedule; every sample is trained once on any rank count"
