#!/bin/sh
# Mixed backends under MPI: rank 0 on the CPU backend, rank 1 on OpenCL (PoCL
# here). The result equals one CPU rank with the whole batch within 1e-4
# relative L2, and "auto" shares give the faster rank the larger share and a
# faster step than the equal split.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
"$BERTRAIN" version | grep -q "; mpi)" || skip "bertrain was built without MPI"
"$BERTRAIN" version | grep -q "opencl" || skip "bertrain was built without OpenCL"
command -v mpiexec >/dev/null 2>&1 || skip "no mpiexec"
spec=${BERTRAIN_TEST_OPENCL_DEVICE:-opencl:0:0}
"$BERTRAIN" bench --preset tiny --seq 16 --batch 1 --steps 1 --warmup 0 --backend "$spec" \
    > "$tmpdir/probe" 2>&1 || skip "no OpenCL device $spec: $(tail -1 "$tmpdir/probe")"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=
export OMP_NUM_THREADS=1 POCL_MAX_PTHREAD_COUNT=1
MPI="mpiexec --oversubscribe --bind-to none"
common="--set train_steps=5 --set steps_per_print=1 --set data.seq_len=32 --set data.valid=\"\"
        --set train_batch_size=16 --set model.hidden_dropout_prob=0.1"

# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $common --set train_micro_batch_size_per_gpu=16 \
    --set output_dir="\"$tmpdir/one\"" > "$tmpdir/one.log" 2>&1 || fail "one CPU rank failed"
# shellcheck disable=SC2086
$MPI -n 2 "$BERTRAIN" train tests/fixtures/base.json $common --set train_micro_batch_size_per_gpu=8 \
    --set "devices=[\"cpu\", \"$spec\"]" --set output_dir="\"$tmpdir/mixed\"" \
    > "$tmpdir/mixed.log" 2>&1 || { cat "$tmpdir/mixed.log"; fail "mixed run failed"; }
grep "^ *[01] | " "$tmpdir/mixed.log"
grep -q "^ *1 | .* | opencl | " "$tmpdir/mixed.log" || fail "rank 1 did not run on OpenCL"
"$top_builddir/tests/c/st_compare" "$tmpdir/one/ckpt-00000005/model.safetensors" \
    "$tmpdir/mixed/ckpt-00000005/model.safetensors" 1e-4 || fail "CPU+OpenCL differs from one CPU rank"

# auto shares vs the equal split, same devices, side by side
for plan in equal auto; do
    extra=""
    [ $plan = auto ] && extra="--set distributed.shares=auto"
    # shellcheck disable=SC2086
    $MPI -n 2 "$BERTRAIN" train tests/fixtures/base.json $common --set train_steps=6 \
        --set train_micro_batch_size_per_gpu=8 --set "devices=[\"cpu\", \"$spec\"]" $extra \
        --set output_dir="\"$tmpdir/$plan\"" > "$tmpdir/$plan.log" 2>&1 ||
        { cat "$tmpdir/$plan.log"; fail "$plan run failed"; }
done
grep "^ *[01] | " "$tmpdir/auto.log"
s0=$(sed -n 's/^ *0 | .* | \([0-9]*\) | [0-9.]*$/\1/p' "$tmpdir/auto.log" | head -1)
s1=$(sed -n 's/^ *1 | .* | \([0-9]*\) | [0-9.]*$/\1/p' "$tmpdir/auto.log" | head -1)
rate() { grep '"loss"' "$1" | tail -5 | sed 's/.*"samples_per_s": \([^,]*\),.*/\1/' |
         awk '{ s += $1 } END { printf "%.2f", s / NR }'; }
r_eq=$(rate "$tmpdir/equal/metrics.jsonl")
r_auto=$(rate "$tmpdir/auto/metrics.jsonl")
echo "auto shares: cpu $s0, opencl $s1; samples/s equal split $r_eq, auto $r_auto"
[ -n "$s0" ] && [ -n "$s1" ] && [ "$s0" -gt "$s1" ] || fail "auto did not give the faster CPU rank more"
awk -v a="$r_auto" -v e="$r_eq" 'BEGIN { exit !(a > e) }' || fail "auto ($r_auto) not faster than equal ($r_eq)"
echo "PASS: mixed CPU+OpenCL equals one rank; auto shares beat the equal split"
