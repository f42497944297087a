"""docs/CONFIG.md against the config's key table (tests/config-doc.sh).

usage: config_doc.py CONFIG.md KEYS.jsonl
KEYS.jsonl is tests/c/config_table's output: one key a line with its kind,
range and default. Every key must have exactly one row in a key table of
CONFIG.md (| key | type | default ... |), and no row may name a key the table
lacks. A row's type cell names the kind; for numbers it states the range the
loader enforces ("int in [1, 10^9]", "float in (0, 1]", "int ≥ 0" only where
the loader has no upper bound, which none has); for a choice it lists every
choice. Its default cell is the value config_defaults gives, or, for the keys
in DERIVED, the words saying how the default follows from other keys.
Prints one line per problem and exits 1 when there is any."""
import json
import math
import re
import sys

# keys whose default is computed from other keys when the config leaves them
# out: the table holds a sentinel, and CONFIG.md says how it is derived
DERIVED = {
    "train_batch_size": "two of the three batch keys give the third",
    "train_micro_batch_size_per_gpu": "two of the three batch keys give the third",
    "gradient_accumulation_steps": "two of the three batch keys give the third",
    "scheduler.params.warmup_max_lr": "optimizer.params.lr",
    "scheduler.params.total_num_steps": "train_steps, or the run's samples",
    "data.max_predictions": "from seq_len and mask_prob",
    "distributed.shares": "an equal split",
    "eval.fill_mask": "no texts",
}
TYPE_WORDS = {
    "int": ("int",),
    "seed": ("int",),
    "float": ("float", "seconds"),
    "bool": ("bool",),
    "string": ("string", "path"),
    "string_or_null": ("string", "path"),
    "betas": ("[b1, b2]",),
    "shares": ("list",),
    "devices": ("list",),
    "texts": ("list",),
}


def number(text):
    """A number as CONFIG.md writes it: 12, 1e-3, 10^9, 2^24, 4,096."""
    text = text.strip().replace(",", "")
    m = re.fullmatch(r"(\d+)\^(\d+)", text)
    if m:
        return float(int(m.group(1)) ** int(m.group(2)))
    return float(text)


NUM = r"-?[0-9][0-9.,eE+-]*(?:\^[0-9]+)?"


def stated_range(cell):
    """(lo, lo_open, hi, hi_open) stated in a type cell; None where absent."""
    m = re.search(r"in ([\[(])\s*(" + NUM + r")\s*,\s*(" + NUM + r")\s*([\])])", cell)
    if m:
        return number(m.group(2)), m.group(1) == "(", number(m.group(3)), m.group(4) == ")"
    m = re.search(r"(≥|>)\s*(" + NUM + ")", cell)
    if m:
        return number(m.group(2)), m.group(1) == ">", None, False
    return None, False, None, False


def same(a, b):
    return a == b or math.isclose(a, b, rel_tol=1e-6, abs_tol=0.0)


def bound_ok(stated, is_open, actual, lower):
    """A stated closed bound must be the table's; an open one must be the
    nearest value below (lower) or above the table's, within 1e-9."""
    if stated is None:
        return False
    if not is_open:
        return same(stated, actual)
    return (0 < actual - stated <= 1e-9) if lower else (0 < stated - actual <= 1e-9)


def check_type(key, cell, problems):
    kind = key["kind"]
    if kind == "choice":
        for choice in key["choices"].split("|"):
            if "`" + choice + "`" not in cell:
                problems.append(f"{key['path']}: type cell does not list the choice `{choice}`: {cell}")
        return
    words = TYPE_WORDS[kind]
    if not any(cell.startswith(w) for w in words):
        problems.append(f"{key['path']}: type cell should start with {' or '.join(words)}: {cell}")
    if kind == "seed":
        if "[0, 2^64)" not in cell:
            problems.append(f"{key['path']}: type cell should say [0, 2^64): {cell}")
        return
    if "min" not in key or kind not in ("int", "float"):
        return
    lo, lo_open, hi, hi_open = stated_range(cell)
    if not bound_ok(lo, lo_open, key["min"], True) or not bound_ok(hi, hi_open, key["max"], False):
        problems.append(
            f"{key['path']}: the loader accepts [{key['min']:g}, {key['max']:g}]; the type cell says: {cell}")


def check_default(key, cell, problems):
    path, want = key["path"], key["default"]
    text = cell.strip().strip("`")
    if path in DERIVED:
        if not cell.strip():
            problems.append(f"{path}: empty default cell (derived: {DERIVED[path]})")
        return
    if cell.strip() in ("none", "required") and want in (None, ""):
        return
    if isinstance(want, bool):
        ok = text == ("true" if want else "false")
    elif isinstance(want, (int, float)):
        m = re.match(NUM, text)
        try:
            ok = m is not None and same(number(m.group(0)), float(want))
        except ValueError:
            ok = False
    elif isinstance(want, str):
        ok = cell.strip() == "`" + want + "`"
    elif isinstance(want, list):
        try:
            ok = json.loads(text) == want
        except ValueError:
            ok = False
    else:
        ok = False
    if not ok:
        problems.append(f"{path}: default is {json.dumps(want)}; the default cell says: {cell}")


def doc_rows(path):
    """{key: [(line number, [cells])]} of every key table's rows."""
    rows, in_table = {}, False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if not line.startswith("|"):
                in_table = False
            elif cells[:2] == ["key", "type"] and cells[2].startswith("default"):
                in_table = True
            elif in_table and not line.startswith("|---"):
                m = re.fullmatch(r"`([A-Za-z0-9_.]+)`", cells[0])
                rows.setdefault(m.group(1) if m else cells[0], []).append((n, cells))
    return rows


def main():
    doc, table = sys.argv[1], sys.argv[2]
    keys = [json.loads(line) for line in open(table, encoding="utf-8")]
    if not keys:
        print("the key table is empty")
        return 1
    rows, problems = doc_rows(doc), []
    for key in keys:
        found = rows.get(key["path"], [])
        if len(found) != 1:
            problems.append(f"{key['path']}: {len(found)} rows in {doc} (want 1)")
            continue
        cells = found[0][1]
        check_type(key, cells[1], problems)
        check_default(key, cells[2], problems)
    known = {k["path"] for k in keys}
    for name, found in rows.items():
        if name not in known:
            problems.append(f"{doc}:{found[0][0]}: a row for {name}, which is not a config key")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) in {doc}")
        return 1
    print(f"ok   {len(keys)} keys: each has one row in {doc} with its type, range and default")
    return 0


if __name__ == "__main__":
    sys.exit(main())
