#!/bin/sh
# Start-up time of bertrain commands that need no ranks: the mean wall time of
# N runs of `bertrain version` and of `bertrain predict --help`, in ms.
#   sh scripts/bench-startup.sh [N]     (from a built tree; N default 50)
cd "$(dirname "$0")/.." || exit 1
n=${1:-50}
mean_ms() { # COMMAND...: mean wall time over n runs
    start=$(date +%s%N)
    i=0
    while [ $i -lt "$n" ]; do "$@" > /dev/null 2>&1; i=$((i + 1)); done
    echo $((($(date +%s%N) - start) / n / 1000000))
}
echo "bertrain version: $(mean_ms ./bertrain version) ms (mean of $n runs; $(./bertrain version))"
echo "bertrain predict --help: $(mean_ms ./bertrain predict --help) ms"
