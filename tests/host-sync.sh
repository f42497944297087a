#!/bin/sh
# The host-sync budget as a count, never a time: a training step on a device
# backend makes one blocking device-to-host read on one rank (the losses and
# the gradients' checks together) and at most 3 under MPI, whatever the
# number of tensors and of all-reduce buckets. Read from train
# --profile N's counters (OUTPUT_DIR/profile.json, "most_in_a_step": the worst
# of the profiled steps) on OpenCL (PoCL's CPU device here) and on the
# emulated CUDA device, over:
#  - AdamW; LAMB with fp16 and its loss scaler, gradient accumulation (4
#    micro-batches), z-loss and the attention-logit penalty; NSP;
#  - a model with 3x the layers (3x the tensors): the same reads (one);
#  - 2 MPI ranks with several buckets (0.1 MB), on OpenCL and on the
#    emulated CUDA device: still at most 3, and on cuda-emu no blocking
#    upload (the buckets' sums go back with upload_async).
# On the emulated CUDA device the batch's upload is asynchronous (page-locked
# staging): no blocking upload and no wait in any profiled step.
# Each part that cannot run here (no OpenCL build or device, no emulated CUDA,
# no MPI) is a SKIP with its reason.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
every_device_env

small="--set data.seq_len=32 --set train_batch_size=16 --set train_micro_batch_size_per_gpu=16
       --set data.valid=\"\" --set steps_per_print=1 --set train_steps=4"
lamb="--set optimizer.type=\"Lamb\" --set fp16.enabled=true --set train_micro_batch_size_per_gpu=4
      --set model.z_loss=1e-4 --set model.attention_logit_penalty=1e-3"
nsp="--set model.nsp=true --set data.mode=\"sentence_pairs\""
deep="--set model.num_hidden_layers=6"

# profile_field FILE KEY...: a field of a profile.json (nested keys), or nothing
profile_field() {
    python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v = v.get(k) if isinstance(v, dict) else None
print("" if v is None else v)' "$@" 2> /dev/null
}

# run DEVICE LABEL [--set ...]: 3 profiled steps; prints the worst step's reads
run() {
    dev=$1 label=$2
    shift 2
    out="$tmpdir/$label"
    # shellcheck disable=SC2086
    "$BERTRAIN" train tests/fixtures/base.json $small --set device="\"$dev\"" \
        --set output_dir="\"$out\"" --profile 3 "$@" > "$out.log" 2>&1 ||
        { tail -20 "$out.log"; fail "$label: training on $dev failed"; }
    [ -f "$out/profile.json" ] || { tail -5 "$out.log"; fail "$label: no $out/profile.json"; }
    r=$(profile_field "$out/profile.json" most_in_a_step host_reads)
    [ -n "$r" ] || { cat "$out/profile.json"; fail "$label: no most_in_a_step in profile.json"; }
    [ "$(profile_field "$out/profile.json" steps)" = 3 ] || fail "$label: profile.json has not 3 steps"
    echo "$r"
}

# budget DEVICE: every configuration on one rank with 1 read a step, and no more with more tensors
budget() {
    dev=$1 tag=${1%%:*}
    for cfg in adamw lamb nsp; do
        case $cfg in
            adamw) extra="" ;; lamb) extra=$lamb ;; nsp) extra=$nsp ;;
        esac
        # shellcheck disable=SC2086
        r=$(run "$dev" "$tag-$cfg" $extra) || { echo "$r"; exit 1; }
        [ "$r" -le 1 ] || { grep "per step" "$tmpdir/$tag-$cfg.log"; fail "$dev, $cfg: $r blocking reads in a step (one rank: budget 1)"; }
        # shellcheck disable=SC2086
        rd=$(run "$dev" "$tag-$cfg-deep" $extra $deep) || { echo "$rd"; exit 1; }
        [ "$rd" -eq "$r" ] || fail "$dev, $cfg: $r reads a step with 2 layers, $rd with 6"
        echo "ok   $dev, $cfg: $r blocking reads in the worst step, $rd with 3x the tensors"
    done
}

if ! "$BERTRAIN" version | grep -q "opencl"; then
    skip_part "OpenCL: bertrain was built without OpenCL"
