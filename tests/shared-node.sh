#!/bin/sh
# The CPU backend on a shared node, by counts, never times:
#  1. the device line says the threads follow the CPUs the process gets;
#  2. a 2-thread bench of BERT-tiny (seq 10, batch 200: the demo's shape,
#     small ops, many barriers a step) uses 1.5 threads or fewer on average
#     beside a busy process at normal priority (the governor gives the
#     contended thread back: cpu_govern_threads), and 1.9 or more idle
#     (checked only where other processes used under 0.15 CPUs meanwhile),
#     and back at 2 threads at the end of a run whose busy neighbour ends
#     once the run has used 1 s of CPU (the governor looks at the idle CPUs
#     before it tries a thread more; a SKIP where the run never dropped a
#     thread);
#  3. in a cgroup with a CPU quota of 1 CPU (cgroup v1 cpu controller or v2
#     cpu.max, as root), the default is 1 thread and the line says why;
#  4. with 2 MPI ranks on this node, each rank's default takes half the
#     usable CPUs and the line says so;
#  5. on OpenCL (PoCL here), the thread that issues the ops uses under 10%
#     of a step's time as CPU time: it sleeps while it waits for the device.
# Parts that cannot run here (2 CPUs or fewer than 2 usable, no writable
# cgroup, no MPI, no OpenCL) are SKIPs with the reason. CUDA's blocking wait
# is test_cuda_emu sync-flags (tests/cuda-emu.sh).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
unset OMP_NUM_THREADS

tiny="--preset tiny --seq 16 --batch 2 --steps 1 --warmup 0 --backend cpu"

