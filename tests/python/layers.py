#!/usr/bin/env python3
"""The layering of docs/ARCHITECTURE.md, checked on the sources.

Every #include "..." of the engine's C and CUDA files is resolved as the
compiler resolves it (the including file's directory, then the top of the
tree, then src/) and must point to a file of the same layer or a lower one:

    backends (with kernels, kernels_cu), mpi      <- the bottom
    src/util
    src/model
    src/config
    src/data
    src/store
    src/train
    src/cli
    conformance (the tool: backends and src/util only)

and the include graph of files has no cycle. With object files or archives
after the source tree, no two of their objects call each other, directly or
around a loop (the call graph from their defined and undefined symbols,
read with nm). Prints each violation on one line; exit 1 when there is one.

    python3 tests/python/layers.py TOP_SRCDIR [OBJECT_OR_ARCHIVE...]
"""
import collections
import os
import re
import subprocess
import sys

RANKS = {"backends": 0, "kernels": 0, "kernels_cu": 0, "mpi": 0, "src/util": 1,
         "src/model": 2, "src/config": 3, "src/data": 4, "src/store": 5, "src/train": 6,
         "src/cli": 7}
CONFORMANCE_MAY = {"backends", "src/util", "conformance"}


def layer(path):
    """The layer a file belongs to (its folder's), or None outside the engine."""
    for name in sorted(RANKS, key=len, reverse=True):
        if path == name or path.startswith(name + "/"):
            return name
    if path.startswith("conformance/"):
        return "conformance"
    return None


def resolve(top, src_file, inc):
    for base in (os.path.dirname(src_file), "", "src"):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(top, cand)):
            return cand
    return None


def cycles(edges):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    sys.setrecursionlimit(100000)

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(set(edges) | {t for ts in edges.values() for t in ts}):
        if v not in index:
            strong(v)
    return found


# Functions that only the named objects may call: mixed precision's storing
# of activations is the model's ops' business (docs/DESIGN-NOTES.md, 27),
# never a block's.
ONLY_CALLED_BY = {
    "bert_act_store16": {"bert_ops.o"},
    "bert_act_round16": {"bert_ops.o"},
}


def symbols(paths):
    """(defs, undef) of the archives and object files in paths: the object
    defining each symbol, and the symbols each object calls from outside."""
    defs, undef = {}, collections.defaultdict(set)
    for path in paths:
        out = subprocess.run(["nm", "-A", path], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) != 3:
                continue
            fields = parts[0].split(":")
            obj = fields[1] if path.endswith(".a") and len(fields) > 2 else fields[0]
            kind, sym = parts[1], parts[2]
            if kind == "U":
                undef[obj].add(sym)
            elif kind in "TDBRCG":
                defs[sym] = obj
    return defs, undef


def restricted_calls(paths):
    """Calls of ONLY_CALLED_BY's functions from any other object: one line each."""
    _, undef = symbols(paths)
    return [f"{os.path.basename(obj)} calls {sym}, which only "
            f"{', '.join(sorted(ONLY_CALLED_BY[sym]))} may call"
            for obj, syms in sorted(undef.items()) for sym in sorted(syms)
            if sym in ONLY_CALLED_BY and os.path.basename(obj) not in ONLY_CALLED_BY[sym]]


def call_cycles(paths):
    """Objects (of the archives and object files in paths) that call each
    other around a loop: one line each."""
    defs, undef = symbols(paths)
    edges = collections.defaultdict(set)
    for obj, syms in undef.items():
        for sym in syms:
            if sym in defs and defs[sym] != obj:
                edges[obj].add(defs[sym])
    return ["call cycle: " + " <-> ".join(os.path.basename(o) for o in c) for c in cycles(edges)]


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else "."
    files = []
    for root in ("backends", "kernels", "kernels_cu", "mpi", "src", "conformance"):
        for d, _, names in os.walk(os.path.join(top, root)):
            for n in names:
                if n.endswith((".c", ".h", ".cu", ".cuh", ".cl")):
                    files.append(os.path.relpath(os.path.join(d, n), top))
    edges = {f: [] for f in files}
    bad = []
    for f in sorted(files):
        text = open(os.path.join(top, f), encoding="utf-8", errors="replace").read()
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            target = resolve(top, f, inc)
            if target is None:
                continue  # generated or system-provided
            edges[f].append(target)
            lf, lt = layer(f), layer(target)
            if lf is None or lt is None:
                continue
            if lf == "conformance":
                if lt not in CONFORMANCE_MAY:
                    bad.append(f"{f}: includes {target} ({lt}): the conformance tool uses "
                               "backends and src/util only")
            elif lt != "conformance" and RANKS[lt] > RANKS[lf]:
                bad.append(f"{f} ({lf}) includes {target} ({lt}), a layer above it")
    # include cycles, file by file
    bad += ["include cycle: " + " <-> ".join(c) for c in cycles(edges)]
    bad += call_cycles(sys.argv[2:])
    bad += restricted_calls(sys.argv[2:])
    for line in bad:
        print(line)
    print(f"{len(files)} files, {sum(len(e) for e in edges.values())} includes: "
          f"{len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
