#!/usr/bin/env python3
"""Build the bertrain demo data set (WordPiece vocab + train/valid shards).

Usage (from the repository root):

  python3 scripts/make-demo-data.py                # build data/demo/{vocab.txt,train.shard,valid.shard}
  python3 scripts/make-demo-data.py --check        # independently re-read and validate the shards
  python3 scripts/make-demo-data.py --extract-corpus DIR
        # (re)create data/corpus/*.txt from the Debian package r-cran-janeaustenr;
        # DIR is the installed R package directory, i.e.
        # /usr/lib/R/site-library/janeaustenr (or the same path under a `dpkg -x` root)

Building needs the PyPI package `tokenizers` (pip install tokenizers); --check and
--extract-corpus use only the Python standard library.

Corpus convention: a blank line separates documents, every other line is one
sentence/segment (here: one paragraph).  Documents are numbered across all
data/corpus/*.txt files in sorted file-name order; document i goes to the
validation split when i % 20 == 7, otherwise to the training split.

Shard format (little-endian), 64-byte header:
  0  8  magic "BRTSHARD"        32 8  u64 n_docs
  8  4  u32 version = 1         40 8  u64 n_sents
  12 4  u32 token_width (2|4)   48 8  u64 n_tokens
  16 4  u32 vocab_size          56 4  u32 payload_crc (zlib.crc32 of bytes 64..EOF)
  20 4  u32 flags (bit0 lower)  60 4  u32 header_crc  (zlib.crc32 of bytes 0..59)
  24 8  u64 vocab_hash (FNV-1a 64 over each token + b"\\n", in id order)
payload: tokens[n_tokens] (token_width bytes each), zero padding to a multiple of
8 bytes from file start, u64 sent_offsets[n_sents+1], u64 doc_offsets[n_docs+1].
"""

import argparse
import glob
import gzip
import os
import re
import struct
import sys
import zlib
from array import array

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS_DIR = os.path.join(ROOT, "data", "corpus")
DEMO_DIR = os.path.join(ROOT, "data", "demo")

VOCAB_SIZE = 8000
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VALID_EVERY = 20
VALID_INDEX = 7

MAGIC = b"BRTSHARD"
VERSION = 1
HEADER_SIZE = 64
FLAG_LOWERCASE = 1
HEADER_FMT = "<8sIIIIQQQQ"  # up to and excluding payload_crc (56 bytes)
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3

# ---------------------------------------------------------------------------
# corpus extraction (r-cran-janeaustenr -> data/corpus/*.txt)
# ---------------------------------------------------------------------------

# (R object name in janeaustenr, output file, title, first published)
BOOKS = [
    ("prideprejudice", "austen-pride-and-prejudice.txt", "Pride and Prejudice", 1813),
    ("sensesensibility", "austen-sense-and-sensibility.txt", "Sense and Sensibility", 1811),
    ("persuasion", "austen-persuasion.txt", "Persuasion", 1818),
]


class RUnserializer:
    """Minimal reader for R's XDR serialization format (versions 2 and 3).

    Supports just what janeaustenr's lazy-load database uses: character,
    integer and logical vectors, generic vectors (lists), pairlists for
    attributes, symbols and references.
    """

    def __init__(self, buf):
        self.b = buf
        self.p = 0
        self.refs = []

    def i32(self):
        v = struct.unpack_from(">i", self.b, self.p)[0]
        self.p += 4
        return v

    def read(self):
        flags = self.i32()
        t = flags & 0xFF
        has_attr = flags & (1 << 9)
        has_tag = flags & (1 << 10)
        if t == 254:  # NILVALUE_SXP
            return None
        if t == 255:  # REFSXP
            return self.refs[(flags >> 8) - 1]
        if t == 1:  # SYMSXP
            sym = ("SYM", self.read())
            self.refs.append(sym)
            return sym
        if t == 9:  # CHARSXP
            n = self.i32()
            if n == -1:
                return None
            v = self.b[self.p:self.p + n].decode("utf-8")
            self.p += n
            return v
        if t == 2:  # LISTSXP (pairlist) -> list of (tag, value)
            if has_attr:
                self.read()
            tag = self.read() if has_tag else None
            car = self.read()
            cdr = self.read()
            return [(tag[1] if tag else None, car)] + (cdr or [])
        if t in (10, 13, 16, 19):  # LGLSXP, INTSXP, STRSXP, VECSXP
            n = self.i32()
            if t in (10, 13):
                v = [self.i32() for _ in range(n)]
            else:
                v = [self.read() for _ in range(n)]
            attrs = dict(self.read()) if has_attr else {}
            if "names" in attrs:
                return dict(zip(attrs["names"], v))
            return v
        raise ValueError("unsupported R SEXP type %d" % t)

    def top(self):
        if self.b[:2] != b"X\n":
            raise ValueError("not an XDR R serialization")
        self.p = 2
        version = self.i32()
        self.i32()  # writer R version
        self.i32()  # minimal reader R version
        if version == 3:
            n = self.i32()
            self.p += n  # native encoding name
        return self.read()


