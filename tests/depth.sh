#!/bin/sh
# The depth experiment, fast (docs/STABILITY.md has the full one): a 12-layer,
# hidden-64 model at lr 5e-3 constant (no warmup), 120 steps of 64 x 32 tokens
# on the synthetic successor corpus of scripts/depth-experiment.sh. Post-LN
# stays on the unigram plateau (ln 400 = 6.0: mean logged loss at steps
# 90-120 above 5.85), Pre-LN and Admin train (below 5.5). The same seed and data for
# all three, so the gap is the norm placement's.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
command -v python3 > /dev/null 2>&1 || skip "no python3 (it writes the synthetic corpus)"
export OMP_NUM_THREADS=1 # the three runs side by side, one thread each
for n in post pre admin; do
    BERTRAIN="$BERTRAIN" sh scripts/depth-experiment.sh "$tmpdir/$n" 12 5e-3 120 "$n" > "$tmpdir/$n.out" 2>&1 &
done
wait
for n in post pre admin; do
    [ -s "$tmpdir/$n/$n.dat" ] || { cat "$tmpdir/$n.out" "$tmpdir/$n/$n.log"; fail "the $n run failed"; }
done
# logged every 10 steps: the mean of steps 90, 100, 110 and 120
tail_mean() { awk '$1 > 80 { s += $2; n++ } END { if (n == 4) printf "%.4f", s / n }' "$tmpdir/$1/$1.dat"; }
post=$(tail_mean post) pre=$(tail_mean pre) admin=$(tail_mean admin)
echo "mean loss at steps 90-120: post $post, pre $pre, admin $admin"
[ -n "$post" ] && [ -n "$pre" ] && [ -n "$admin" ] || fail "missing losses"
awk -v p="$post" 'BEGIN { exit !(p > 5.85) }' || fail "Post-LN left the plateau ($post): the experiment no longer shows the failure"
awk -v a="$pre" -v b="$admin" 'BEGIN { exit !(a < 5.5 && b < 5.5) }' ||
    fail "Pre-LN ($pre) or Admin ($admin) did not train below 5.5"
echo "PASS: at depth and a high learning rate Post-LN stalls, Pre-LN and Admin train"
