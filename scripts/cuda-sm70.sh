#!/bin/sh
# A CUDA toolkit that still builds V100 code (sm_70), for building and testing
# the CUDA backend where none is installed or the one installed cannot (CUDA 13
# dropped sm_70). No GPU and no root are needed.
#   scripts/cuda-sm70.sh path     print the toolkit's directory (it may not exist)
#   scripts/cuda-sm70.sh check    exit 0 when it is there, complete
#   scripts/cuda-sm70.sh install  fetch it unless it is there
#   scripts/cuda-sm70.sh archs    the CUDA_ARCH it builds: sm_70, sm_80, sm_90
#                                 and compute_90 PTX
#   scripts/cuda-sm70.sh nvccflags  the NVCCFLAGS it needs (its host compiler)
# What it is: NVIDIA's CUDA 11.8 as Debian 12 packs it (non-free:
# nvidia-cuda-toolkit, nvidia-cuda-dev, libcudart11.0, libcublas11,
# libcublaslt11), under NVIDIA's licence (/usr/share/doc in the packages).
# The packages are downloaded with apt-get through a private package list (the
# system's sources are not changed) and unpacked with dpkg -x
# (scripts/debs.sh), then arranged as
# NVIDIA lays a toolkit out (bin/, nvvm/, include/, lib64/), with an
# nvcc.profile that points inside it. PyPI has no CUDA 12 nvcc (its
# nvidia-cuda-nvcc-cu12 wheels hold ptxas and libNVVM only), and CUDA 11.8 is
# the last toolkit Debian packs; it builds sm_70, sm_80 and sm_90.
# Its host compiler is clang-14 (Debian's pairing; CUDA 11.8 predates gcc 12):
# build with NVCCFLAGS="-ccbin clang++-14".
# Where: $BERTRAIN_CUDA_SM70 if set, else ~/.cache/bertrain/cuda-11.8 (750 MB;
# the download, 1.1 GB, is deleted once unpacked).
set -eu
version=11.8.89~11.8.0-5~deb12u1
dir=${BERTRAIN_CUDA_SM70:-${XDG_CACHE_HOME:-$HOME/.cache}/bertrain/cuda-11.8}
stamp="$dir/.bertrain-complete"

case "${1:-}" in
path) echo "$dir"; exit 0 ;;
archs)
    echo "-gencode arch=compute_70,code=sm_70 -gencode arch=compute_80,code=sm_80" \
        "-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
    exit 0 ;;
nvccflags) echo "-ccbin clang++-14"; exit 0 ;;
check) [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$version" ]; exit $? ;;
install) ;;
*) echo "usage: $0 path|check|install|archs|nvccflags" >&2; exit 2 ;;
esac
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$version" ]; then
    exit 0
fi
if [ -e "$dir" ] && [ ! -f "$stamp" ]; then
    echo "cuda-sm70: $dir exists and is not a toolkit this script made; move it away or set BERTRAIN_CUDA_SM70" >&2
    exit 1
fi
for tool in apt-get dpkg; do
    command -v $tool > /dev/null 2>&1 || { echo "cuda-sm70: needs $tool (Debian)" >&2; exit 1; }
done
parent=$(dirname "$dir")
mkdir -p "$parent"
work=$(mktemp -d "$parent/.cuda-11.8.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "cuda-sm70: fetching NVIDIA's CUDA 11.8 (Debian 12 non-free, 1.1 GB) into $dir"

# Debian 12's non-free component, through a package list of our own (scripts/debs.sh)
sh "$(dirname "$0")/debs.sh" "$work/root" non-free "nvidia-cuda-toolkit=$version" \
    "nvidia-cuda-dev=$version" "libcudart11.0=$version" "libcublas11=11.11.3.6~11.8.0-5~deb12u1" \
    "libcublaslt11=11.11.3.6~11.8.0-5~deb12u1" > /dev/null

# NVIDIA's layout, from Debian's
usr="$work/root/usr" new="$work/toolkit"
mkdir -p "$new/bin" "$new/nvvm/bin" "$new/nvvm/libdevice" "$new/lib64" "$new/include"
cp -a "$usr/lib/nvidia-cuda-toolkit/bin/nvcc" "$usr/lib/nvidia-cuda-toolkit/bin/crt" "$new/bin/"
cp -a "$usr/lib/nvidia-cuda-toolkit/bin/cicc" "$new/nvvm/bin/"
cp -a "$usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc" "$new/nvvm/libdevice/"
for tool in ptxas fatbinary nvlink cudafe++ cuobjdump nvdisasm bin2c nvprune; do
    cp -a "$usr/bin/$tool" "$new/bin/"
done
cp -a "$usr/include/." "$new/include/"
for lib in libcudart libcublas libcublasLt; do
    cp -a "$usr/lib/x86_64-linux-gnu/$lib.so" "$usr/lib/x86_64-linux-gnu/$lib.so."* "$new/lib64/"
done
mkdir -p "$new/share/doc"
cp -a "$usr/share/doc/nvidia-cuda-toolkit" "$usr/share/doc/nvidia-cuda-dev" "$new/share/doc/" 2> /dev/null || true
cat > "$new/bin/nvcc.profile" << 'EOF'
TOP                = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
PATH              += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES          += "-I$(TOP)/include" $(_SPACE_)
LIBRARIES          =+ $(_SPACE_) "-L$(TOP)/lib64"
EOF
"$new/bin/nvcc" --list-gpu-arch | grep -qx compute_70 ||
    { echo "cuda-sm70: the unpacked nvcc does not run or lists no compute_70" >&2; exit 1; }
echo "$version" > "$new/.bertrain-complete"
rm -rf "$dir"
mv "$new" "$dir"
echo "cuda-sm70: ready: $dir (nvcc $("$dir/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
