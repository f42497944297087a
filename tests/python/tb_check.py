"""tests/tensorboard.sh's reader: a run's TensorBoard event files, read with
TensorBoard's own readers, against its metrics.jsonl.

    tb_check.py METRICS_JSONL OUTPUT_DIR [PAST_STEP | lossy]

Every number of every metrics.jsonl record must be in the event files
(bertrain's, *.bertrain) exactly once, under the tag docs/CONFIG.md gives it
("metrics"), at the record's step, equal to the number rounded to float32;
and nothing else may be there. Each file starts with the version header and
holds whole records only. With PAST_STEP: some event must have a step beyond
it (a run killed after its checkpoint at PAST_STEP left events past it).
With "lossy" (writes failed, so either file may lack records): each event
once and equal to metrics.jsonl where that has the step; nothing more. Prints one line per
finding and exits 1 on any; else a summary line.
"""
import collections
import glob
import json
import os
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator, event_file_loader
from tensorboard.compat.proto import event_pb2


def f32(x):
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def record_scalars(rec):
    """(tag, value) for each number of one metrics.jsonl record."""
    if "skipped" in rec:
        group, strip = "skipped", False
    elif "rollback_to_step" in rec:
        group, strip = "rollback", False
    elif any(k.startswith("eval_") for k in rec):
        group, strip = "eval", True
    else:
        group, strip = "train", False
    for key, v in rec.items():
        if key == "step":
            continue
        if key == "ranks" and isinstance(v, list):
            for i, one in enumerate(v):
                for k, x in one.items():
                    if isinstance(x, (int, float)) and not isinstance(x, bool):
                        yield f"rank{i}/{k}", x
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            name = key[5:] if strip and key.startswith("eval_") else key
            yield f"{group}/{name}", v


def expected(metrics_path):
    want = {}
    with open(metrics_path) as f:
        for line in f:
            rec = json.loads(line)
            for tag, x in record_scalars(rec):
                want[(tag, rec["step"])] = f32(x)
    return want


def read_events(out_dir, problems):
    """(tag, step) -> [values], from TensorBoard's raw record reader."""
    seen = collections.defaultdict(list)
    files = sorted(glob.glob(os.path.join(out_dir, "events.out.tfevents.*.bertrain")))
    if not files:
        problems.append(f"no event files in {out_dir}")
    for path in files:
        first, size = True, 0
        for raw in event_file_loader.RawEventFileLoader(path).Load():
            size += len(raw) + 16  # length, its CRC, the data's CRC
            ev = event_pb2.Event.FromString(raw)
            if first and ev.file_version != "brain.Event:2":
                problems.append(f"{path}: first record is not the brain.Event:2 header")
            first = False
            for v in ev.summary.value:
                if v.WhichOneof("value") != "simple_value":
                    problems.append(f"{path}: step {ev.step} tag {v.tag}: not a simple_value")
                seen[(v.tag, ev.step)].append(v.simple_value)
        if size != os.path.getsize(path):
            problems.append(f"{path}: {os.path.getsize(path) - size} bytes after the last "
                            "whole record")
    return seen, len(files)


def main():
    metrics_path, out_dir = sys.argv[1], sys.argv[2]
    lossy = len(sys.argv) > 3 and sys.argv[3] == "lossy"
    past = int(sys.argv[3]) if len(sys.argv) > 3 and not lossy else None
    want = expected(metrics_path)
    problems = []
    seen, n_files = read_events(out_dir, problems)
    for key, values in sorted(seen.items()):
        if len(values) != 1:
            problems.append(f"tag {key[0]} step {key[1]}: {len(values)} events {values}")
        elif key not in want:
            if not lossy:
                problems.append(f"tag {key[0]} step {key[1]}: in the events, not in metrics.jsonl")
        elif values[0] != want[key]:
            problems.append(f"tag {key[0]} step {key[1]}: event {values[0]!r}, "
                            f"metrics.jsonl {want[key]!r} (float32)")
    for key in [] if lossy else sorted(want.keys() - seen.keys()):
        problems.append(f"tag {key[0]} step {key[1]}: in metrics.jsonl, not in the events")
    steps = sorted({s for _, s in seen})
    if past is not None and (not steps or steps[-1] <= past):
        problems.append(f"no event past step {past} (last: {steps[-1] if steps else None})")
    # TensorBoard's own accumulator over the directory sees the same train/loss curve
    acc = event_accumulator.EventAccumulator(out_dir, size_guidance={"scalars": 0})
    acc.Reload()
    curve = [(s.step, f32(s.value)) for s in acc.Scalars("train/loss")]
    want_curve = sorted((s, x) for (t, s), x in want.items() if t == "train/loss")
    if curve != want_curve and not lossy:
        problems.append(f"EventAccumulator's train/loss {curve} differs from metrics.jsonl's "
                        f"{want_curve}")
    for p in problems[:20]:
        print("tb_check:", p)
    if problems:
        print(f"tb_check: {len(problems)} problem(s)")
        return 1
    tags = sorted({t for t, _ in seen})
    print(f"ok   {n_files} event file(s): {len(seen)} scalars, {len(tags)} tags, steps "
          f"{steps[0]}..{steps[-1]}, each once and equal to metrics.jsonl (float32)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