# ---- 1. the device line ----
l=$("$BERTRAIN" bench $tiny 2>&1 | head -1)
echo "$l" | grep -q "; fewer while others take them))$" || fail "the device line does not say the threads follow the CPUs: $l"
echo "ok   the device line: $(echo "$l" | grep -o "CPU reference (.*")"

# ---- 2. the threads in use, idle and beside a busy process ----
busy=""
trap 'kill $busy 2> /dev/null; rm -rf "$tmpdir"' EXIT # lib.sh's clean-up too
units() { # the mean threads in use over 15 steps of a 2-thread bench at the demo's shape
    "$BERTRAIN" bench --preset tiny --seq 10 --batch 200 --steps 15 --warmup 1 --backend cpu \
        --threads 2 > "$tmpdir/u" 2>&1 || { tail -5 "$tmpdir/u"; fail "bench failed"; }
    sed -n 's/^compute units in use: \([0-9.]*\) a step on average.*/\1/p' "$tmpdir/u"
}
if [ "$(nproc)" -lt 2 ]; then
    skip_part "the threads in use: this machine has $(nproc) CPU"
else
    # What other processes used: the machine's busy time (/proc/stat) less
    # this shell's children's CPU time. Both functions run in this shell, not
    # in a subshell ($(...)), where 'times' would see none of its children.
    busy_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
    own_seconds() { # into FILE: this shell's children's user + system time
        times > "$tmpdir/times"
        awk 'NR == 2 { n = split($0, f, /[ ms]+/); t = 0
            for (i = 1; i < n; i += 2) t += f[i] * 60 + f[i + 1]; print t }' "$tmpdir/times" > "$1"; }
    mark() { mark_j=$(busy_jiffies) mark_w=$(date +%s.%N); own_seconds "$tmpdir/mark"; }
    # others_since [TICKS]: $others = the CPUs other processes used on average
    # since mark (TICKS: the CPU time, in clock ticks, that a child still
    # running at mark had used by then: ours, not theirs)
    others_since() {
        now_j=$(busy_jiffies) now_w=$(date +%s.%N); own_seconds "$tmpdir/now"
        others=$(awk -v j="$((now_j - mark_j))" -v hz="$(getconf CLK_TCK)" -v o0="$(cat "$tmpdir/mark")" \
            -v o1="$(cat "$tmpdir/now")" -v b0="${1:-0}" -v w0="$mark_w" -v w1="$now_w" \
            'BEGIN { printf "%.2f", (j / hz - (o1 - o0 - b0 / hz)) / (w1 - w0) }')
    }
    mark
    idle=$(units) && cp "$tmpdir/u" "$tmpdir/idle"
    others_since
    idle_others=$others
    sh -c 'while :; do :; done' &
    busy=$!
    contended=$(units)
    kill $busy 2> /dev/null || true
    [ -n "$idle" ] && [ -n "$contended" ] || fail "bench printed no compute units in use"
    awk -v c="$contended" 'BEGIN { exit !(c <= 1.5) }' ||
        fail "threads in use: $contended a step beside a busy process (want <= 1.5)"
    echo "ok   threads in use a step beside a busy process: $contended"
    # idle: only where nothing else ran (make -j check runs tests side by side):
    # other processes used under 0.15 CPUs on average during that run
    if awk -v x="$idle_others" 'BEGIN { exit !(x < 0.15) }'; then
        awk -v i="$idle" 'BEGIN { exit !(i >= 1.9) }' || fail "threads in use: $idle a step idle (want >= 1.9; others used $idle_others CPUs)"
        echo "ok   threads in use a step, idle: $idle (others used $idle_others CPUs)"
        # the busy process ends once the run has used 1 s of CPU: the governor
        # takes the core back
        # (checked where other processes used under 0.15 CPUs after it ended:
        # the machine's busy time less the bench's CPU time over that stretch,
        # and where the run did drop a thread: its mean is under 2)
        sh -c 'while :; do :; done' &
        busy=$!
        "$BERTRAIN" bench --preset tiny --seq 10 --batch 200 --steps 90 --warmup 1 --backend cpu \
            --threads 2 > "$tmpdir/back" 2>&1 &
        bench=$!
        # until the bench has used 1 s of CPU time (its steps have begun, beside
        # the busy process: a slow start-up cannot outlast the neighbour)
        ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2> /dev/null || echo "$2"; } # PID's CPU time, or $2 once it ended
        hz=$(getconf CLK_TCK) i=0
        while [ "$(ticks "$bench" "$hz")" -lt "$hz" ] &&
            [ "$i" -lt 400 ]; do
            sleep 0.05
            i=$((i + 1))
        done
        kill $busy 2> /dev/null || true
        wait $busy 2> /dev/null || true
        mark
        b0=$(ticks "$bench" 0) # its CPU so far
        wait $bench || { tail -5 "$tmpdir/back"; fail "bench failed"; }
        others_since "$b0"
        after=$others
        back=$(sed -n 's/^compute units in use: \([0-9.]*\) a step on average, \([0-9]*\) at the end.*/\1 \2/p' "$tmpdir/back")
        if ! awk -v x="$after" 'BEGIN { exit !(x < 0.15) }'; then
            skip_part "threads in use after a busy process ended: other work ran beside it ($after CPUs on average)"
        elif ! awk -v m="${back% *}" 'BEGIN { exit !(m < 1.995) }'; then
            skip_part "threads in use after a busy process ended: the run never dropped a thread while it ran ($back: mean, at the end)"
        else
            [ "${back#* }" = 2 ] || fail "threads in use after a busy process ended: $back (mean, at the end; want 2 at the end; others used $after CPUs)"
            echo "ok   a busy process ends once the run has used 1 s of CPU: ${back% *} threads a step on average, ${back#* } at the end (others used $after CPUs after it)"
        fi
    else
        skip_part "threads in use idle: other work ran beside it ($idle_others CPUs on average)"
    fi
fi

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
    echo "$quota_line" | grep -q "(1 thread: a cgroup quota of 1.00 CPUs;" ||
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
    n=$(grep -c "shared by 2 ranks;" "$tmpdir/mpi.log" || true)
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
finish "the CPU backend sizes its threads to the CPUs it may use and gets"
