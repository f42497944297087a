#!/bin/sh
# Start-up cost of the commands that do not train across ranks (prep, vocab,
# export, import, predict, devices, version), checked by cause, not by time:
#  - they never start MPI: with an MPI component that does not exist
#    (OMPI_MCA_pml), MPI_Init fails, so train fails and they must not;
#  - version, prep, vocab, export, import and predict load no CUDA library
#    (the CUDA backend is a plugin loaded only for a CUDA device);
#  - prep and vocab work under `ulimit -v 400000` (400 MB of address space);
#  - train without a launcher (an MPI singleton) starts no orted daemon.
# The time itself is measured in docs/PERFORMANCE.md (scripts/bench-startup.sh).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
export OMP_NUM_THREADS=1
vocab=data/demo/vocab.txt text=data/corpus/austen-persuasion.txt
small="--set data.seq_len=32 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
       --set data.valid=\"\" --set steps_per_print=1 --set train_steps=1"
# shellcheck disable=SC2086
"$BERTRAIN" train tests/fixtures/base.json $small --set output_dir="\"$tmpdir/run\"" > "$tmpdir/run.log" 2>&1 ||
    { cat "$tmpdir/run.log"; fail "training failed"; }

# run_all PREFIX...: every command that needs no ranks, under PREFIX (env settings)
run_all() {
    rm -rf "$tmpdir/hf" "$tmpdir/imp" # export and import write only into new directories
    "$@" "$BERTRAIN" version > /dev/null &&
        "$@" "$BERTRAIN" prep --vocab $vocab --lowercase --out "$tmpdir/shards" $text > /dev/null &&
        "$@" "$BERTRAIN" vocab --size 300 --out "$tmpdir/vocab.txt" $text > /dev/null &&
        "$@" "$BERTRAIN" export "$tmpdir/run" "$tmpdir/hf" > /dev/null &&
        "$@" "$BERTRAIN" import "$tmpdir/hf" "$tmpdir/imp" > /dev/null &&
        "$@" "$BERTRAIN" predict "$tmpdir/run" "a [MASK] b" > /dev/null
}

if "$BERTRAIN" version | grep -q "; mpi)"; then
    # shellcheck disable=SC2086
    OMPI_MCA_pml=bertrain_no_such_component "$BERTRAIN" train tests/fixtures/base.json $small \
        --set output_dir="\"$tmpdir/probe\"" > "$tmpdir/probe.log" 2>&1 &&
        { cat "$tmpdir/probe.log"; fail "train ran with a broken MPI: the probe cannot see MPI_Init"; }
    run_all env OMPI_MCA_pml=bertrain_no_such_component 2> "$tmpdir/mpi.err" ||
        { cat "$tmpdir/mpi.err"; fail "a command that needs no ranks started MPI"; }
    OMPI_MCA_pml=bertrain_no_such_component "$BERTRAIN" devices > /dev/null 2>&1 ||
        fail "devices started MPI"
    echo "ok   version, prep, vocab, export, import, predict, devices run where MPI_Init fails (train does not)"
    # train without a launcher is an isolated MPI singleton: Open MPI starts no
    # orted for it (the programs it executes, seen by strace); told otherwise
    # (OMPI_MCA_ess_singleton_isolated=0, which bertrain leaves as set) it
    # does, which shows that the trace sees the daemon
    if command -v strace > /dev/null 2>&1 && strace -f -qq -o /dev/null true 2> /dev/null; then
        singleton() { # LOG [ENV...]: a 1-step train under strace -f, its execve calls in LOG
            log=$1
            shift
            # shellcheck disable=SC2086
            env "$@" strace -f -qq -e trace=execve -o "$log" "$BERTRAIN" train tests/fixtures/base.json \
                $small --set output_dir="\"$tmpdir/single-$(basename "$log")\"" > "$log.out" 2>&1 ||
                { cat "$log.out"; fail "train under strace failed"; }
        }
        singleton "$tmpdir/isolated.trace"
        singleton "$tmpdir/daemon.trace" OMPI_MCA_ess_singleton_isolated=0
        grep -q 'execve("[^"]*orted"' "$tmpdir/daemon.trace" ||
            { grep execve "$tmpdir/daemon.trace" | head; fail "no orted seen with OMPI_MCA_ess_singleton_isolated=0: the trace cannot see the daemon"; }
        if grep 'execve("[^"]*orted"' "$tmpdir/isolated.trace"; then
            fail "train without a launcher started orted (the MPI singleton is not isolated)"
        fi
        echo "ok   train without a launcher starts no orted ($(grep -c 'execve(' "$tmpdir/isolated.trace") execve; $(grep -c 'execve(' "$tmpdir/daemon.trace") with OMPI_MCA_ess_singleton_isolated=0, orted among them)"
    else
        skip_part "the MPI singleton's daemon check (no strace that may trace here: apt-get install strace)"
    fi
else
    skip_part "the MPI check (bertrain was built without MPI)"
fi

run_all env LD_DEBUG=libs 2> "$tmpdir/libs.log" || { tail "$tmpdir/libs.log"; fail "a command failed"; }
[ -s "$tmpdir/libs.log" ] || fail "LD_DEBUG=libs printed nothing: cannot see which libraries load"
if grep -E "calling init: .*(libcudart|libcublas)" "$tmpdir/libs.log"; then
    fail "a command that uses no CUDA device loaded a CUDA library"
fi
echo "ok   no CUDA library loaded by version, prep, vocab, export, import, predict ($(grep -c 'calling init' "$tmpdir/libs.log") library inits seen)"

(
    ulimit -v 400000 || exit 3
    "$BERTRAIN" prep --vocab $vocab --lowercase --out "$tmpdir/ulimit" data/corpus/*.txt > "$tmpdir/ulimit.log" 2>&1 &&
        "$BERTRAIN" vocab --size 2000 --lowercase --out "$tmpdir/ulimit/vocab.txt" data/corpus/*.txt >> "$tmpdir/ulimit.log" 2>&1
)
rc=$?
[ "$rc" -ne 3 ] || fail "cannot set ulimit -v"
[ "$rc" -eq 0 ] || { cat "$tmpdir/ulimit.log"; fail "prep or vocab failed under ulimit -v 400000"; }
[ -s "$tmpdir/ulimit/train.shard" ] && [ -s "$tmpdir/ulimit/vocab.txt" ] || fail "no output under ulimit -v"
echo "ok   prep and vocab on the bundled corpus under ulimit -v 400000"
finish "commands that need no ranks start no MPI and load no CUDA library; prep fits in 400 MB"
