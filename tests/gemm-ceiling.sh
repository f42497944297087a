#!/bin/sh
# bench --profile's GEMM shapes and --ceiling's replay of them, checked as
# counts and sums, never as times: every GEMM of the timed steps falls into
# exactly one shape (the shapes' calls and ms add up to the gemm op's), the
# model's own shapes are there with the calls a step makes of them (tiny: 2
# layers, hidden 128, 2 heads; batch 4 x seq 32; the top layer's feed-forward
# block at the heads' rows, as many as bench reports, or with --dense-top at
# every row), and the ceiling is the
# shapes' FLOPs over their replayed times. Without --ceiling nothing is
# replayed. On the CPU backend and, where built and present, OpenCL (device
# marks instead of the wall clock).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/bertrain-pocl-cache}" "${POCL_MAX_PTHREAD_COUNT:=2}"
export POCL_CACHE_DIR POCL_MAX_PTHREAD_COUNT OMP_NUM_THREADS=2
command -v python3 > /dev/null || skip "no python3 to read the JSON"

bench() { # BACKEND [FLAGS]: bench's JSON on stdout
    be=$1
    shift
    "$BERTRAIN" bench --preset tiny --seq 32 --batch 4 --steps 2 --warmup 1 --backend "$be" "$@"
}

# check FILE REPLAYED(0|1) LABEL
check() {
    python3 - "$1" "$2" "$3" <<'PY' || exit 1
import json, sys
path, replayed, label = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
j = json.load(open(path))
p, dense = j["profile"], j["bench"]["dense_top"]
def fail(msg):
    print("FAIL: %s: %s" % (label, msg)); sys.exit(1)
ops = {o["op"]: o for o in p["ops"]}
shapes = p["gemm_shapes"]
if not shapes: fail("no gemm_shapes")
GEMM_OPS = ("gemm", "gemm16", "gemm_grid")
calls = sum(o["calls"] for n, o in ops.items() if n in GEMM_OPS)
ms = sum(o["ms"] for n, o in ops.items() if n in GEMM_OPS)
if abs(sum(s["calls"] for s in shapes) - calls) > 1e-9:
    fail("the shapes' calls add up to %g, the GEMM ops made %g" % (sum(s["calls"] for s in shapes), calls))
if abs(sum(s["ms"] for s in shapes) - ms) > 1e-4 * ms + 1e-5 * len(shapes):
    fail("the shapes' ms add up to %g, the GEMM ops took %g" % (sum(s["ms"] for s in shapes), ms))
if abs(p["gemm_ms"] - ms) > 1e-4 * ms:
    fail("gemm_ms %g, the GEMM ops took %g" % (p["gemm_ms"], ms))
def count(m, n, k, ta, tb, batch, groups=1):
    return sum(s["calls"] for s in shapes if (s["m"], s["n"], s["k"], s["trans_a"], s["trans_b"], s["batch"], s["groups"]) == (m, n, k, ta, tb, batch, groups))
N, H, L = 4 * 32, 128, 2
full = L if dense else L - 1 # the layers whose feed-forward block runs at every row
want = {"FFN up (N x 4H x H, B transposed)": (count(N, 4 * H, H, False, True, 1), full),
        "QKV (N x 3H x H, B transposed)": (count(N, 3 * H, H, False, True, 1), L),
        "FFN up dW (4H x H x N, A transposed)": (count(4 * H, H, N, True, False, 1), full),
        "QK^T (T x T x 64, heads x B sequences)": (count(32, 32, 64, False, True, 2, 4), 2 * L)}
for what, (got, expect) in want.items():
    if got != expect: fail("%s: %g calls a step, expected %g" % (what, got, expect))
# the top layer's FFN up at its rows: once a step, with the rows bench reports
top = [s for s in shapes if (s["n"], s["k"], s["trans_a"], s["trans_b"], s["batch"]) == (4 * H, H, False, True, 1) and s["m"] < N]
top_calls = sum(s["calls"] for s in top)
if abs(top_calls - (0 if dense else 1)) > 1e-9:
    fail("FFN up at fewer than N rows: %g calls a step, expected %d" % (top_calls, 0 if dense else 1))
rows = sum(s["m"] * s["calls"] for s in top) / top_calls if top else N
if abs(rows - 4 * j["bench"]["top_rows_per_seq"]) > 1e-6 * rows:
    fail("the top layer's FFN up ran at %g rows a step, bench reports %g a sequence x 4" % (rows, j["bench"]["top_rows_per_seq"]))
flops = [2.0 * s["m"] * s["n"] * s["k"] * s["batch"] * s["groups"] * s["calls"] for s in shapes]
if not replayed:
    if any(s["alone_gflops"] != 0 for s in shapes) or p["gemm_ceiling_gflops"] != 0 or p["gemm_alone_ms"] != 0:
        fail("shapes replayed without --ceiling")
    sys.exit(0)
if any(s["alone_gflops"] <= 0 for s, f in zip(shapes, flops) if f > 0): fail("a shape was not replayed")
alone_ms = sum(f / (s["alone_gflops"] * 1e9) * 1e3 for f, s in zip(flops, shapes) if f > 0)
if abs(alone_ms - p["gemm_alone_ms"]) > 1e-3 * alone_ms:
    fail("gemm_alone_ms %g, the shapes' replayed times add up to %g" % (p["gemm_alone_ms"], alone_ms))
ceiling = sum(flops) / (alone_ms / 1e3) / 1e9
if abs(ceiling - p["gemm_ceiling_gflops"]) > 1e-3 * ceiling:
    fail("gemm_ceiling_gflops %g, the shapes' FLOPs over their times give %g" % (p["gemm_ceiling_gflops"], ceiling))
print("ok   %s: %d shapes, %g GEMMs a step, ceiling %.1f GFLOP/s" % (label, len(shapes), calls, ceiling))
PY
}

