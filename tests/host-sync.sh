#!/bin/sh
# The host-sync budget as a count, never a time: a training step on a device
# backend makes at most 3 blocking device-to-host reads, plus one per
# all-reduce bucket, whatever the number of tensors. Read from train
# --profile N's counters (OUTPUT_DIR/profile.json, "most_in_a_step": the worst
# of the profiled steps) on OpenCL (PoCL's CPU device here) and on the
# emulated CUDA device, over:
#  - AdamW; LAMB with fp16 and its loss scaler, gradient accumulation (4
#    micro-batches), z-loss and the attention-logit penalty; NSP;
#  - a model with 3x the layers (3x the tensors): the same reads;
#  - 2 MPI ranks with one bucket: at most 3 + 1.
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

# budget DEVICE: every configuration within 3 reads a step, and no more with more tensors
budget() {
    dev=$1 tag=${1%%:*}
    for cfg in adamw lamb nsp; do
        case $cfg in
            adamw) extra="" ;; lamb) extra=$lamb ;; nsp) extra=$nsp ;;
        esac
        # shellcheck disable=SC2086
        r=$(run "$dev" "$tag-$cfg" $extra) || { echo "$r"; exit 1; }
        [ "$r" -le 3 ] || { grep "per step" "$tmpdir/$tag-$cfg.log"; fail "$dev, $cfg: $r blocking reads in a step (budget 3)"; }
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

# 2 ranks, one all-reduce bucket (bucket_mb far above the model): at most 3 + 1
if "$BERTRAIN" version | grep -q "; mpi)" && command -v mpiexec > /dev/null 2>&1 &&
    "$BERTRAIN" version | grep -q "opencl"; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=
    out="$tmpdir/mpi"
    # shellcheck disable=SC2086
    mpiexec --oversubscribe --bind-to none -n 2 -x POCL_CACHE_DIR -x POCL_MAX_PTHREAD_COUNT \
        "$BERTRAIN" train tests/fixtures/base.json $small $lamb --set device='"opencl:0:0"' \
        --set distributed.bucket_mb=1000 --set output_dir="\"$out\"" --profile 3 > "$out.log" 2>&1 ||
        { tail -20 "$out.log"; fail "2 ranks: training failed"; }
    for f in profile.json profile-rank1.json; do
        [ -f "$out/$f" ] || { tail -5 "$out.log"; fail "2 ranks: no $f (did both ranks run?)"; }
        r=$(profile_field "$out/$f" most_in_a_step host_reads)
        [ -n "$r" ] && [ "$r" -le 4 ] || fail "2 ranks, $f: ${r:-no} blocking reads in a step (budget 3 + 1 bucket)"
        echo "ok   2 ranks on opencl, LAMB + fp16 + accumulation, one bucket, $f: $r blocking reads in the worst step"
    done
else
    skip_part "2 ranks: no MPI build, mpiexec or OpenCL"
fi
finish "a training step stays within 3 blocking reads (+1 per all-reduce bucket) on every device here"
