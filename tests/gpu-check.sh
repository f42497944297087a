#!/bin/sh
# GPU check of the CUDA backend, for a machine with an NVIDIA GPU. Build first:
#
#   ./configure --with-cuda && make && make check
#   sh tests/gpu-check.sh [N]        # N: the CUDA device (default 0)
#
# (from a VPATH build directory: sh SRCDIR/tests/gpu-check.sh; top_builddir
# and top_srcdir may also be set in the environment). It runs:
#  1. the backend conformance suite on cuda:N (every op against float64);
#  2. 20 training steps of tests/fixtures/base.json on the CPU and on cuda:N (tests/train-vs-cpu.sh): the
#     per-step losses (metrics.jsonl) within 1e-4 relative, and the final
#     parameters (ckpt-00000020/model.safetensors) within 1e-4 relative L2
#     (tests/c/st_compare, built by make check);
#  2b. 20 steps with bf16 and with fp16 on the CPU and on cuda:N (tensor-core
#     GEMMs there): per-step losses within 2e-2 relative;
#  3. bertrain bench --preset base and --preset large (seq 128, batch 32), in
#     fp32, TF32 and fp16, and TF32 and fp16 with model.attention_kernel
#     fused: samples/s, activation memory, TFLOP/s and MFU, the achieved
#     model FLOP/s over the card's peak (table below);
#  3b. CUDA Graphs: bench --preset base, bf16, seq 128, batch 32, 4 steps
#     after 3 warm-up ones, with graphs (the default) and with
#     BERTRAIN_CUDA_GRAPHS=0: the same last step's loss and gradient norm,
#     1 launch a step with graphs, and both speeds;
#  3c. the GEMM epilogues on cuBLASLt: bench --preset base, bf16, seq 128,
#     batch 32 with them (the default) and with --unfused epilogue: no line
#     that cuBLASLt lacked an algorithm, gemm16_bias and gemm16_bias_grad in
#     the profile, the last step's loss within 1e-3 relative, both speeds;
#  4. compute-sanitizer memcheck and racecheck on the conformance suite
#     (--quick), when compute-sanitizer is installed.
# The conformance suite and the equivalence run in exact fp32 (BERTRAIN_CUDA_TF32
# unset, config tf32 false); the benches run fp32 both ways (tf32 false and
# the default, TF32 where the card has it).
# GPU_CHECK_LOGS=DIR keeps every log of the checks in DIR (made if missing).
# Prints a summary; exit status 0 when every check passed, 1 when one failed,
# 77 when there is no CUDA device, 2 when bertrain was built without CUDA.
#
#   sh tests/gpu-check.sh --cpu      the CPU part, for any build and no GPU
#
# runs what needs no GPU, through the same programs and steps: the
# conformance suite (--quick) on the CPU, tests/train-vs-cpu.sh with the CPU
# on both sides (4 sequences of 32 tokens: fp32, bf16, fp16; the runs must
# agree exactly) and a short bench of the tiny preset. The GPU kit
# (scripts/gpu-kit.sh) runs it where there is no nvcc or no device.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
if [ -z "${top_builddir:-}" ]; then
    if [ -x ./bertrain ]; then top_builddir=$(pwd); else top_builddir=$top_srcdir; fi
