#!/bin/sh
# Admin (model.norm admin) end to end (its forward, gradients and optimizer
# steps are checked against PyTorch by tests/torch-ref.sh, torch_ref_admin):
#  - a fresh run profiles omega on its first samples: omega_0 = 1, increasing,
#    printed and saved in state.json; with initializer_range 0.2 the branches'
#    variances are large, so the omegas are far from 1 and distinct;
#  - model.admin_init closed_form gives sqrt((N+1)/ln(N+1) - 1), N = 2L;
#  - 10 steps straight = 5 + resume + 5 (cmp): omega comes from the checkpoint;
#  - 2 ranks profile the same omegas and train the same parameters as 1 (1e-5);
#  - OpenCL (when built, with a device): profiling and 10 steps match the CPU (1e-4);
#  - `export` folds omega into a plain Post-LN model whose logits equal the
#    Admin model's: after import (1e-5 relative L2) and in transformers (1e-4);
#    also pruned with --keep-layers 0,2 against evaluation with 1,3 skipped.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
export OMP_NUM_THREADS=1
CMP="$top_builddir/tests/c/st_compare"
LOGITS="$top_builddir/tests/c/hf_logits"
common="--set model.norm=admin --set model.admin_init=profile --set model.num_hidden_layers=4 --set model.initializer_range=0.2
        --set data.seq_len=32 --set data.valid=\"\" --set steps_per_print=1 --set train_batch_size=8
        --set train_micro_batch_size_per_gpu=8"
train() { # NAME ARGS...
    name=$1
    shift
    # shellcheck disable=SC2086
    "$BERTRAIN" train tests/fixtures/base.json $common --set output_dir="\"$tmpdir/$name\"" "$@" \
        > "$tmpdir/$name.log" 2>&1 || { cat "$tmpdir/$name.log"; fail "$name: training failed"; }
}
omegas() { tr -d ' \t\n' < "$1/state.json" | grep -o '"admin_omega":\[[^]]*\]' | sed 's/.*\[//; s/\]//'; }

train straight --set train_steps=10
a="$tmpdir/straight/ckpt-00000010"
line=$(grep "^bertrain: Admin omega (profiled on 8 samples), sublayers 0..7:" "$tmpdir/straight.log") ||
    { cat "$tmpdir/straight.log"; fail "no profiled omega line"; }
w=$(omegas "$a")
echo "$w" | awk -F, '{ ok = NF == 8 && $1 == 1 && $8 > 2
    for (i = 2; i <= NF; i++) if (!($i > $(i - 1))) ok = 0
    exit !ok }' || fail "state.json admin_omega [$w]: expected 8 values from 1, increasing, the last > 2"
printed=$(echo "$line" | sed 's/.*: //')
echo "$w" | awk -F, -v p="$printed" '{ n = split(p, q, " "); ok = n == NF
    for (i = 1; i <= NF; i++) if ((q[i] - $i) ^ 2 > (1e-3 * $i) ^ 2) ok = 0
    exit !ok }' || fail "printed omegas ($printed) differ from state.json ($w)"
echo "ok   profiled: $printed (= state.json)"

train closed --set train_steps=1 --set model.admin_init=closed_form
expect=$(awk 'BEGIN { n = 8; printf "%.4g", sqrt((n + 1) / log(n + 1) - 1) }')
grep -q "^bertrain: Admin omega (closed form), sublayers 0..7:\( $expect\)\{8\}$" "$tmpdir/closed.log" ||
    { grep "Admin omega" "$tmpdir/closed.log"; fail "closed form: expected 8 x $expect"; }
echo "ok   closed form: 8 x $expect = sqrt(9/ln 9 - 1)"

train resumed --set train_steps=5
train resumed --set train_steps=10 --resume auto
b="$tmpdir/resumed/ckpt-00000010"
cmp "$a/model.safetensors" "$b/model.safetensors" && cmp "$a/optim.bin" "$b/optim.bin" ||
    fail "Admin: 10 steps differ from 5 + resume + 5"
[ "$(omegas "$b")" = "$w" ] || fail "the resumed run's omegas differ"
grep -q "Admin omega" "$tmpdir/resumed.log" && fail "a resumed run profiled omega again"
echo "ok   10 steps = 5 + resume + 5 (cmp model.safetensors, optim.bin); omega from the checkpoint"

