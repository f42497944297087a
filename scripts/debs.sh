#!/bin/sh
# Debian 12 packages unpacked into a folder, never installed: no root, and the
# system's sources, package lists and installed packages are not changed.
#   sh scripts/debs.sh ROOT COMPONENT PKG[=VERSION]...
# fetches each PKG (at VERSION when given) of Debian 12's COMPONENT (main,
# non-free, ...; from bookworm and bookworm-security, the newer version
# winning) with apt-get download through a package list of its own, unpacks it
# into ROOT with dpkg -x (ROOT/usr/..., as the package would install it),
# deletes the .deb, and prints "PKG VERSION" of each on standard output.
# Needs apt-get, dpkg and the Debian mirror (deb.debian.org). Used by
# scripts/cuda-sm70.sh (CUDA 11.8) and scripts/gpu-kit.sh (the GPU kit's
# libraries).
set -eu
[ $# -ge 3 ] || { echo "usage: $0 ROOT COMPONENT PKG[=VERSION]..." >&2; exit 2; }
root=$1 component=$2
shift 2
for tool in apt-get dpkg dpkg-deb; do
    command -v $tool > /dev/null 2>&1 || { echo "debs: needs $tool (Debian)" >&2; exit 1; }
done
mkdir -p "$root"
# the downloads beside ROOT, on its file system (CUDA's are 1.1 GB)
work=$(mktemp -d "$(dirname "$root")/.debs.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/apt/lists/partial" "$work/apt/archives/partial" "$work/debs"
{
    echo "deb http://deb.debian.org/debian bookworm $component"
    echo "deb http://deb.debian.org/debian-security bookworm-security $component"
} > "$work/apt/sources.list"
# the download runs as this user (as root too: no sandbox user that cannot
# write into $work)
apt_opts="-o Dir::Etc::SourceList=$work/apt/sources.list -o Dir::Etc::SourceParts=- \
  -o Dir::State::Lists=$work/apt/lists -o Dir::Cache=$work/apt \
  -o APT::Sandbox::User=$(id -un)"
# shellcheck disable=SC2086
apt-get $apt_opts -qq update ||
    { echo "debs: apt-get update failed (no network to deb.debian.org?)" >&2; exit 1; }
(
    cd "$work/debs"
    # shellcheck disable=SC2086
    apt-get $apt_opts -qq download "$@"
) || { echo "debs: apt-get download $* failed" >&2; exit 1; }
for deb in "$work"/debs/*.deb; do
    dpkg -x "$deb" "$root"
    dpkg-deb -f "$deb" Package Version | awk '{ printf "%s%s", (NR > 1 ? " " : ""), $2 } END { print "" }'
    rm -f "$deb"
done
