#!/bin/sh
# The CUDA backend built by the real nvcc for every GPU generation it is for
# (no GPU needed). The build makes every nvcc and host-compiler warning an
# error (Makefile.am, NVCC_WERROR), so a plugin that built is warning-free.
#  1. this build's plugin (configure --with-cuda): its fatbinary holds machine
#     code for every sm_XX of the build's CUDA_ARCH and PTX for every
#     compute_XX named as code, and each of them holds every kernel that
#     kernels_cu/kernels.cuh declares, no more and no fewer; and no kernel of
#     its PTX keeps an array in local memory (check_registers);
#  2. V100: where this build's toolkit cannot build sm_70 (CUDA 13 dropped it),
#     a copy of the sources is configured and built again with the CUDA 11.8
#     of scripts/cuda-sm70.sh for sm_70, sm_80 and sm_90 (scripts/deps.sh test
#     fetches it) and checked as in 1.
# Each part that cannot run (no CUDA build; no CUDA 11.8) is a SKIP part.
. "$(dirname "$0")/lib.sh"

kernel_names __global__ "$top_srcdir/kernels_cu/kernels.cuh" > "$tmpdir/kernels"
[ -s "$tmpdir/kernels" ] || fail "found no kernel in kernels_cu/kernels.cuh"

# find_cuobjdump NVCC: the cuobjdump of NVCC's toolkit, else the one (CUDA
# 13.2, from PyPI) that scripts/deps.sh test puts in the test environment,
# which reads the fatbinaries of every toolkit here; empty if neither.
find_cuobjdump() {
    own="$(dirname "$1")/cuobjdump"
    if [ -x "$own" ]; then
        echo "$own"
        return
    fi
    for venv in ${BERTRAIN_VENV:-} "$top_builddir/venv" "$top_srcdir/venv"; do
        [ -d "$venv" ] || continue
        found=$(find "$venv" -path '*/nvidia/cu13/bin/cuobjdump' -type f 2> /dev/null | head -1)
        [ -n "$found" ] && { echo "$found"; return; }
    done
}

# kernels_of ARCH < RESOURCE_USAGE: the kernels (bt_* names, demangled from
# their _Z<length><name> symbols) that cuobjdump lists for ARCH, sorted.
kernels_of() {
    awk -v want="$1" '
        /^arch = / { on = ($3 == want) }
        on && $1 == "Function" {
            sym = $2
            sub(/:$/, "", sym)
            if (sym !~ /^_Z[0-9]+/) { print sym; next }
            digits = sym
            sub(/^_Z/, "", digits)
            match(digits, /^[0-9]+/)
            len = substr(digits, 1, RLENGTH) + 0
            print substr(digits, RLENGTH + 1, len)
        }' | sort -u
}

# check_fatbin SO CUOBJDUMP CUDA_ARCH WHAT: part 1's check of one plugin.
check_fatbin() {
    so=$1 objdump=$2 archs=$3 what=$4
    sms=$(echo "$archs" | grep -o 'code=sm_[0-9]*' | sed 's/^code=//' | sort -u)
    ptxs=$(echo "$archs" | grep -o 'code=compute_[0-9]*' | sed 's/^code=compute_/sm_/' | sort -u)
    [ -n "$sms" ] || fail "$what: CUDA_ARCH names no sm_XX code: $archs"
    "$objdump" --dump-resource-usage "$so" > "$tmpdir/res" 2>&1 ||
        { cat "$tmpdir/res"; fail "$what: $objdump cannot read $so"; }
    listed=$(sed -n 's/^arch = //p' "$tmpdir/res" | sort -u | tr '\n' ' ')
    for sm in $sms; do
        kernels_of "$sm" < "$tmpdir/res" > "$tmpdir/got"
        diff "$tmpdir/kernels" "$tmpdir/got" > "$tmpdir/diff" || {
            cat "$tmpdir/diff"
            fail "$what: the $sm code lacks kernels (<) or has others (>) (archs in the binary: $listed)"
        }
    done
    extra=$(for sm in $(sed -n 's/^arch = //p' "$tmpdir/res" | sort -u); do
        echo "$sms" | grep -qx "$sm" || echo "$sm"
    done | tr '\n' ' ')
    [ -z "$extra" ] || fail "$what: machine code for $extra, which CUDA_ARCH does not ask for"
    "$objdump" --list-ptx "$so" > "$tmpdir/ptx" 2>&1 || fail "$what: $objdump --list-ptx failed"
    for p in $ptxs; do
        grep -q "\.$p\.ptx\$" "$tmpdir/ptx" ||
            { cat "$tmpdir/ptx"; fail "$what: no PTX for compute_${p#sm_}"; }
    done
    echo "ok   $what: $(echo $sms) machine code${ptxs:+ and $(echo "$ptxs" | sed 's/sm_/compute_/' | tr '\n' ' ')PTX}, each with all $(wc -l < "$tmpdir/kernels") kernels"
}

