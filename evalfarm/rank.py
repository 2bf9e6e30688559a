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
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:  # torch is imported where it is used: planning a run (a no-op rerun) must not pay for it
    import torch

Similarity = Literal["cos", "l2"]
SIMILARITIES: tuple[Similarity, ...] = ("cos", "l2")
Ties = Literal["optimistic", "pessimistic", "realistic"]
TIES: tuple[Ties, ...] = ("optimistic", "pessimistic", "realistic")


@dataclass(frozen=True)
class RankPolicy:
    """Every choice that changes a rank, explicit. Part of the rank unit's fingerprint."""

    ties: Ties = "optimistic"
    filter_other_positives: bool = False
    center: bool | None = None  # None: the pool's protocol default
    l2_normalized: bool = False  # L2-normalise before the l2 similarity too
    hits: tuple[int, ...] = (1, 3, 10)

    def __post_init__(self) -> None:  # fail when the run is configured, not in every worker
        if self.ties not in TIES:
            raise ValueError(f"unknown tie policy {self.ties!r} (choose from {', '.join(TIES)})")
        if not self.hits or any(int(k) != k or k < 1 for k in self.hits):
            raise ValueError(f"hits@k needs whole numbers k >= 1, got {self.hits}")


def pick_device(device: str | None = None) -> torch.device:
    import torch

    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


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


