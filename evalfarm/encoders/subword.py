"""fastText models that keep their character n-gram table: an out-of-vocabulary word gets its own vector.

A fastText model (Bojanowski et al. 2017) sums a word's vector with the vectors of its character n-grams, hashed
into ``bucket`` rows. The local zoo stores the word matrix (``model.npy`` + ``vocab.txt``, as every trained model)
and, for these models, the n-gram table (``ngrams.npy``) with its parameters (``subword.json``: ``min_n``,
``max_n``, ``bucket``), all data, no pickle. A word outside the vocabulary is the mean of its n-grams' rows (what
gensim's ``FastTextKeyedVectors.get_vector`` returns); only a word without a single n-gram stays OOV. The embed
stage asks :meth:`SubwordVectors.oov_vectors` for the words the vocabulary lacks, so the ties that shared OOV
vectors make disappear for a real reason.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evalfarm.catalog.specs import ModelSpec
from evalfarm.encoders.protocol import ModelLoadError
from evalfarm.encoders.word_vectors import WordVectors
from evalfarm.plugins import LoadContext, ModelKind, model_kinds

__all__ = ["KIND", "SubwordVectors"]

NGRAM_FILES = ("ngrams.npy", "subword.json")


class SubwordVectors(WordVectors):
    """A word matrix plus fastText's hashed character n-gram table (``ngrams``, ``(bucket, dim)``)."""

    def __init__(self, words: WordVectors, ngrams: np.ndarray, *, min_n: int, max_n: int) -> None:
        super().__init__(None, words.vectors, index=words.index, lowercase=words.lowercase, check_finite=False)
        if ngrams.ndim != 2 or ngrams.shape[1] != self.dim:
            raise ModelLoadError(f"n-gram table of shape {ngrams.shape} does not fit {self.dim}-d word vectors")
        self.ngrams = ngrams
        self.min_n, self.max_n = min_n, max_n
        self._cache = words._cache

    def oov_vectors(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(vectors, known)``: each word's n-gram mean; ``known`` is false for a word without n-grams."""
        from gensim.models.fasttext import ft_ngram_hashes

        out = np.zeros((len(words), self.dim), dtype=np.float32)
        known = np.zeros(len(words), dtype=bool)
        bucket = self.ngrams.shape[0]
        for i, w in enumerate(words):
            key = w.lower() if self.lowercase else w
            hashes = ft_ngram_hashes(key, self.min_n, self.max_n, bucket)
            if hashes:
                out[i] = self.ngrams[np.asarray(hashes, dtype=np.int64)].mean(axis=0)
                known[i] = True
        return out, known


def save_ngrams(folder: Path, kv: Any) -> None:
    """Write a trained gensim ``FastTextKeyedVectors``' n-gram table and parameters into ``folder``."""
    np.save(folder / "ngrams.npy", np.ascontiguousarray(kv.vectors_ngrams, dtype=np.float32), allow_pickle=False)
    meta = {"min_n": int(kv.min_n), "max_n": int(kv.max_n), "bucket": int(kv.bucket)}
    (folder / "subword.json").write_text(json.dumps(meta, sort_keys=True) + "\n")


def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[SubwordVectors, dict[str, Any]]:
    """The numpy-vocab word matrix at the source, and the n-gram table beside it."""
    path = ctx.local_path
    folder = path if path.is_dir() else path.parent
    missing = [f for f in NGRAM_FILES if not (folder / f).is_file()]
    if missing:
        raise ModelLoadError(f"{folder}: a fastText n-gram model needs {', '.join(missing)} beside its matrix")
    words = WordVectors.load(path, "numpy-vocab", vocab=spec.vocab, lowercase=spec.lowercase)
    meta = json.loads((folder / "subword.json").read_text())
    ngrams = np.load(folder / "ngrams.npy", mmap_mode="r", allow_pickle=False)
    if ngrams.shape[0] != meta["bucket"]:
        raise ModelLoadError(f"{folder / 'ngrams.npy'}: {ngrams.shape[0]} rows, subword.json says {meta['bucket']}")
    from evalfarm.encoders.word_vectors import check_finite_rows

    check_finite_rows(ngrams, str(folder / "ngrams.npy"), lambda r: f"n-gram bucket {r}")
    enc = SubwordVectors(words, ngrams, min_n=int(meta["min_n"]), max_n=int(meta["max_n"]))
    enc.name = spec.id
    prov = {
        "vocab_size": enc.vocab_size(),
        "ngram_buckets": int(ngrams.shape[0]),
        "min_n": enc.min_n,
        "max_n": enc.max_n,
    }
    return enc, prov


KIND = ModelKind(
    name="fasttext-ngrams",
    description="A fastText model trained by `evalfarm zoo build` with its character n-gram table: numpy-vocab "
    "matrix + ngrams.npy; an out-of-vocabulary word is the mean of its n-grams' vectors.",
    levels=("word",),
    load=load_model,
    libraries=("numpy", "gensim"),
    cost=0.03,
    small=True,
    fields=("source", "vocab", "lowercase"),
)
model_kinds.register(KIND)
