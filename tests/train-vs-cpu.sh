#!/bin/sh
# 20 training steps of tests/fixtures/base.json on the CPU backend and on DEVICE,
# side by side (tests/gpu-check.sh's check 2, and the emulated CUDA device's
# in tests/cuda-emu.sh):
#  - fp32: the per-step losses within 1e-4 relative and the final parameters
#    within 1e-4 relative L2 (tests/c/st_compare);
#  - bf16 and fp16: per-step losses within 2e-2 relative (DEVICE multiplies
#    16-bit operands on tensor cores where it has them; the CPU keeps fp32
#    GEMMs over 16-bit-valued activations, so the runs drift apart a little).
# Prints one line per check, "CHECK<TAB>PASS|FAIL<TAB>DETAIL", and exits 1 when
# one failed.
#   sh tests/train-vs-cpu.sh DEVICE WORKDIR [--set KEY=VALUE]...
# (extra --set options shrink the runs, e.g. for an emulated device). Needs
# top_srcdir and top_builddir (or a built tree around it).
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
BERTRAIN="$top_builddir/bertrain"
DEV=$1 tmp=$2
shift 2
failed=0

record() { # CHECK RESULT DETAIL
    printf '%s\t%s\t%s\n' "$1" "$2" "$3"
    [ "$2" != FAIL ] || failed=1
}

train() { # train DEVICE OUTDIR [--set KEY=VALUE ...]
    dev=$1 out=$2
    shift 2
    (cd "$top_srcdir" && BERTRAIN_CUDA_TF32= "$BERTRAIN" train tests/fixtures/base.json \
        --set train_steps=20 --set data.seq_len=64 --set steps_per_print=1 \
        --set data.valid='""' --set device="\"$dev\"" --set output_dir="\"$out\"" --set tf32=false \
        "$@") > "$out.log" 2>&1
}

# per-step training losses of a metrics.jsonl: "STEP LOSS" lines
losses() {
    grep '"loss": ' "$1" | awk '{
        s = $0; sub(/.*"step": /, "", s); sub(/[,}].*/, "", s)
        l = $0; sub(/.*"loss": /, "", l); sub(/[,}].*/, "", l)
        print s, l }'
}

# ---- fp32 ----
if train cpu "$tmp/cpu" "$@" && train "$DEV" "$tmp/dev" "$@"; then
    losses "$tmp/cpu/metrics.jsonl" > "$tmp/cpu.loss"
    losses "$tmp/dev/metrics.jsonl" > "$tmp/dev.loss"
    verdict=$(paste "$tmp/cpu.loss" "$tmp/dev.loss" | awk '
        function abs(x) { return x < 0 ? -x : x }
        { n++
          if ($1 != $3) { bad = "step numbers differ at line " n; exit }
          m = abs($2) > abs($4) ? abs($2) : abs($4)
          r = m > 0 ? abs($2 - $4) / m : abs($2 - $4)
          if (n == 1 || r > worst) { worst = r; at = $1 } }
        END {
          if (bad != "") { print "FAIL", bad; exit }
          if (n != 20) { print "FAIL", "expected 20 logged steps, got " n; exit }
          printf "%s max relative difference %.2e at step %d over %d steps (tolerance 1e-4)\n",
                 worst <= 1e-4 ? "PASS" : "FAIL", worst, at, n }')
    record "CPU vs $DEV: 20 step losses" "${verdict%% *}" "${verdict#* }"
    # The criterion is the relative L2 over all parameters. st_compare's worst
    # tensor is usually an attention key bias, at a relative difference near
    # 1: its exact gradient is zero (softmax ignores a constant added to a row),
    # so AdamW turns rounding noise of either sign into lr-sized steps, on any
    # two backends; those values stay tiny next to the weights.
    st="$top_builddir/tests/c/st_compare"
    [ -x "$st" ] || (cd "$top_builddir" && make tests/c/st_compare) > "$tmp/make.log" 2>&1
    if [ ! -x "$st" ]; then
        record "CPU vs $DEV: final parameters" FAIL "tests/c/st_compare missing (run make check)"
    elif out=$("$st" "$tmp/cpu/ckpt-00000020/model.safetensors" \
            "$tmp/dev/ckpt-00000020/model.safetensors" 1e-4 2>&1); then
        record "CPU vs $DEV: final parameters" PASS "$out"
    else
        record "CPU vs $DEV: final parameters" FAIL "$out"
    fi
else
    for d in cpu dev; do
        [ -f "$tmp/$d.log" ] && { echo "--- $d run:"; tail -20 "$tmp/$d.log"; }
    done
    record "CPU vs $DEV: 20 step training" FAIL "a training run failed (log above)"
fi

# ---- bf16, fp16 ----
for p in bf16 fp16; do
    if train cpu "$tmp/cpu-$p" --set $p.enabled=true "$@" &&
        train "$DEV" "$tmp/dev-$p" --set $p.enabled=true "$@"; then
        losses "$tmp/cpu-$p/metrics.jsonl" > "$tmp/cpu-$p.loss"
        losses "$tmp/dev-$p/metrics.jsonl" > "$tmp/dev-$p.loss"
        verdict=$(paste "$tmp/cpu-$p.loss" "$tmp/dev-$p.loss" | awk '
            function abs(x) { return x < 0 ? -x : x }
            { n++; if ($1 != $3) { bad = 1; exit }
              r = abs($2 - $4) / (abs($2) > 0 ? abs($2) : 1); if (r > worst) worst = r }
            END { if (bad || n < 10) { print "FAIL", "steps differ or fewer than 10 logged (" n ")"; exit }
                  printf "%s max relative loss difference %.2e over %d steps (tolerance 2e-2)\n",
                         worst <= 2e-2 ? "PASS" : "FAIL", worst, n }')
        record "CPU vs $DEV: 20 steps $p" "${verdict%% *}" "${verdict#* }"
    else
        tail -5 "$tmp/dev-$p.log" 2>/dev/null
        record "CPU vs $DEV: 20 steps $p" FAIL "a training run failed (log above)"
    fi
done
exit $failed
