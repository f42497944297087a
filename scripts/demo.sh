#!/bin/sh
# README command 1: install what is missing, build, and pretrain the tiny
# model on the bundled Jane Austen corpus with the CPU backend.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh build
[ -x configure ] || autoreconf -fi
[ -f Makefile ] || ./configure
make -j"$(nproc)"
exec ./bertrain train examples/demo.json "$@"
