"""`dlbench data text`: a local corpus, a WordPiece vocabulary (tokenizers) and BERT MLM + NSP samples (.npz)."""

from __future__ import annotations

import ast
import re
import sysconfig
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dlbench.data.folders import matching, staging, write_manifest
from dlbench.data.layout import MASK_PROB, SAMPLES, SEQ_LEN, SPECIAL_TOKENS, DataLayoutError

STDLIB_SOURCE = "python stdlib docstrings"
PAD, UNK, CLS, SEP, MASK = range(len(SPECIAL_TOKENS))
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'`])")
_BLANK = re.compile(r"\n\s*\n")

Document = list[str]

if TYPE_CHECKING:
    from tokenizers import Tokenizer


def split_sentences(text: str) -> list[str]:
    """A paragraph's sentences, whitespace collapsed, dropping fragments of fewer than three words."""
    out = []
    for para in _BLANK.split(text):
        for s in _SENTENCE_END.split(" ".join(para.split())):
            if len(s.split()) >= 3:
                out.append(s)
    return out


def stdlib_documents(max_sentences: int) -> Iterator[Document]:
    """Docstrings of the standard library's modules, classes and functions, read with ast (nothing imported)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    count = 0
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if rel[0] in {"site-packages", "dist-packages", "test", "idlelib", "lib2to3"} or "tests" in rel:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = split_sentences(ast.get_docstring(node) or "")
                if len(doc) >= 2:
                    yield doc
                    count += len(doc)
                    if count >= max_sentences:
                        return


def file_documents(files: Sequence[Path]) -> Iterator[Document]:
    """Each file's blank-line-separated paragraphs as documents."""
    for f in files:
        try:
            text = Path(f).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise DataLayoutError(f"cannot read {f}: {exc.strerror}") from None
        for para in _BLANK.split(text):
            doc = split_sentences(para)
            if doc:
                yield doc


