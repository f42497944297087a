#!/bin/sh
# A one-node Slurm cluster on this machine (munged, slurmctld, slurmd with a
# private key, config, ports and state in $tmpdir), and the recipe
# examples/slurm/train.sbatch under it with a 1-minute limit and SIGUSR1 15 s
# before it: the job saves at the signal, requeues itself and resumes with
# --resume auto until done, and the weights, optimizer state and per-step
# metrics equal (cmp) an uninterrupted run's; a 2-rank job under srun with
# PMIx, where SIGUSR1 reaches both ranks at every stop.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
mpi_setup
for p in munged slurmctld slurmd sbatch scontrol srun sinfo squeue scancel; do
    command -v "$p" > /dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin
    command -v "$p" > /dev/null 2>&1 ||
        skip "no $p (Debian: apt-get install munge slurmctld slurmd slurm-client; scripts/deps.sh test)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd runs jobs as their user only as root; this test runs as $(id -un)"
RECIPE="$top_srcdir/examples/slurm/train.sbatch"

# On exit (also on SIGINT and SIGTERM): the cluster's jobs cancelled (their
# processes outlive slurmd), the daemons and the uninterrupted run stopped and
# waited for, then lib.sh's removal of $tmpdir.
c=$tmpdir/cluster
mkdir -p "$c/state" "$c/spool" "$c/munge" "$c/jobs"
chmod 700 "$c/munge"
pids=""
stop_daemons() {
    if [ -n "${SLURM_CONF:-}" ] && scontrol ping > /dev/null 2>&1; then
        jobs=$(squeue -h -o %A 2> /dev/null)
        # shellcheck disable=SC2086
        [ -z "$jobs" ] || scancel $jobs
        n=0
        while [ -n "$(squeue -h -o %A 2> /dev/null)" ] && [ $n -lt 60 ]; do
            sleep 0.5
            n=$((n + 1))
        done
    fi
    for p in $pids ${straight_pid:-}; do kill "$p" 2> /dev/null; done
    for p in $pids ${straight_pid:-}; do wait "$p" 2> /dev/null; done
    rm -rf "$tmpdir"
}
trap stop_daemons EXIT
trap 'exit 130' INT HUP
trap 'exit 143' TERM
# cannot_start NAME LOG: SKIP naming the daemon and its last error lines
cannot_start() {
    why=$(grep -i 'error\|fatal' "$2" 2> /dev/null | tail -n 3 | sed 's/^[^ ]*: //' | paste -sd ';' | sed 's/;/; /g')
    skip "$1 does not start here: ${why:-$(tail -n 1 "$2" 2> /dev/null)}"
}

dd if=/dev/urandom of="$c/munge/key" bs=1024 count=1 2> /dev/null && chmod 400 "$c/munge/key"
munged --foreground --force --key-file="$c/munge/key" --socket="$c/munge/sock" \
    --pid-file="$c/munge/pid" --seed-file="$c/munge/seed" --log-file="$c/munge/log" > "$c/munged.out" 2>&1 &
pids="$pids $!"
n=0
until [ -S "$c/munge/sock" ]; do
    n=$((n + 1))
    [ $n -lt 50 ] || cannot_start munged "$c/munged.out"
    sleep 0.1
done

