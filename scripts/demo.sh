#!/bin/sh
# README command 1: install what is missing, build, turn the bundled Jane
# Austen corpus into shards, pretrain the tiny model on the CPU backend, and
# print the held-out MLM accuracy beside the frequency baseline.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh build
[ -x configure ] || autoreconf -fi
[ -f Makefile ] || ./configure
make -j"$(nproc)"
# raw text -> shards with the bundled vocab (built from this corpus by
# `bertrain vocab --size 8000 --lowercase`), then train and evaluate
./bertrain prep --vocab data/demo/vocab.txt --lowercase --out runs/demo-data data/corpus/*.txt
exec ./bertrain train examples/demo.json --set data.train='"runs/demo-data/train.shard"' \
    --set data.valid='"runs/demo-data/valid.shard"' "$@"
