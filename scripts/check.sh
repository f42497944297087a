#!/bin/sh
# README command 2 (and CI): install what is missing, build, and run the whole
# test suite. Ends with one line: "N passed, N failed, N skipped".
set -eu
cd "$(dirname "$0")/.."
# Debian packages, and the Python environment ./venv with the Hugging Face
# references the tests compare against (scripts/deps.sh says how)
sh scripts/deps.sh test
autoreconf -fi
# The CUDA backend is built whenever there is an nvcc (building and the CUDA
# tests need no GPU; the CUDA conformance run skips without one): the machine's
# own toolkit, else the CUDA 11.8 that scripts/deps.sh fetched, for V100, A100
# and H100 (sm_70, sm_80, sm_90). tests/nvcc-archs.sh builds with the other
# toolkit too, where the machine's own cannot build sm_70.
cuda_note=""
if command -v nvcc >/dev/null 2>&1 || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
    echo "check: nvcc found: configuring --with-cuda"
    ./configure --with-opencl --with-cuda
elif sh scripts/cuda-sm70.sh check; then
    sm70=$(sh scripts/cuda-sm70.sh path)
    echo "check: no nvcc installed: configuring --with-cuda=$sm70 (CUDA 11.8, scripts/cuda-sm70.sh)"
    ./configure --with-opencl --with-cuda="$sm70" NVCCFLAGS="$(sh scripts/cuda-sm70.sh nvccflags)" \
        CUDA_ARCH="$(sh scripts/cuda-sm70.sh archs)"
else
    cuda_note="check: CUDA build skipped: no nvcc (install NVIDIA's CUDA toolkit, or set CUDA_HOME, or let scripts/cuda-sm70.sh install fetch one, to build and test the CUDA backend)"
    echo "$cuda_note"
    ./configure --with-opencl
fi
make -j"$(nproc)"
status=0
make -j"$(nproc)" check-suite || status=$?
[ -z "$cuda_note" ] || echo "$cuda_note"
sh scripts/test-summary.sh
exit $status
