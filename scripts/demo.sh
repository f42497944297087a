#!/bin/sh
# README command 1: install what is missing, build, turn the bundled Jane
# Austen corpus into shards (5% of the chapters held out), pretrain a small
# BERT on the CPU backend with examples/demo.json, and show what it learned:
# held-out MLM accuracy beside the frequency baseline, and fill-mask
# predictions for held-out sentences, at every evaluation. Ends with the
# commands to run next. Extra arguments go to `bertrain train`
# (sh scripts/demo.sh --set train_steps=60).
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh build
[ -x configure ] || autoreconf -fi
[ -f Makefile ] || ./configure
make -j"$(nproc)"
# raw text -> shards with the bundled vocab (built from this corpus by
# `bertrain vocab --size 8000 --lowercase`)
./bertrain prep --vocab data/demo/vocab.txt --lowercase --valid-fraction 0.05 \
    --out runs/demo-data data/corpus/*.txt
# a new output directory each time: nothing of an earlier demo is overwritten
out=runs/demo n=1
while [ -e "$out" ]; do n=$((n + 1)) out=runs/demo-$n; done
start=$(date +%s)
./bertrain train examples/demo.json --set data.train='"runs/demo-data/train.shard"' \
    --set data.valid='"runs/demo-data/valid.shard"' --set output_dir="\"$out\"" "$@"
cat <<EOF

demo: trained and evaluated in $(($(date +%s) - start)) s; metrics in $out/metrics.jsonl. Next:
  scripts/plot-metrics $out/metrics.jsonl $out/curves.png     # loss and accuracy curves (apt-get install gnuplot-nox)
  ./bertrain predict $out "She was [MASK] to see him again."  # the model on your own sentence
  ./bertrain export $out $out-hf                              # a Hugging Face model (transformers' pipeline("fill-mask"))
EOF
