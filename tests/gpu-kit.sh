#!/bin/sh
# The GPU kit (scripts/gpu-kit.sh) rehearsed on a machine that has nothing of
# ours: a fresh Debian 12 chroot holding only gcc, make and libc6-dev (no
# nvcc, pkg-config, autotools, cJSON, BLAS, utf8proc, zlib headers or MPI).
# The kit is made from this build (its make dist files and Debian 12's
# packages of the libraries), copied into the chroot and its run.sh run there
# with no network needed: it must configure and build everything but the
# CUDA backend against the kit's libraries, link them from the kit, run the
# CPU part of tests/gpu-check.sh (--cpu) with every row PASS and say so in
# results.txt, and leave the chroot's system as it found it (nothing
# installed outside the kit's folder).
# The chroot's base (debootstrap --variant=minbase --include=gcc,make,libc6-dev
# bookworm) is made once and kept as a tarball in ~/.cache/bertrain
# ($BERTRAIN_CHROOT_CACHE overrides the folder); each run unpacks it afresh.
# Skips when not root (chroot, mount), without debootstrap (scripts/deps.sh
# test installs it) or without the Debian mirror (deb.debian.org).
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap, chroot, mount /proc)"
for tool in debootstrap chroot mount umount mountpoint apt-get dpkg; do
    command -v $tool > /dev/null 2>&1 || skip "no $tool (scripts/deps.sh test installs debootstrap)"
done
[ -f "$top_builddir/config.status" ] || fail "$top_builddir is not a configured tree"

