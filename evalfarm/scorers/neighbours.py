"""Each query's top-k nearest background items, for error analysis (what does a model confuse x with?).

Two ways, same semantics:

- :func:`top_neighbours`: a FAISS exact index on its own (``IndexFlatIP`` for cos on the given, normalised
  vectors; ``IndexFlatL2`` for l2, score 1 / (1 + distance)); faiss-gpu when the GPU build is installed and sees
  a GPU, faiss-cpu otherwise. One GEMM of the queries against the background plus FAISS's fused selection.
- ``rank_counts(..., neighbours=k)`` (the rank kernel): the same top-k taken from the score blocks the rank kernel
  computes anyway, through FAISS's selection heaps (``float_minheap_array_t.addn``) on CPU and ``torch.topk`` on
  GPU: no second GEMM. A separate search costs about as much as ranking one similarity; the fused selection
  costs a small fraction of it (``benchmarks/bench_rank.py`` measures both).

Without FAISS (a base ``pip install evalfarm``, neither the ``cpu`` nor the ``gpu`` extra) both ways fall back to
an exact numpy k-NN: the same float32 GEMM blocks (``IndexFlatIP`` / ``IndexFlatL2`` arithmetic) and
``np.argpartition`` instead of FAISS's heaps, so every metric is computed on CPU; FAISS stays the fast path.
The neighbours are the same items (tests/test_neighbours.py compares both on the same vectors); scores agree to
float32 rounding, and which items tied at the k-th place make the list is unspecified either way (below).

Policy:
- The query item itself is never its own neighbour (removed by id when it is in the background).
- Exact duplicates of the query (other items with the identical vector: OOV items filled with one mean vector,
  rows shared in a pruned vector table, duplicate texts) *are* neighbours, at the top with the query's own
  score: they are exactly what the model cannot tell apart from x.
- Neighbours are background items only (a positive outside the background is never one).
- Order: score descending, then item id ascending. When items tie at the k-th place, which of them make the
  list is unspecified. Fewer than k background items (x excluded): the row is padded with id -1, score NaN.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, Protocol

import numpy as np

from evalfarm.options import Similarity

Exclude = Literal["self"]


class ColumnLayout(Protocol):
    """What :class:`BlockTopK` reads of the rank kernel's column layout (``rank_kernel._Plan`` has it): the kernel
    imports this module, never the other way round."""

    @property
    def uq(self) -> np.ndarray: ...  # unique query items, in processing order

    @property
    def background(self) -> np.ndarray: ...  # background item ids

    @property
    def bg_col(self) -> np.ndarray: ...  # column of each background item

    @property
    def n_counted(self) -> int: ...  # columns that stand for background vectors


class Neighbours(NamedTuple):
    """Top-k background items of each query item: the rows of a ``neighbours`` table (query, position, ...)."""

    queries: np.ndarray  # int64 [n_q] query item ids
    ids: np.ndarray  # int64 [n_q, k] neighbour item ids, -1 where fewer than k exist
    scores: np.ndarray  # float32 [n_q, k] s(query, neighbour): cos, or 1 / (1 + distance) for l2; NaN padding


NUMPY_BLOCK_BYTES = 64 << 20
"""The numpy fallback scores this many bytes of (queries x background) float32 at a time."""


def _import_faiss() -> Any:
    """The faiss module, or None where it is not installed (the numpy fallback then does the search)."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def faiss_has_gpu(faiss: Any) -> bool:
    """Whether ``faiss`` (the module, or None) is a GPU build that sees a GPU."""
    return faiss is not None and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def _faiss_gpu(faiss: Any, device: str | None) -> bool:
    """Whether to search on a GPU: asked for (device names cuda), or not said and the GPU build sees one."""
    if device is not None and (device == "cpu" or device.startswith("cpu:")):
        return False
    if device is not None:
        if not faiss_has_gpu(faiss):
            raise RuntimeError(
                f"neighbours: device {device!r} asked for, but FAISS is not installed, has no GPU support or sees no "
                "GPU (install the `gpu` extra, faiss-gpu-cu12, on GPU workers; or pass device='cpu')"
            )
        return True
    return faiss_has_gpu(faiss)


