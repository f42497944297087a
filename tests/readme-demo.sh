#!/bin/sh
# README command 1 as a new user runs it: `sh scripts/demo.sh` in a fresh
# `git clone` of this tree (its committed state: nothing that only a
# developer's tree has), shortened to 60 training steps. It must install,
# build, prepare the data, train, evaluate, print fill-mask predictions and
# the commands to run next, and exit 0.
. "$(dirname "$0")/lib.sh"
command -v git > /dev/null 2>&1 || skip "no git (apt-get install git) to clone the tree"
head=$(git -C "$top_srcdir" rev-parse --short HEAD 2>/dev/null) ||
    skip "$top_srcdir is not a git checkout (a release tarball): nothing to clone"
git clone -q "$top_srcdir" "$tmpdir/clone" || fail "git clone $top_srcdir failed"
[ -z "$(git -C "$top_srcdir" status --porcelain --untracked-files=no 2>/dev/null)" ] ||
    echo "note: $top_srcdir has uncommitted changes; this checks the committed state $head"
cd "$tmpdir/clone" || fail "no clone"
start=$(date +%s)
sh scripts/demo.sh --set train_steps=60 > "$tmpdir/demo.log" 2>&1
rc=$?
secs=$(($(date +%s) - start))
[ "$rc" -eq 0 ] || { tail -40 "$tmpdir/demo.log"; fail "sh scripts/demo.sh in a fresh clone of $head: exit $rc"; }
grep -q '^eval step 60 |' "$tmpdir/demo.log" || { tail -40 "$tmpdir/demo.log"; fail "no evaluation at step 60"; }
grep -q '^fill-mask step 60' "$tmpdir/demo.log" || { tail -40 "$tmpdir/demo.log"; fail "no fill-mask predictions at step 60"; }
grep -q 'bertrain predict' "$tmpdir/demo.log" && grep -q 'plot-metrics' "$tmpdir/demo.log" ||
    { tail -20 "$tmpdir/demo.log"; fail "the demo does not end with the commands to run next"; }
[ -s runs/demo/metrics.jsonl ] || fail "no runs/demo/metrics.jsonl"
tail -12 "$tmpdir/demo.log"
echo "PASS: README command 1 in a fresh clone of $head: built, trained 60 steps, evaluated ($secs s)"
