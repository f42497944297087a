#!/bin/sh
# CUDA Graphs change how a training step is launched, never what it
# computes. On the emulated A100 (tests/cuda_emu, whose capture refuses what
# CUDA's refuses):
#  - bench, 4 timed steps after 2 warm-up ones (whose growing buffers break
#    the first captures): the last step's loss and gradient norm are the
#    bits of BERTRAIN_CUDA_GRAPHS=0, and a timed step makes 1 launch (one
#    graph: forward, backward, the step's gate and the update it governs),
#    1 blocking read, no wait and no blocking write, where without graphs it
#    makes dozens of launches; in bf16, fp16 with Pre-LN, fp32, with 2 micro-batches,
#    recompute "layer", the fused attention and LAMB;
#  - the heads' and the top layer's rows padded to the bound of a
#    micro-batch's masked total (mask_total_bound), not to the capacity;
#  - LayerDrop, whose skipped layers change the region from step to step:
#    the same bits (the regions break and run as they come);
#  - train, 6 steps on the demo data (masks of every size: the head's rows
#    are padded so the shapes stay) with an evaluation and a checkpoint: the
#    same per-step losses and gradient norms and the same checkpoint bytes;
#  - a capture CUDA invalidates (the emulator's CUDA_EMU_INVALIDATE_CAPTURE),
#    in step 2 while step 1's checkpoint is written: one line and exit 1,
#    the checkpoint whole, and the run resumed op by op gives the same bits;
#  - 2 MPI ranks, 0.1 MB buckets: on each rank the forward and backward with
#    the buckets' copies to the host are one graph, captured once and
#    replayed every later step (BERTRAIN_CUDA_GRAPHS=log says so), with the
#    bits and checkpoint bytes of the steps launched op by op.
# No emulated device built: SKIP. No MPI build or mpiexec: that part SKIPs.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
every_device_env
[ -f "$BERTRAIN_CUDA_EMU" ] || skip "no emulated CUDA device built (tests/cuda_emu)"
export CUDA_EMU_ARCH=80

# bench LABEL GRAPHS ARGS...: the tiny model (2 layers unless ARGS say), seq 32, batch 4
bench() {
    run=$1 graphs=$2
    shift 2
    case " $* " in *" --layers "*) layers="" ;; *) layers="--layers 2" ;; esac
    # shellcheck disable=SC2086
    BERTRAIN_CUDA_GRAPHS=$graphs "$BERTRAIN" bench --preset tiny $layers --seq 32 --batch 4 \
        --steps 4 --warmup 2 --backend cuda-emu --json "$@" > "$tmpdir/$run.json" \
        2> "$tmpdir/$run.err" || { tail -5 "$tmpdir/$run.err"; fail "$run: bench failed"; }
}

# field LABEL KEY: a field of a bench's JSON, with 17 digits
field() {
    python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))["bench"][sys.argv[2]]
print(repr(v))' "$tmpdir/$1.json" "$2"
}

# count LABEL KEY: a counter of a bench's JSON as a float ("2.0")
count() {
    python3 -c 'import json, sys
print(float(json.load(open(sys.argv[1]))["bench"][sys.argv[2]]))' "$tmpdir/$1.json" "$2"
}

# same_bits LABEL ARGS...: graphs on and off end with the same bits; prints
# the launches a step with graphs
same_bits() {
    label=$1
    shift
    bench "$label-on" 1 "$@"
    bench "$label-off" 0 "$@"
    for k in loss grad_norm; do
        a=$(field "$label-on" $k) b=$(field "$label-off" $k)
        [ -n "$a" ] && [ "$a" = "$b" ] || fail "$label: $k $a with graphs, $b without"
    done
    echo "ok   $label: loss $(field "$label-on" loss), grad_norm $(field "$label-on" grad_norm) with and without graphs"
}

# one_launch LABEL: 1 launch, 1 read, no wait or write a step with graphs
# (and more than 20 launches without)
one_launch() {
    label=$1
    [ "$(count "$label-on" launches_per_step)" = 1.0 ] ||
        fail "$label: $(count "$label-on" launches_per_step) launches a step with graphs, want 1 (the step's graph)"
    [ "$(count "$label-on" host_reads_per_step)" = 1.0 ] ||
        fail "$label: $(count "$label-on" host_reads_per_step) blocking reads a step, want 1"
    [ "$(count "$label-on" host_syncs_per_step)" = 0.0 ] ||
        fail "$label: $(count "$label-on" host_syncs_per_step) waits a step, want 0"
    [ "$(count "$label-on" host_writes_per_step)" = 0.0 ] ||
        fail "$label: $(count "$label-on" host_writes_per_step) blocking writes a step, want 0"
    off=$(count "$label-off" launches_per_step)
    python3 -c "import sys; sys.exit(0 if float('$off') > 20 else 1)" ||
        fail "$label: only $off launches a step without graphs: the comparison shows nothing"
    echo "ok   $label: 1 launch a step with graphs, $off without; 1 read, no wait, no write"
}

