"""Vocabulary statistics of word vectors: the EvalRank protocol's means, in streaming float64 passes.

A low module (numpy only): the vector cache keeps them beside a cached matrix (:mod:`evalfarm.encoders.vector_cache`),
the preprocessing protocols use them (:mod:`evalfarm.preprocess`), and a word model's text store records them; none
of those layers has to import another for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_CHUNK = 8192


@dataclass(frozen=True)
class VocabStats:
    """Statistics over a set of vocabulary rows, all float64 ``(dim,)``.

    ``mean`` = mean(v); ``mean_unit_centred`` = mean(unit(v - mean)); ``mean_unit`` = mean(unit(v)).
    ``unit(0) = 0``: a zero vector (or one equal to the mean) contributes nothing but still counts in ``n``.
    """

    n: int
    mean: np.ndarray
    mean_unit_centred: np.ndarray
    mean_unit: np.ndarray

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "mean": self.mean.tolist(),
            "mean_unit_centred": self.mean_unit_centred.tolist(),
            "mean_unit": self.mean_unit.tolist(),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> VocabStats:
        return cls(
            int(d["n"]),
            np.asarray(d["mean"], np.float64),
            np.asarray(d["mean_unit_centred"], np.float64),
            np.asarray(d["mean_unit"], np.float64),
        )


def _unit(block: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(block, axis=1, keepdims=True)
    np.divide(block, norms, out=block, where=norms > 0)  # a zero row stays zero
    return block


def vocab_statistics(matrix: np.ndarray, rows: np.ndarray | None = None, *, chunk: int = _CHUNK) -> VocabStats:
    """:class:`VocabStats` of ``matrix[rows]`` (all rows when None) in two streaming float64 passes.

    Rows are visited in ascending order, ``chunk`` at a time, so a memory-mapped matrix is read sequentially and
    never copied whole; a row listed twice counts twice. Pass 1: sum(v), sum(unit(v)); pass 2: sum(unit(v - m)).
    """
    n_rows, dim = matrix.shape
    order = None if rows is None else np.sort(np.asarray(rows, dtype=np.int64))
    n = n_rows if order is None else len(order)
    if n == 0:
        raise ValueError("vocabulary statistics need at least one row")

    def blocks():
        for start in range(0, n, chunk):
            if order is None:
                yield np.asarray(matrix[start : start + chunk], dtype=np.float64)
            else:
                yield np.asarray(matrix[order[start : start + chunk]], dtype=np.float64)

    s = np.zeros(dim, np.float64)
    su = np.zeros(dim, np.float64)
    for b in blocks():
        s += b.sum(axis=0)
        su += _unit(b).sum(axis=0)
    mean = s / n
    suc = np.zeros(dim, np.float64)
    for b in blocks():
        b -= mean
        suc += _unit(b).sum(axis=0)
    return VocabStats(n, mean, suc / n, su / n)


__all__ = ["VocabStats", "vocab_statistics"]
