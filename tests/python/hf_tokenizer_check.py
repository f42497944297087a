#!/usr/bin/env python3
"""The tokenizer files of a `bertrain export` directory, against Hugging Face.

usage: hf_tokenizer_check.py HF_DIR TEXT_FILE...

  - tokenizers: Tokenizer.from_file(HF_DIR/tokenizer.json) gives the same ids,
    tokens and offsets as BertWordPieceTokenizer over HF_DIR/vocab.txt (with
    the export's lowercasing), for single texts and pairs;
  - transformers: AutoTokenizer.from_pretrained(HF_DIR) loads the fast
    tokenizer from tokenizer.json, and its input_ids and token_type_ids equal
    those of the fast tokenizer that transformers converts from vocab.txt
    itself, and of the slow BertTokenizer (pairs with an empty text aside,
    where transformers' slow and fast tokenizers differ from each other).
The texts: every line of the TEXT_FILEs, and hand-picked hard cases.
"""
import json
import os
import sys
import warnings

import transformers
from tokenizers import BertWordPieceTokenizer, Tokenizer
from transformers import AutoTokenizer, BertTokenizer, BertTokenizerFast

HARD = ["Héllo WORLD, naïve café!", "[MASK] and [CLS] in text", "東京 is 日本's capital",
        "tabs\tand\u00a0nbsp\u200bzero-width", "control\x07chars\x00here", "ÉCOLE ÖSTERREICH",
        "a" * 150, "don't--stop... (really)?", "", "   ", "ﬁne ligatures ¼ ½"]


def main(hf_dir, *text_files):
    transformers.logging.set_verbosity_error()
    warnings.simplefilter("ignore")
    with open(os.path.join(hf_dir, "tokenizer_config.json")) as f:
        lower = json.load(f)["do_lower_case"]
    texts = list(HARD)
    for path in text_files:
        with open(path, encoding="utf-8") as f:
            texts += [line.rstrip("\n") for line in f]
    fast = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    ref = BertWordPieceTokenizer(os.path.join(hf_dir, "vocab.txt"), lowercase=lower)
    problems = []
    pairs = list(zip(texts[::2], texts[1::2]))
    for a, b in [(t, None) for t in texts] + pairs:
        x, y = fast.encode(a, b), ref.encode(a, b)
        if (x.ids, x.tokens, x.type_ids, x.offsets) != (y.ids, y.tokens, y.type_ids, y.offsets):
            problems.append(f"tokenizer.json vs BertWordPieceTokenizer on {a[:60]!r}: "
                            f"{x.tokens[:12]} vs {y.tokens[:12]}")
    auto = AutoTokenizer.from_pretrained(hf_dir)
    converted = BertTokenizerFast(vocab_file=os.path.join(hf_dir, "vocab.txt"), do_lower_case=lower)
    slow = BertTokenizer.from_pretrained(hf_dir)
    if not auto.is_fast:
        problems.append(f"AutoTokenizer loaded {type(auto).__name__}, not the fast tokenizer")
    for a, b in [(t, None) for t in texts[:3000]] + pairs[:1000]:
        x = auto(a, b)
        refs = [("the tokenizer transformers converts from vocab.txt", converted(a, b))]
        if a.strip() and (b is None or b.strip()):
            refs.append(("the slow BertTokenizer", slow(a, b)))
        for what, y in refs:
            if (x["input_ids"], x["token_type_ids"]) != (y["input_ids"], y["token_type_ids"]):
                problems.append(f"AutoTokenizer vs {what} on {a[:60]!r}")
    for p in problems[:20]:
        print("MISMATCH", p)
    print(f"hf_tokenizer_check: {hf_dir}: lowercase {lower}, {len(texts)} texts and {len(pairs)} "
          f"pairs: {len(problems)} mismatches (tokenizers BertWordPieceTokenizer, transformers "
          f"{transformers.__version__} {type(auto).__name__})")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