# on BACKEND: --ceiling (JSON and text) and --profile alone
backend_checks() {
    be=$1 tag=${1%%:*}
    bench "$be" --threads 2 --ceiling --json > "$tmpdir/$tag-ceiling.json" 2> "$tmpdir/$tag.err" ||
        { cat "$tmpdir/$tag.err"; fail "$be: bench --ceiling --json failed"; }
    check "$tmpdir/$tag-ceiling.json" 1 "$be --ceiling"
    bench "$be" --threads 2 --profile --json > "$tmpdir/$tag-profile.json" ||
        fail "$be: bench --profile --json failed"
    check "$tmpdir/$tag-profile.json" 0 "$be --profile"
    bench "$be" --threads 2 --profile --json --dense-top > "$tmpdir/$tag-dense.json" ||
        fail "$be: bench --profile --json --dense-top failed"
    check "$tmpdir/$tag-dense.json" 0 "$be --profile --dense-top"
    bench "$be" --threads 2 --ceiling > "$tmpdir/$tag-ceiling.txt" || fail "$be: bench --ceiling failed"
    grep -q "^gemm ceiling at this model's shapes: [0-9.]* GFLOP/s" "$tmpdir/$tag-ceiling.txt" ||
        fail "$be: no ceiling line in bench --ceiling's text"
    bench "$be" --threads 2 --profile > "$tmpdir/$tag-profile.txt" || fail "$be: bench --profile failed"
    grep -q "^gemm shapes" "$tmpdir/$tag-profile.txt" || fail "$be: no GEMM shapes in bench --profile"
    ! grep -q "ceiling" "$tmpdir/$tag-profile.txt" || fail "$be: a ceiling without --ceiling"
}

backend_checks cpu
if ! "$BERTRAIN" version | grep -q "opencl"; then
    skip_part "OpenCL: bertrain was built without OpenCL"
elif bench opencl:0:0 > "$tmpdir/probe" 2>&1; then
    backend_checks opencl:0:0
else
    skip_part "OpenCL: no device opencl:0:0: $(tail -1 "$tmpdir/probe")"
fi
finish "GEMM shapes add up to the gemm op, the model's shapes with their calls, the ceiling from the replay"
