"""Bag-of-words sentence encoder: the mean of a sentence's in-vocabulary word vectors.

Tokens are ``\\w+`` runs and single punctuation characters; tokens the word model does not know (punctuation
included) are dropped, the rest are averaged. A sentence with no known token gets a zero vector, which the embed
stage reports. The mean is one sparse ``(sentences x rows)`` averaging matrix times the word matrix, so 25k
sentences take about a second.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from evalfarm.catalog.specs import ModelSpec
from evalfarm.encoders.protocol import ModelLoadError, WordEncoder
from evalfarm.plugins import LoadContext, ModelKind, model_kinds

TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str, lowercase: bool = False) -> list[str]:
    return TOKEN_RE.findall(text.lower() if lowercase else text)


class BagOfWords:
    """Mean of in-vocabulary word vectors of ``base``.

    ``lowercase`` lowercases tokens before lookup (the base model may lowercase again on its own spec).
    """

    level: Literal["sentence"] = "sentence"

    def __init__(self, base: WordEncoder, *, lowercase: bool = False, chunk: int = 8192) -> None:
        self.base = base
        self.lowercase = lowercase
        self.dim = int(base.dim)
        self.chunk = chunk
        self.spec_id = ""
        self.provenance: dict = {}
        self.last_stats: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"BagOfWords({self.base!r}, lowercase={self.lowercase})"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        n_tok = n_known = n_empty = 0
        for start in range(0, len(texts), self.chunk):
            block, stats = self._encode_chunk(texts[start : start + self.chunk])
            out[start : start + len(block)] = block
            n_tok += stats[0]
            n_known += stats[1]
            n_empty += stats[2]
        self.last_stats = {"tokens": n_tok, "in_vocab_tokens": n_known, "zero_vectors": n_empty}
        return out

    def _encode_chunk(self, texts: Sequence[str]) -> tuple[np.ndarray, tuple[int, int, int]]:
        import scipy.sparse as sp  # here: validating a catalog imports this module, and scipy costs ~0.2 s

        toks = [tokenize(t, self.lowercase) for t in texts]
        lengths = np.fromiter((len(t) for t in toks), dtype=np.int64, count=len(toks))
        flat = [w for t in toks for w in t]
        sent = np.repeat(np.arange(len(toks)), lengths)
        rows_fn = getattr(self.base, "rows", None)
        matrix = getattr(self.base, "vectors", None)
        fill = getattr(self.base, "oov_vectors", None)  # a subword model: an unknown token has a vector too
        if rows_fn is not None and matrix is not None and fill is None:
            rows = rows_fn(flat)
            known = rows >= 0
            cols, ncols, dense = rows[known], matrix.shape[0], matrix
        else:  # any WordEncoder: look the tokens up and average those rows
            vecs, oov = self.base.lookup(flat)
            if fill is not None and oov.any():
                idx = np.flatnonzero(oov)
                sub, ok = fill([flat[i] for i in idx])
                vecs[idx[ok]] = sub[ok]
                oov[idx[ok]] = False
            known = ~oov
            cols, ncols, dense = np.flatnonzero(known), len(flat), vecs
        sent = sent[known]
        counts = np.bincount(sent, minlength=len(toks))
        weights = (1.0 / counts[sent]).astype(np.float32)
        avg = sp.csr_matrix((weights, (sent, cols)), shape=(len(toks), ncols), dtype=np.float32)
        block = np.asarray(avg @ dense, dtype=np.float32)
        return block, (len(flat), int(known.sum()), int((counts == 0).sum()))


# -- the model kind -------------------------------------------------------------------------------------------------
def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[BagOfWords, dict[str, Any]]:
    """The mean of the loaded base's word vectors (``ctx.base``, a word model that looks words up)."""
    base = ctx.base
    if not hasattr(base, "lookup"):
        raise ModelLoadError(f"model {spec.id!r}: bow needs a word-vectors base; {spec.base!r} is not one")
    lowercase = spec.lowercase or bool(getattr(base, "lowercase", False))
    return BagOfWords(base, lowercase=lowercase), {"lowercase": lowercase, "tokenizer": TOKEN_RE.pattern}


KIND = ModelKind(
    name="bow",
    description="Bag of words: the mean of a sentence's in-vocabulary word vectors, over a word model ('base').",
    levels=("sentence",),
    load=load_model,
    libraries=("numpy", "scipy"),
    cost=0.05,
    small=True,
    needs_source=False,
    base_levels=("word",),
    fields=("base", "lowercase"),
)
model_kinds.register(KIND)