else
    if "$BERTRAIN" bench --preset tiny --seq 16 --batch 1 --steps 1 --warmup 0 --backend opencl:0:0 \
        > "$tmpdir/probe" 2>&1; then
        budget opencl:0:0
    else
        skip_part "OpenCL: no device opencl:0:0: $(tail -1 "$tmpdir/probe")"
    fi
fi
if [ -f "$BERTRAIN_CUDA_EMU" ]; then
    budget cuda-emu:0
    for cfg in adamw lamb nsp; do
        pj="$tmpdir/cuda-emu-$cfg/profile.json"
        w=$(profile_field "$pj" per_step host_writes) s=$(profile_field "$pj" most_in_a_step host_syncs)
        [ "$w" = 0 ] && [ "$s" = 0 ] ||
            fail "cuda-emu, $cfg: ${w:-?} blocking uploads a step, ${s:-?} waits in the worst (want 0 and 0)"
    done
    echo "ok   cuda-emu: no blocking upload and no wait in a step (adamw, lamb, nsp)"
else
    skip_part "the emulated CUDA device is not built (configure found no C++17 compiler)"
fi

# ops_calls FILE OP: calls a step of op OP in a profile.json, or nothing
ops_calls() {
    python3 -c 'import json, sys
for o in json.load(open(sys.argv[1])).get("ops", []):
    if o.get("op") == sys.argv[2]: print(round(o["calls"]))' "$@" 2> /dev/null
}

# two_ranks DEVICE: 2 ranks with 0.1 MB buckets (several a step): the
# buckets' copies add no blocking read, each rank within 3 a step
two_ranks() {
    dev=$1 tag=${1%%:*}
    out="$tmpdir/mpi-$tag"
    # shellcheck disable=SC2086
    mpiexec --oversubscribe --bind-to none -n 2 -x POCL_CACHE_DIR -x POCL_MAX_PTHREAD_COUNT \
        -x BERTRAIN_CUDA_EMU -x CUDA_EMU_WORKERS \
        "$BERTRAIN" train tests/fixtures/base.json $small $lamb --set device="\"$dev\"" \
        --set distributed.bucket_mb=0.1 --set output_dir="\"$out\"" --profile 3 > "$out.log" 2>&1 ||
        { tail -20 "$out.log"; fail "2 ranks on $dev: training failed"; }
    for f in profile.json profile-rank1.json; do
        [ -f "$out/$f" ] || { tail -5 "$out.log"; fail "2 ranks on $dev: no $f (did both ranks run?)"; }
        r=$(profile_field "$out/$f" most_in_a_step host_reads) b=$(ops_calls "$out/$f" download_async)
        [ -n "$b" ] && [ "$b" -ge 2 ] || fail "2 ranks on $dev, $f: ${b:-no} bucket copies a step (want several)"
        [ -n "$r" ] && [ "$r" -le 3 ] || fail "2 ranks on $dev, $f: ${r:-no} blocking reads in a step with $b buckets (budget 3)"
        echo "ok   2 ranks on $dev, LAMB + fp16 + accumulation, $b buckets a step, $f: $r blocking reads in the worst step"
    done
}

if "$BERTRAIN" version | grep -q "; mpi)" && command -v mpiexec > /dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=
    if "$BERTRAIN" version | grep -q "opencl"; then two_ranks opencl:0:0; else skip_part "2 ranks on OpenCL: no OpenCL build"; fi
    if [ -f "$BERTRAIN_CUDA_EMU" ]; then
        two_ranks cuda-emu:0
        for f in profile.json profile-rank1.json; do
            w=$(profile_field "$tmpdir/mpi-cuda-emu/$f" per_step host_writes)
            [ "$w" = 0 ] || fail "2 ranks on cuda-emu, $f: ${w:-?} blocking uploads a step (the sums go back without)"
        done
        echo "ok   2 ranks on cuda-emu: the buckets' sums go back without a blocking upload"
    else
        skip_part "2 ranks on cuda-emu: the emulated CUDA device is not built"
    fi
else
    skip_part "2 ranks: no MPI build or mpiexec"
fi
finish "a training step makes one blocking read on one rank and at most 3 under MPI, whatever its tensors and all-reduce buckets, on every device here"