fi
BERTRAIN="$top_builddir/bertrain"
CONFORMANCE="$top_builddir/bertrain-conformance"
cpu_only=no
case ${1:-} in
--cpu) cpu_only=yes DEV=cpu ;;
*) DEV="cuda:${1:-0}" ;;
esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bertrain-gpu-check.XXXXXX")
keep_logs() {
    [ -z "${GPU_CHECK_LOGS:-}" ] || { mkdir -p "$GPU_CHECK_LOGS" && cp "$tmp"/*.log "$tmp/summary" "$GPU_CHECK_LOGS/" 2> /dev/null; }
    rm -rf "$tmp"
}
trap keep_logs EXIT
summary="$tmp/summary"
: > "$summary"
failed=0

# record CHECK RESULT DETAIL: one row of the summary
record() {
    printf '%-38s %-5s %s\n' "$1" "$2" "$3" >> "$summary"
    [ "$2" != FAIL ] || failed=1
    echo "gpu-check: $1: $2 $3"
}

[ -x "$BERTRAIN" ] && [ -x "$CONFORMANCE" ] || {
    echo "gpu-check: no bertrain in $top_builddir: build first (./configure --with-cuda && make)"
    exit 2
}

# summary_end: the summary, and the exit status
summary_end() {
    echo
    echo "==== gpu-check: $1 ===="
    cat "$summary"
    if [ $failed -eq 0 ]; then echo "result: PASS"; else echo "result: FAIL"; fi
    exit $failed
}

# conformance_row NAME ARGS...: bertrain-conformance ARGS, one summary row
conformance_row() {
    name=$1
    shift
    rc=0
    BERTRAIN_CUDA_TF32= "$CONFORMANCE" "$@" > "$tmp/conformance.log" 2>&1 || rc=$?
    counts=$(tail -1 "$tmp/conformance.log")
    if [ $rc -eq 0 ]; then
        record "$name" PASS "$counts"
    else
        grep -E 'FAIL' "$tmp/conformance.log" | head -20
        record "$name" FAIL "$counts (exit $rc)"
    fi
}

# train_rows DEV ARGS...: tests/train-vs-cpu.sh DEV (its options ARGS), its
# tab-separated rows into the summary
train_rows() {
    tab=$(printf '\t') train_dev=$1
    shift
    sh "$top_srcdir/tests/train-vs-cpu.sh" "$train_dev" "$tmp" "$@" > "$tmp/train.out" 2>&1
    grep -v "$tab" "$tmp/train.out"
    grep "$tab" "$tmp/train.out" > "$tmp/train.rows"
    while IFS="$tab" read -r check result detail; do
        record "$check" "$result" "$detail"
    done < "$tmp/train.rows"
    [ -s "$tmp/train.rows" ] ||
        record "CPU vs $train_dev: training" FAIL "tests/train-vs-cpu.sh printed no result"
}

# ---- the CPU part (--cpu) ----
if [ $cpu_only = yes ]; then
    echo "gpu-check: the CPU part only (bertrain $("$BERTRAIN" version | head -1))"
    conformance_row "conformance --quick (cpu)" --backend cpu --quick
    train_rows cpu --set train_batch_size=4 --set train_micro_batch_size_per_gpu=4 \
        --set data.seq_len=32
    log="$tmp/bench-tiny-cpu.log"
    if "$BERTRAIN" bench --preset tiny --seq 64 --batch 8 --steps 3 --backend cpu > "$log" 2>&1; then
        record "bench tiny fp32 (cpu, seq 64, batch 8)" PASS \
            "$(sed -n 's/^samples\/s: //p' "$log") samples/s, $(sed -n 's/^TFLOP\/s: //p' "$log") TFLOP/s"
    else
        tail -20 "$log"
        record "bench tiny fp32 (cpu, seq 64, batch 8)" FAIL "bertrain bench failed (log above)"
    fi
    summary_end "the CPU part (no GPU)"
fi
built=$("$BERTRAIN" version | sed -n 's/.*(backends: \([^;)]*\).*/\1/p')
case " $built " in
*" cuda "*) ;;
*)
    echo "gpu-check: this bertrain was built without CUDA (backends: $built): ./configure --with-cuda && make"
    exit 2
    ;;
esac

# ---- is there a device? ----
probe=$(BERTRAIN_CUDA_TF32= "$CONFORMANCE" --backend "$DEV" --op info 2>&1)
case $probe in
*"SKIP backend $DEV: "*)
    echo "gpu-check: $(printf '%s\n' "$probe" | sed -n "s/^SKIP backend $DEV: //p" | head -1)"
    echo "gpu-check: no CUDA device $DEV here: nothing to check"
    exit 77
    ;;
esac
card=$("$BERTRAIN" devices 2>/dev/null | sed -n "s/^$DEV: \([^,]*\),.*/\1/p" | head -1)
[ -n "$card" ] || card="unknown card"
echo "gpu-check: $DEV is $card"

# ---- 1. conformance ----
conformance_row "conformance ($DEV)" --backend "$DEV"

# ---- 2, 2b. CPU vs CUDA training, 20 steps (tests/train-vs-cpu.sh) ----
train_rows "$DEV"