def _numpy_search(
    base: np.ndarray, query: np.ndarray, width: int, similarity: Similarity
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``width`` of each query row over the ``base`` rows, as FAISS's flat indexes answer: (values,
    labels); values are inner products (cos) or squared distances (l2, ``|q|^2 + |b|^2 - 2 q.b`` in float32 like
    IndexFlatL2's GEMM path). Not sorted: the caller orders the candidates."""
    n_q, n_b = len(query), len(base)
    base_sq = (base * base).sum(axis=1) if similarity == "l2" else None
    rows = max(1, NUMPY_BLOCK_BYTES // (4 * max(n_b, 1)))
    values = np.empty((n_q, width), np.float32)
    labels = np.empty((n_q, width), np.int64)
    for r0 in range(0, n_q, rows):
        q = query[r0 : r0 + rows]
        key = q @ base.T  # larger is nearer
        if base_sq is not None:  # squared distance, negated so that larger is still nearer (in place)
            key *= 2.0
            key -= (q * q).sum(axis=1)[:, None]
            key -= base_sq[None, :]
        top = _top_columns(key, width)
        val = np.take_along_axis(key, top, axis=1)
        values[r0 : r0 + rows] = np.maximum(-val, 0.0) if base_sq is not None else val
        labels[r0 : r0 + rows] = top
    return values, labels


def _top_columns(key: np.ndarray, width: int) -> np.ndarray:
    """Column indices of the ``width`` largest values of each row (in no particular order)."""
    n = key.shape[1]
    if width >= n:
        return np.broadcast_to(np.arange(n), key.shape).copy()
    return np.argpartition(key, n - width, axis=1)[:, n - width :]  # no negated copy of the block


def _finish_rows(
    queries: np.ndarray, cand_ids: np.ndarray, cand_scores: np.ndarray, k: int, exclude_self: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Drop each query's own id, order by (score desc, id asc), keep k, pad with -1 / NaN."""
    n_q, width = cand_ids.shape
    ids = cand_ids.copy()
    scores = cand_scores.astype(np.float32, copy=True)
    invalid = ids < 0
    if exclude_self:
        invalid |= ids == queries[:, None]
    scores[invalid] = np.nan
    ids[invalid] = np.iinfo(np.int64).max  # sorts after every real id
    # NaN sorts last under a descending score key (-NaN is NaN, which lexsort puts at the end)
    order = np.lexsort((ids, -scores), axis=1)
    ids = np.take_along_axis(ids, order, axis=1)[:, :k]
    scores = np.take_along_axis(scores, order, axis=1)[:, :k]
    pad = ids == np.iinfo(np.int64).max
    ids[pad] = -1
    scores[pad] = np.nan
    if ids.shape[1] < k:  # a background smaller than k
        ids = np.hstack([ids, np.full((n_q, k - ids.shape[1]), -1, np.int64)])
        scores = np.hstack([scores, np.full((n_q, k - scores.shape[1]), np.nan, np.float32)])
    return ids, scores


def top_neighbours(
    emb: np.ndarray,
    queries: np.ndarray,
    background: np.ndarray,
    *,
    k: int = 10,
    similarity: Similarity,
    exclude: Exclude = "self",
    device: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` background items of each query item by a FAISS exact search (numpy's where FAISS is not
    installed): (ids int64 [n_q, k], scores float32).

    ``emb``: (n_items, d) vectors, preprocessed as for ranking (cos expects L2-normalised rows); ``queries``,
    ``background``: item ids. See the module docstring for the policy on the query itself and its duplicates.
    """
    if similarity not in ("cos", "l2"):
        raise ValueError(f"unknown similarity {similarity!r} (choose from ('cos', 'l2'))")
    if exclude != "self":
        raise ValueError(f"unknown exclusion {exclude!r}: the query itself is always excluded ('self')")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    faiss = _import_faiss()
    queries = np.asarray(queries, dtype=np.int64)
    background = np.asarray(background, dtype=np.int64)
    if len(queries) == 0 or len(background) == 0:
        return np.full((len(queries), k), -1, np.int64), np.full((len(queries), k), np.nan, np.float32)
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    width = min(k + 1, len(background))  # one more: the query itself may be among them
    gpu_device = (device or "cuda") if _faiss_gpu(faiss, device) else None  # not said: the GPU build's first GPU
    if faiss is None:
        dist, label = _numpy_search(np.take(emb, background, axis=0), np.take(emb, queries, axis=0), width, similarity)
    else:
        dist, label = _faiss_search(faiss, emb, queries, background, width, similarity, gpu_device)
    cand_ids = np.where(label >= 0, background[np.maximum(label, 0)], -1)
    if similarity == "cos":
        scores = dist
    else:  # IndexFlatL2 returns squared distances
        scores = 1.0 / (1.0 + np.sqrt(np.maximum(dist, 0.0)))
    return _finish_rows(queries, cand_ids, scores, k, exclude_self=True)


def _faiss_search(
    faiss: Any,
    emb: np.ndarray,
    queries: np.ndarray,
    background: np.ndarray,
    width: int,
    similarity: Similarity,
    gpu_device: str | None,
) -> tuple[np.ndarray, np.ndarray]:
    """FAISS's flat index over the background, on the GPU named by ``gpu_device`` (None: CPU)."""
    d = emb.shape[1]
    index = faiss.IndexFlatIP(d) if similarity == "cos" else faiss.IndexFlatL2(d)
    resources = None  # must outlive the GPU index
    if gpu_device is not None:
        gpu = int(gpu_device.split(":")[1]) if ":" in gpu_device else 0
        resources = faiss.StandardGpuResources()
        index = faiss.index_cpu_to_gpu(resources, gpu, index)
    index.add(np.take(emb, background, axis=0))
    dist, label = index.search(np.take(emb, queries, axis=0), width)
    del index, resources
    return dist, label


class BlockTopK:
    """Top-k columns of each query row, fed block by block by the rank kernel; expanded to items at the end.

    Columns of the kernel stand for distinct vectors: a column shared by several identical background items
    expands to all of them (ids ascending), the query item itself removed. k + 1 columns per row are enough:
    at most one column (the query's own, when it stands for the query alone) expands to nothing.
    """

    def __init__(self, plan: ColumnLayout, k: int) -> None:
        if k < 1:
            raise ValueError(f"neighbours: k must be >= 1, got {k}")
        self.plan = plan
        self.k = k
        self.width = min(k + 1, plan.n_counted)
        n_uq = len(plan.uq)
        self.val = np.full((n_uq, self.width), -np.inf, dtype=np.float32)
        self.col = np.full((n_uq, self.width), -1, dtype=np.int64)
        self._faiss: Any = None  # the faiss module (or False: not installed), looked up at the first numpy block

    def add_numpy(self, u0: int, s: np.ndarray) -> None:
        """FAISS's selection heap over each row's counted columns (one C call per block, no copy); without FAISS,
        ``np.argpartition`` over the block."""
        if self.width == 0:
            return
        if self._faiss is None:
            self._faiss = _import_faiss() or False
        if self._faiss is False:
            self._add_argpartition(u0, s)
            return
        faiss = self._faiss
        m, n = s.shape[0], self.plan.n_counted
        val, col = self.val[u0 : u0 + m], self.col[u0 : u0 + m]
        heap = faiss.float_minheap_array_t()  # a min-heap keeps the largest values
        heap.nh, heap.k = m, self.width
        heap.val, heap.ids = faiss.swig_ptr(val), faiss.swig_ptr(col)
        heap.heapify()
        if s.shape[1] == n and s.flags.c_contiguous:  # the usual case: every column is a background vector
            heap.addn(n, faiss.swig_ptr(s), 0, 0, m)
        else:  # positives outside the background add columns that are never neighbours: row by row
            for r in range(m):
                heap.addn(n, faiss.swig_ptr(s[r, :n]), 0, r, 1)
        heap.reorder()

    def _add_argpartition(self, u0: int, s: np.ndarray) -> None:
        """The numpy selection: each row's ``width`` largest counted columns. Like FAISS's ``heapify`` above, it
        replaces what the rows held: the kernel visits each row block once, with all its columns."""
        m, n = s.shape[0], self.plan.n_counted
        block = s[:, :n]
        top = _top_columns(block, self.width)
        self.val[u0 : u0 + m] = np.take_along_axis(block, top, axis=1)
        self.col[u0 : u0 + m] = top

    def add_torch(self, u0: int, s: Any) -> None:
        if self.width == 0:
            return
        import torch

        val, col = torch.topk(s[:, : self.plan.n_counted], self.width, dim=1)
        m = s.shape[0]
        self.val[u0 : u0 + m] = val.cpu().numpy()
        self.col[u0 : u0 + m] = col.cpu().numpy()

    def result(self, similarity: Similarity, query_sq_norms: np.ndarray | None = None) -> Neighbours:
        """Each unique query's top-k items; l2 needs the float64 squared norms of the unique queries (the kernel
        computes them once for the pairs' scores)."""
        plan, k = self.plan, self.k
        n_uq = len(plan.uq)
        # Members of each counted column: background items grouped by column, ids ascending.
        bg_col = plan.bg_col
        by_col = np.lexsort((plan.background, bg_col))
        members = plan.background[by_col]
        first = np.searchsorted(bg_col[by_col], np.arange(plan.n_counted + 1))
        cols = np.where(self.col >= 0, self.col, 0)
        count = np.where(self.col >= 0, first[cols + 1] - first[cols], 0)
        # Expand every selected column to its members (at most k + 1 items each are needed).
        take = np.minimum(count, k + 1)
        row = np.repeat(np.arange(n_uq), take.sum(axis=1))
        flat_col = np.repeat(cols.ravel(), take.ravel())
        flat_val: np.ndarray = np.repeat(self.val.ravel(), take.ravel())  # float32; float64 scores for l2
        within = np.arange(len(flat_col)) - np.repeat(np.cumsum(take.ravel()) - take.ravel(), take.ravel())
        item = members[first[flat_col] + within]
        if similarity == "l2":  # v = x.b - ||b||^2 / 2  ->  1 / (1 + sqrt(||x||^2 - 2 v))
            if query_sq_norms is None:
                raise ValueError("l2 neighbours need the queries' squared norms")
            q_sq = query_sq_norms
            flat_val = 1.0 / (1.0 + np.sqrt(np.maximum(q_sq[row] - 2.0 * flat_val.astype(np.float64), 0.0)))
        # Back to a dense (n_uq, width') matrix, then the shared finishing (self removed, order, pad).
        per_row = np.bincount(row, minlength=n_uq)
        wide = max(1, int(per_row.max()) if len(per_row) else 1)
        pos_in_row = np.arange(len(row)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
        ids = np.full((n_uq, wide), -1, np.int64)
        vals = np.full((n_uq, wide), np.nan, np.float32)
        ids[row, pos_in_row] = item
        vals[row, pos_in_row] = flat_val
        ids_k, scores_k = _finish_rows(plan.uq, ids, vals, k, exclude_self=True)
        return Neighbours(plan.uq.copy(), ids_k, scores_k)