def _other_positive_pairs(queries: np.ndarray, positives: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pair index, other positive item) for every pair whose query has more than one positive."""
    order = np.argsort(queries, kind="stable")
    q_sorted = queries[order]
    starts = np.flatnonzero(np.r_[True, q_sorted[1:] != q_sorted[:-1]])
    sizes = np.diff(np.r_[starts, len(q_sorted)])
    rows, others = [], []
    for s, k in zip(starts[sizes > 1], sizes[sizes > 1], strict=True):  # only multi-positive queries
        members = order[s : s + k]
        a, b = np.meshgrid(members, members, indexing="ij")
        keep = a != b
        rows.append(a[keep])
        others.append(positives[b[keep]])
    if not rows:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(rows), np.concatenate(others)


def rank_pairs(
    emb: np.ndarray,
    queries: np.ndarray,
    positives: np.ndarray,
    background: np.ndarray,
    similarity: Similarity,
    *,
    ties: Ties = "optimistic",
    filter_other_positives: bool = False,
    device: str | None = None,
    max_block_bytes: int = 256 << 20,
    tied_out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact ranks and positive scores for preprocessed embeddings.

    ``emb``: (n_items, d) float32, already preprocessed (see :func:`preprocess`). ``queries`` / ``positives``:
    item ids of each directed pair. ``background``: item ids ranked against. Returns ``(ranks, scores)``: float64
    ranks (whole numbers unless ``ties="realistic"``) and the similarity s(x, y) of each pair (cos, or
    1/(1+||x-y||) for l2). When ``tied_out`` (int64, one slot per pair) is given it receives the number of counted
    background items that tie exactly with the positive: the gap between pessimistic and optimistic rank.
    """
    if similarity not in SIMILARITIES:
        raise ValueError(f"unknown similarity {similarity!r} (choose from {SIMILARITIES})")
    if ties not in TIES:
        raise ValueError(f"unknown tie policy {ties!r} (choose from {', '.join(TIES)})")
    n_pairs = len(queries)
    if n_pairs == 0:
        return np.empty(0, np.float64), np.empty(0, np.float32)
    import torch

    dev = pick_device(device)
    n_items = emb.shape[0]
    # Columns: the background, then any positive that is not in it (scored in the same GEMM, never counted).
    col_of = np.full(n_items, -1, dtype=np.int64)
    col_of[background] = np.arange(len(background))
    extra = np.setdiff1d(np.unique(positives[col_of[positives] < 0]), background)
    col_of[extra] = len(background) + np.arange(len(extra))
    n_bg = len(background)
    cols = np.concatenate([background, extra])
    emb_t = torch.from_numpy(np.ascontiguousarray(emb, dtype=np.float32))
    cand = emb_t[torch.from_numpy(cols)].to(dev)
    cand_sq = (cand * cand).sum(1) if similarity == "l2" else None

    other_rows, other_items = (
        _other_positive_pairs(queries, positives)
        if filter_other_positives
        else (np.empty(0, np.int64), np.empty(0, np.int64))
    )
    ranks = np.empty(n_pairs, dtype=np.float64)
    scores = np.empty(n_pairs, dtype=np.float32)
    count_ties = ties != "optimistic" or tied_out is not None
    # Process pairs grouped by query so each query's row is computed once per block.
    order = np.argsort(queries, kind="stable")
    bytes_per_row = max(1, len(cols)) * 4 * 3  # score row, gathered copy, comparison mask
    rows_per_block = max(1, min(n_pairs, max_block_bytes // bytes_per_row))
    # Position of each pair in processing order: lets every block pick its other-positive entries at once.
    slot = np.empty(n_pairs, dtype=np.int64)
    slot[order] = np.arange(n_pairs)
    other_slot = slot[other_rows]
    other_cols = col_of[other_items]

    with torch.inference_mode():
        for start in range(0, n_pairs, rows_per_block):
            idx = order[start : start + rows_per_block]
            q_items = queries[idx]
            uq, inv = np.unique(q_items, return_inverse=True)
            q = emb_t[torch.from_numpy(uq)].to(dev)
            s = q @ cand.T  # (n_unique_queries, n_cols)
            if similarity == "l2":
                s = 2.0 * s - (q * q).sum(1, keepdim=True) - cand_sq[None, :]  # -||q - c||^2
                s = torch.clamp(s, max=0.0)
            rows = s[torch.from_numpy(inv).to(dev)]  # one row per pair
            r = torch.arange(len(idx), device=dev)
            pos_cols = torch.from_numpy(col_of[positives[idx]]).to(dev)
            pos = rows[r, pos_cols].clone()
            # x and y themselves never count; neither do other positives when filtering.
            q_cols = col_of[q_items]
            in_bg = q_cols >= 0
            rows[r[torch.from_numpy(in_bg).to(dev)], torch.from_numpy(q_cols[in_bg]).to(dev)] = -torch.inf
            rows[r, pos_cols] = -torch.inf
            if len(other_slot):
                sel = (other_slot >= start) & (other_slot < start + len(idx))
                if sel.any():
                    rows[
                        torch.from_numpy(other_slot[sel] - start).to(dev), torch.from_numpy(other_cols[sel]).to(dev)
                    ] = -torch.inf
            bg_rows = rows[:, :n_bg]
            above = (bg_rows > pos[:, None]).sum(1).cpu().numpy()
            tied = (bg_rows == pos[:, None]).sum(1).cpu().numpy() if count_ties else 0
            ranks[idx] = 1 + above + {"optimistic": 0.0, "pessimistic": 1.0, "realistic": 0.5}[ties] * tied
            if tied_out is not None:
                tied_out[idx] = tied
            pos_np = pos.float().cpu().numpy()
            scores[idx] = pos_np if similarity == "cos" else 1.0 / (1.0 + np.sqrt(np.maximum(-pos_np, 0.0)))
    return ranks, scores


def rank_pairs_loop(
    emb: np.ndarray,
    queries: np.ndarray,
    positives: np.ndarray,
    background: np.ndarray,
    similarity: Similarity,
    *,
    ties: Ties = "optimistic",
    filter_other_positives: bool = False,
) -> np.ndarray:
    """Reference implementation: one Python iteration per pair, straight from the definition.

    Used by the tests as an oracle and by the benchmark as the baseline; never on the hot path.
    """
    ranks = np.empty(len(queries), dtype=np.float64)
    positives_of: dict[int, set[int]] = {}
    for qi, pi in zip(queries, positives, strict=True):
        positives_of.setdefault(int(qi), set()).add(int(pi))
    e64 = emb.astype(np.float64)
    for i, (x, y) in enumerate(zip(queries, positives, strict=True)):
        if similarity == "cos":
            row = e64 @ e64[x]
        else:
            row = -((e64 - e64[x]) ** 2).sum(1)
        sb, sy = row[background], row[y]  # s(x, y) from the same row as the background scores
        excluded = {int(x), int(y)}
        if filter_other_positives:
            excluded |= positives_of[int(x)]
        keep = ~np.isin(background, list(excluded))
        sb = sb[keep]
        above, tied = int((sb > sy).sum()), int((sb == sy).sum())
        ranks[i] = 1 + above + {"optimistic": 0, "pessimistic": tied, "realistic": tied / 2}[ties]
    return ranks


def rank_metrics(ranks: np.ndarray, hits: tuple[int, ...] = (1, 3, 10)) -> dict[str, float]:
    """MR, MRR and Hits@k of a rank vector (empty: NaN metrics, n_pairs 0)."""
    n = len(ranks)
    out: dict[str, float] = {"n_pairs": float(n)}
    if n == 0:
        out.update({"mr": float("nan"), "mrr": float("nan")} | {f"hits@{k}": float("nan") for k in hits})
        return out
    r = ranks.astype(np.float64)
    out["mr"] = float(r.mean())
    out["mrr"] = float((1.0 / r).mean())
    for k in hits:
        out[f"hits@{k}"] = float((ranks <= k).mean())
    return out


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
    pool_center: bool,
    device: str | None = None,
) -> RankResult:
    """Apply the OOV policy and the preprocessing protocol, then rank every pair against the background.

    OOV policy: ``mean`` (the model's vocabulary mean vector, as the paper's toolkit), ``zero`` (a zero vector:
    cosine 0 with everything), ``skip`` (pairs touching an OOV item are dropped and OOV items leave the
    background). Centering subtracts the vocabulary mean for word models (``vocab_mean`` in the embeddings
    metadata) and the background mean otherwise.
    """
    n_items = emb.shape[0]
    x = emb.astype(np.float32, copy=True)
    vocab_mean = np.asarray(meta["vocab_mean"], dtype=np.float32) if "vocab_mean" in meta else None
    known_mean = x[~oov].mean(axis=0) if (~oov).any() else np.zeros(x.shape[1], np.float32)
    if oov_policy == "mean":
        x[oov] = vocab_mean if vocab_mean is not None else known_mean
    elif oov_policy == "zero":
        x[oov] = 0.0
    elif oov_policy != "skip":
        raise ValueError(f"unknown OOV policy {oov_policy!r} (mean, skip or zero)")
    pair_oov = oov[queries] | oov[positives]
    keep = ~pair_oov if oov_policy == "skip" else np.ones(len(queries), dtype=bool)
    background = np.flatnonzero(~oov) if oov_policy == "skip" else np.arange(n_items)
    center_on = policy.center if policy.center is not None else pool_center
    center = None
    if center_on:
        center = vocab_mean if vocab_mean is not None else x[background].mean(axis=0)
    xp = preprocess(x, similarity, center=center, l2_normalized=policy.l2_normalized)
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
