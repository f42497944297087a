#!/bin/sh
# The whole model against PyTorch. With a torch-capable python (configure's
# TORCH_PYTHON), the fixtures are regenerated live from PyTorch; otherwise the
# committed ones are used.
. "$(dirname "$0")/lib.sh"
dir="$top_srcdir/tests/fixtures"
if [ -n "${TORCH_PYTHON:-}" ]; then
    echo "regenerating fixtures with $TORCH_PYTHON (live PyTorch)"
    "$TORCH_PYTHON" "$top_srcdir/tests/torch_ref.py" --out "$tmpdir" || fail "torch_ref.py failed"
    dir="$tmpdir"
else
    echo "no python with torch: comparing against the committed fixtures"
fi
for f in torch_ref_nsp torch_ref_mlm torch_ref_pre torch_ref_admin torch_ref_reg; do
    "$top_builddir/tests/test_torch" "$dir/$f.safetensors" || fail "$f"
done
echo "PASS: model, gradients and optimizer steps match PyTorch"