if "$BERTRAIN" version | grep -q "; mpi)" && command -v mpiexec > /dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=
    # shellcheck disable=SC2086
    mpiexec --oversubscribe --bind-to none -n 2 "$BERTRAIN" train tests/fixtures/base.json $common \
        --set train_steps=10 --set 'distributed.shares=[3,5]' --set output_dir="\"$tmpdir/mpi\"" \
        > "$tmpdir/mpi.log" 2>&1 || { cat "$tmpdir/mpi.log"; fail "2 ranks failed"; }
    for r in 0 1; do grep -q "^ *$r | " "$tmpdir/mpi.log" || fail "rank $r did not run"; done
    [ "$(omegas "$tmpdir/mpi/ckpt-00000010")" = "$w" ] || fail "2 ranks profiled other omegas"
    "$CMP" "$a/model.safetensors" "$tmpdir/mpi/ckpt-00000010/model.safetensors" 1e-5 ||
        fail "2 ranks (3+5) differ from 1 rank"
    echo "ok   2 ranks (3+5): the same omegas, parameters = 1 rank (1e-5)"
else
    skip_part "the 2-rank Admin check (no MPI build or mpiexec)"
fi

spec=${BERTRAIN_TEST_OPENCL_DEVICE:-opencl:0:0}
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=2}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT
if "$BERTRAIN" version | grep -q "opencl" &&
    "$BERTRAIN" bench --preset tiny --seq 16 --batch 1 --steps 1 --warmup 0 --backend "$spec" \
        > "$tmpdir/probe" 2>&1; then
    train opencl --set train_steps=10 --set device="\"$spec\""
    echo "$(omegas "$tmpdir/opencl/ckpt-00000010") $w" | tr ',' ' ' | awk '{ n = NF / 2; ok = n == 8
        for (i = 1; i <= n; i++) if (($i - $(i + n)) ^ 2 > (1e-5 * $i) ^ 2) ok = 0
        exit !ok }' || fail "$spec profiled other omegas: $(omegas "$tmpdir/opencl/ckpt-00000010")"
    "$CMP" "$a/model.safetensors" "$tmpdir/opencl/ckpt-00000010/model.safetensors" 1e-4 ||
        fail "Admin on $spec differs from the CPU backend"
    echo "ok   $spec profiles the CPU's omegas (1e-5) and 10 Admin steps match the CPU backend (1e-4)"
else
    skip_part "the CPU-vs-OpenCL Admin check (no OpenCL build or device)"
fi

# export folds omega: a plain Post-LN model with the same logits
"$BERTRAIN" export "$a" "$tmpdir/hf" > "$tmpdir/export.log" 2>&1 ||
    { cat "$tmpdir/export.log"; fail "export of an Admin checkpoint failed"; }
grep -q "Admin's omegas folded" "$tmpdir/export.log" || fail "export did not say it folded omega"
"$BERTRAIN" import "$tmpdir/hf" "$tmpdir/imp" > /dev/null 2>&1 || fail "import of the folded export failed"
grep -q 'admin' "$tmpdir/imp/state.json" && fail "the import is not a plain Post-LN model"
"$LOGITS" "$a" "$tmpdir/admin.safetensors" > /dev/null && "$LOGITS" "$tmpdir/imp" "$tmpdir/folded.safetensors" > /dev/null ||
    fail "hf_logits failed"
"$CMP" "$tmpdir/admin.safetensors" "$tmpdir/folded.safetensors" 1e-5 ||
    fail "the folded Post-LN model's logits differ from the Admin model's"
echo "ok   folded export (imported as Post-LN) = the Admin model's logits (1e-5)"
"$BERTRAIN" export "$a" "$tmpdir/hf-pruned" --keep-layers 0,2 > /dev/null 2>&1 || fail "pruned export failed"
"$BERTRAIN" import "$tmpdir/hf-pruned" "$tmpdir/imp-pruned" > /dev/null 2>&1 || fail "pruned import failed"
"$LOGITS" "$a" "$tmpdir/skip.safetensors" --skip-layers 1,3 > /dev/null &&
    "$LOGITS" "$tmpdir/imp-pruned" "$tmpdir/pruned.safetensors" > /dev/null || fail "hf_logits failed"
"$CMP" "$tmpdir/skip.safetensors" "$tmpdir/pruned.safetensors" 1e-5 ||
    fail "the folded, pruned export differs from evaluating with layers 1,3 skipped"
echo "ok   folded and pruned (--keep-layers 0,2) = the Admin model with layers 1,3 skipped (1e-5)"

find_transformers_python
if [ -n "$TPY" ]; then
    "$TPY" tests/python/hf_check.py "$tmpdir/hf" "$tmpdir/admin.safetensors" ||
        fail "transformers on the folded export does not match the Admin model"
else
    skip_part "the folded export in transformers (no python imports transformers and torch; scripts/deps.sh test makes venv/)"
fi
finish "Admin profiles omega, resumes exactly, agrees across ranks, and exports as Post-LN"
