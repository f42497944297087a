#!/bin/sh
# The GPU kit: a folder to copy to a machine with an NVIDIA GPU, the CUDA
# toolkit, a C compiler and make, and nothing else of ours (no autotools,
# cJSON, BLAS, utf8proc, MPI or pkg-config; no network). Run here, on Debian 12:
#
#   sh scripts/gpu-kit.sh OUTDIR         (OUTDIR: a new or empty folder)
#
# and there:
#
#   sh OUTDIR/run.sh [N]                 (N: the CUDA device, default 0)
#
# OUTDIR holds:
#   bertrain-VERSION.tar.gz  the make dist tarball (make distdir, packed with tar)
#   deps/                    the headers and shared libraries of cJSON, zlib,
#                            utf8proc and the reference BLAS with its CBLAS
#                            (libblas3: 0.5 MB, where OpenBLAS is 42 MB), from
#                            Debian 12's packages, unpacked with dpkg -x
#                            (scripts/debs.sh), never installed; their copyright
#                            files in deps/usr/share/doc; deps/PACKAGES lists
#                            each package and version
#   run.sh                   scripts/gpu-kit-run.sh: configures against deps/
#                            (with the CUDA toolkit it finds), builds, runs
#                            tests/gpu-check.sh and writes every figure to
#                            OUTDIR/results.txt
# The tarball comes from a configured tree of this script's source tree:
# BERTRAIN_BUILD=DIR, else the source tree itself, else the current directory
# (a VPATH build of it), else a configure of it in a temporary folder (which
# needs the build's Debian packages: scripts/deps.sh build). MPI is left out.
# Needs apt-get, dpkg and the Debian mirror (deb.debian.org).
set -eu
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
srcdir=$(cd "$(dirname "$0")/.." && pwd)
out=$1
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then
    echo "gpu-kit: $out is not empty" >&2
    exit 1
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bertrain-gpu-kit.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# ---- the dist tarball ----
# is_build DIR: DIR is a configured tree of this source tree (in it, or a VPATH build)
is_build() {
    [ -f "$1/config.status" ] && grep -q '^PACKAGE = bertrain$' "$1/Makefile" 2> /dev/null &&
        [ "$(cd "$(sed -n 's/^abs_top_srcdir = //p' "$1/Makefile")" 2> /dev/null && pwd)" = "$srcdir" ]
}
if [ -n "${BERTRAIN_BUILD:-}" ]; then
    is_build "$BERTRAIN_BUILD" ||
        { echo "gpu-kit: BERTRAIN_BUILD=$BERTRAIN_BUILD is not a configured tree of $srcdir" >&2; exit 1; }
    build=$BERTRAIN_BUILD
elif is_build "$srcdir"; then
    build=$srcdir
elif is_build .; then
    build=$(pwd)
else
    echo "gpu-kit: no configured tree: configuring $srcdir in $tmp/build"
    [ -x "$srcdir/configure" ] || (cd "$srcdir" && autoreconf -fi) > "$tmp/autoreconf.log" 2>&1 ||
        { cat "$tmp/autoreconf.log"; echo "gpu-kit: autoreconf failed" >&2; exit 1; }
    mkdir "$tmp/build"
    (cd "$tmp/build" && "$srcdir/configure" --without-mpi) > "$tmp/configure.log" 2>&1 ||
        { tail -20 "$tmp/configure.log"; echo "gpu-kit: configure failed (scripts/deps.sh build installs what it needs)" >&2; exit 1; }
    build=$tmp/build
fi
version=$(sed -n 's/^VERSION = //p' "$build/Makefile")
name=bertrain-$version
# make dist's files, into a folder of our own (the tree's make dist would
# write its tarball into the build tree)
MAKEFLAGS='' MFLAGS='' make -s -C "$build" distdir distdir="$tmp/$name" > "$tmp/dist.log" 2>&1 ||
    { cat "$tmp/dist.log"; echo "gpu-kit: make distdir failed in $build" >&2; exit 1; }
(cd "$tmp" && tar -cf - "$name" | gzip -9 > "$out/$name.tar.gz")
rm -rf "${tmp:?}/$name"

# ---- the libraries, from Debian 12 ----
# zlib1g too: zlib1g-dev's libz.so points at /lib/.../libz.so.1.2.13, which
# the GPU machine may have in another version
sh "$srcdir/scripts/debs.sh" "$tmp/root" main libcjson1 libcjson-dev zlib1g zlib1g-dev \
    libutf8proc2 libutf8proc-dev libblas3 libblas-dev > "$tmp/packages"
deps=$out/deps
multi=usr/lib/x86_64-linux-gnu
mkdir -p "$deps/$multi/blas" "$deps/usr/include/x86_64-linux-gnu" "$deps/usr/share/doc"
# headers; shared libraries and their links (no static libraries, pkg-config
# or CMake files: run.sh gives configure the flags)
cp -a "$tmp/root/usr/include/." "$deps/usr/include/"
for d in "$tmp/root/$multi" "$tmp/root/lib/x86_64-linux-gnu"; do
    [ -d "$d" ] || continue
    (cd "$d" && find . -maxdepth 2 -name '*.so*' \( -type f -o -type l \)) | while read -r f; do
        cp -a "$d/$f" "$deps/$multi/$f"
    done
done
# links: each absolute one (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13)
# to the file beside it
find "$deps" -type l | while read -r l; do
    target=$(readlink "$l")
    case $target in
    /*)
        [ -e "$(dirname "$l")/${target##*/}" ] ||
            { echo "gpu-kit: $l points to $target, which the kit lacks" >&2; exit 1; }
        ln -sf "${target##*/}" "$l"
        ;;
    esac
done
# cblas.h: Debian's alternatives name the reference CBLAS header so
ln -s cblas-netlib.h "$deps/usr/include/x86_64-linux-gnu/cblas.h"
while read -r p _; do
    [ ! -f "$tmp/root/usr/share/doc/$p/copyright" ] ||
        { mkdir "$deps/usr/share/doc/$p" && cp "$tmp/root/usr/share/doc/$p/copyright" "$deps/usr/share/doc/$p/"; }
done < "$tmp/packages"
sort "$tmp/packages" > "$deps/PACKAGES"
for f in cjson/cJSON.h zlib.h utf8proc.h x86_64-linux-gnu/cblas.h; do
    [ -f "$deps/usr/include/$f" ] || { echo "gpu-kit: deps/usr/include/$f is missing" >&2; exit 1; }
done
for f in libcjson.so libz.so libutf8proc.so blas/libblas.so; do
    [ -f "$deps/$multi/$f" ] || { echo "gpu-kit: deps/$multi/$f is missing" >&2; exit 1; }
done

cp "$srcdir/scripts/gpu-kit-run.sh" "$out/run.sh"
chmod +x "$out/run.sh"
echo "gpu-kit: $out ($(du -sk "$out" | cut -f1) KiB): $name.tar.gz, deps/ ($(tr '\n' ',' < "$deps/PACKAGES" | sed 's/,$//; s/,/, /g')), run.sh"
echo "gpu-kit: there: sh run.sh [N] (results in results.txt beside it)"
