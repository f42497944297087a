#!/bin/sh
# 20 training steps of the tiny model on the demo data, dropout on, on the
# OpenCL backend and on the CPU backend: every step's loss agrees within 1e-4
# relative, and the final parameters within 1e-4 relative L2. Skips (77)
# without an OpenCL build or device (BERTRAIN_TEST_OPENCL_DEVICE, default
# opencl:0:0: PoCL's CPU device where there is no GPU).
# Also: a device by name, and a CLBlast tuning file named in the start-up lines.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
spec=${BERTRAIN_TEST_OPENCL_DEVICE:-opencl:0:0}
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=2}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT
"$BERTRAIN" version | grep -q "opencl" || skip "bertrain was built without OpenCL (configure --with-opencl)"
"$BERTRAIN" bench --preset tiny --seq 16 --batch 1 --steps 1 --warmup 0 --backend "$spec" \
    > "$tmpdir/probe" 2>&1 || skip "no OpenCL device $spec: $(tail -1 "$tmpdir/probe")"

# a device by name substring: the device name of $spec (any case) picks it, or
# names every device that shares it; a name nothing has is one clear line
name=$("$BERTRAIN" devices | sed -n "s/^  $spec  \(.*\) \[.*\]\$/\1/p")
[ -n "$name" ] || fail "bertrain devices does not list $spec"
upper=$(printf '%s' "$name" | tr '[:lower:]' '[:upper:]')
if "$BERTRAIN" bench --preset tiny --seq 16 --batch 1 --steps 1 --warmup 0 \
        --backend "opencl:$upper" > "$tmpdir/byname" 2>&1; then
    grep -qF "($name)" "$tmpdir/byname" || { cat "$tmpdir/byname"; fail "opencl:NAME picked another device"; }
    echo "ok   opencl:$upper selects $spec ($name)"
else
    grep -q "devices match" "$tmpdir/byname" || { cat "$tmpdir/byname"; fail "opencl:NAME failed"; }
    echo "ok   opencl:$upper: several devices share the name: $(cat "$tmpdir/byname")"
fi
rc=0
"$BERTRAIN" bench --preset tiny --seq 16 --batch 1 --steps 1 --warmup 0 \
    --backend opencl:no-such-device-xyz > "$tmpdir/noname" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$(wc -l < "$tmpdir/noname")" -eq 1 ] &&
    grep -q "no OpenCL device name or vendor contains 'no-such-device-xyz'" "$tmpdir/noname" ||
    { cat "$tmpdir/noname"; fail "an unknown device name must give one clear line and fail"; }
echo "ok   opencl:no-such-device-xyz: $(cat "$tmpdir/noname")"

# a CLBlast tuning file for this device (BERTRAIN_CLBLAST_TUNING; the shipped
# file's parameters under this device's name) is named in train's device line
# and bench's "tuning:" line, and says nothing on stderr; "none" loads none
tuning="$tmpdir/tuning.json"
sed "s/\"device\": \"[^\"]*\"/\"device\": \"$(printf '%s' "$name" | sed 's/[\/&]/\\&/g')\"/" \
    backends/opencl/tuning/pthread_skylake_avx512_intel_r_xeon_r_processor.json > "$tuning"
one_step() { # TUNING NAME: one training step on $spec with BERTRAIN_CLBLAST_TUNING=TUNING
    BERTRAIN_CLBLAST_TUNING=$1 "$BERTRAIN" train tests/fixtures/base.json --set train_steps=1 \
        --set data.seq_len=16 --set data.valid='""' --set device="\"$spec\"" \
        --set output_dir="\"$tmpdir/$2\"" > "$tmpdir/$2.out" 2> "$tmpdir/$2.err" ||
        { cat "$tmpdir/$2.err"; fail "one step with BERTRAIN_CLBLAST_TUNING=$1 failed"; }
}
one_step "$tuning" tuned
grep -qF "(opencl; CLBlast tuning for Xgemm from $tuning)" "$tmpdir/tuned.out" && [ ! -s "$tmpdir/tuned.err" ] ||
    { cat "$tmpdir/tuned.out" "$tmpdir/tuned.err"; fail "the tuning loaded is not named in the device line alone"; }
one_step none untuned
grep -q "^bertrain: device .* (opencl); " "$tmpdir/untuned.out" ||
    { cat "$tmpdir/untuned.out"; fail "BERTRAIN_CLBLAST_TUNING=none: the device line names a tuning"; }
BERTRAIN_CLBLAST_TUNING=$tuning "$BERTRAIN" bench --preset tiny --seq 16 --batch 1 --steps 1 --warmup 0 \
    --backend "$spec" > "$tmpdir/tuned-bench" 2>&1
grep -qxF "tuning: CLBlast tuning for Xgemm from $tuning" "$tmpdir/tuned-bench" ||
    { cat "$tmpdir/tuned-bench"; fail "bench does not name the tuning it loaded"; }
echo "ok   a tuning file is named in the start-up lines: $(grep -o '(opencl; CLBlast tuning[^)]*)' "$tmpdir/tuned.out")"

for dev in cpu "$spec"; do
    name=${dev%%:*}
    "$BERTRAIN" train tests/fixtures/base.json --set train_steps=20 --set steps_per_print=1 \
        --set data.seq_len=64 --set data.valid='""' --set device="\"$dev\"" \
        --set output_dir="\"$tmpdir/$name\"" > "$tmpdir/$name.log" 2>&1 ||
        { cat "$tmpdir/$name.log"; fail "training on $dev failed"; }
    grep '"loss": ' "$tmpdir/$name/metrics.jsonl" | sed 's/.*"loss": \([^,}]*\).*/\1/' \
        > "$tmpdir/$name.loss"
    [ "$(wc -l < "$tmpdir/$name.loss")" -eq 20 ] ||
        fail "$dev: expected 20 per-step losses in metrics.jsonl, got $(wc -l < "$tmpdir/$name.loss")"
done
grep "device\|steps in" "$tmpdir/opencl.log"
paste "$tmpdir/cpu.loss" "$tmpdir/opencl.loss" | awk '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > m) m = r
      printf "step %2d  cpu %s  opencl %s  rel %.2e\n", NR, $1, $2, r }
    END { printf "max loss rel diff %.3e\n", m; exit !(m <= 1e-4) }' ||
    fail "per-step losses differ by more than 1e-4 relative"
"$top_builddir/tests/c/st_compare" "$tmpdir/cpu/ckpt-00000020/model.safetensors" \
    "$tmpdir/opencl/ckpt-00000020/model.safetensors" 1e-4 ||
    fail "final parameters differ by more than 1e-4 relative L2"
echo "PASS: 20 steps on $spec match the CPU backend"
