#!/usr/bin/env python3
"""The independent side of tests/predict.sh, with transformers and torch.

  predict_check.py compare HF_DIR PREDICT.jsonl TOP_K
      transformers' fill-mask pipeline on HF_DIR, for every text that
      `bertrain predict --json --top TOP_K` wrote to PREDICT.jsonl: for each
      [MASK], the K probabilities agree rank by rank within TOL, and the token
      ids are the same except where two probabilities are within TOL of each
      other (an order that rounding may swap). Exits 0 when all agree.
  predict_check.py make-model DIR VOCAB
      a BertForMaskedLM made by transformers itself (random weights from a
      fixed torch seed, spread wide enough that the predictions differ),
      saved with save_pretrained, with a BertTokenizerFast over VOCAB.
"""
import json
import sys
import warnings

import torch
import transformers
from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast, pipeline

ABS_TOL, REL_TOL = 2e-5, 1e-4


def close(a, b):
    return abs(a - b) <= ABS_TOL + REL_TOL * max(abs(a), abs(b))


def compare_mask(text, k, ours, theirs):
    """Problems with one [MASK]'s top-k lists, as strings."""
    problems = []
    if len(ours) != len(theirs):
        return [f"{text!r} mask {k}: {len(ours)} guesses vs {len(theirs)}"]
    for rank, (a, b) in enumerate(zip(ours, theirs)):
        if not close(a["prob"], b["score"]):
            problems.append(f"{text!r} mask {k} rank {rank}: prob {a['prob']:.7g} (bertrain) vs "
                            f"{b['score']:.7g} (transformers)")
        elif a["id"] != b["token"]:
            # a swap is fine only between near-equal probabilities
            near = [x for x in theirs if close(x["score"], a["prob"])]
            if a["id"] not in [x["token"] for x in near]:
                problems.append(f"{text!r} mask {k} rank {rank}: token {a['token']} ({a['id']}) "
                                f"vs {b['token_str']} ({b['token']})")
    return problems


def compare(hf_dir, predictions, top_k):
    transformers.logging.set_verbosity_error()
    warnings.simplefilter("ignore")
    fill = pipeline("fill-mask", model=hf_dir, tokenizer=hf_dir, device=-1)
    problems, n_masks = [], 0
    with open(predictions) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for row in rows:
        theirs = fill(row["text"], top_k=int(top_k))
        if row["masks"] and theirs and isinstance(theirs[0], dict):
            theirs = [theirs]  # one [MASK]: the pipeline returns a flat list
        if len(theirs) != len(row["masks"]):
            problems.append(f"{row['text']!r}: {len(row['masks'])} masks vs {len(theirs)}")
            continue
        for k, (ours, t) in enumerate(zip(row["masks"], theirs)):
            problems += compare_mask(row["text"], k, ours, t)
            n_masks += 1
    for p in problems[:20]:
        print("MISMATCH", p)
    print(f"predict_check: {len(rows)} texts, {n_masks} masks, top {top_k}: "
          f"{len(problems)} mismatches (transformers {transformers.__version__}, fill-mask pipeline)")
    return 1 if problems or not rows else 0


def make_model(out_dir, vocab):
    with open(vocab, encoding="utf-8") as f:
        n_vocab = sum(1 for _ in f)
    torch.manual_seed(1234)
    cfg = BertConfig(vocab_size=n_vocab, hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=2, intermediate_size=128, max_position_embeddings=64,
                     initializer_range=0.2)
    BertForMaskedLM(cfg).save_pretrained(out_dir, safe_serialization=True)
    BertTokenizerFast(vocab, do_lower_case=True).save_pretrained(out_dir)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "compare":
        sys.exit(compare(*sys.argv[2:]))
    if len(sys.argv) == 4 and sys.argv[1] == "make-model":
        sys.exit(make_model(*sys.argv[2:]))
    sys.exit(__doc__)
