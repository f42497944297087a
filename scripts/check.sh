#!/bin/sh
# README command 2 (and CI): install what is missing, build, and run the whole
# test suite. Ends with one line: "N passed, N failed, N skipped".
set -eu
cd "$(dirname "$0")/.."
# Debian packages, and the Python environment ./venv with the Hugging Face
# references the tests compare against (scripts/deps.sh says how)
sh scripts/deps.sh test
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
