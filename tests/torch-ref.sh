#!/bin/sh
# The whole model against PyTorch: fixtures regenerated live from PyTorch
# (Debian's python3-torch); without torch, the committed ones, and the test
# reports SKIP.
. "$(dirname "$0")/lib.sh"
dir="$top_srcdir/tests/fixtures" what="committed fixture"
if find_python torch numpy; then
    echo "regenerating the fixtures with $PY (live PyTorch $("$PY" -c 'import torch; print(torch.__version__)'))"
    "$PY" "$top_srcdir/tests/python/torch_ref.py" --out "$tmpdir" || fail "torch_ref.py failed"
    dir=$tmpdir what="live PyTorch"
else
    skip_part "the live PyTorch comparison (no python imports torch; apt-get install python3-torch): checked the committed fixtures only"
fi
for f in torch_ref_nsp torch_ref_mlm torch_ref_pre torch_ref_admin torch_ref_reg; do
    "$top_builddir/tests/c/test_torch" "$dir/$f.safetensors" || fail "$f ($what)"
done
finish "model, gradients and optimizer steps match PyTorch"
