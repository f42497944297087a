#!/bin/sh
# Install the Debian packages bertrain needs, if any are missing.
#   scripts/deps.sh build   what building and the demo need
#   scripts/deps.sh test    that, plus what the whole test suite uses
# As root it runs apt-get; otherwise sudo if available; otherwise it prints
# the one apt-get line to run and fails.
set -eu
what=${1:-build}
pkgs="gcc make autoconf automake libtool pkg-config libcjson-dev libopenblas-dev zlib1g-dev libutf8proc-dev"
if [ "$what" = test ]; then
    pkgs="$pkgs python3 python3-torch python3-numpy openmpi-bin libopenmpi-dev"
    pkgs="$pkgs pocl-opencl-icd ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers libclblast-dev clinfo"
fi
missing=""
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0
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
