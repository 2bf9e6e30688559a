"""Smaller embeddings from a model's own: Matryoshka truncation and int8 / binary quantisation.

What users weigh before they store a prefix of a vector or one bit per dimension, each a post-processing
(:class:`evalfarm.catalog.specs.PostProcess`) whose derived model is scored as every model is:

- ``truncate``: the first ``d`` coordinates, L2-renormalised: a Matryoshka model's smaller embedding (Kusupati et
  al. 2022; sentence-transformers' ``truncate_dim``; the Qwen3-Embedding, mxbai and nomic cards). With
  ``layer_norm`` a layer norm without weights (``torch.nn.functional.layer_norm``, eps 1e-5) over the whole vector
  comes first, as nomic-embed-text-v1.5's card does before it truncates.
- ``int8``: sentence-transformers' calibrated scalar quantisation (``quantize_embeddings(emb, precision="int8",
  calibration_embeddings=cal)``, sentence-transformers 6.2): per dimension, ``start`` = the calibration set's
  minimum, ``step`` = (maximum - minimum) / 255 (1 where they are equal), code = ``clip(floor((x - start) / step), 0,
  255) - 128``, all in float32. The library's arithmetic, in numpy (no torch import for a transform; the tests hold
  the codes to the library's). A vector is stored as its reconstruction ``start + (code + 128 + 0.5) * step``, the
  middle of its bucket, so the scorers compare what the index holds; a value outside the calibration range
  saturates at the range's end, as the library clips it.
- ``binary``: the library's ``precision="binary"`` bit, ``x > 0``; stored dequantised as +1 / -1 (a zero coordinate
  is bit 0, -1). The cosine of two such vectors is ``1 - 2 * hamming / d``: EvalRank ranks them by Hamming distance
  with exact ties (its ``hamming`` variant).

Each is deterministic and row by row (a vector's image does not depend on the other rows), except int8's ranges,
which come from the declared calibration set (``fit_on``, default the EvalRank sentence pool).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

LAYER_NORM_EPS = 1e-5
"""torch.nn.functional.layer_norm's default eps (nomic's card calls it with no other)."""
NORMALIZE_EPS = 1e-12
"""torch.nn.functional.normalize's default eps: a zero row stays zero."""


def _rows(Y: np.ndarray) -> np.ndarray:
    Y = np.asarray(Y)
    if Y.ndim != 2:
        raise ValueError(f"expected an (n, dim) matrix, got shape {Y.shape}")
    return Y


@dataclass(frozen=True)
class Truncation:
    """The first ``d`` coordinates, renormalised (after a layer norm over the whole vector with ``layer_norm``)."""

    d: int
    layer_norm: bool = False
    method: Literal["truncate"] = "truncate"

    def apply(self, Y: np.ndarray) -> np.ndarray:
        Y = _rows(Y)
        if self.d > Y.shape[1]:
            raise ValueError(
                f"truncate: d={self.d} is above the model's width {Y.shape[1]}: a Matryoshka prefix is at most the "
                "whole vector"
            )
        x = Y.astype(np.float64)
        if self.layer_norm:
            x = x - x.mean(axis=1, keepdims=True)
            x = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + LAYER_NORM_EPS)
        x = x[:, : self.d]
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        return (x / np.maximum(norms, NORMALIZE_EPS)).astype(np.float32)


@dataclass(frozen=True)
class ScalarQuantiser:
    """int8 codes from per-dimension ranges (``starts``, ``steps``: float32), stored as their reconstruction."""

    starts: np.ndarray
    steps: np.ndarray
    n_fit: int = 0
    method: Literal["int8"] = "int8"

    @classmethod
    def calibrate(cls, X: np.ndarray) -> ScalarQuantiser:
        """The ranges of the calibration embeddings ``X`` (their per-dimension min and max)."""
        X = _rows(X)
        if len(X) == 0:
            raise ValueError("int8: the calibration set holds no vectors")
        if not np.isfinite(X).all():
            raise ValueError("int8: the calibration vectors hold NaN or inf")
        starts = X.min(axis=0).astype(np.float32)
        steps = ((X.max(axis=0).astype(np.float32) - starts) / np.float32(255)).astype(np.float32)
        steps = np.where(steps == 0, np.float32(1), steps).astype(np.float32)
        return cls(starts, steps, n_fit=len(X))

    def codes(self, Y: np.ndarray) -> np.ndarray:
        """The int8 codes of ``Y``, as sentence-transformers' ``quantize_embeddings(..., "int8", ranges)`` gives."""
        Y = _rows(Y)
        if Y.shape[1] != len(self.starts):
            raise ValueError(f"int8: expected {len(self.starts)} dimensions, got {Y.shape[1]}")
        q = np.clip(np.floor((Y.astype(np.float32) - self.starts) / self.steps), 0, 255)
        return (q - 128).astype(np.int8)

    def apply(self, Y: np.ndarray) -> np.ndarray:
        q = self.codes(Y).astype(np.float32) + np.float32(128.5)
        return (self.starts + q * self.steps).astype(np.float32)


@dataclass(frozen=True)
class SignBits:
    """Each coordinate's bit (``x > 0``) as +1 / -1."""

    method: Literal["binary"] = "binary"

    def apply(self, Y: np.ndarray) -> np.ndarray:
        return np.where(_rows(Y) > 0, np.float32(1), np.float32(-1)).astype(np.float32)


Compression = Truncation | ScalarQuantiser | SignBits

__all__ = ["Compression", "ScalarQuantiser", "SignBits", "Truncation"]