def train_wordpiece(documents: Sequence[Document], vocab_size: int) -> Tokenizer:
    """A BERT-style WordPiece tokenizer trained on the documents (special tokens get ids 0..4)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS))
    tok.train_from_iterator((s for doc in documents for s in doc), trainer=trainer)
    return tok


def _mask(ids: np.ndarray, special: np.ndarray, vocab: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """BERT masking of one sequence: 15% of non-special tokens; 80% [MASK], 10% random, 10% unchanged."""
    labels = np.full_like(ids, -100)
    candidates = np.flatnonzero(~special)
    n = max(1, round(len(candidates) * MASK_PROB))
    chosen = rng.choice(candidates, size=min(n, len(candidates)), replace=False)
    labels[chosen] = ids[chosen]
    out = ids.copy()
    fate = rng.random(len(chosen))
    out[chosen[fate < 0.8]] = MASK
    rand = chosen[(fate >= 0.8) & (fate < 0.9)]
    out[rand] = rng.integers(len(SPECIAL_TOKENS), vocab, size=len(rand))
    return out, labels


def _truncate(a: list[int], b: list[int], budget: int, rng: np.random.Generator) -> None:
    """Shorten the longer of the pair, from a random end, until both fit (BERT's truncate_seq_pair)."""
    while len(a) + len(b) > budget:
        longer = a if len(a) > len(b) else b
        del longer[0 if rng.random() < 0.5 else -1]


def make_samples(
    docs: list[list[list[int]]], n: int, vocab: int, seed: int, seq_len: int = SEQ_LEN
) -> dict[str, np.ndarray]:
    """n MLM + NSP samples from tokenised documents (lists of sentences of ids); half the pairs are IsNext."""
    rng = np.random.default_rng(seed)
    multi = [d for d in docs if len(d) >= 2]
    if not multi:
        raise DataLayoutError("the corpus needs documents of at least two sentences for next-sentence pairs")
    arrays: dict[str, np.ndarray] = {
        "input_ids": np.zeros((n, seq_len), np.int32),
        "token_type_ids": np.zeros((n, seq_len), np.int8),
        "attention_mask": np.zeros((n, seq_len), np.int8),
        "mlm_labels": np.full((n, seq_len), -100, np.int32),
        "nsp_labels": np.zeros(n, np.int8),
    }
    target = seq_len - 3
    for k in range(n):
        doc = multi[int(rng.integers(len(multi)))]
        cut = int(rng.integers(1, len(doc)))
        a = [t for s in doc[max(0, cut - 3) : cut] for t in s][-target:]
        not_next = bool(rng.random() < 0.5)
        if not_next:
            other = docs[int(rng.integers(len(docs)))]
            start = int(rng.integers(len(other)))
            b = [t for s in other[start : start + 3] for t in s]
        else:
            b = [t for s in doc[cut : cut + 3] for t in s]
        a, b = list(a), list(b[:target])
        _truncate(a, b, target, rng)
        ids = np.array([CLS, *a, SEP, *b, SEP], np.int32)
        special = np.isin(ids, (CLS, SEP))
        masked, labels = _mask(ids, special, vocab, rng)
        length = len(ids)
        arrays["input_ids"][k, :length] = masked
        arrays["token_type_ids"][k, len(a) + 2 : length] = 1
        arrays["attention_mask"][k, :length] = 1
        arrays["mlm_labels"][k, :length] = labels
        arrays["nsp_labels"][k] = int(not_next)
    return arrays


def make_text(
    out: Path,
    samples: int,
    files: Sequence[Path] = (),
    vocab_size: int = 30522,
    seed: int = 0,
    max_sentences: int = 10_000,
    force: bool = False,
) -> dict[str, object]:
    """Corpus, vocabulary and samples into out, in the layout of docs/data-layout.md; returns the manifest."""
    if samples < 1:
        raise DataLayoutError(f"need at least one sample; got {samples}")
    if vocab_size <= len(SPECIAL_TOKENS):
        raise DataLayoutError(f"vocabulary size must be > {len(SPECIAL_TOKENS)}; got {vocab_size}")
    documents = list(file_documents(files) if files else stdlib_documents(max_sentences))
    if sum(len(d) for d in documents) < 10:
        raise DataLayoutError("the corpus has fewer than 10 sentences: give more text")
    tok = train_wordpiece(documents, vocab_size)
    vocab = tok.get_vocab()
    encoded = tok.encode_batch([s for d in documents for s in d], add_special_tokens=False)
    flat = iter(e.ids for e in encoded)
    docs = [[next(flat) for _ in d] for d in documents]
    arrays = make_samples(docs, samples, len(vocab), seed)
    with staging(out, force) as tmp:
        (tmp / "corpus.txt").write_text("\n\n".join("\n".join(d) for d in documents) + "\n", encoding="utf-8")
        by_id = sorted(vocab.items(), key=lambda kv: kv[1])
        (tmp / "vocab.txt").write_text("".join(f"{t}\n" for t, _ in by_id), encoding="utf-8")
        tok.save(str(tmp / "tokenizer.json"))
        np.savez(tmp / SAMPLES, **arrays)  # type: ignore[arg-type]
        manifest = write_manifest(
            tmp,
            {
                "kind": "text",
                "samples": samples,
                "seq_len": SEQ_LEN,
                "vocab_size": len(vocab),
                "mask_prob": MASK_PROB,
                "seed": seed,
                "documents": len(documents),
                "sentences": sum(len(d) for d in documents),
                "sources": [str(Path(f)) for f in files] or [STDLIB_SOURCE],
            },
        )
    return manifest


def ensure_text(out: Path, samples: int, seed: int = 0) -> Path:
    """out, made from the standard library's docstrings only if not already there with these settings."""
    if not matching(out, {"kind": "text", "samples": samples, "seed": seed, "sources": [STDLIB_SOURCE]}):
        make_text(out, samples, seed=seed, force=True)
    return out