for case in "bf16:--precision bf16" "fp16-pre:--precision fp16 --norm pre" "fp32:--precision fp32" \
    "accum2:--precision bf16 --accum 2" "recompute:--precision bf16 --set model.recompute=\"layer\"" \
    "fused-attention:--precision bf16 --set model.attention_kernel=\"fused\"" \
    "lamb:--precision fp16 --set optimizer.type=\"Lamb\""; do
    label=${case%%:*}
    eval "same_bits $label ${case#*:}"
    one_launch "$label"
done

# The heads' rows keep one shape at the bound of a micro-batch's masked total
# (mean + 4 sd of 4 x 30 tokens masked at 0.15: 35), not at 4 x the
# per-sequence cap (4 x 14 = 56), and the top layer's at it plus [CLS] when
# NSP reads them.
python3 - "$tmpdir/bf16-on.json" <<'PY' || fail "bf16: the padded rows are not the batch's bound"
import json, math, sys
b = json.load(open(sys.argv[1]))["bench"]
n, p, B = 4 * 30, 0.15, 4
bound = math.ceil(n * p + 4 * math.sqrt(n * p * (1 - p))) + 1
cap = B * (math.ceil(30 * p + 4 * math.sqrt(30 * p * (1 - p))) + 1)
head, top = b["head_rows_run_per_seq"] * B, b["top_rows_run_per_seq"] * B
nsp = b["top_rows_per_seq"] > b["masked_per_seq"]
print("%s   bf16: the head ran %g rows, the top layer %g, for %g masked a step; bound %d, "
      "capacity %d" % ("ok" if head == bound and top == bound + B * nsp else "FAIL", head, top,
                       b["masked_per_seq"] * B, bound, cap))
sys.exit(0 if head == bound and top == bound + B * nsp and bound < cap else 1)
PY

same_bits layerdrop --precision bf16 --layers 4 --layerdrop 0.5

# steps_of RUN_DIR: each step's loss and gradient norm of a run's metrics.jsonl
# into RUN_DIR.steps, with 17 digits
steps_of() {
    python3 -c 'import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if "grad_norm" in m: print(m["step"], repr(m["loss"]), repr(m["grad_norm"]))' \
        "$1/metrics.jsonl" > "$1.steps"
}

# same_runs LABEL DIR_WITH DIR_WITHOUT: 6 steps each, the same losses and
# gradient norms, the same checkpoint bytes
same_runs() {
    [ "$(wc -l < "$2.steps")" -eq 6 ] || fail "$1: $(wc -l < "$2.steps") steps in metrics.jsonl, want 6"
    cmp -s "$2.steps" "$3.steps" ||
        { diff "$2.steps" "$3.steps"; fail "$1: the steps' losses or gradient norms differ with graphs"; }
    for f in model.safetensors optim.bin; do
        cmp -s "$2/ckpt-00000006/$f" "$3/ckpt-00000006/$f" || fail "$1: the checkpoint's $f differs with graphs"
    done
}

# train: the demo data, 6 steps, an evaluation and a checkpoint at the end
train() {
    graphs=$1
    BERTRAIN_CUDA_GRAPHS=$graphs "$BERTRAIN" train tests/fixtures/base.json --set data.seq_len=32 \
        --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8 --set steps_per_print=1 \
        --set train_steps=6 --set device=\"cuda-emu\" --set output_dir=\"$tmpdir/train-$graphs\" \
        > "$tmpdir/train-$graphs.log" 2>&1 || { tail -5 "$tmpdir/train-$graphs.log"; fail "train (graphs $graphs) failed"; }
    steps_of "$tmpdir/train-$graphs"
}
train 1
train 0
same_runs train "$tmpdir/train-1" "$tmpdir/train-0"
echo "ok   train: 6 steps' losses and gradient norms, the checkpoint's weights and optimizer state: the same bytes"

