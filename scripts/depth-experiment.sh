#!/bin/sh
# The depth experiment of docs/STABILITY.md: a deep, narrow BERT trained at a
# high learning rate with no warmup, once per norm placement (post, pre,
# admin, and admin_profile: Admin with the profiled omega), on a synthetic corpus where every word has one fixed successor (so a
# masked word is predictable from its neighbours and a working encoder drives
# the MLM loss far below the unigram plateau, ln 400 = 6.0, within a few
# hundred steps). Writes OUT/<norm>/metrics.jsonl, OUT/summary.txt and, with
# gnuplot, OUT/depth.png (the loss curves).
# Usage: scripts/depth-experiment.sh OUT [LAYERS] [LR] [STEPS] [NORMS...]
set -eu
out=${1:?usage: depth-experiment.sh OUT [LAYERS] [LR] [STEPS] [NORMS...]}
layers=${2:-24} lr=${3:-2e-3} steps=${4:-300}
shift $(( $# < 4 ? $# : 4 ))
norms=${*:-post pre admin admin_profile}
top=$(cd "$(dirname "$0")/.." && pwd)
BERTRAIN=${BERTRAIN:-$top/bertrain}
mkdir -p "$out/data"
if [ ! -s "$out/data/shards/train.shard" ]; then
    python3 - "$out/data/train.txt" <<'PY'
import random, sys
random.seed(7)
words = []
while len(words) < 400:  # pronounceable 4-letter words, one WordPiece token each
    w = "".join(random.choice(s) for s in ("bcdfghjklmnprstvz", "aeiou") * 2)
    if w not in words:
        words.append(w)
succ = dict(zip(words, random.sample(words, len(words))))
with open(sys.argv[1], "w") as f:
    for _ in range(20000):
        w, line = random.choice(words), []
        for _ in range(40):
            line.append(w)
            w = succ[w]
        f.write(" ".join(line) + ".\n")
PY
    "$BERTRAIN" vocab --size 600 --out "$out/data/vocab.txt" --lowercase "$out/data/train.txt" > /dev/null
    "$BERTRAIN" prep --vocab "$out/data/vocab.txt" --lowercase --out "$out/data/shards" \
        "$out/data/train.txt" > /dev/null
fi
cat > "$out/config.json" <<JSON
{
  "model": {"vocab_size": 600, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 256,
            "max_position_embeddings": 64, "num_hidden_layers": $layers, "layer_norm_eps": 1e-6},
  "data": {"train": "$out/data/shards/train.shard", "vocab": "$out/data/vocab.txt", "seq_len": 32},
  "train_batch_size": 64, "train_micro_batch_size_per_gpu": 64, "train_steps": $steps,
  "steps_per_print": 10, "seed": 42,
  "optimizer": {"type": "AdamW", "params": {"lr": $lr, "betas": [0.9, 0.98], "eps": 1e-6, "weight_decay": 0.01}},
  "scheduler": {"type": "constant"},
  "gradient_clipping": 1.0,
  "guard": {"loss_spike_factor": 0, "max_bad_steps": 1000000, "window": 1000000}
}
JSON
: > "$out/summary.txt"
for n in $norms; do
    case $n in # admin_profile: Admin with the profiled omega instead of the closed form
        admin_profile) set -- --set model.norm='"admin"' --set model.admin_init='"profile"';;
        *) set -- --set model.norm="\"$n\"";;
    esac
    "$BERTRAIN" train "$out/config.json" "$@" --set output_dir="\"$out/$n\"" \
        > "$out/$n.log" 2>&1 || echo "$n: exit $?" >> "$out/summary.txt"
    grep -o '"step": [0-9]*, "loss": [^,]*' "$out/$n/metrics.jsonl" |
        sed 's/"step": \([0-9]*\), "loss": \(.*\)/\1 \2/' > "$out/$n.dat"
    awk -v n="$n" '{ if ($1 > last_step - 50) { s += $2; k++ } last_step = $1; all[NR] = $0 }
        END { s = 0; k = 0; for (i = 1; i <= NR; i++) { split(all[i], f, " "); if (f[1] > last_step - 50) { s += f[2]; k++ } }
              printf "%s: final loss %.4f, mean over the last 50 steps %.4f\n", n, f[2], s / k }' \
        "$out/$n.dat" >> "$out/summary.txt"
done
cat "$out/summary.txt"
if command -v gnuplot > /dev/null 2>&1; then
    plots="" && for n in $norms; do plots="$plots${plots:+, }'$out/$n.dat' using 1:2 with lines lw 2 title '$n'"; done
    gnuplot <<GP
set terminal pngcairo size 900,560 font ",11" noenhanced
set output "$out/depth.png"
set title "MLM loss, $layers layers x hidden 64, lr $lr constant (no warmup), batch 64 x 32 tokens"
set xlabel "step"; set ylabel "training loss"; set grid; set key top right
set yrange [0:10]
plot $plots, log(400) with lines dt 2 lc rgb "gray" title "unigram plateau ln 400"
GP
    echo "plot: $out/depth.png"
else
    echo "note: no gnuplot (apt-get install gnuplot-nox): no plot"
fi
