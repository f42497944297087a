#!/bin/sh
# Install what bertrain needs, if any of it is missing.
#   scripts/deps.sh build   the Debian packages that building and the demo need
#   scripts/deps.sh test    those, the Debian packages the whole test suite uses,
#                           the test suite's Python environment (below), and a
#                           CUDA toolkit that builds V100 code (below)
# Debian packages: as root it runs apt-get; otherwise sudo if available;
# otherwise it prints the one apt-get line to run and fails.
# Python: the independent references the tests compare against (Hugging Face
# tokenizers and transformers, from PyPI, pinned) go into a virtual environment,
# ./venv in the build tree (BERTRAIN_VENV overrides), made with
# --system-site-packages so that it sees Debian's torch and numpy; Debian 12
# refuses a system-wide pip install (PEP 668), and torch never comes from PyPI.
# tests/lib.sh finds it there. It also holds NVIDIA's cuobjdump (CUDA 13.2,
# from PyPI), which lists the GPU code in a CUDA build of any toolkit version.
# CUDA: the suite builds the CUDA backend with the real nvcc (no GPU needed).
# Where no nvcc is installed that builds V100 code (sm_70; CUDA 13 dropped it),
# scripts/cuda-sm70.sh fetches NVIDIA's CUDA 11.8 from Debian 12's non-free
# packages into ~/.cache/bertrain (no root; the system is not changed), with
# clang-14 as its host compiler.
set -eu
what=${1:-build}
pkgs="gcc make autoconf automake libtool pkg-config libcjson-dev libopenblas-dev zlib1g-dev libutf8proc-dev"
# metrics.tensorboard's event writer (optional in configure)
pkgs="$pkgs libprotobuf-c-dev protobuf-c-compiler libisal-dev"
if [ "$what" = test ]; then
    pkgs="$pkgs g++ git procps python3 python3-venv python3-torch python3-numpy openmpi-bin libopenmpi-dev"
    # tests/pool.sh: a rate-limited network namespace (ip, tc)
    pkgs="$pkgs iproute2"
    pkgs="$pkgs pocl-opencl-icd ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers libclblast-dev clinfo oclgrind clang-14"
    # tests/gpu-kit.sh: a Debian 12 chroot with only gcc and make
    pkgs="$pkgs debootstrap"
    # what TensorBoard's event reader imports (tests/tensorboard.sh)
    pkgs="$pkgs python3-protobuf python3-absl python3-six"
    # tests/slurm.sh: a one-node Slurm cluster (munged, slurmctld, slurmd, sbatch)
    pkgs="$pkgs munge slurmctld slurmd slurm-client"
    # tests/startup.sh: the programs a run executes (no orted for an MPI singleton)
    pkgs="$pkgs strace"
fi
# The last releases that work with Debian 12's torch 1.13 and Python 3.11.
PYPI_PKGS="transformers==4.40.2 tokenizers==0.19.1 huggingface_hub==0.23.5 safetensors==0.4.3"
PYPI_PKGS="$PYPI_PKGS nvidia-cuda-cuobjdump==13.2.86"
# TensorBoard's reader for tests/tensorboard.sh, without its dependencies (its
# server's: grpcio, werkzeug, ...): the reader needs only Debian's protobuf,
# absl, six and numpy (above). 2.16.2 works with Debian 12's protobuf 3.21.
PYPI_NODEPS="tensorboard==2.16.2"

missing=""
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "deps: missing Debian packages; ask an administrator to run:" >&2
        echo "  apt-get install -y$missing" >&2
        exit 1
    fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
[ "$what" = test ] || exit 0

# An nvcc that lists compute_70 builds V100 code; otherwise fetch CUDA 11.8.
sm70_nvcc=""
for nvcc in "$(command -v nvcc 2> /dev/null || true)" "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" \
    /usr/local/cuda/bin/nvcc; do
    if [ -n "$nvcc" ] && [ -x "$nvcc" ] && "$nvcc" --list-gpu-arch 2> /dev/null | grep -qx compute_70; then
        sm70_nvcc=$nvcc
        break
    fi
done
if [ -z "$sm70_nvcc" ] && ! sh "$(dirname "$0")/cuda-sm70.sh" install; then
    echo "deps: could not fetch CUDA 11.8 (scripts/cuda-sm70.sh): the suite's V100 (sm_70)" \
        "build will report SKIP" >&2
fi

venv=${BERTRAIN_VENV:-$(pwd)/venv}
if [ -x "$venv/bin/python3" ] &&
    "$venv/bin/python3" -c 'import transformers, tokenizers, torch, tensorboard' >/dev/null 2>&1 &&
    [ -n "$(find "$venv" -path '*/nvidia/cu13/bin/cuobjdump' 2> /dev/null)" ]; then
    exit 0
fi
echo "deps: Python test environment $venv (Debian's torch; $PYPI_PKGS $PYPI_NODEPS from PyPI)"
# Debian's python3, not another on PATH (pyenv, conda): it is the one that has torch
if ! /usr/bin/python3 -m venv --system-site-packages "$venv" ||
    ! "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check $PYPI_PKGS ||
    ! "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --no-deps $PYPI_NODEPS; then
    echo "deps: could not set up $venv (no network to PyPI?): the tests that compare" \
        "against Hugging Face or read TensorBoard's files will report SKIP" >&2
fi