def load_lazydata(pkgdir):
    """Return {name: list-of-lines} from an R package's data/Rdata.{rdx,rdb}."""
    with gzip.open(os.path.join(pkgdir, "data", "Rdata.rdx")) as f:
        index = RUnserializer(f.read()).top()
    if index.get("compressed") != [1]:
        raise ValueError("expected zlib-compressed lazy-load database")
    with open(os.path.join(pkgdir, "data", "Rdata.rdb"), "rb") as f:
        rdb = f.read()
    out = {}
    for name, (off, length) in index["variables"].items():
        blk = rdb[off:off + length]
        raw = zlib.decompress(blk[4:])
        if len(raw) != struct.unpack(">I", blk[:4])[0]:
            raise ValueError("bad uncompressed length for " + name)
        out[name] = RUnserializer(raw).top()
    return out


CHAPTER_RE = re.compile(r"^\s*(CHAPTER|Chapter)\s+([0-9]+|[IVXLC]+)\.?\s*$")
RULE_RE = re.compile(r"^[\s*]+$")            # "* * * * *" / "***" section breaks
END_RE = re.compile(r"^\s*(THE END|Finis)\s*$")
NOTE_RE = re.compile(r"^\[.*\]$")            # editorial notes, e.g. "[At this point ...]"


def book_to_chapters(lines):
    """Gutenberg-style hard-wrapped lines -> list of chapters (lists of paragraphs)."""
    chapters = []
    para = []

    def flush():
        if para:
            text = " ".join(para)
            text = text.replace("_", "")          # _italics_ markup
            text = re.sub(r"\s+", " ", text).strip()
            if text and not NOTE_RE.match(text):
                chapters[-1].append(text)
            para.clear()

    for line in lines:
        line = line if line is not None else ""
        if CHAPTER_RE.match(line):
            flush()
            chapters.append([])
            continue
        if not chapters:          # title page / front matter before chapter 1
            continue
        if not line.strip() or RULE_RE.match(line) or END_RE.match(line):
            flush()
            continue
        para.append(line.strip())
    flush()
    return [c for c in chapters if c]


def extract_corpus(pkgdir):
    data = load_lazydata(pkgdir)
    os.makedirs(CORPUS_DIR, exist_ok=True)
    total = 0
    for name, fname, title, year in BOOKS:
        chapters = book_to_chapters(data[name])
        text = "\n\n".join("\n".join(ch) for ch in chapters) + "\n"
        path = os.path.join(CORPUS_DIR, fname)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        nbytes = len(text.encode("utf-8"))
        total += nbytes
        print("%-36s %-24s chapters=%3d paragraphs=%5d bytes=%d" % (
            fname, title, len(chapters), sum(len(c) for c in chapters), nbytes))
    print("corpus total bytes=%d" % total)


# ---------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------


def read_corpus():
    """Return list of documents; each document is a list of non-empty lines."""
    files = sorted(glob.glob(os.path.join(CORPUS_DIR, "*.txt")))
    if not files:
        sys.exit("no corpus files in " + CORPUS_DIR)
    docs = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            cur = []
            for line in f:
                line = line.strip()
                if line:
                    cur.append(line)
                elif cur:
                    docs.append(cur)
                    cur = []
            if cur:
                docs.append(cur)
    return files, docs


