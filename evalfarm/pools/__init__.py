"""Evaluation pools: one module per pool kind, plus ``data`` for fetching and checksumming files."""

from __future__ import annotations

from evalfarm.catalog.specs import PoolSpec
from evalfarm.pools.evalrank import RankPool, load_evalrank_pool


def load_pool(spec: PoolSpec) -> RankPool:
    """Load a pool by its kind. New kinds (wordsim, sts, heros, …) register here."""
    if spec.kind == "evalrank":
        return load_evalrank_pool(spec)
    raise ValueError(f"pool {spec.id!r}: unknown kind {spec.kind!r}")


__all__ = ["RankPool", "load_pool"]
