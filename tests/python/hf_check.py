#!/usr/bin/env python3
"""Load a `bertrain export` directory with transformers' BertForPreTraining
and compare its logits with bertrain's on the fixed batch that tests/c/hf_logits
wrote. Exits 0 when from_pretrained reports no missing or unexpected keys and
the MLM (and NSP) logits agree within 1e-4 relative (max |diff| / max |logit|).

usage: hf_check.py HF_DIR LOGITS.safetensors
"""
import json
import struct
import sys
import warnings

import numpy as np
import torch
import transformers
from transformers import BertForPreTraining, BertTokenizer

TOL = 1e-4


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    dt = {"F32": np.float32, "I32": np.int32}
    out = {}
    for k, v in header.items():
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(blob[8 + n + a:8 + n + b], dtype=dt[v["dtype"]]).reshape(v["shape"])
    return out


def main(hf_dir, dump):
    transformers.logging.set_verbosity_error()
    warnings.simplefilter("ignore")
    model, info = BertForPreTraining.from_pretrained(hf_dir, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        print("FAIL: from_pretrained reported", problems)
        return 1
    print("from_pretrained(%s): BertForPreTraining, no missing or unexpected keys" % hf_dir)
    tok = BertTokenizer.from_pretrained(hf_dir)
    print("BertTokenizer: %d tokens, do_lower_case %s" % (len(tok), tok.do_lower_case))
    model.eval()
    d = read(dump)
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(d["input_ids"].astype(np.int64)),
                    token_type_ids=torch.from_numpy(d["token_type_ids"].astype(np.int64)),
                    attention_mask=torch.from_numpy(d["attention_mask"].astype(np.int64)))
    V = out.prediction_logits.shape[-1]
    hf = out.prediction_logits.reshape(-1, V).numpy()[d["positions"]]
    ours = d["mlm_logits"]
    rel = np.abs(hf - ours).max() / np.abs(hf).max()
    print("MLM logits, %d rows x %d: max |transformers - bertrain| / max |logit| = %.3e "
          "(tolerance %.0e)" % (hf.shape[0], V, rel, TOL))
    ok = rel <= TOL
    if "nsp_logits" in d:
        hn = out.seq_relationship_logits.numpy()
        rn = np.abs(hn - d["nsp_logits"]).max() / max(np.abs(hn).max(), 1e-30)
        print("NSP logits: relative difference %.3e" % rn)
        ok = ok and rn <= TOL
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
