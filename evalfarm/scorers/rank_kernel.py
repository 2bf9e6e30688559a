"""The EvalRank kernel: exact ranks counted over blocks of a queries x background GEMM (PyKEEN-style, no sort).

For a positive pair (x, y) and a similarity s::

    rank = 1 + #{b in background, b not in {x, y}: s(x, b) > s(x, y)}      (optimistic ties, default)
    rank = 1 + #{b in background, b not in {x, y}: s(x, b) >= s(x, y)}     (pessimistic ties)
    rank = (optimistic + pessimistic) / 2                                   (realistic ties)

- s(x, y) is read from the same computed row as every s(x, b) (never recomputed separately, so the positive
  cannot outrank itself by one ulp).
- cos: dot products of (already L2-normalised) vectors; a zero vector has cosine 0 with everything.
- l2: s = 1 / (1 + ||x - b||). Ranks are counted on -||x - b||^2 taken from the same GEMM row, a strictly
  monotone transform of s that avoids the spurious ties sqrt and division would introduce.
- Other positives of x count as background by default (as in the paper); ``filter_other_positives`` removes
  them from the count.
- Memory is bounded: queries are processed in blocks.

The kernel knows nothing of models, pools or OOV policies: it takes preprocessed vectors and item ids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:  # torch is imported where it is used: planning a run (a no-op rerun) must not pay for it
    import torch

Similarity = Literal["cos", "l2"]
SIMILARITIES: tuple[Similarity, ...] = ("cos", "l2")
Ties = Literal["optimistic", "pessimistic", "realistic"]
TIES: tuple[Ties, ...] = ("optimistic", "pessimistic", "realistic")


def pick_device(device: str | None = None) -> torch.device:
    import torch

    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


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
