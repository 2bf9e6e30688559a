"""Degenerate models: vectors that cannot be compared, flagged before their numbers reach a leaderboard.

A model whose vectors are all zero, all OOV or nearly all identical ties every comparison, and under EvalRank's
default (optimistic) ties a pair whose positive ties with everything ranks first: such a model scored MRR 1.0 and
topped the board (issue #13.4). The score stage therefore measures, once per unit and from the stored vectors of the
unit's texts (so for every scorer alike, before any scorer-specific preprocessing), three properties:

- ``oov_rate``: the share of the task's texts without a vector (out of vocabulary, or an all-zero vector, which the
  embed stage stores as OOV). Every OOV text becomes one and the same fill vector.
- ``duplicate_rate``: the share of the covered texts whose vector repeats another text's exactly, i.e.
  ``1 - distinct vectors / covered texts``: the vector-level tie rate (equal vectors tie under every similarity).
- ``rank_ratio``: the numerical rank of the covered vectors (uncentred; at most ``MAX_RANK_ROWS`` rows sampled
  evenly), divided by the largest rank that matrix could have, ``min(rows, dim)``. Singular values below
  ``max(rows, dim) * eps(float32) * largest`` count as zero (numpy's ``matrix_rank`` rule at the stored float32
  precision), so vectors that differ only by float32 noise around one direction have rank 1.

A unit is ``degenerate`` when any of them passes :data:`THRESHOLDS` (the rank: below ``min_rank_ratio`` of the largest
possible rank, and always at rank 1). Its numbers are still computed and stored, with ``degenerate = true`` and the
reason on every metrics row; the ``leaderboard`` and ``evalrank`` views leave it out, ``leaderboard_all`` shows it,
flagged, and the ``quality`` view holds the figures of every unit.

The thresholds sit far from every real model's figures (the starter zoo's, ``benchmarks/bench_quality.py``; the
worst of them are in ``benchmarks/README.md``) and close to a degenerate model's, which sits at 1.0, ~1.0 and rank
1; past an OOV rate of 0.9 a model's numbers are mostly its OOV fill vector's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

MAX_RANK_ROWS = 1024
"""Rows (evenly spaced) the numerical rank is computed on: an SVD of at most 1024 x dim, milliseconds."""


@dataclass(frozen=True)
class Thresholds:
    """Past any of these a unit is degenerate (see the module docstring for how they were chosen)."""

    max_oov_rate: float = 0.9
    max_duplicate_rate: float = 0.95
    min_rank_ratio: float = 0.1


THRESHOLDS = Thresholds()


@dataclass
class Quality:
    """What :func:`assess` measured on one unit's stored vectors, and why it is degenerate (empty: it is not)."""

    n_texts: int
    n_vectors: int  # texts with a vector (not OOV)
    dim: int
    oov_rate: float
    duplicate_rate: float
    numerical_rank: int
    rank_ratio: float
    reasons: list[str] = field(default_factory=list)
    thresholds: Thresholds = THRESHOLDS

    @property
    def degenerate(self) -> bool:
        return bool(self.reasons)

    @property
    def reason(self) -> str | None:
        return "; ".join(self.reasons) if self.reasons else None

    def table(self) -> Any:
        """The unit's ``quality`` detail row (run_id, model, task and fingerprint are added by ``write_results``)."""
        import pyarrow as pa

        return pa.table(
            {
                "n_texts": pa.array([self.n_texts], pa.int64()),
                "n_vectors": pa.array([self.n_vectors], pa.int64()),
                "dim": pa.array([self.dim], pa.int64()),
                "oov_rate": pa.array([self.oov_rate], pa.float64()),
                "duplicate_rate": pa.array([self.duplicate_rate], pa.float64()),
                "numerical_rank": pa.array([self.numerical_rank], pa.int64()),
                "rank_ratio": pa.array([self.rank_ratio], pa.float64()),
                "degenerate": pa.array([self.degenerate], pa.bool_()),
                "reason": pa.array([self.reason], pa.string()),
                "thresholds": pa.array([json.dumps(asdict(self.thresholds), sort_keys=True)], pa.string()),
            }
        )


def numerical_rank(rows: np.ndarray) -> int:
    """Rank of ``rows`` (float32 data) under numpy's ``matrix_rank`` tolerance at float32 precision."""
    if rows.size == 0:
        return 0
    s = np.linalg.svd(np.asarray(rows, dtype=np.float64), compute_uv=False)
    if s[0] == 0:
        return 0
    tol = s[0] * max(rows.shape) * np.finfo(np.float32).eps
    return int((s > tol).sum())


def assess(emb: np.ndarray, oov: np.ndarray, thresholds: Thresholds = THRESHOLDS) -> Quality:
    """Measure one unit's stored vectors (``emb`` rows of OOV texts are ignored) against ``thresholds``."""
    emb = np.asarray(emb)
    oov = np.asarray(oov, dtype=bool)
    n_texts, dim = int(emb.shape[0]), int(emb.shape[1]) if emb.ndim == 2 else 0
    covered = np.ascontiguousarray(emb[~oov], dtype=np.float32)
    n_vectors = int(covered.shape[0])
    oov_rate = 1.0 - n_vectors / n_texts if n_texts else 1.0
    if n_vectors and dim:
        n_distinct = len(np.unique(covered.view(np.dtype((np.void, covered.itemsize * dim))).ravel()))
        sample = covered
        if n_vectors > MAX_RANK_ROWS:
            sample = covered[np.linspace(0, n_vectors - 1, MAX_RANK_ROWS).astype(np.int64)]
        rank = numerical_rank(sample)
        most = min(sample.shape)
        rank_ratio = rank / most
    else:
        n_distinct, rank, most, rank_ratio = 0, 0, 0, 0.0
    duplicate_rate = 1.0 - n_distinct / n_vectors if n_vectors else 0.0
    reasons = []
    if oov_rate > thresholds.max_oov_rate:
        reasons.append(
            f"oov_rate {oov_rate:.3f} > {thresholds.max_oov_rate}: {n_vectors} of {n_texts} texts have a vector "
            "(OOV texts all get one fill vector and tie)"
        )
    if n_vectors and duplicate_rate > thresholds.max_duplicate_rate:
        reasons.append(
            f"duplicate_rate {duplicate_rate:.3f} > {thresholds.max_duplicate_rate}: {n_distinct} distinct vectors "
            f"for {n_vectors} texts (equal vectors tie)"
        )
    if n_vectors and rank < max(2, thresholds.min_rank_ratio * most):
        reasons.append(
            f"numerical rank {rank} of at most {most} (rank_ratio {rank_ratio:.3f}; degenerate below "
            f"max(2, {thresholds.min_rank_ratio} x {most})): the vectors (nearly) lie on "
            + ("one line" if rank <= 1 else f"a {rank}-dimensional subspace")
        )
    return Quality(n_texts, n_vectors, dim, oov_rate, duplicate_rate, rank, rank_ratio, reasons, thresholds)
