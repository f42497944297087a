#!/bin/sh
# README command 1 as a new user runs it: `sh scripts/demo.sh` in a fresh
# `git clone` of this tree (its committed state: nothing that only a
# developer's tree has), in full. It must install, build, prepare the data,
# train, and keep the README's promises:
#  - held-out MLM accuracy at least 2.5x the frequency baseline (always
#    predicting the most common training token), on a held-out set large
#    enough to be a measurement (at least 2000 masked tokens);
#  - fill-mask predictions for its held-out sentences at every evaluation;
#  - the commands to run next (plot, predict, export), which work.
# Without git (a release tarball), the demo's training runs from this build
# instead, and the test reports SKIP for the fresh-clone part.
. "$(dirname "$0")/lib.sh"
head=""
if is_git_checkout "$top_srcdir" && head=$(git -C "$top_srcdir" rev-parse --short HEAD 2>/dev/null); then
    git clone -q "$top_srcdir" "$tmpdir/clone" || fail "git clone $top_srcdir failed"
    [ -z "$(git -C "$top_srcdir" status --porcelain --untracked-files=no 2>/dev/null)" ] ||
        echo "note: $top_srcdir has uncommitted changes; this checks the committed state $head"
    cd "$tmpdir/clone" || fail "no clone"
    start=$(date +%s)
    sh scripts/demo.sh > "$tmpdir/demo.log" 2>&1
    rc=$?
    secs=$(($(date +%s) - start))
    [ "$rc" -eq 0 ] || { tail -40 "$tmpdir/demo.log"; fail "sh scripts/demo.sh in a fresh clone of $head: exit $rc"; }
    run=runs/demo
else
    skip_part "README command 1 in a fresh clone (no git, or $top_srcdir is not a git checkout)"
    cd "$top_srcdir" || fail "no source dir"
    "$BERTRAIN" prep --vocab data/demo/vocab.txt --lowercase --valid-fraction 0.05 \
        --out "$tmpdir/data" data/corpus/*.txt > "$tmpdir/demo.log" 2>&1 &&
        "$BERTRAIN" train examples/demo.json --set data.train="\"$tmpdir/data/train.shard\"" \
            --set data.valid="\"$tmpdir/data/valid.shard\"" --set output_dir="\"$tmpdir/run\"" \
            >> "$tmpdir/demo.log" 2>&1 || { tail -40 "$tmpdir/demo.log"; fail "the demo's training failed"; }
    run=$tmpdir/run
fi
grep -E '^(eval|fill-mask)|steps in' "$tmpdir/demo.log"

line=$(grep '"eval_mlm_acc"' "$run/metrics.jsonl" | tail -1)
[ -n "$line" ] || fail "no evaluation in $run/metrics.jsonl"
acc=$(echo "$line" | sed 's/.*"eval_mlm_acc": \([^,]*\),.*/\1/')
base=$(echo "$line" | sed 's/.*"eval_baseline_acc": \([^,]*\),.*/\1/')
masked=$(echo "$line" | sed 's/.*"eval_masked": \([0-9]*\).*/\1/')
[ "$masked" -ge 2000 ] || fail "the held-out set has only $masked masked tokens"
n_evals=$(grep -c '^eval step' "$tmpdir/demo.log")
n_fill=$(grep -c '^fill-mask step' "$tmpdir/demo.log")
n_sent=$(grep -c '\[MASK\]' examples/demo.json)
[ "$n_evals" -ge 2 ] && [ "$n_fill" -eq $((n_evals * n_sent)) ] ||
    fail "$n_fill fill-mask lines for $n_evals evaluations of $n_sent sentences"
awk -v a="$acc" -v b="$base" 'BEGIN { exit !(b > 0 && a >= 2.5 * b) }' ||
    fail "held-out accuracy $acc is not 2.5x the baseline $base"
ratio=$(awk -v a="$acc" -v b="$base" 'BEGIN { printf "%.4f = %.2fx the baseline %.4f", a, a / b, b }')
echo "ok   held-out MLM accuracy $ratio on $masked masked tokens; $n_fill fill-mask lines"

if [ -n "$head" ]; then
    for next in "scripts/plot-metrics $run/metrics.jsonl" "./bertrain predict $run" "./bertrain export $run"; do
        grep -q "^  $next" "$tmpdir/demo.log" || { tail -6 "$tmpdir/demo.log"; fail "the demo does not end with: $next ..."; }
    done
    ./bertrain predict "$run" "Elizabeth looked at her [MASK]." > "$tmpdir/predict.out" 2>&1 ||
        { cat "$tmpdir/predict.out"; fail "the predict command the demo suggests failed"; }
    ./bertrain export "$run" "$run-hf" > "$tmpdir/export.out" 2>&1 ||
        { cat "$tmpdir/export.out"; fail "the export command the demo suggests failed"; }
    echo "ok   next commands: $(sed -n 2p "$tmpdir/predict.out" | sed 's/^ *//'); export wrote $(ls "$run-hf" | wc -l) files"
    finish "README command 1 in a fresh clone of $head: built, trained and evaluated in $secs s; accuracy $ratio"
fi
finish "the demo's training: accuracy $ratio"