# ---- 3. bench and MFU ----
# Dense peak TFLOP/s (no 2:4 sparsity) per card: FP32 on CUDA cores, TF32
# tensor cores, BF16/FP16 tensor cores (FP32 accumulate), from NVIDIA's
# datasheets ("-": no such unit). Sparse datasheet figures are halved.
#   A100 (SXM4, PCIe; NVIDIA A100 datasheet): FP32 19.5, TF32 156, BF16/FP16 312
#   H100 SXM5 (NVIDIA H100 datasheet): FP32 67, TF32 989* -> 494.5, BF16 1,979* -> 989.5
#   H100 PCIe: FP32 51, TF32 756* -> 378, BF16 1,513* -> 756.5
#   H100 NVL: FP32 60, TF32 835* -> 417.5, BF16 1,671* -> 835.5
#   H200 SXM (NVIDIA H200 datasheet): as H100 SXM5: 67, 494.5, 989.5
#   H200 NVL: as H100 NVL: 60, 417.5, 835.5
#   L40S (NVIDIA L40S datasheet): FP32 91.6, TF32 183 (366*), BF16/FP16 362.05 (733*)
#   V100 SXM2 (NVIDIA V100 datasheet): FP32 15.7, FP16 tensor 125; V100 PCIe: 14, 112;
#     V100S PCIe: 16.4, 130 (Volta has no TF32 and no BF16)
#   RTX 4090 (NVIDIA Ada Lovelace architecture whitepaper, appendix): FP32 82.6,
#     TF32 tensor 82.6, FP16/BF16 tensor with FP32 accumulate 165.2
#   (* with sparsity)
peaks() { # card name -> "FP32 TF32 BF16" or nothing
    case $1 in
    *A100*) echo "19.5 156 312" ;;
    *H100*PCIe*) echo "51 378 756.5" ;;
    *H100*NVL* | *H200*NVL*) echo "60 417.5 835.5" ;;
    *H100* | *H200*) echo "67 494.5 989.5" ;;
    *L40S*) echo "91.6 183 362.05" ;;
    *V100S*) echo "16.4 - 130" ;;
    *V100*PCIE*) echo "14 - 112" ;;
    *V100*) echo "15.7 - 125" ;;
    *"RTX 4090"*) echo "82.6 82.6 165.2" ;;
    esac
}
# MFU is taken against the peak of the arithmetic the GEMMs use: FP32, TF32
# (the default on cards that have it: bench says "fp32 GEMMs: TF32 tensor
# cores"), the BF16/FP16 tensor peak for bf16 and fp16 (16-bit operands on
# tensor cores); the BF16/FP16 tensor peak is shown beside the first two for
# scale.
mfu() { # achieved-TFLOP/s card precision tf32(1/0) -> text
    p=$(peaks "$2")
    echo "$1 $p $4 $3" | awk '{
        t = $1 + 0
        if ($1 !~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ || t <= 0) { print "TFLOP/s n/a: no MFU"; exit }
        if (NF < 6) { printf "%.2f TFLOP/s; MFU n/a (no peak known for this card)\n", t; exit }
        if ($6 != "fp32") {
            printf "%.2f TFLOP/s, MFU %.1f%% of the BF16/FP16 tensor peak %s TFLOP/s\n", t, 100 * t / $4, $4
            exit }
        tf32 = $5 == "1" && $3 != "-"
        peak = tf32 ? $3 : $2
        printf "%.2f TFLOP/s, MFU %.1f%% of the %s peak %s TFLOP/s (%.1f%% of the BF16/FP16 tensor peak %s)\n",
               t, 100 * t / peak, tf32 ? "TF32 tensor" : "FP32", peak, 100 * t / $4, $4 }'
}
for preset in base large; do for mode in fp32 tf32 fp16 tf32+fused fp16+fused; do
    log="$tmp/bench-$preset-$mode.log"
    what="bench $preset $mode (seq 128, batch 32)"
    # +fused: model.attention_kernel fused (attention_fwd / attention_bwd), beside the default
    kernel=unfused
    case $mode in *+fused) kernel=fused mode=${mode%+fused} ;; esac
    case $mode in
    fp32) prec=fp32 tf32=false ;; # exact fp32 GEMMs (CUDA cores)
    tf32) prec=fp32 tf32=true ;;  # the default: TF32 where the card has it
    *) prec=$mode tf32=true ;;
    esac
    if BERTRAIN_CUDA_TF32= "$BERTRAIN" bench --preset $preset --seq 128 --batch 32 --precision $prec \
        --set tf32=$tf32 --set model.attention_kernel=$kernel --backend "$DEV" > "$log" 2>&1; then
        sps=$(sed -n 's/^samples\/s: //p' "$log")
        tfl=$(sed -n 's/^TFLOP\/s: //p' "$log")
        mem=$(sed -n 's/^activations: \([0-9.]*\) MB.*/\1/p' "$log")
        on=0
        grep -q '^fp32 GEMMs: TF32' "$log" && on=1
        record "$what" PASS "${sps:-?} samples/s, activations ${mem:-?} MB, $(mfu "${tfl:-x}" "$card" $prec $on)"
    elif grep -qi 'out of .*memory\|out of memory' "$log"; then
        record "$what" SKIP "out of device memory: $(tail -1 "$log")"
    else
        tail -20 "$log"
        record "$what" FAIL "bertrain bench failed (log above)"
    fi
done; done