host=$(hostname -s)
hw=$(slurmd -C | head -n 1)
cpus=$(echo "$hw" | sed -n 's/.* CPUs=\([0-9]*\).*/\1/p')
mem=$(echo "$hw" | sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p')
[ -n "$cpus" ] && [ -n "$mem" ] || skip "slurmd -C does not say this node's CPUs and memory: $hw"
# ports of our own: from the process id, away from Slurm's 6817/6818
port=$((20000 + $$ % 20000 * 2))
# cgroup-free plugins (a chroot or container may have no cgroup controllers);
# cred_expire=5 and sched_interval=2: a requeued job starts again about 6 s
# later (defaults: 121 s, then the next scheduling pass, up to 60 s)
cat > "$c/slurm.conf" << EOF
ClusterName=bertrain-test
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$c/munge/sock,cred_expire=5
StateSaveLocation=$c/state
SlurmdSpoolDir=$c/spool
SlurmctldPidFile=$c/slurmctld.pid
SlurmdPidFile=$c/slurmd.pid
SlurmctldLogFile=$c/slurmctld.log
SlurmdLogFile=$c/slurmd.log
PlugStackConfig=$c/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
JobRequeue=1
ReturnToService=2
KillWait=10
SchedulerParameters=sched_interval=2
MailProg=/bin/true
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
: > "$c/plugstack.conf"
export SLURM_CONF="$c/slurm.conf"
slurmctld -D -i > "$c/slurmctld.out" 2>&1 &
ctld=$!
slurmd -D > "$c/slurmd.out" 2>&1 &
slurmd=$!
pids="$pids $ctld $slurmd"
# until the node is idle (at most 60 s); a daemon that exits (slurmd without
# /sys/fs/cgroup, in a chroot) is a SKIP naming it and its error
end=$(($(date +%s) + 60))
until [ "$(sinfo -h -o %t 2> /dev/null)" = idle ]; do
    kill -0 "$ctld" 2> /dev/null || cannot_start slurmctld "$c/slurmctld.out"
    kill -0 "$slurmd" 2> /dev/null || cannot_start slurmd "$c/slurmd.out"
    if [ "$(date +%s)" -ge "$end" ]; then
        scontrol ping > /dev/null 2>&1 || cannot_start slurmctld "$c/slurmctld.out"
        cannot_start slurmd "$c/slurmd.out"
    fi
    sleep 0.2
done
srun --mpi=list 2>&1 | grep -qw pmix ||
    skip "this Slurm's srun has no PMIx plugin (srun --mpi=list), which the recipe launches with"
echo "ok   munged, slurmctld and slurmd on $host ($cpus CPUs, $mem MB, ports $port and $((port + 1)))"

# the runs: steps for about 60 s here (measured on 1 and on 2 ranks), longer
# than one start of a job lasts (SIGUSR1 at 15 to 45 s: Slurm checks limits
# every 30 s); a run that is done before any signal (the measurement ran under
# a heavier load than the job: the suite runs tests side by side) is run again
# with twice the steps, up to 3 times
small="--set data.seq_len=32 --set train_batch_size=8 --set data.valid=\"\" --set steps_per_print=1
       --set checkpoint.interval=100000"
steps_for_60s() { # NRANKS: prints the steps that take about 60 s on NRANKS ranks
    if [ "$1" -eq 1 ]; then launch=""; else launch="$MPI -n $1"; fi
    # shellcheck disable=SC2086
    $launch "$BERTRAIN" train tests/fixtures/base.json $small --set train_micro_batch_size_per_gpu=$((8 / $1)) \
        --set train_steps=150 --set output_dir="\"$tmpdir/speed$1\"" > "$tmpdir/speed$1.log" 2>&1 ||
        { cat "$tmpdir/speed$1.log" >&2; echo "FAIL: the timing run on $1 rank(s) failed" >&2; return 1; }
    secs=$(sed -n 's/^bertrain: 150 steps in \([0-9.]*\) s.*/\1/p' "$tmpdir/speed$1.log")
    [ -n "$secs" ] || { echo "FAIL: the timing run on $1 rank(s) printed no time" >&2; return 1; }
    awk -v s="$secs" 'BEGIN { n = int(150 * 60 / (s > 0.01 ? s : 0.01)); print (n < 300 ? 300 : n) }'
}
steps=$(steps_for_60s 1) || exit 1
steps2=$(steps_for_60s 2) || exit 1

# wait_job ID LIMIT: until job ID has ended (at most LIMIT s); its state in $state
wait_job() {
    n=0
    while :; do
        state=$(scontrol show job "$1" 2> /dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
        case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return ;; esac
        n=$((n + 1))
        [ $n -lt $(($2 * 2)) ] || { scancel "$1"; fail "job $1 not done within $2 s (state $state)"; }
        sleep 0.5
    done
}
# submit NAME NTASKS STEPS PROGRAM [LAUNCH]: the recipe as a job (a 1-minute
# limit, SIGUSR1 15 s before it), id in $job; sbatch passes the environment on
submit() {
    name=$1 ntasks=$2 nsteps=$3
    # shellcheck disable=SC2086
    job=$(cd "$c/jobs" && BERTRAIN=$4 BERTRAIN_LAUNCH=${5:-} && export BERTRAIN BERTRAIN_LAUNCH &&
        sbatch --parsable --chdir="$top_srcdir" --time=1 --signal=B:USR1@15 --ntasks="$ntasks" \
            --output="$c/jobs/$name.out" "$RECIPE" "$top_srcdir/tests/fixtures/base.json" $small \
            --set train_micro_batch_size_per_gpu=$((8 / ntasks)) --set train_steps="$nsteps" \
            --set output_dir="\"$tmpdir/$name\"") || fail "$name: sbatch failed"
}
# show_job NAME: the job's own output and the end of bertrain's, without the step lines
show_job() {
    cat "$c/jobs/$1.out"
    grep -v '^step \|^  rank ' "$c/jobs/bertrain-$job.log" 2> /dev/null | tail -n 20
}
# ended NAME: wait for the job of submit; true when it was done with no
# requeue (then the test runs it again, longer)
ended() {
    wait_job "$job" 900
    restarts=$(scontrol show job "$job" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
    [ "$state" = COMPLETED ] && [ "${restarts:-0}" -eq 0 ] || return 1
    echo "     $1: done before any signal ($(tail -n 1 "$c/jobs/bertrain-$job.log" | sed "s|$tmpdir/||g")): again with twice the steps"
}
# check_job NAME: the job of submit ended well after at least one requeue
check_job() {
    wait_job "$job" 900
    restarts=$(scontrol show job "$job" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
    [ "$state" = COMPLETED ] || { show_job "$1"; fail "$1: job $job ended $state"; }
    [ "${restarts:-0}" -ge 1 ] ||
        { show_job "$1"; fail "$1: the job was never interrupted and requeued: the test proves nothing"; }
    grep -q "^resume: from $tmpdir/$1/ckpt-" "$c/jobs/bertrain-$job.log" ||
        { show_job "$1"; fail "$1: no start resumed from a checkpoint"; }
}

# 1 rank: the recipe as it is (its default launcher, srun --mpi=pmix), while
# the same run goes uninterrupted beside it
straight() { # the uninterrupted run of $steps steps, in the background: pid in $straight_pid
    rm -rf "$tmpdir/straight"
    # shellcheck disable=SC2086
    "$BERTRAIN" train tests/fixtures/base.json $small --set train_micro_batch_size_per_gpu=8 \
        --set train_steps="$steps" --set output_dir="\"$tmpdir/straight\"" > "$tmpdir/straight.log" 2>&1 &
    straight_pid=$!
}
one=one
submit $one 1 "$steps" "$BERTRAIN"
straight
tries=1
while ended $one; do
    wait "$straight_pid"
    [ $tries -lt 4 ] || fail "1 rank: $tries jobs, the last of $steps steps, were each done before any signal"
    tries=$((tries + 1)) steps=$((steps * 2)) one=one-x$((1 << (tries - 1)))
    submit $one 1 "$steps" "$BERTRAIN"
    straight
done
wait "$straight_pid" || { cat "$tmpdir/straight.log"; fail "the uninterrupted run failed"; }
check_job $one
last=$(printf 'ckpt-%08d' "$steps")
for f in model.safetensors optim.bin; do
    cmp "$tmpdir/straight/$last/$f" "$tmpdir/$one/$last/$f" ||
        fail "1 rank: $f after $((restarts + 1)) starts differs from the uninterrupted run's"
done
# metrics.jsonl: per-step records without the timings (which differ run to run)
for r in straight $one; do
    sed 's/"samples_per_s": [^,]*, "tokens_per_s": [^,]*, "data_time_frac": [^,]*, "eta_s": [^,]*, //' \
        "$tmpdir/$r/metrics.jsonl" > "$tmpdir/$r.metrics"
done
[ "$(wc -l < "$tmpdir/straight.metrics")" -eq "$steps" ] || fail "expected $steps metrics records"
cmp "$tmpdir/straight.metrics" "$tmpdir/$one.metrics" || fail "1 rank: per-step metrics differ"
echo "ok   1 rank, $steps steps: $((restarts + 1)) starts ($(grep -c 'stopped after step' "$c/jobs/bertrain-$job.log") stops at SIGUSR1):" \
    "model.safetensors, optim.bin and per-step metrics identical (cmp) to the uninterrupted run"
grep 'stopped after step\|requeueing' "$c/jobs/$one.out" | sed "s|$tmpdir/||g; s/^/     /"

# 2 ranks under srun with PMIx: each rank notes the start of the job in which
# it got the signal (a wrapper around bertrain), and the job runs to the end
cat > "$tmpdir/rank-wrapper" << EOF
#!/bin/sh
# one rank: note SIGUSR1 and pass it on to bertrain
"$BERTRAIN" "\$@" &
child=\$!
trap 'echo "start \${SLURM_RESTART_COUNT:-0} rank \${SLURM_PROCID:-?}: SIGUSR1" >> "$tmpdir/signals.\$SLURM_JOB_ID"
      kill -USR1 \$child' USR1
while :; do
    wait \$child
    rc=\$?
    kill -0 \$child 2> /dev/null || exit \$rc
done
EOF
chmod +x "$tmpdir/rank-wrapper"
two_ranks() { # NAME LAUNCH
    base=$1 name=$1 sig=USR1 tries=1
    submit "$name" 2 "$steps2" "$tmpdir/rank-wrapper" "$2"
    while ended "$name"; do
        [ $tries -lt 4 ] || fail "$base: $tries jobs, the last of $steps2 steps, were each done before any signal"
        tries=$((tries + 1)) steps2=$((steps2 * 2)) name=$base-x$((1 << (tries - 1)))
        submit "$name" 2 "$steps2" "$tmpdir/rank-wrapper" "$2"
    done
    check_job "$name"
    [ -f "$tmpdir/$name/$(printf 'ckpt-%08d' "$steps2")/optim.bin" ] || fail "$name: no final checkpoint"
    stops=$(grep -c '^bertrain: SIGUSR1: stopped after step' "$c/jobs/bertrain-$job.log")
    [ "$stops" -ge 1 ] || fail "$name: no stop at SIGUSR1"
    # the starts that stopped at the signal, from the recipe's own lines (a
    # signal that comes as the last step ends stops nothing and is not counted)
    stopped_starts=$(awk '/ job [0-9]+ start [0-9]+:/ { n = $6; sub(":", "", n) }
        / SIGUSR1: stopped after step / { print n }' "$c/jobs/$name.out")
    [ "$(echo "$stopped_starts" | wc -w)" -eq "$stops" ] ||
        { show_job "$name"; fail "$name: the recipe's output names $(echo "$stopped_starts" | wc -w) stopping starts, bertrain's $stops"; }
    for n in $stopped_starts; do
        for r in 0 1; do
            got=$(grep -c "^start $n rank $r: SIG$sig\$" "$tmpdir/signals.$job")
            [ "$got" -eq 1 ] ||
                { show_job "$name"; cat "$tmpdir/signals.$job"; fail "$name: rank $r got SIG$sig $got times in start $n, which stopped at it"; }
        done
    done
    echo "ok   2 ranks, $steps2 steps, $((restarts + 1)) starts under $name: SIG$sig reached both ranks at every stop ($stops)"
}
two_ranks srun "srun --mpi=pmix"
finish "Slurm: time limit, SIGUSR1, requeue and --resume auto give the uninterrupted run's results"