# check_registers SO CUOBJDUMP CUDA_ARCH WHAT: no kernel of the PTX the plugin
# embeds (its compute_XX code) declares local memory (a __local_depot): every
# per-thread array (a row's values a lane keeps, a Philox block) is indexed by
# constants only, so that it stays in registers; a loop left rolled or an
# index computed at run time puts the array in per-thread off-chip memory,
# behind every access to it. The unrolling is decided before PTX, for every
# target alike; a build that embeds no PTX skips this part.
check_registers() {
    so=$1 objdump=$2 archs=$3 what=$4
    echo "$archs" | grep -q 'code=compute_' ||
        { skip_part "$what: arrays in local memory: CUDA_ARCH embeds no PTX (no code=compute_XX)"; return; }
    "$objdump" -ptx "$so" > "$tmpdir/ptx.txt" 2>&1 || { tail -5 "$tmpdir/ptx.txt"; fail "$what: $objdump -ptx failed"; }
    entries=$(grep -c '^\.visible \.entry' "$tmpdir/ptx.txt" || true)
    [ "$entries" -gt 0 ] || fail "$what: no kernel in the plugin's PTX"
    awk '/^\.visible \.entry/ { name = $3; sub(/\(.*/, "", name) } /__local_depot/ && name { print name; name = "" }' \
        "$tmpdir/ptx.txt" | sort -u > "$tmpdir/local"
    [ ! -s "$tmpdir/local" ] || { cat "$tmpdir/local"; fail "$what: the kernels above keep arrays in local memory (a loop over a register array not unrolled: BT_UNROLL; or an index known only at run time)"; }
    echo "ok   $what: none of the $entries kernels of its PTX keeps an array in local memory"
}

# ---- 1. this build's plugin ----
make_var() { sed -n "s/^$1 = //p" "$top_builddir/Makefile"; }
build_nvcc=$(make_var NVCC)
build_arch=$(make_var CUDA_ARCH)
checked=""
if [ -f "$top_builddir/bertrain-cuda.so" ] && [ -n "$build_nvcc" ]; then
    objdump=$(find_cuobjdump "$build_nvcc")
    if [ -z "$objdump" ]; then
        skip_part "this build's plugin: no cuobjdump (in $(dirname "$build_nvcc") or the test environment: run scripts/deps.sh test)"
    else
        version=$("$build_nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
        check_fatbin "$top_builddir/bertrain-cuda.so" "$objdump" "$build_arch" "this build (CUDA $version)"
        check_registers "$top_builddir/bertrain-cuda.so" "$objdump" "$build_arch" "this build (CUDA $version)"
        checked="CUDA $version"
    fi
else
    skip_part "this build's plugin: not built (configure --with-cuda)"
fi

# ---- 2. V100 (sm_70) ----
if [ -n "$build_nvcc" ] && "$build_nvcc" --list-gpu-arch 2> /dev/null | grep -qx compute_70 &&
    echo "$build_arch" | grep -q 'code=sm_70'; then
    echo "ok   this build's toolkit builds sm_70 itself: part 2 not needed"
elif ! sh "$top_srcdir/scripts/cuda-sm70.sh" check; then
    skip_part "the V100 (sm_70) build: no CUDA 11.8 at $(sh "$top_srcdir/scripts/cuda-sm70.sh" path) (scripts/cuda-sm70.sh install)"
elif ! is_git_checkout "$top_srcdir"; then
    skip_part "the V100 (sm_70) build: $top_srcdir is not a git checkout (its sources are copied by git ls-files)"
else
    sm70=$(sh "$top_srcdir/scripts/cuda-sm70.sh" path)
    src="$tmpdir/src"
    mkdir -p "$src"
    # the sources as they are now (tracked and new files), and autoreconf's output
    (
        cd "$top_srcdir" &&
            { git ls-files -co --exclude-standard; ls configure Makefile.in aclocal.m4 config.h.in 2> /dev/null; find build-aux m4 -type f; } |
            while read -r f; do [ -f "$f" ] && echo "$f"; done | tar -cf - -T -
    ) | tar -C "$src" -xf - || fail "cannot copy the sources into $src"
    arch=$(sh "$top_srcdir/scripts/cuda-sm70.sh" archs)
    (cd "$src" && ./configure --without-opencl --without-mpi --with-cuda="$sm70" \
        NVCCFLAGS="$(sh "$top_srcdir/scripts/cuda-sm70.sh" nvccflags)" CUDA_ARCH="$arch") \
        > "$tmpdir/configure.log" 2>&1 || { tail -20 "$tmpdir/configure.log"; fail "configure --with-cuda=$sm70 failed"; }
    make -C "$src" -j2 bertrain-cuda.so > "$tmpdir/make.log" 2>&1 ||
        { grep -E 'error|warning' "$tmpdir/make.log" | head -30; fail "the CUDA 11.8 build of bertrain-cuda.so failed (warnings are errors)"; }
    check_fatbin "$src/bertrain-cuda.so" "$sm70/bin/cuobjdump" "$arch" "CUDA 11.8 (V100, A100, H100)"
    check_registers "$src/bertrain-cuda.so" "$sm70/bin/cuobjdump" "$arch" "CUDA 11.8 (V100, A100, H100)"
    checked="${checked:+$checked and }CUDA 11.8"
fi
finish "the CUDA plugin built warning-free by the real nvcc ($checked), every kernel in every architecture asked for"
