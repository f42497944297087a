#!/bin/sh
# README command 2 (and CI): install what is missing, build, and run the whole
# test suite. Ends with one line: "N passed, N failed, N skipped".
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh test
# Hugging Face tokenizers (PyPI) lets the tokenizer test compare live; without
# it the committed fixture is used and the test says so.
if ! python3 -c 'import tokenizers' >/dev/null 2>&1; then
    python3 -m pip install --quiet tokenizers ||
        echo "check: could not install tokenizers from PyPI; using committed fixtures"
fi
# transformers (PyPI) lets tests/hf.sh load exported models in
# BertForPreTraining with Debian's torch (python3-torch, /usr/bin/python3).
# Pinned to the last releases that work with Debian 12's torch 1.13, and
# installed without dependencies so that pip never pulls a torch wheel.
# Without it, tests/hf.sh checks the export against a committed fixture.
if [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -c 'import transformers, torch' >/dev/null 2>&1; then
    /usr/bin/python3 -m pip install --quiet --break-system-packages --no-deps \
        transformers==4.40.2 tokenizers==0.19.1 huggingface_hub==0.23.5 safetensors==0.4.3 \
        regex packaging filelock tqdm ||
        echo "check: could not install transformers from PyPI; tests/hf.sh uses its fixture"
fi
autoreconf -fi
# The CUDA backend is built whenever nvcc is there (building and
# tests/cuda-parity.sh need no GPU; the CUDA conformance run skips without one).
cuda_flag="" cuda_note=""
if command -v nvcc >/dev/null 2>&1 || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
    cuda_flag=--with-cuda
    echo "check: nvcc found: configuring --with-cuda"
else
    cuda_note="check: CUDA build skipped: nvcc not found (install NVIDIA's CUDA toolkit, or set CUDA_HOME, to build and test the CUDA backend)"
    echo "$cuda_note"
fi
./configure --with-opencl $cuda_flag
make -j"$(nproc)"
status=0
make -j"$(nproc)" check || status=$?
[ -z "$cuda_note" ] || echo "$cuda_note"
sh scripts/test-summary.sh
exit $status
