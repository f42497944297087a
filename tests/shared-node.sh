#!/bin/sh
# The CPU backend on a shared node, by counts, never times:
#  1. its threads wait passively by default: the device line says so, and
#     OMP_WAIT_POLICY from the environment is kept (and said);
#  2. beside a busy process at normal priority, a 2-thread bench of BERT-mini
#     makes at least 100 voluntary context switches a step (its threads sleep
#     at barriers), and at least 10x as many as the same bench with OpenMP's
#     own default (BERTRAIN_OMP_WAIT_SET=1 skips bertrain's set-up: threads
#     spin long before they sleep, 2 voluntary switches a step here), so a
#     return of spinning barriers fails here;
#  3. in a cgroup with a CPU quota of 1 CPU (cgroup v1 cpu controller or v2
#     cpu.max, as root), the default is 1 thread and the line says why;
#  4. with 2 MPI ranks on this node, each rank's default takes half the
#     usable CPUs and the line says so.
#  5. on OpenCL (PoCL here), the thread that issues the ops uses under 10%
#     of a step's time as CPU time: it sleeps while it waits for the device.
# Parts that cannot run here (no writable cgroup, no MPI, no OpenCL) are SKIPs
# with the reason. CUDA's blocking wait is test_cuda_emu sync-flags
# (tests/cuda-emu.sh).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
unset OMP_NUM_THREADS OMP_WAIT_POLICY GOMP_SPINCOUNT KMP_BLOCKTIME BERTRAIN_OMP_WAIT_SET

tiny="--preset tiny --seq 16 --batch 2 --steps 1 --warmup 0 --backend cpu"
line() { "$BERTRAIN" bench $tiny "$@" 2>&1 | head -1; }

# ---- 1. the wait policy ----
l=$(line)
echo "$l" | grep -q "threads wait passively))$" || fail "default: the device line does not say the threads wait passively: $l"
l2=$(OMP_WAIT_POLICY=active "$BERTRAIN" bench $tiny 2>&1 | head -1)
echo "$l2" | grep -q "threads spin (OMP_WAIT_POLICY)))$" || fail "OMP_WAIT_POLICY=active was not kept: $l2"
echo "ok   the threads wait passively by default; OMP_WAIT_POLICY from the environment is kept"

# ---- 2. sleeping, not spinning, beside a busy process ----
sh -c 'while :; do :; done' &
busy=$!
trap 'kill $busy 2> /dev/null; rm -rf "$tmpdir"' EXIT # lib.sh's clean-up too
switches() { # ENV...: voluntary context switches a step of a 2-thread mini bench
    env "$@" "$BERTRAIN" bench --preset mini --seq 64 --batch 8 --steps 2 --warmup 1 --backend cpu \
        --threads 2 > "$tmpdir/sw" 2>&1 || { tail -5 "$tmpdir/sw"; fail "bench failed"; }
    sed -n 's/^context switches a step: \([0-9.]*\) voluntary.*/\1/p' "$tmpdir/sw"
}
v=$(switches X=1) va=$(switches BERTRAIN_OMP_WAIT_SET=1)
kill $busy 2> /dev/null || true
[ -n "$v" ] && [ -n "$va" ] || fail "bench printed no context switches"
awk -v v="$v" -v a="$va" 'BEGIN { exit !(v >= 100 && v >= 10 * (a + 1)) }' ||
    fail "beside a busy process: $v voluntary switches a step by default, $va with OpenMP's default wait (want >= 100 and >= 10x)"
echo "ok   beside a busy process: $v voluntary context switches a step (threads sleep), $va with OpenMP's default wait (spinning)"

# ---- 3. a cgroup quota of 1 CPU ----
quota_line=""
if [ "$(id -u)" = 0 ] && [ -w /sys/fs/cgroup/cpu ] && [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    cg=/sys/fs/cgroup/cpu/bertrain-test-$$
    mkdir "$cg" && echo 100000 > "$cg/cpu.cfs_period_us" && echo 100000 > "$cg/cpu.cfs_quota_us" &&
        quota_line=$(sh -c "echo \$\$ > $cg/tasks && exec \"$BERTRAIN\" bench $tiny" 2>&1 | head -1)
    rmdir "$cg" 2> /dev/null || true
elif [ "$(id -u)" = 0 ] && [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
    cg=/sys/fs/cgroup/bertrain-test-$$
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu > /sys/fs/cgroup/cgroup.subtree_control 2> /dev/null || true
    mkdir "$cg" && echo "100000 100000" > "$cg/cpu.max" 2> /dev/null &&
        quota_line=$(sh -c "echo \$\$ > $cg/cgroup.procs && exec \"$BERTRAIN\" bench $tiny" 2>&1 | head -1)
    rmdir "$cg" 2> /dev/null || true
fi
if [ -z "$quota_line" ]; then
    skip_part "a cgroup with a CPU quota: not root, or no writable cpu controller here"
else
    echo "$quota_line" | grep -q "(1 thread: the cgroup's CPU quota of 1.00 CPUs;" ||
        fail "in a cgroup with 1 CPU: $quota_line"
    echo "ok   in a cgroup with a quota of 1 CPU: 1 thread, and the line says why"
fi

# ---- 4. two ranks on the node ----
if "$BERTRAIN" version | grep -q "; mpi)" && command -v mpiexec > /dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=
    out="$tmpdir/mpi"
    mpiexec --oversubscribe --bind-to none -n 2 "$BERTRAIN" train tests/fixtures/base.json \
        --set device='"cpu"' --set train_steps=1 --set train_micro_batch_size_per_gpu=16 \
        --set data.valid='""' --set output_dir="\"$out\"" \
        > "$tmpdir/mpi.log" 2>&1 || { tail -20 "$tmpdir/mpi.log"; fail "2 ranks: training failed"; }
    n=$(grep -c "shared by 2 ranks on this node" "$tmpdir/mpi.log" || true)
    [ "$n" -ge 1 ] || { cat "$tmpdir/mpi.log"; fail "2 ranks: no device line says the CPUs are shared by 2 ranks"; }
    echo "ok   2 ranks on this node: $(grep -m1 -o "CPU reference ([^;]*" "$tmpdir/mpi.log")"
else
    skip_part "2 ranks: no MPI build or mpiexec"
fi
# ---- 5. an OpenCL host thread does not spin while it waits ----
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=2}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT
if "$BERTRAIN" version | grep -q "opencl" &&
    "$BERTRAIN" bench --preset mini --seq 64 --batch 8 --steps 2 --warmup 1 --backend opencl:0:0 > "$tmpdir/cl" 2>&1; then
    ms=$(sed -n 's/^ms\/step: //p' "$tmpdir/cl") host=$(sed -n 's/^host thread CPU: \([0-9.]*\) ms a step/\1/p' "$tmpdir/cl")
    [ -n "$ms" ] && [ -n "$host" ] || fail "OpenCL: bench printed no step time or host thread CPU"
    awk -v h="$host" -v s="$ms" 'BEGIN { exit !(h < 0.1 * s) }' ||
        fail "OpenCL: the host thread used $host ms of CPU in a $ms ms step (it spins while it waits?)"
    echo "ok   OpenCL: the host thread used $host ms of CPU in a $ms ms step"
else
    skip_part "OpenCL: no OpenCL build or device opencl:0:0"
fi
finish "the CPU backend sleeps at barriers and sizes its threads to the CPUs it may use"
