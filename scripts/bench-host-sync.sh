#!/bin/sh
# What a training step costs the host, per optimizer and depth: op calls,
# kernel launches, blocking reads, waits and the device memory peak, from
# train --profile 2 on a short run of tests/fixtures/base.json (seq 32, batch
# 16, no held-out data). Give two binaries to compare a change side by side.
#   sh scripts/bench-host-sync.sh DEVICE BERTRAIN [BERTRAIN...]
# e.g. sh scripts/bench-host-sync.sh opencl:0:0 /tmp/before/bertrain ./bertrain
set -eu
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: sh scripts/bench-host-sync.sh DEVICE BERTRAIN [BERTRAIN...]" >&2; exit 2; }
dev=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| binary | optimizer | layers | op calls | launches | blocking reads | waits | memory peak |"
echo "|---|---|---|---:|---:|---:|---:|---:|"
for bin in "$@"; do
    for opt in AdamW Lamb; do
        for layers in 2 12; do
            out="$work/run"
            rm -rf "$out"
            "$bin" train tests/fixtures/base.json --set data.seq_len=32 --set train_batch_size=16 \
                --set train_micro_batch_size_per_gpu=16 --set data.valid='""' --set train_steps=3 \
                --set device="\"$dev\"" --set optimizer.type="\"$opt\"" \
                --set model.num_hidden_layers="$layers" --set output_dir="\"$out\"" --profile 2 \
                > "$work/log" 2>&1 || { tail -5 "$work/log"; exit 1; }
            grep '^per step' "$work/log" | sed -n "s#^per step: \([0-9.]*\) op calls, \([0-9.]*\) kernel launches, \([0-9.]*\) blocking reads, \([0-9.]*\) waits.*memory peak \(.*\)\$#| $bin | $opt | $layers | \1 | \2 | \3 | \4 | \5 |#p"
        done
    done
done