def fnv1a64_vocab(tokens):
    h = FNV_OFFSET
    for tok in tokens:
        for byte in tok.encode("utf-8") + b"\n":
            h ^= byte
            h = (h * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def u64_bytes(values):
    a = array("Q", values)
    assert a.itemsize == 8
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


def write_shard(path, docs_ids, vocab_size, vocab_hash, lowercase=True):
    """docs_ids: list of documents, each a list of sentences (lists of token ids)."""
    width = 2 if vocab_size <= 65536 else 4
    tokens = array("H" if width == 2 else "I")
    assert tokens.itemsize == width
    sent_offsets = [0]
    doc_offsets = [0]
    for doc in docs_ids:
        n_before = len(sent_offsets)
        for sent in doc:
            if not sent:
                continue
            tokens.extend(sent)
            sent_offsets.append(len(tokens))
        if len(sent_offsets) > n_before:
            doc_offsets.append(len(sent_offsets) - 1)
    n_tokens = len(tokens)
    n_sents = len(sent_offsets) - 1
    n_docs = len(doc_offsets) - 1
    if sys.byteorder == "big":
        tokens.byteswap()
    tok_bytes = tokens.tobytes()
    pad = (-(HEADER_SIZE + len(tok_bytes))) % 8
    payload = tok_bytes + b"\0" * pad + u64_bytes(sent_offsets) + u64_bytes(doc_offsets)
    head = struct.pack(HEADER_FMT, MAGIC, VERSION, width, vocab_size,
                       FLAG_LOWERCASE if lowercase else 0, vocab_hash,
                       n_docs, n_sents, n_tokens)
    head += struct.pack("<I", zlib.crc32(payload) & 0xFFFFFFFF)
    head += struct.pack("<I", zlib.crc32(head) & 0xFFFFFFFF)
    assert len(head) == HEADER_SIZE
    with open(path, "wb") as f:
        f.write(head)
        f.write(payload)
    lens = sorted(sent_offsets[i + 1] - sent_offsets[i] for i in range(n_sents))
    return n_docs, n_sents, n_tokens, HEADER_SIZE + len(payload), lens


def train_wordpiece_vocab(lines, vocab_size, special_tokens, min_frequency=2,
                          limit_alphabet=1000, prefix="##"):
    """Deterministic WordPiece vocabulary training.

    Same algorithm as tokenizers' WordPieceTrainer (BPE merges over
    pre-tokenized words, continuation pieces carry the "##" prefix), but with
    every tie broken explicitly: equal pair counts -> lexicographically
    smallest (left, right) pair; alphabet and "##" characters in sorted order.
    (tokenizers' own trainer breaks ties by internal ids that depend on Rust
    HashMap iteration order, so its vocabulary differs from run to run.)
    Normalization and pre-tokenization are tokenizers' BertNormalizer
    (lowercase, strip accents, clean text, CJK spacing) and BertPreTokenizer,
    i.e. exactly what BertWordPieceTokenizer(vocab, lowercase=True) applies.
    """
    import heapq
    from collections import Counter
    from tokenizers import normalizers, pre_tokenizers

    norm = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                      strip_accents=None, lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    wc = Counter()
    for line in lines:
        for w, _ in pre.pre_tokenize_str(norm.normalize_str(line)):
            wc[w] += 1

    chars = Counter()
    for w, n in wc.items():
        for c in w:
            chars[c] += n
    alphabet = sorted(c for c, _ in sorted(chars.items(), key=lambda kv: (-kv[1], kv[0]))
                      [:limit_alphabet])
    alpha = set(alphabet)

    words, counts = [], []
    for w in sorted(wc):
        if any(c not in alpha for c in w):
            continue  # would encode to [UNK]; not used for merges
        words.append([w[0]] + [prefix + c for c in w[1:]])
        counts.append(wc[w])

    vocab = list(special_tokens)
    seen = set(vocab)
    for t in alphabet + sorted({s for sym in words for s in sym[1:]}):
        if t not in seen:
            vocab.append(t)
            seen.add(t)

    pair_count = Counter()
    where = {}
    for i, sym in enumerate(words):
        for p in zip(sym, sym[1:]):
            pair_count[p] += counts[i]
            where.setdefault(p, set()).add(i)
    heap = [(-n, a, b) for (a, b), n in pair_count.items()]
    heapq.heapify(heap)

    plen = len(prefix)
    while len(vocab) < vocab_size and heap:
        negn, a, b = heapq.heappop(heap)
        n = pair_count.get((a, b), 0)
        if n != -negn:
            continue  # stale heap entry
        if n < min_frequency:
            break
        new = a + b[plen:]
        if new not in seen:
            vocab.append(new)
            seen.add(new)
        touched = set()
        for i in sorted(where.pop((a, b), ())):
            sym = words[i]
            c = counts[i]
            for p in zip(sym, sym[1:]):
                pair_count[p] -= c
                touched.add(p)
                if p in where:
                    where[p].discard(i)
            out, k = [], 0
            while k < len(sym):
                if k + 1 < len(sym) and sym[k] == a and sym[k + 1] == b:
                    out.append(new)
                    k += 2
                else:
                    out.append(sym[k])
                    k += 1
            words[i] = out
            for p in zip(out, out[1:]):
                pair_count[p] += c
                touched.add(p)
                where.setdefault(p, set()).add(i)
        for p in sorted(touched):
            if pair_count[p] > 0:
                heapq.heappush(heap, (-pair_count[p], p[0], p[1]))
            else:
                pair_count.pop(p, None)
                where.pop(p, None)
    return vocab


def build():
    try:
        from tokenizers import BertWordPieceTokenizer
    except ImportError:
        sys.exit("this needs the `tokenizers` package: pip install tokenizers")
    import tokenizers
    print("tokenizers %s" % tokenizers.__version__)

    files, docs = read_corpus()
    train_docs = [d for i, d in enumerate(docs) if i % VALID_EVERY != VALID_INDEX]
    valid_docs = [d for i, d in enumerate(docs) if i % VALID_EVERY == VALID_INDEX]
    print("corpus: %d files, %d documents (%d train, %d valid)" % (
        len(files), len(docs), len(train_docs), len(valid_docs)))

    # 1. vocabulary, trained on the training split only
    vocab = train_wordpiece_vocab((line for doc in train_docs for line in doc),
                                  VOCAB_SIZE, SPECIAL_TOKENS)
    for t in vocab:
        if not t or any(c in t for c in "\n\r") or t != t.strip():
            sys.exit("unexpected vocab token %r" % t)
    os.makedirs(DEMO_DIR, exist_ok=True)
    vocab_path = os.path.join(DEMO_DIR, "vocab.txt")
    with open(vocab_path, "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(t + "\n" for t in vocab))
    vocab_hash = fnv1a64_vocab(vocab)
    print("vocab: %d tokens -> %s (fnv1a64 %016x)" % (len(vocab), vocab_path, vocab_hash))

    # 2. tokenize with the written vocabulary
    tok = BertWordPieceTokenizer(vocab_path, lowercase=True)
    if tok.get_vocab_size() != len(vocab):
        sys.exit("reloaded vocab size mismatch")
    unk_id = vocab.index("[UNK]")
    for split, sdocs in (("train", train_docs), ("valid", valid_docs)):
        flat = [line for doc in sdocs for line in doc]
        enc = tok.encode_batch(flat, add_special_tokens=False)
        ids = [e.ids for e in enc]
        docs_ids, k = [], 0
        for doc in sdocs:
            docs_ids.append(ids[k:k + len(doc)])
            k += len(doc)
        n_unk = sum(s.count(unk_id) for s in ids)
        path = os.path.join(DEMO_DIR, split + ".shard")
        n_docs, n_sents, n_tokens, size, lens = write_shard(
            path, docs_ids, len(vocab), vocab_hash)
        print("%s: docs=%d sents=%d tokens=%d unk=%d bytes=%d -> %s" % (
            split, n_docs, n_sents, n_tokens, n_unk, size, path))
        if lens:
            pct = lambda q: lens[min(len(lens) - 1, int(q * len(lens)))]
            print("  tokens/sentence: min=%d median=%d p90=%d p99=%d max=%d mean=%.1f" % (
                lens[0], pct(0.5), pct(0.9), pct(0.99), lens[-1], n_tokens / n_sents))


# ---------------------------------------------------------------------------
# independent checker (standard library only; does not reuse the writer code)
# ---------------------------------------------------------------------------


def check_shard(path, vocab):
    with open(path, "rb") as f:
        buf = f.read()
    errs = []
    if len(buf) < 64:
        return ["file shorter than header"]
    if buf[0:8] != b"BRTSHARD":
        errs.append("bad magic %r" % buf[0:8])
    (version, width, vsize, flags) = struct.unpack_from("<4I", buf, 8)
    (vhash, nd, ns, nt) = struct.unpack_from("<4Q", buf, 24)
    (pcrc, hcrc) = struct.unpack_from("<2I", buf, 56)
    if zlib.crc32(buf[:60]) != hcrc:
        errs.append("header crc mismatch")
    if zlib.crc32(buf[64:]) != pcrc:
        errs.append("payload crc mismatch")
    if version != 1:
        errs.append("version %d" % version)
    if width != (2 if vsize <= 65536 else 4):
        errs.append("token_width %d for vocab_size %d" % (width, vsize))
    if vsize != len(vocab):
        errs.append("vocab_size %d != vocab.txt lines %d" % (vsize, len(vocab)))
    h = 0xCBF29CE484222325
    for b in "".join(t + "\n" for t in vocab).encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) % (1 << 64)
    if h != vhash:
        errs.append("vocab_hash %016x != vocab.txt %016x" % (vhash, h))
    tok_end = 64 + nt * width
    sent_at = (tok_end + 7) // 8 * 8
    doc_at = sent_at + 8 * (ns + 1)
    end = doc_at + 8 * (nd + 1)
    if end != len(buf):
        errs.append("size %d != expected %d" % (len(buf), end))
        return errs
    if any(buf[tok_end:sent_at]):
        errs.append("non-zero padding")
    toks = struct.unpack_from("<%d%s" % (nt, "H" if width == 2 else "I"), buf, 64)
    so = struct.unpack_from("<%dQ" % (ns + 1), buf, sent_at)
    do = struct.unpack_from("<%dQ" % (nd + 1), buf, doc_at)
    if so[0] != 0 or so[-1] != nt:
        errs.append("sent_offsets ends %d..%d (want 0..%d)" % (so[0], so[-1], nt))
    if do[0] != 0 or do[-1] != ns:
        errs.append("doc_offsets ends %d..%d (want 0..%d)" % (do[0], do[-1], ns))
    if any(so[i + 1] <= so[i] for i in range(ns)):
        errs.append("sent_offsets not strictly increasing (empty sentence)")
    if any(do[i + 1] <= do[i] for i in range(nd)):
        errs.append("doc_offsets not strictly increasing (empty document)")
    mx = max(toks) if toks else 0
    if mx >= vsize:
        errs.append("max token id %d >= vocab_size %d" % (mx, vsize))
    print("%s: OK=%s version=%d width=%d vocab=%d flags=%d docs=%d sents=%d tokens=%d "
          "max_id=%d bytes=%d" % (os.path.relpath(path, ROOT), not errs, version, width,
                                  vsize, flags, nd, ns, nt, mx, len(buf)))
    if not errs and nt:
        first = toks[so[do[0]]:so[do[1]]][:40]
        words = []
        for t in first:
            piece = vocab[t]
            if piece.startswith("##") and words:
                words[-1] += piece[2:]
            else:
                words.append(piece)
        print("  first 40 tokens of doc 0: %s" % list(first))
        print("  decoded: %s" % " ".join(words))
    return errs


def check():
    with open(os.path.join(DEMO_DIR, "vocab.txt"), encoding="utf-8") as f:
        vocab = f.read().split("\n")
    if vocab and vocab[-1] == "":
        vocab.pop()
    bad = 0
    for split in ("train", "valid"):
        errs = check_shard(os.path.join(DEMO_DIR, split + ".shard"), vocab)
        for e in errs:
            print("  ERROR: " + e)
        bad += len(errs)
    if bad:
        sys.exit("check FAILED (%d errors)" % bad)
    print("check passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="validate existing shards")
    ap.add_argument("--extract-corpus", metavar="DIR",
                    help="rebuild data/corpus from the janeaustenr R package directory")
    args = ap.parse_args()
    if args.extract_corpus:
        extract_corpus(args.extract_corpus)
    elif args.check:
        check()
    else:
        build()


if __name__ == "__main__":
    main()
