#!/bin/sh
# Every op of the dispatch table is in every place docs/ADDING_AN_OP.md says
# an op goes: the table's "check" column gives, per place, a pattern with NAME
# for the op and the files to look in; each op of BT_OP_LIST
# (backends/op_list.h) must match in each. A backend that lacks an op
# fails here even where it cannot run (CUDA without a GPU). The conformance
# row check runs the suite (--quick) on the CPU and needs a row per op.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "no source dir"
doc=docs/ADDING_AN_OP.md

ops=$(sed -n '/#define BT_OP_LIST/,/^$/p' backends/op_list.h | grep -o 'X([a-z0-9_]*, [A-Z]*)' |
      sed 's/X(\([a-z0-9_]*\),.*/\1/')
n_ops=$(echo "$ops" | wc -w)
[ "$n_ops" -ge 30 ] || fail "found only $n_ops ops in BT_OP_LIST: the list scan is broken"

# "| # | place | what | `PATTERN` in `FILES` |" rows
grep '^| *[0-9]' "$doc" | sed -n 's/.*| *`\([^`]*NAME[^`]*\)` in `\([^`]*\)` *|$/\1	\2/p' > "$tmpdir/places"
n_places=$(wc -l < "$tmpdir/places")
[ "$n_places" -ge 5 ] || fail "$doc: found $n_places checkable places; the table's check column is broken"

missing=0
while IFS='	' read -r pattern files; do
    for op in $ops; do
        want=$(printf '%s' "$pattern" | sed "s/NAME/$op/g")
        # shellcheck disable=SC2086
        if ! grep -qF -- "$want" $files 2>/dev/null; then
            echo "missing: op $op: no '$want' in $files"
            missing=$((missing + 1))
        fi
    done
    echo "ok   $n_ops ops: '$pattern' in $files"
done < "$tmpdir/places"

# a conformance row for every op
"$top_builddir/bertrain-conformance" --backend cpu --quick > "$tmpdir/conf" 2>&1 ||
    { tail -5 "$tmpdir/conf"; fail "bertrain-conformance --quick failed"; }
for op in $ops; do
    grep -q "^$op " "$tmpdir/conf" || { echo "missing: op $op: no conformance row"; missing=$((missing + 1)); }
done
echo "ok   conformance rows checked for $n_ops ops"
[ "$missing" -eq 0 ] || fail "$missing op places missing (docs/ADDING_AN_OP.md)"
echo "PASS: each of $n_ops ops is in all $n_places checked places and has conformance rows"
