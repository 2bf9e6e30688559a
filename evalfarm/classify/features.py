"""What a model is trained on: pair features, a fit's rows (:class:`Fit`), and the per-training-set
standardisation both backends share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``[u, v, |u - v|, u * v]`` per row, for MRPC and SICK-E (InferSent's pair features, as issue #10 asks;
    SentEval and the EvalRank toolkit's copy of it use ``[|u - v|, u * v]`` only: ``mrpc.py``, ``sick.py``)."""
    u = np.asarray(u, dtype=np.float32)
    v = np.asarray(v, dtype=np.float32)
    if u.shape != v.shape or u.ndim != 2:
        raise ValueError(f"pair features need two (n, d) matrices of one shape, got {u.shape} and {v.shape}")
    return np.hstack([u, v, np.abs(u - v), u * v])


@dataclass(frozen=True, eq=False)
class Fit:
    """One model to train: its training rows, its C, and the rows whose labels it must predict."""

    train: np.ndarray
    c: float
    evaluate: np.ndarray


# --- standardisation: one definition for both backends ----------------------------------------------------

CONSTANT_REL = 1e-6
"""A column whose standard deviation over a model's training rows is at most this share of the largest column's
is constant for that model and dropped (weight 0): all-MiniLM-L6-v2 has dimensions of magnitude ~1e-32 that a
per-column scaler would otherwise blow up to unit variance, so that rounding noise decides the model."""


def standardisation(X: np.ndarray, train_sets: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each training set's column means and inverse scales, float64 ``(S, d)`` each: a model standardises its
    features as ``(x - mean) * inv``, with ``inv = 1 / std`` (ddof 0) and ``inv = 0`` for a column that is
    constant on its rows (``std <= CONSTANT_REL * max std``). Both backends use it, so they fit the same model."""
    mean, sd = _moments(X, train_sets)
    return mean[:-1], _inverse_scales(sd[:-1])


def _inverse_scales(sd: np.ndarray) -> np.ndarray:
    constant = sd <= CONSTANT_REL * sd.max(axis=1, keepdims=True)
    return np.where(constant, 0.0, 1.0 / np.where(constant, 1.0, sd))


def _moments(X: np.ndarray, train_sets: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations (ddof 0), float64 ``(S + 1, d)``: one row per training set, the last
    over the union of their rows (the torch engine's conditioning). One float64 copy of the rows some set trains on
    (dev and test rows are never read), centred and squared in place: these passes over a big task's matrix (SST2:
    67k rows) cost more than its solve."""
    used = np.unique(np.concatenate([np.asarray(r, dtype=np.int64) for r in train_sets]))
    local = np.full(len(X), -1, dtype=np.int64)
    local[used] = np.arange(len(used))
    mask = np.zeros((len(train_sets) + 1, len(used)))
    for s, rows in enumerate(train_sets):
        mask[s, local[rows]] = 1.0
    mask[-1] = 1.0
    n = mask.sum(axis=1, keepdims=True)
    Xc = np.asarray(X[used], dtype=np.float64)
    shift = Xc.mean(axis=0)  # centring first keeps E[x^2] - E[x]^2 from cancelling
    Xc -= shift
    mean_c = (mask @ Xc) / n
    np.square(Xc, out=Xc)
    var = np.maximum((mask @ Xc) / n - mean_c * mean_c, 0.0)
    return mean_c + shift, np.sqrt(var)


def _train_sets(fits: Sequence[Fit]) -> tuple[list[np.ndarray], np.ndarray]:
    """The distinct training-row arrays of ``fits`` (by identity: the protocols share one array per fold) and
    each fit's index into them: the features are standardised once per training set, not once per C."""
    index: dict[int, int] = {}
    sets: list[np.ndarray] = []
    of = np.empty(len(fits), dtype=np.int64)
    for i, f in enumerate(fits):
        key = id(f.train)
        if key not in index:
            index[key] = len(sets)
            sets.append(f.train)
        of[i] = index[key]
    return sets, of
