"""An independent port of the EvalRank toolkit's word protocol, counted in float64 with evalfarm's exact rule.

Reading and preprocessing follow BinWang28/EvalRank-Embedding-Evaluation (src/w_model.py, commit 9754e9d):
``read_word_embs`` lower-cases each key and keeps its first occurrence; ``config.centralization`` (always True in
src/run_word_evaluation.py) subtracts the vocabulary mean; ``normalizing_word_vectors`` (cos only) L2-normalises;
``word_emb_avg`` — the mean of the vectors after those steps — is the vector of every out-of-vocabulary word, used
as is. The count is evalfarm's: ``rank = 1 + #{b in background, b not in {x, y}: s(x, b) > s(x, y)}`` with the
positive's score taken from the same row (the toolkit scores the positive separately, and counts x against itself).
Nothing here imports evalfarm: it is the oracle the pipeline is checked against.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def read_glove_text(path: Path) -> tuple[dict[str, int], np.ndarray]:
    """``w_model.read_word_embs``: lower-cased keys, first occurrence wins, float32 rows."""
    index: dict[str, int] = {}
    rows: list[np.ndarray] = []
    with open(path, encoding="utf-8", errors="ignore", newline="\n") as f:
        for line in f:
            tokens = line.rstrip().split(" ")
            if len(tokens) < 25:  # the toolkit's min_dims
                continue
            key = tokens[0].lower()
            if key not in index:
                index[key] = len(rows)
                rows.append(np.array(tokens[1:], dtype=np.float32))
    return index, np.stack(rows)


def read_numpy_vocab(matrix: Path, vocab: Path) -> tuple[dict[str, int], np.ndarray]:
    """The same reading rule over a ``.npy`` matrix + a parquet vocabulary column ``index`` (GloVe 6B from PyPI)."""
    import pyarrow.parquet as pq

    words = pq.read_table(vocab).column("index").to_pylist()
    m = np.load(matrix, mmap_mode="r")
    index: dict[str, int] = {}
    keep: list[int] = []
    for i, w in enumerate(words):
        key = str(w).lower()
        if key not in index:
            index[key] = len(keep)
            keep.append(i)
    return index, np.asarray(m[np.asarray(keep)], dtype=np.float32)


def toolkit_vectors(
    index: dict[str, int], matrix: np.ndarray, items: list[str], *, similarity: str, oov: str
) -> tuple[np.ndarray, np.ndarray]:
    """(float64 vectors of ``items`` under the toolkit's protocol, OOV mask). ``oov``: mean | zero | skip."""
    E = matrix.astype(np.float64)
    E = E - E.mean(axis=0, keepdims=True)  # centralization
    if similarity == "cos":
        E = E / np.linalg.norm(E, axis=1, keepdims=True)  # normalizing_word_vectors
    avg = E.mean(axis=0)  # word_emb_avg, after the steps above
    rows = np.array([index.get(w.lower(), -1) for w in items])
    is_oov = rows < 0
    X = np.empty((len(items), E.shape[1]))
    X[~is_oov] = E[rows[~is_oov]]
    X[is_oov] = avg if oov == "mean" else 0.0
    return X, is_oov


def oracle_ranks(
    X: np.ndarray,
    queries: np.ndarray,
    positives: np.ndarray,
    background: np.ndarray,
    *,
    similarity: str,
    chunk: int = 256,
    tol: float = 1e-6,
) -> tuple[np.ndarray, np.ndarray]:
    """(float64 optimistic ranks, number of counted items within ``tol`` of the positive's score) per pair."""
    ranks = np.empty(len(queries))
    near = np.empty(len(queries), dtype=np.int64)
    # Identical vectors (every OOV word is one) must get bit-identical scores, or a GEMM's last bits — which differ
    # between output columns (SIMD tails, blocking) — would order exact ties by accident. Score each distinct
    # vector once and spread the scores back to its items.
    B_unique, spread = np.unique(X[background], axis=0, return_inverse=True)
    spread = spread.reshape(-1)
    b_sq = (B_unique * B_unique).sum(axis=1)
    col = np.full(len(X), -1)
    col[background] = np.arange(len(background))
    for start in range(0, len(queries), chunk):
        q, p = queries[start : start + chunk], positives[start : start + chunk]
        Q = X[q]
        S = Q @ B_unique.T
        if similarity == "l2":
            S = -((Q * Q).sum(axis=1)[:, None] + b_sq[None, :] - 2 * S)  # -||x - b||^2, monotone in 1/(1+d)
        S = S[:, spread]
        r = np.arange(len(q))
        # the positive's score from the same row (every positive is in the background here)
        assert (col[p] >= 0).all()
        pos = S[r, col[p]].copy()
        for own in (q, p):  # x and y never count
            c = col[own]
            S[r[c >= 0], c[c >= 0]] = -np.inf
        ranks[start : start + chunk] = 1 + (S > pos[:, None]).sum(axis=1)
        # near-ties: items whose score differs from the positive's (an exact tie is the same vector, which both
        # sides score identically) by less than float32 can resolve
        if similarity == "l2":  # the expansion's rounding scales with the norms, not with the distance
            scale = (Q * Q).sum(axis=1)[:, None] + b_sq[spread][None, :]
        else:
            scale = np.maximum(1.0, np.abs(pos))[:, None]
        gap = np.abs(S - pos[:, None])
        near[start : start + chunk] = ((gap <= tol * scale) & (gap > 0)).sum(axis=1)
    return ranks, near


def toolkit_loop_ranks(
    index: dict[str, int], matrix: np.ndarray, items: list[str], queries: np.ndarray, positives: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The toolkit's own cos loop (``w_evaluation.eval_for_ranking``), in its float32 arithmetic.

    Returns (its ranks, the positive's score computed as it does: ``np.dot(w1_emb, w2_emb)``, separately from the
    background row ``np.dot(vocab_embs, w1_emb)``). The background holds x itself (self-score 1 counts as the +1
    of evalfarm's rule) and rank 0 is clipped to 1.
    """
    E = matrix - matrix.mean(axis=0, keepdims=True)
    E = E / np.linalg.norm(E, axis=1)[:, np.newaxis]
    avg = np.mean(E, axis=0)
    V = np.stack([E[index[w]] if w in index else avg for w in items])
    ranks = np.empty(len(queries), dtype=np.int64)
    pos_scores = np.empty(len(queries), dtype=np.float32)
    for i, (a, b) in enumerate(zip(queries, positives, strict=True)):
        pos = np.dot(V[a], V[b])
        bg = np.sort(np.dot(V, V[a]))[::-1]
        rank = len(bg) - np.searchsorted(bg[::-1], pos, side="right")
        ranks[i] = max(int(rank), 1)
        pos_scores[i] = pos
    return ranks, pos_scores
