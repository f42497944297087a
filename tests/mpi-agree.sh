#!/bin/sh
# No rank out of step:
# - ranks started with different configs (hidden size, layers, micro-batch,
#   seed, learning rate, data path) stop before any work with exit 2 and one
#   bertrain line naming the first differing key, both values and the rank;
#   per-rank keys (device, cpu_threads) may differ;
# - a collective whose size differs between ranks stops the job (exit 2)
#   before a byte moves (tests/c/test_dist, a direct call of the dist layer);
# - a rank that stops responding (SIGSTOP) makes the others abort the job
#   after distributed.timeout_s, naming it, exit 4, while the waiting ranks
#   sleep instead of spinning (under 10% of a core).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
mpi_setup
common="--set steps_per_print=1 --set data.seq_len=32 --set data.valid=\"\" --set train_batch_size=16
        --set train_micro_batch_size_per_gpu=8 --set train_steps=2"

# two ranks: rank 1 gets the extra --set; expect exit 2 and WANT in bertrain's line
differ() {
    name=$1 extra=$2 want=$3
    # shellcheck disable=SC2086
    $MPI -n 1 "$BERTRAIN" train tests/fixtures/base.json $common --set output_dir="\"$tmpdir/$name\"" : \
        -n 1 "$BERTRAIN" train tests/fixtures/base.json $common --set output_dir="\"$tmpdir/$name\"" $extra \
        > "$tmpdir/$name.log" 2>&1
    rc=$?
    [ "$rc" -eq 2 ] || { cat "$tmpdir/$name.log"; fail "$name: exit $rc, not 2"; }
    [ "$(grep -c '^bertrain: ' "$tmpdir/$name.log")" -eq 1 ] || { cat "$tmpdir/$name.log"; fail "$name: not one bertrain line"; }
    grep -q "^bertrain: rank 1 (.*) differs from rank 0 before any work: $want (ranks differing from rank 0: 1)" \
        "$tmpdir/$name.log" || { cat "$tmpdir/$name.log"; fail "$name: no '$want'"; }
    grep -q "^step" "$tmpdir/$name.log" && fail "$name: a step ran"
    grep -qi "AddressSanitizer\|overflow\|Segmentation" "$tmpdir/$name.log" && fail "$name: memory error"
    echo "ok   $name: $(grep '^bertrain: rank 1' "$tmpdir/$name.log" | sed 's/ (ranks differing.*//')"
}
differ hidden "--set model.hidden_size=64" "model.hidden_size is 128 on rank 0 and 64 on rank 1"
differ layers "--set model.num_hidden_layers=3" "model.num_hidden_layers is 2 on rank 0 and 3 on rank 1"
differ micro "--set train_micro_batch_size_per_gpu=4" "train_micro_batch_size_per_gpu is 8 on rank 0 and 4 on rank 1"
differ seed "--set seed=43" "seed is 42 on rank 0 and 43 on rank 1"
differ lr "--set optimizer.params.lr=0.002" "optimizer.params.lr is 0.001 on rank 0 and 0.002 on rank 1"
cp data/demo/train.shard "$tmpdir/copy.shard"
differ path "--set data.train=\"$tmpdir/copy.shard\"" "data.train is \"data/demo/train.shard\" on rank 0 and \"$tmpdir/copy.shard\" on rank 1"

# per-rank keys may differ
# shellcheck disable=SC2086
$MPI -n 1 "$BERTRAIN" train tests/fixtures/base.json $common --set output_dir="\"$tmpdir/own\"" --set cpu_threads=1 : \
    -n 1 "$BERTRAIN" train tests/fixtures/base.json $common --set output_dir="\"$tmpdir/own\"" --set cpu_threads=2 \
    --set device='"cpu"' > "$tmpdir/own.log" 2>&1 || { cat "$tmpdir/own.log"; fail "per-rank cpu_threads and device were refused"; }
grep -q "^step      2" "$tmpdir/own.log" || { cat "$tmpdir/own.log"; fail "the per-rank run did not train"; }
echo "ok   device and cpu_threads may differ between ranks"

# a collective of different sizes: stopped before it runs
$MPI -n 2 "$top_builddir/tests/c/test_dist" sizes > "$tmpdir/sizes.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "the gradient all-reduce: this rank has 10[01] elements, other ranks between 100 and 101: the ranks run different models or configs" \
    "$tmpdir/sizes.log" && ! grep -q "reduced" "$tmpdir/sizes.log" ||
    { cat "$tmpdir/sizes.log"; fail "a size mismatch was not stopped (exit $rc)"; }
echo "ok   an all-reduce of 100 floats on rank 0 and 101 on rank 1 stops the job, exit 2"

# a stopped rank: the others back off, then abort naming it (Open MPI's own
# yielding is off, so that a rank that spins shows as CPU time even on a busy machine)
# shellcheck disable=SC2086
OMPI_MCA_mpi_yield_when_idle=0 $MPI -n 3 "$BERTRAIN" train tests/fixtures/base.json $common --set train_steps=100000 --set train_batch_size=24 \
    --set distributed.timeout_s=6 --set output_dir="\"$tmpdir/stop\"" > "$tmpdir/stop.log" 2>&1 &
job=$!
i=0
until grep -q "^step      3" "$tmpdir/stop.log"; do
    i=$((i + 1)); [ $i -lt 600 ] || { kill $job; fail "the 3-rank run never reached step 3"; }
    sleep 0.2
done
p0="" p1=""
for p in $(pgrep -f "output_dir=.$tmpdir/stop"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = bertrain ] || continue
    r=$(tr '\0' '\n' < "/proc/$p/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ "$r" = 0 ] && p0=$p
    [ "$r" = 1 ] && p1=$p
done
[ -n "$p0" ] && [ -n "$p1" ] || { kill $job; fail "cannot find the ranks' processes"; }
kill -STOP "$p1"
stopped=$(date +%s)
ticks() { awk '{print $14 + $15}' "/proc/$p0/stat"; }
t0=$(ticks); sleep 1; t0=$(ticks); sleep 3; t1=$(ticks) # rank 0 waits from the first second on
hz=$(getconf CLK_TCK)
wait $job
rc=$?
took=$(( $(date +%s) - stopped ))
kill -9 "$p1" 2>/dev/null
[ "$rc" -eq 4 ] || { cat "$tmpdir/stop.log"; fail "a stopped rank: exit $rc, not 4"; }
grep -q "^bertrain: rank 0 (.*): waited [0-9]* s in .* (collective #[0-9]*; distributed.timeout_s 6): rank 1 did not arrive (no answer in 5 s: stopped, hung or busy elsewhere); ranks 0, 2 are waiting; stopping the job" \
    "$tmpdir/stop.log" || { cat "$tmpdir/stop.log"; fail "the time-out did not name rank 1"; }
[ "$took" -le 30 ] || fail "the job took $took s to stop after the time-out of 6 s"
used=$(( (t1 - t0) * 100 / (3 * hz) ))
[ "$used" -lt 10 ] || fail "rank 0 used $used% of a core while waiting for the stopped rank"
echo "ok   SIGSTOPped rank 1: stopped in $took s (timeout 6 s + 5 s for answers), exit 4, rank 1 named; rank 0 used $used% of a core waiting"
echo "PASS: ranks agree before any work; size mismatches and stopped ranks stop the job"
