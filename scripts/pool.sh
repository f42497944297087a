#!/bin/sh
# An emulated pool on one machine: run `mpiexec MPIEXEC-ARGS` in a private
# network namespace whose loopback carries at most RATE (tc's tbf: "1gbit",
# "100mbit"), with LATENCY the most a packet may wait in tbf's queue ("20ms"),
# and Open MPI on TCP over that loopback only (no shared memory). Every byte
# between ranks then crosses the limited link, as between the nodes of a pool
# joined by Ethernet. The kernel here has no netem, so LATENCY bounds queueing
# only and adds no fixed delay. Needs root (or an unprivileged user namespace
# that allows network namespaces), iproute2 and Open MPI.
# Usage: scripts/pool.sh RATE LATENCY -- MPIEXEC-ARGS...
set -eu
if [ $# -lt 4 ] || [ "$3" != "--" ]; then
    echo "usage: scripts/pool.sh RATE LATENCY -- MPIEXEC-ARGS..." >&2
    exit 2
fi
rate=$1 latency=$2
shift 3
for tool in unshare ip tc mpiexec; do
    command -v "$tool" > /dev/null 2>&1 || { echo "pool: no $tool (apt-get install util-linux iproute2 openmpi-bin)" >&2; exit 2; }
done
export POOL_RATE="$rate" POOL_LATENCY="$latency"
exec unshare -n sh -c '
    set -e
    ip link set lo up
    tc qdisc add dev lo root tbf rate "$POOL_RATE" burst 128kb latency "$POOL_LATENCY"
    exec mpiexec --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "$@"
' pool "$@"
