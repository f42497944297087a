#!/bin/sh
# LayerDrop end to end (the engine's part is tests/c/test_layerdrop):
#  - a 4-layer model with model.layerdrop 0.5, 12 steps straight equal 6
#    steps, a stop and 6 resumed steps: model.safetensors, optim.bin and
#    state.json's per-layer update counts identical (the drops are a function of
#    (seed, step), and the counts are checkpointed);
#  - under MPI (2 ranks, shares 3+5) every rank logs the same dropped layers at
#    every step, and the parameters equal 1 rank's with the whole batch (1e-5
#    relative L2): the dropped layers' missing buckets do not shift the others;
#  - `export --keep-layers 0,2` writes a 2-layer model whose logits equal
#    evaluating the checkpoint with layers 1 and 3 skipped: bit for bit after
#    import (cmp of tests/c/hf_logits' outputs), and within 1e-4 in transformers;
#    a bad --keep-layers is one line and writes nothing.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
need_test_build
export OMP_NUM_THREADS=1
CMP="$top_builddir/tests/c/st_compare"
LOGITS="$top_builddir/tests/c/hf_logits"
common="--set model.num_hidden_layers=4 --set model.layerdrop=0.5 --set data.seq_len=32
        --set data.valid=\"\" --set steps_per_print=1 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=8
        --set model.hidden_dropout_prob=0.1"
train() { # NAME ARGS...
    name=$1
    shift
    # shellcheck disable=SC2086
    "$BERTRAIN" train tests/fixtures/base.json $common --set output_dir="\"$tmpdir/$name\"" "$@" \
        > "$tmpdir/$name.log" 2>&1 || { cat "$tmpdir/$name.log"; fail "$name: training failed"; }
}
layer_steps() { tr -d ' \t\n' < "$1/state.json" | grep -o '"layer_steps":\[[0-9,]*\]'; }

# resume
train straight --set train_steps=12
train resumed --set train_steps=6
train resumed --set train_steps=12 --resume auto
a="$tmpdir/straight/ckpt-00000012" b="$tmpdir/resumed/ckpt-00000012"
cmp "$a/model.safetensors" "$b/model.safetensors" && cmp "$a/optim.bin" "$b/optim.bin" ||
    fail "12 steps with LayerDrop differ from 6 + resume + 6"
[ -n "$(layer_steps "$a")" ] && [ "$(layer_steps "$a")" = "$(layer_steps "$b")" ] ||
    fail "per-layer update counts differ: $(layer_steps "$a") vs $(layer_steps "$b")"
steps=$(layer_steps "$a")
case "$steps" in *'[12,12,12,12]'*) fail "no layer was ever dropped in 12 steps at p = 0.5";; esac
echo "ok   12 steps = 6 + resume + 6 with LayerDrop 0.5 (cmp model.safetensors, optim.bin); $steps"

# MPI: every rank drops the same layers; 2 ranks = 1 rank
if "$BERTRAIN" version | grep -q "; mpi)" && command -v mpiexec > /dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=
    # shellcheck disable=SC2086
    BERTRAIN_TEST_LOG_LAYERDROP=1 mpiexec --oversubscribe --bind-to none -n 2 "$BERTRAIN_T" train \
        tests/fixtures/base.json $common --set train_steps=12 --set 'distributed.shares=[3,5]' \
        --set output_dir="\"$tmpdir/mpi\"" > "$tmpdir/mpi.log" 2>&1 ||
        { cat "$tmpdir/mpi.log"; fail "2 ranks with LayerDrop failed"; }
    for r in 0 1; do
        grep "^layerdrop rank $r " "$tmpdir/mpi.log" | sed 's/ rank [0-9]*//' | sort > "$tmpdir/drops.$r"
        [ "$(wc -l < "$tmpdir/drops.$r")" -eq 12 ] || { cat "$tmpdir/mpi.log"; fail "rank $r did not log 12 steps' drops"; }
    done
    diff "$tmpdir/drops.0" "$tmpdir/drops.1" || fail "the ranks dropped different layers"
    "$CMP" "$a/model.safetensors" "$tmpdir/mpi/ckpt-00000012/model.safetensors" 1e-5 ||
        fail "2 ranks (3+5) with LayerDrop differ from 1 rank"
    echo "ok   2 ranks drop the same layers at all 12 steps (e.g. $(grep -c ': *$' "$tmpdir/drops.0") steps with none," \
        "step 1:$(grep 'step 1:' "$tmpdir/drops.0" | cut -d: -f2)) and equal 1 rank (1e-5)"
else
    skip_part "the 2-rank LayerDrop check (no MPI build or mpiexec)"
fi

# export --keep-layers 0,2 = evaluation with layers 1 and 3 skipped
"$BERTRAIN" export "$a" "$tmpdir/hf" --keep-layers 0,2 > "$tmpdir/export.log" 2>&1 ||
    { cat "$tmpdir/export.log"; fail "export --keep-layers failed"; }
grep -q '"num_hidden_layers":	2' "$tmpdir/hf/config.json" || fail "config.json does not say 2 layers"
"$BERTRAIN" import "$tmpdir/hf" "$tmpdir/imp" > "$tmpdir/import.log" 2>&1 ||
    { cat "$tmpdir/import.log"; fail "import of the pruned export failed"; }
"$LOGITS" "$a" "$tmpdir/skip.safetensors" --skip-layers 1,3 > /dev/null &&
    "$LOGITS" "$tmpdir/imp" "$tmpdir/pruned.safetensors" > /dev/null || fail "hf_logits failed"
cmp "$tmpdir/skip.safetensors" "$tmpdir/pruned.safetensors" ||
    fail "the pruned model's logits differ from evaluating with layers 1,3 skipped"
"$LOGITS" "$a" "$tmpdir/all.safetensors" > /dev/null || fail "hf_logits failed"
cmp -s "$tmpdir/all.safetensors" "$tmpdir/skip.safetensors" && fail "skipping layers changed nothing"
echo "ok   $(sed "s|$tmpdir/||g" "$tmpdir/export.log")"
echo "ok   its logits (imported) = the checkpoint's with layers 1,3 skipped, bit for bit (cmp)"
for bad in 0,4 2,0 0,,1 x; do
    rc=0
    "$BERTRAIN" export "$a" "$tmpdir/bad" --keep-layers "$bad" > /dev/null 2> "$tmpdir/bad.err" || rc=$?
    [ "$rc" -ne 0 ] && [ "$(wc -l < "$tmpdir/bad.err")" -eq 1 ] && [ ! -e "$tmpdir/bad" ] ||
        { cat "$tmpdir/bad.err"; fail "--keep-layers $bad: expected one line, non-zero exit, nothing written"; }
done
echo "ok   bad --keep-layers (0,4  2,0  0,,1  x): $(cat "$tmpdir/bad.err")"

find_transformers_python
if [ -n "$TPY" ]; then
    "$TPY" tests/python/hf_check.py "$tmpdir/hf" "$tmpdir/skip.safetensors" ||
        fail "transformers on the pruned export does not match evaluation with layers skipped"
else
    skip_part "the pruned export in transformers (no python imports transformers and torch; scripts/deps.sh test makes venv/)"
fi
finish "LayerDrop resumes exactly, agrees across ranks, and prunes on export"
