#!/usr/bin/env python3
"""safetensors without dependencies (the standard library only), for the tests.

  st_tool.py names FILE             one line per tensor: name dtype shape (sorted)
  st_tool.py rename IN OUT MODE     rewrite IN's names as another HF layout:
                                    bertmodel: BertModel keys (no "bert." prefix,
                                    no cls.* heads); maskedlm: BertForMaskedLM
                                    keys (no pooler, no NSP head); gamma: old LayerNorm
                                    gamma/beta names; drop-decoder: without the
                                    tied cls.predictions.decoder.* copies;
                                    plain: the same names, without bertrain's
                                    metadata (as transformers writes it); every
                                    mode drops bertrain_export (the result is
                                    no longer a bertrain export)
  st_tool.py same A B [PREFIX]      exit 0 when every tensor of A (whose name
                                    starts with PREFIX) is in B with the same
                                    bytes (prints the count)
"""
import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", None)
    data = blob[8 + n:]
    tensors = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
               for k, v in header.items()}
    return tensors, meta


def write(path, tensors, meta):
    header, off, chunks = {}, 0, []
    if meta:
        header["__metadata__"] = meta
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        chunks.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(len(text) + 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def rename(name, mode):
    if mode == "bertmodel":
        if name.startswith("cls."):
            return None
        return name[5:] if name.startswith("bert.") else name
    if mode == "maskedlm":
        return None if name.startswith(("bert.pooler.", "cls.seq_relationship.")) else name
    if mode == "gamma":
        return name.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta")
    if mode == "drop-decoder":
        return None if name.startswith("cls.predictions.decoder.") else name
    if mode == "plain":
        return name
    raise SystemExit("unknown mode " + mode)


def main(argv):
    if len(argv) == 3 and argv[1] == "names":
        tensors, _ = read(argv[2])
        for name in sorted(tensors):
            print(name, tensors[name][0], "x".join(str(d) for d in tensors[name][1]))
        return 0
    if len(argv) == 5 and argv[1] == "rename":
        tensors, meta = read(argv[2])
        out = {}
        for name, t in tensors.items():
            new = rename(name, argv[4])
            if new:
                out[new] = t
        # another layout is a hand-made directory, not a bertrain export: no export mark
        meta = {k: v for k, v in (meta or {"format": "pt"}).items() if k != "bertrain_export"}
        write(argv[3], out, {"format": "pt"} if argv[4] == "plain" else meta)
        return 0
    if len(argv) in (4, 5) and argv[1] == "same":
        a, _ = read(argv[2])
        b, _ = read(argv[3])
        if len(argv) == 5:
            a = {k: v for k, v in a.items() if k.startswith(argv[4])}
        bad = [k for k in a if k not in b or a[k] != b[k]]
        print("%d of %d tensors identical%s" % (len(a) - len(bad), len(a),
                                                "; differ: " + ", ".join(bad[:5]) if bad else ""))
        return 1 if bad else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
