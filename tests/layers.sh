#!/bin/sh
# The layering of docs/ARCHITECTURE.md holds: no file includes one of a layer
# above it, no include cycle, and no two object files of the engine (the
# library; the CUDA backend's objects, as the emulated plugin compiles them
# and as nvcc does when built) call each other directly or around a loop
# (tests/python/layers.py).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
find_python os || skip "no python3"
command -v nm > /dev/null 2>&1 || skip "no nm (binutils)"
[ -f "$top_builddir/libbertrain.a" ] || fail "libbertrain.a is not built"
objs="$top_builddir/libbertrain.a"
# the CUDA backend's objects: the emulated plugin's, and nvcc's when built
for o in $(find "$top_builddir/tests/cuda_emu" "$top_builddir/backends" \
               "$top_builddir/kernels_cu" -name '*.o' 2>/dev/null | sort); do
    case $o in
    */tests/cuda_emu/bertrain_cuda_emu_so-*) ;; # the emulated runtime: test code, not the engine
    *bertrain_cuda_emu_so-*) objs="$objs $o" ;;
    */backends/cuda/*.o | */kernels_cu/*.o) objs="$objs $o" ;;
    esac
done
# shellcheck disable=SC2086
"$PY" tests/python/layers.py "$top_srcdir" $objs > "$tmpdir/layers" 2>&1
rc=$?
cat "$tmpdir/layers"
[ $rc -eq 0 ] || fail "the layering of docs/ARCHITECTURE.md is broken"
echo "PASS: $(tail -1 "$tmpdir/layers"); no call cycle among $(echo "$objs" | wc -w) object files and archives"
