#!/bin/sh
# bertrain's CPU backend beside PyTorch (Debian's python3-torch) on the same
# machine in the same run: training samples/s for a preset at one sequence
# length, each measured twice, alternating, so machine noise shows.
#   scripts/bench-vs-torch.sh PRESET SEQ BATCH STEPS [THREADS]
set -eu
cd "$(dirname "$0")/.."
preset=$1 seq=$2 batch=$3 steps=$4 threads=${5:-$(nproc)}
py=${TORCH_PYTHON:-/usr/bin/python3}
echo "| preset | seq | batch | threads | engine | samples/s (run 1) | samples/s (run 2) |"
echo "|---|---|---|---|---|---|---|"
b1= b2= t1= t2=
for round in 1 2; do
    b=$(OMP_NUM_THREADS=$threads ./bertrain bench --preset "$preset" --seq "$seq" --batch "$batch" \
        --steps "$steps" --warmup 1 --threads "$threads" | sed -n 's/^samples\/s: //p')
    t=$("$py" scripts/bench_torch.py --preset "$preset" --seq "$seq" --batch "$batch" \
        --steps "$steps" --warmup 1 --threads "$threads" | sed -n 's/^samples\/s: //p')
    if [ $round = 1 ]; then b1=$b t1=$t; else b2=$b t2=$t; fi
done
echo "| $preset | $seq | $batch | $threads | bertrain cpu | $b1 | $b2 |"
echo "| $preset | $seq | $batch | $threads | PyTorch $("$py" -c 'import torch; print(torch.__version__)') | $t1 | $t2 |"