# A capture CUDA invalidates (CUDA_EMU_INVALIDATE_CAPTURE: the emulated device
# fails the work captured after, as CUDA does) in step 2, while step 1's
# checkpoint is written in the background: one line names the capture's
# error and the switch that does without graphs, the exit is 1, step 1's
# checkpoint is whole, and the run resumed from it op by op ends with the
# bits of the run without graphs.
out="$tmpdir/capture-fails"
# train_ckpt LOG GRAPHS INVALIDATE ARGS...: train's 6 steps into $out, a checkpoint
# every step, with BERTRAIN_CUDA_GRAPHS=GRAPHS and CUDA_EMU_INVALIDATE_CAPTURE=INVALIDATE
train_ckpt() {
    log=$1 graphs=$2 invalidate=$3
    shift 3
    BERTRAIN_CUDA_GRAPHS=$graphs CUDA_EMU_INVALIDATE_CAPTURE=$invalidate "$BERTRAIN" train \
        tests/fixtures/base.json --set data.seq_len=32 --set train_batch_size=8 \
        --set train_micro_batch_size_per_gpu=8 --set steps_per_print=1 --set train_steps=6 \
        --set checkpoint.interval=1 --set device=\"cuda-emu\" --set output_dir=\"$out\" "$@" \
        > "$log" 2>&1
}
rc=0
train_ckpt "$out.log" 1 2 || rc=$?
[ $rc -eq 1 ] || { tail -5 "$out.log"; fail "capture fails: exit $rc, want 1"; }
grep -q "^bertrain: cuda: .*cudaErrorStreamCaptureInvalidated.*BERTRAIN_CUDA_GRAPHS=0" "$out.log" ||
    { tail -5 "$out.log"; fail "capture fails: no line names the capture's error and BERTRAIN_CUDA_GRAPHS=0"; }
[ "$(grep -c "^bertrain: cuda:" "$out.log")" -eq 1 ] || { tail -5 "$out.log"; fail "capture fails: more than one line of the device's error"; }
[ -f "$out/ckpt-00000001/model.safetensors" ] && [ -z "$(find "$out" -name '*.tmp-*')" ] ||
    { ls -la "$out"; fail "capture fails: step 1's checkpoint is not whole"; }
train_ckpt "$out-resumed.log" 0 0 --resume auto ||
    { tail -5 "$out-resumed.log"; fail "capture fails: the resume op by op failed"; }
grep -q "^resume: from .*/ckpt-00000001 (step 1," "$out-resumed.log" ||
    { head -5 "$out-resumed.log"; fail "capture fails: the resume did not start from step 1's checkpoint"; }
steps_of "$out"
same_runs "capture fails" "$out" "$tmpdir/train-0"
echo "ok   capture fails in step 2: $(grep -o 'cudaErrorStreamCaptureInvalidated' "$out.log" | head -1) named with BERTRAIN_CUDA_GRAPHS=0, exit 1, step 1's checkpoint whole; resumed op by op, the bits of the run without graphs"

# train_mpi GRAPHS: train on 2 ranks, 0.1 MB buckets (several a step)
train_mpi() {
    graphs=$1 out="$tmpdir/mpi-$1"
    mpiexec --oversubscribe --bind-to none -n 2 -x BERTRAIN_CUDA_EMU -x CUDA_EMU_ARCH \
        -x CUDA_EMU_WORKERS -x BERTRAIN_CUDA_GRAPHS="$graphs" \
        "$BERTRAIN" train tests/fixtures/base.json --set data.seq_len=32 --set train_batch_size=16 \
        --set train_micro_batch_size_per_gpu=8 --set data.valid=\"\" --set steps_per_print=1 \
        --set train_steps=6 --set device=\"cuda-emu:0\" --set distributed.bucket_mb=0.1 \
        --set output_dir="\"$out\"" > "$out.log" 2>&1 || { tail -5 "$out.log"; fail "2 ranks (graphs $graphs): training failed"; }
    steps_of "$out"
}
if "$BERTRAIN" version | grep -q "; mpi)" && command -v mpiexec > /dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=
    train_mpi log
    train_mpi 0
    same_runs "2 ranks" "$tmpdir/mpi-log" "$tmpdir/mpi-0"
    # each rank: region 0 (forward, backward, the buckets' copies) replayed in
    # steps 3 to 6 with its copies, and never given up after its capture
    replays=$(grep -c "graph region 0: replayed, [0-9]* calls, [2-9][0-9]* downloads" "$tmpdir/mpi-log.log")
    ends=$(grep -c "graph region 0: replay ends" "$tmpdir/mpi-log.log")
    copies=$(grep -o "graph region 0: replayed, [0-9]* calls, [0-9]* downloads" "$tmpdir/mpi-log.log" | head -1)
    [ "$replays" -eq 8 ] && [ "$ends" -eq 0 ] ||
        { grep "graph region" "$tmpdir/mpi-log.log" | sort | uniq -c; fail "2 ranks: $replays replays of the step's graph with the buckets' copies (want 4 a rank), $ends given up"; }
    echo "ok   2 ranks: the forward and backward are one graph on each rank, replayed 4 times ($copies); the same losses, gradient norms and checkpoint bytes as op by op"
else
    skip_part "2 ranks: no MPI build or mpiexec"
fi
finish "CUDA Graphs give the bits of the steps launched op by op, in 1 launch a step on one rank, and under MPI the forward and backward in one graph"