# ---- 3b. CUDA Graphs against launches op by op ----
graphs_bench() { # GRAPHS -> the bench's log in $tmp/bench-graphs-GRAPHS.log; status
    BERTRAIN_CUDA_GRAPHS=$1 BERTRAIN_CUDA_TF32= "$BERTRAIN" bench --preset base --seq 128 --batch 32 \
        --precision bf16 --steps 4 --warmup 3 --backend "$DEV" > "$tmp/bench-graphs-$1.log" 2>&1
}
what="CUDA Graphs (bench base bf16, seq 128, batch 32)"
if graphs_bench 1 && graphs_bench 0; then
    on=$(grep '^last step:' "$tmp/bench-graphs-1.log") off=$(grep '^last step:' "$tmp/bench-graphs-0.log")
    launches=$(sed -n 's/^a step: \([0-9.]*\) launches.*/\1/p' "$tmp/bench-graphs-1.log")
    speeds="$(sed -n 's/^samples\/s: //p' "$tmp/bench-graphs-1.log") samples/s with graphs, $(sed -n 's/^samples\/s: //p' "$tmp/bench-graphs-0.log") without"
    if [ -n "$on" ] && [ "$on" = "$off" ] && [ "$launches" = 1.0 ]; then
        record "$what" PASS "$speeds; 1 launch a step; the same bits"
    else
        record "$what" FAIL "$speeds; $launches launches a step; '$on' with graphs, '$off' without"
    fi
else
    tail -20 "$tmp/bench-graphs-1.log" "$tmp/bench-graphs-0.log"
    record "$what" FAIL "bertrain bench failed (logs above)"
fi

# ---- 3c. the GEMM epilogues on cuBLASLt ----
epilogue_bench() { # UNFUSED -> the bench's log in $tmp/bench-epilogue-UNFUSED.log; status
    BERTRAIN_CUDA_TF32= "$BERTRAIN" bench --preset base --seq 128 --batch 32 --precision bf16 \
        --steps 2 --warmup 1 --profile --unfused "$1" --backend "$DEV" \
        > "$tmp/bench-epilogue-$1.log" 2>&1
}
what="GEMM epilogues on cuBLASLt (bench base bf16, seq 128, batch 32)"
if epilogue_bench none && epilogue_bench epilogue; then
    on="$tmp/bench-epilogue-none.log" off="$tmp/bench-epilogue-epilogue.log"
    speeds="$(sed -n 's/^samples\/s: //p' "$on") samples/s with them, $(sed -n 's/^samples\/s: //p' "$off") without"
    lacked=$(grep 'cuBLASLt has no' "$on" | head -1)
    calls=$(awk '$1 == "gemm16_bias" || $1 == "gemm16_bias_grad" { printf "%s %s; ", $1, $2 }' "$on")
    l_on=$(sed -n 's/^last step: loss \([^,]*\),.*/\1/p' "$on")
    l_off=$(sed -n 's/^last step: loss \([^,]*\),.*/\1/p' "$off")
    if [ -z "$lacked" ] && [ -n "$calls" ] && [ -n "$l_on" ] && [ -n "$l_off" ] &&
        awk -v a="$l_on" -v b="$l_off" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-3 * b) }'; then
        record "$what" PASS "$speeds; calls a step: $calls loss $l_on against $l_off"
    else
        record "$what" FAIL "$speeds; ${lacked:-no fallback}; calls a step: ${calls:-none}; loss $l_on against $l_off"
    fi
else
    tail -20 "$tmp/bench-epilogue-none.log" "$tmp/bench-epilogue-epilogue.log"
    record "$what" FAIL "bertrain bench failed (logs above)"
fi

# ---- 4. compute-sanitizer (optional) ----
# Memory accesses and races only: API calls that return an error are bertrain's
# to check (each is, with file:line), and the conformance suite makes some on
# purpose (the out-of-memory case of test_memory), which memcheck would count.
san=$(command -v compute-sanitizer 2>/dev/null || true)
for d in "${CUDA_HOME:-}" /usr/local/cuda; do
    [ -n "$san" ] || [ -z "$d" ] || [ ! -x "$d/bin/compute-sanitizer" ] || san="$d/bin/compute-sanitizer"
done
for tool in memcheck racecheck; do
    if [ -z "$san" ]; then
        record "compute-sanitizer $tool" SKIP "compute-sanitizer not installed"
    elif BERTRAIN_CUDA_TF32= "$san" --tool $tool --report-api-errors no --error-exitcode 99 "$CONFORMANCE" --backend "$DEV" \
            --quick > "$tmp/san-$tool.log" 2>&1; then
        record "compute-sanitizer $tool" PASS "conformance --quick: $(grep 'SUMMARY' "$tmp/san-$tool.log" | tail -1)"
    else
        # every report: the lines of the sanitizer but its banner and summary
        grep -E '^=+ ' "$tmp/san-$tool.log" | grep -v -E 'COMPUTE-SANITIZER|SUMMARY' | head -60
        record "compute-sanitizer $tool" FAIL "$(grep 'SUMMARY' "$tmp/san-$tool.log" | tail -1)"
    fi
done

summary_end "$DEV, $card"