root=$tmpdir/root
# never remove the chroot while /proc is mounted in it (called by the trap)
# shellcheck disable=SC2317
cleanup() {
    if mountpoint -q "$root/proc" 2> /dev/null; then
        umount "$root/proc" || umount -l "$root/proc"
    fi
    if mountpoint -q "$root/proc" 2> /dev/null; then
        echo "gpu-kit: $root/proc is still mounted: $tmpdir left in place"
    else
        rm -rf "$tmpdir"
    fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
t_start=$(date +%s)
elapsed() { echo "$(($(date +%s) - t_start)) s"; }

# ---- the chroot's base, cached ----
cache=${BERTRAIN_CHROOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bertrain}
base=$cache/debian12-minbase-gcc-make.tar.gz
if [ ! -f "$base" ]; then
    echo "     making the chroot's base (debootstrap bookworm minbase + gcc, make, libc6-dev) into $base"
    mkdir -p "$cache" "$tmpdir/boot"
    if ! debootstrap --variant=minbase --include=gcc,make,libc6-dev bookworm "$tmpdir/boot" \
        http://deb.debian.org/debian > "$tmpdir/debootstrap.log" 2>&1; then
        tail -5 "$tmpdir/debootstrap.log"
        if grep -qiE 'resolve|connect|download|Release' "$tmpdir/debootstrap.log"; then
            skip "debootstrap could not reach the Debian mirror (deb.debian.org)"
        fi
        fail "debootstrap failed (above)"
    fi
    rm -rf "$tmpdir/boot/var/cache/apt/archives/"*.deb
    (cd "$tmpdir/boot" && tar --numeric-owner -czf "$base.tmp.$$" .) || fail "cannot write $base"
    mv -f "$base.tmp.$$" "$base"
    rm -rf "${tmpdir:?}/boot"
    echo "ok   chroot base made ($(du -k "$base" | cut -f1) KiB, $(elapsed))"
fi

# ---- the kit, from this build ----
if ! BERTRAIN_BUILD=$top_builddir sh "$top_srcdir/scripts/gpu-kit.sh" "$tmpdir/kit" > "$tmpdir/kit.log" 2>&1; then
    cat "$tmpdir/kit.log"
    grep -q 'apt-get update failed' "$tmpdir/kit.log" && skip "scripts/gpu-kit.sh could not reach the Debian mirror"
    fail "scripts/gpu-kit.sh failed (above)"
fi
kit_kib=$(du -sk "$tmpdir/kit" | cut -f1)
[ "$kit_kib" -lt 20480 ] || fail "the kit is $kit_kib KiB, more than 20 MiB"
echo "ok   kit made: $kit_kib KiB: $(sed -n 's/^gpu-kit: [^(]*([0-9]* KiB): //p' "$tmpdir/kit.log") ($(elapsed))"

# ---- a fresh chroot with the kit in it ----
mkdir "$root"
tar --numeric-owner -xzf "$base" -C "$root" || fail "cannot unpack $base"
[ -c "$root/dev/null" ] || { rm -f "$root/dev/null"; mknod -m 666 "$root/dev/null" c 1 3; } ||
    skip "no /dev/null in the chroot and mknod is refused"
for absent in usr/bin/nvcc usr/bin/pkg-config usr/bin/autoconf usr/include/cjson usr/include/utf8proc.h \
    usr/include/zlib.h usr/include/x86_64-linux-gnu/cblas.h usr/bin/mpicc; do
    [ ! -e "$root/$absent" ] || fail "the chroot's base already has /$absent: it must hold only gcc, make and libc6-dev"
done
for present in usr/bin/gcc usr/bin/make usr/include/stdio.h; do
    [ -e "$root/$present" ] || fail "the chroot's base lacks /$present"
done
system_files() { (cd "$root" && find bin sbin lib lib64 usr etc var/lib/dpkg -xdev 2> /dev/null | sort); }
system_files > "$tmpdir/before"
cp -a "$tmpdir/kit" "$root/kit"
mount -t proc proc "$root/proc" || skip "cannot mount /proc in the chroot"
echo "ok   fresh chroot: Debian 12 minbase + gcc, make, libc6-dev, no pkg-config or library headers ($(elapsed))"

# ---- run.sh there, with nothing of the host's environment ----
t0=$(date +%s)
chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root JOBS=2 OMP_NUM_THREADS=2 \
    /bin/sh /kit/run.sh > "$tmpdir/run.out" 2>&1
rc=$?
run_s=$(($(date +%s) - t0))
umount "$root/proc" || fail "cannot unmount the chroot's /proc"
res=$root/kit/results.txt
if [ $rc -ne 0 ]; then
    cat "$tmpdir/run.out"
    ! grep -q '^result: FAIL (configure)' "$res" 2> /dev/null || tail -30 "$root/kit/work/configure.log"
    fail "run.sh exited $rc in the chroot"
fi
[ -f "$res" ] || fail "run.sh wrote no results.txt"
echo "ok   run.sh in the chroot: exit 0 in $run_s s"

# ---- what results.txt says ----
expect() { # REGEX (extended) WHAT
    grep -Eq "$1" "$res" || { cat "$res"; fail "results.txt lacks $2 ('$1')"; }
}
expect '^os: Debian GNU/Linux 12' "the chroot's OS"
expect '^cuda: no nvcc' "that no nvcc was found"
expect '^gpu: no nvidia-smi' "the GPU line"
expect '^kit libraries: .*libcjson1 .*libutf8proc2 .*zlib1g ' "the kit's packages"
expect '^configure: [0-9]+ s' "configure's time"
expect '^  backends: +cpu$' "a build without CUDA in configure's summary"
expect '^make -j2: [0-9]+ s; built: bertrain bertrain-conformance tests/c/st_compare $' "the programs built"
expect '^bertrain [0-9.]+ \(backends: cpu; no mpi\)' "bertrain version"
for l in libcjson.so.1 libz.so.1 libutf8proc.so.2 blas/libblas.so.3; do
    expect "${l##*/} => /kit/deps/usr/lib/x86_64-linux-gnu/$l" "$l linked from the kit"
done
for row in 'conformance --quick \(cpu\) +PASS +[0-9]+ passed, 0 failed' \
    'CPU vs cpu: 20 step losses +PASS' 'CPU vs cpu: final parameters +PASS' \
    'CPU vs cpu: 20 steps bf16 +PASS' 'CPU vs cpu: 20 steps fp16 +PASS' \
    'bench tiny fp32 \(cpu, seq 64, batch 8\) PASS +[0-9.]+ samples/s'; do
    expect "^$row" "the row '$row'"
done
expect '^result: PASS \(the CPU part only: no nvcc, built without CUDA\)$' "the result line"
[ "$(tail -1 "$res")" = "result: PASS (the CPU part only: no nvcc, built without CUDA)" ] ||
    fail "results.txt does not end with its result line"
if grep -q FAIL "$res"; then grep FAIL "$res"; fail "results.txt has a FAIL"; fi
echo "ok   results.txt: the machine, configure's summary, the build, every CPU row PASS, the result line"
grep -E '^(configure|make -j2|\(gpu-check)' "$res" | sed 's/^/     /'

# ---- nothing installed outside the kit ----
system_files > "$tmpdir/after"
if ! diff "$tmpdir/before" "$tmpdir/after" > "$tmpdir/diff"; then
    head -20 "$tmpdir/diff"
    fail "the kit changed the chroot's system folders (above: < gone, > new)"
fi
for p in usr/include/cjson usr/include/utf8proc.h usr/include/zlib.h usr/lib/x86_64-linux-gnu/libcjson.so.1; do
    [ ! -e "$root/$p" ] || fail "/$p appeared in the chroot"
done
echo "ok   nothing installed into the chroot's / (bin, sbin, lib, usr, etc, var/lib/dpkg unchanged)"
finish "the GPU kit builds without CUDA and runs gpu-check's CPU part in a Debian 12 chroot with only gcc and make ($(elapsed))"
