#!/bin/sh
# Does a change leave training's results alone? Runs the demo's training
# (README command 1: prep of the bundled corpus, examples/demo.json) with two
# bertrain binaries on one device and compares what they wrote:
#  - metrics.jsonl, byte for byte once the wall-clock fields (samples_per_s,
#    tokens_per_s, data_time_frac, eta_s, eval_s) are taken out;
#  - the final checkpoint: model.safetensors and optim.bin byte for byte,
#    state.json once its run_id (random per run), output_dir (the two runs'
#    own) and checksum are taken out.
#   sh scripts/same-output.sh OLD_BERTRAIN NEW_BERTRAIN DEVICE WORKDIR [--set KEY=VALUE]...
# e.g. a build of the commit before a refactor against the build after it:
#   sh scripts/same-output.sh /tmp/before/bertrain ./bertrain cpu /tmp/same
#   sh scripts/same-output.sh /tmp/before/bertrain ./bertrain opencl:0:0 /tmp/same-cl
# Prints one line per compared file; exit 0 when all are identical.
set -u
cd "$(dirname "$0")/.." || exit 2
[ $# -ge 4 ] || { echo "usage: sh scripts/same-output.sh OLD NEW DEVICE WORKDIR [--set K=V]..." >&2; exit 2; }
old=$1 new=$2 dev=$3 work=$4
shift 4
mkdir -p "$work" || exit 2
"$new" prep --vocab data/demo/vocab.txt --lowercase --valid-fraction 0.05 \
    --out "$work/data" data/corpus/*.txt > "$work/prep.log" 2>&1 || { cat "$work/prep.log"; exit 1; }
for side in old new; do
    eval bin=\$$side
    rm -rf "$work/$side"
    "$bin" train examples/demo.json --set data.train="\"$work/data/train.shard\"" \
        --set data.valid="\"$work/data/valid.shard\"" --set device="\"$dev\"" \
        --set output_dir="\"$work/$side\"" "$@" > "$work/$side.log" 2>&1 ||
        { tail -20 "$work/$side.log"; echo "same-output: the $side binary failed"; exit 1; }
done
# drop the wall-clock fields (they differ between any two runs)
untimed() {
    sed -e 's/, "\(samples_per_s\|tokens_per_s\|data_time_frac\|eta_s\|eval_s\)": [^,}]*//g' "$1"
}
status=0
same() { # LABEL FILE-A FILE-B
    if cmp -s "$2" "$3"; then
        echo "same:    $1"
    else
        echo "DIFFERS: $1"
        status=1
    fi
}
untimed "$work/old/metrics.jsonl" > "$work/old.metrics"
untimed "$work/new/metrics.jsonl" > "$work/new.metrics"
same "metrics.jsonl without wall-clock fields ($(wc -l < "$work/new.metrics") lines)" \
    "$work/old.metrics" "$work/new.metrics"
last=$(ls -d "$work/new"/ckpt-* | tail -1)
last=${last##*/}
for f in model.safetensors optim.bin; do
    same "$last/$f" "$work/old/$last/$f" "$work/new/$last/$f"
done
for side in old new; do
    grep -v '"run_id"\|"output_dir"\|"state_crc32"' "$work/$side/$last/state.json" > "$work/$side.state"
done
same "$last/state.json without run_id, output_dir and its checksum" "$work/old.state" "$work/new.state"
exit $status
