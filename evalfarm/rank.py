"""Rank stage: EvalRank's exact ranks, counted over blocks of a queries × background GEMM.

For a positive pair (x, y) and a similarity s::

    rank = 1 + #{b in background, b not in {x, y}: s(x, b) > s(x, y)}      (optimistic ties, default)
    rank = 1 + #{b in background, b not in {x, y}: s(x, b) >= s(x, y)}     (pessimistic ties)
    rank = (optimistic + pessimistic) / 2                                   (realistic ties)

  The realistic rank is the expected rank when ties are broken at random (PyKEEN's recommendation): identical
  vectors (OOV words filled with one mean vector, rows shared in a pruned vector table) earn no credit from it,
  where the optimistic rank gives a pair of two OOV words rank 1.

- s(x, y) is read from the same computed row as every s(x, b) (never recomputed separately, so the positive
  cannot outrank itself by one ulp).
- cos: dot products of L2-normalised vectors; a zero vector has cosine 0 with everything.
- l2: s = 1 / (1 + ||x - b||). Ranks are counted on -||x - b||^2 taken from the same GEMM row, a strictly
  monotone transform of s that avoids the spurious ties sqrt and division would introduce.
- Other positives of x count as background by default (as in the paper); ``filter_other_positives`` removes
  them from the count.
- Memory is bounded: queries are processed in blocks sized so the score block fits ``max_block_bytes``.

PyKEEN-style counting (no sort): each block costs one GEMM and one comparison pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evalfarm.scorers.rank_kernel import (  # noqa: F401 - re-exported
    SIMILARITIES,
    TIES,
    Similarity,
    Ties,
    pick_device,
    rank_metrics,
    rank_pairs,
    rank_pairs_loop,
)


@dataclass(frozen=True)
class RankPolicy:
    """Every choice that changes a rank, explicit. Part of the rank unit's fingerprint."""

    ties: Ties = "optimistic"
    filter_other_positives: bool = False
    center: bool = True  # the protocol's centring (EvalRank: on for both levels); False is a documented variant
    l2_normalized: bool = False  # L2-normalise before the l2 similarity too
    hits: tuple[int, ...] = (1, 3, 10)

    def __post_init__(self) -> None:  # fail when the run is configured, not in every worker
        if self.ties not in TIES:
            raise ValueError(f"unknown tie policy {self.ties!r} (choose from {', '.join(TIES)})")
        if not self.hits or any(int(k) != k or k < 1 for k in self.hits):
            raise ValueError(f"hits@k needs whole numbers k >= 1, got {self.hits}")


def preprocess(
    emb: np.ndarray, similarity: Similarity, *, center: np.ndarray | None, l2_normalized: bool = False
) -> np.ndarray:
    """Centering (subtract ``center``) then, for cos (or when asked, l2), L2-normalisation. Zero rows stay 0."""
    x = emb.astype(np.float32, copy=True)
    if center is not None:
        x -= center.astype(np.float32)
    if similarity == "cos" or l2_normalized:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        np.divide(x, norms, out=x, where=norms > 0)
    return x


@dataclass
class RankResult:
    """One (model, pool, similarity): metrics, and per-pair ranks for the pairs that were ranked."""

    similarity: str
    metrics: dict[str, float]
    pair_index: np.ndarray  # indices into the pool's pairs
    ranks: np.ndarray
    scores: np.ndarray
    pair_oov: np.ndarray
    tied: np.ndarray


def evaluate_rank_pool(
    emb: np.ndarray,
    oov: np.ndarray,
    meta: dict,
    queries: np.ndarray,
    positives: np.ndarray,
    *,
    similarity: Similarity,
    policy: RankPolicy,
    oov_policy: str,
    level: str,
    device: str | None = None,
) -> RankResult:
    """Prepare the stored vectors under EvalRank's protocol for ``level`` (:mod:`evalfarm.preprocess`: centring,
    normalisation, the OOV vector; ``policy.center`` and ``oov_policy`` select its variants), then rank every pair
    against the background. Under ``skip`` pairs touching an OOV item are dropped and OOV items leave the background.
    Word models need their vocabulary statistics (``vocab_stats`` in the embeddings metadata).
    """
    from evalfarm.preprocess import Protocol, VocabStats, prepare

    n_items = emb.shape[0]
    protocol = Protocol.for_level(level, center=policy.center, oov=oov_policy)  # type: ignore[arg-type]
    vocab = VocabStats.from_meta(meta["vocab_stats"]) if level == "word" else None
    prep = prepare(emb, oov, protocol, similarity=similarity, vocab=vocab, l2_normalized=policy.l2_normalized)
    xp = prep.vectors
    pair_oov = oov[queries] | oov[positives]
    keep = prep.usable[queries] & prep.usable[positives]
    background = np.flatnonzero(prep.usable)
    pair_index = np.flatnonzero(keep)
    tied = np.zeros(len(pair_index), dtype=np.int64)
    ranks, scores = rank_pairs(
        xp,
        queries[pair_index],
        positives[pair_index],
        background,
        similarity,
        ties=policy.ties,
        filter_other_positives=policy.filter_other_positives,
        device=device,
        tied_out=tied,
    )
    metrics = rank_metrics(ranks, policy.hits)
    metrics["oov_rate"] = float(oov.mean()) if n_items else 0.0
    metrics["oov_pair_rate"] = float(pair_oov.mean()) if len(pair_oov) else 0.0
    metrics["n_background"] = float(len(background))
    # Pairs whose positive ties exactly with some background item: their rank depends on the tie policy
    # (identical OOV-filled vectors, shared rows in pruned vector tables, duplicate texts).
    metrics["tie_rate"] = float((tied > 0).mean()) if len(tied) else 0.0
    return RankResult(
        similarity=similarity,
        metrics=metrics,
        pair_index=pair_index,
        ranks=ranks,
        scores=scores,
        pair_oov=pair_oov[pair_index],
        tied=tied,
    )
