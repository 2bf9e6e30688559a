"""The EvalRank kernel: exact ranks counted over blocks of a queries x background GEMM (PyKEEN-style, no sort).

For a positive pair (x, y) and a similarity s, the kernel counts over the background B (x, y excluded)::

    above = #{b in B: s(x, b) > s(x, y)}        tied = #{b in B: s(x, b) == s(x, y)}

and every tie policy derives from those two counts (:mod:`evalfarm.ranking`: optimistic rank = 1 + above,
pessimistic = 1 + above + tied, realistic = 1 + above + tied / 2, the expected rank under random tie-breaking).

- s(x, y) is read from the same computed GEMM row as every s(x, b) (never recomputed separately, so the positive
  cannot outrank itself by one ulp).
- Identical vectors (OOV items filled with one mean vector, rows shared in a pruned vector table, duplicate
  texts) share one GEMM column, counted with its multiplicity: an exact duplicate of y ties with y on every
  backend, although a GEMM may round the same dot product differently in two columns (MKL does).
- cos: dot products of the given (already L2-normalised) vectors; a zero vector has cosine 0 with everything.
- l2: s = 1 / (1 + ||x - b||). Ranks are counted on x.b - ||b||^2 / 2, which orders the background exactly as
  -||x - b||^2 does (x's own norm is constant along a row). The shift is folded into the GEMM itself: queries
  get a last coordinate 1 and candidates -||b||^2 / 2, so l2 costs one GEMM column and no extra pass.
- x and y never count; other positives of x count as background by default (as in the paper) and
  ``filter_other_positives`` removes them. ``exclude`` names one more item per pair that never counts: the query's
  own item when the query's vector sits in another row (an asymmetric model's query side, EvalRank). Exclusions
  are applied after counting, by subtracting the excluded items' own comparisons (read from the same row), so a
  query's row is shared by all of its pairs.
- A positive outside the background is scored in the same GEMM (an extra column, or the column of the
  background vector it equals) but never counted.

Backends (``device``):
- CPU: NumPy's GEMM (OpenBLAS): on one thread at the pool shapes the bare NumPy GEMM beat ``torch.mm`` (MKL) and
  FAISS's exact search of the same rows (its GEMM + top-10 selection) at every shape (``benchmarks/bench_rank.py``,
  figures in benchmarks/README.md). The CPU path never imports torch.
- CUDA: torch. torch is imported only when ``device`` names a non-CPU device, or when ``device`` is None and
  torch is *already imported* and sees a GPU (``pick_device``): a word model on a CPU worker pays no torch import.
  ``backend="torch"`` forces the torch code path on any device (the tests check it on CPU against the oracle).

Memory and speed (CPU): queries are processed in blocks of unique query rows; the score block, the query block
and a boolean row are allocated once and reused (no page faults after the first block). Block rows come from
the GEMM's measured sweet spot (:func:`sweet_spot_rows`: 128 rows when d <= 128, 512 above), capped so the
score block stays under ``max_block_bytes``. Each pair then costs two passes over its query's row, back to back
so the second reads it from cache (``>`` and ``==`` into one reused boolean buffer, counted by
``np.count_nonzero``: no int64 copies); queries with several positives reuse their row for each of them.

The kernel knows nothing of models, pools or OOV policies: it takes preprocessed vectors and item ids.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

import numpy as np

from evalfarm.options import SIMILARITIES, Similarity
from evalfarm.ranking import PAPER_TIES, Ties, check_ties, tie_ranks

if TYPE_CHECKING:
    import torch

    from evalfarm.scorers.neighbours import BlockTopK, Neighbours

Backend = Literal["numpy", "torch"]

# Score block cap: rows x columns x 4 bytes. At the pool shapes the sweet-spot rows stay below it (512 rows x
# 25k columns = 51 MB); it binds for very large backgrounds (1M columns: 64 rows, still close to the GEMM's rate at
# 128 rows for d = 384, where fewer rows fall off: benchmarks/README.md).
DEFAULT_MAX_BLOCK_BYTES = 256 << 20
# On a GPU larger blocks amortise kernel launches; the cap keeps a block well inside a GPU's memory.
DEFAULT_MAX_BLOCK_BYTES_GPU = 1 << 30
# l2 over a whole table larger than this shifts each score block instead of copying the table with one more
# column (a 1M x 384 table would double the rank stage's memory, 1.5 GB more).
L2_COPY_LIMIT_BYTES = 256 << 20
# Work buffers up to this size are kept per thread between calls: a rank worker runs the kernel model after
# model, and fresh multi-MB buffers cost page faults on every call (system time: benchmarks/README.md).
WORKSPACE_KEEP_BYTES = 128 << 20

_workspace = threading.local()


def _buffer(name: str, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """An uninitialised array of ``shape``: this thread's kept buffer ``name`` when it fits (grown when too small)."""
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dt.itemsize
    if nbytes > WORKSPACE_KEEP_BYTES:
        return np.empty(shape, dt)
    kept = getattr(_workspace, "buffers", None)
    if kept is None:
        kept = _workspace.buffers = {}
    buf = kept.get(name)
    if buf is None or buf.nbytes < nbytes:
        buf = kept[name] = np.empty(max(nbytes, 64), np.uint8)
    return buf[:nbytes].view(dt).reshape(shape)


def release_workspace() -> None:
    """Free this thread's kept work buffers (at most a few times ``WORKSPACE_KEEP_BYTES``)."""
    _workspace.buffers = {}


@dataclass(frozen=True)
class RankCounts:
    """Per-pair counts over the background (x, y and, when filtering, other positives excluded).

    ``above``: items scoring strictly higher than the positive; ``tied``: items scoring exactly the same;
    ``score``: s(x, y) (cos, or 1 / (1 + ||x - y||) for l2), read from the same GEMM row as the counts.
    ``neighbours``: each unique query's top-k background items, when asked for (``rank_counts(neighbours=k)``).
    """

    above: np.ndarray  # int64 [n_pairs]
    tied: np.ndarray  # int64 [n_pairs]
    score: np.ndarray  # float32 [n_pairs]
    neighbours: Neighbours | None = None

    def ranks(self, ties: Ties = PAPER_TIES) -> np.ndarray:
        """float64 ranks under a tie policy (:func:`evalfarm.ranking.tie_ranks`): 1 + above (+ tied, or + tied / 2)."""
        return tie_ranks(1 + self.above, self.tied, ties)


def pick_device(device: str | None = None) -> str:
    """The device to rank on, as a name ("cpu", "cuda", "cuda:1"), without importing torch.

    An explicit ``device`` wins. Otherwise a GPU is used only if torch is already imported (a sentence model
    loaded it) and sees one; else "cpu". Checking ``torch.cuda`` would cost a torch import (seconds) on every
    word-model worker, for nothing on a CPU-only machine; a GPU worker passes ``device="cuda"`` to be sure.
    """
    if device:
        return str(device)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return "cuda"
    return "cpu"


def _is_cpu(device: str) -> bool:
    return device == "cpu" or device.startswith("cpu:")


def sweet_spot_rows(dim: int) -> int:
    """Query rows per GEMM block on CPU, from ``benchmarks/bench_rank.py --sweep`` on the pool shapes (1 thread).

    With the workspace kept, the count passes cost the same at any block size; the GEMM decides: at small d the
    time barely depends on the rows above a few dozen, at d = 300-384 it falls up to 512-1,024 rows (the sweep's
    figures are in benchmarks/README.md). 128 / 512 rows keep the score block at tens of MB on the pools;
    ``max_block_bytes`` caps it for larger backgrounds.
    """
    return 128 if dim <= 128 else 512


def _other_positive_pairs(queries: np.ndarray, positives: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pair index, other positive item) for every pair whose query has more than one positive."""
    order = np.argsort(queries, kind="stable")
    q_sorted = queries[order]
    starts = np.flatnonzero(np.r_[True, q_sorted[1:] != q_sorted[:-1]])
    sizes = np.diff(np.r_[starts, len(q_sorted)])
    multi = sizes > 1
    if not multi.any():
        return np.empty(0, np.int64), np.empty(0, np.int64)
    # Every (member, member') of each multi-positive group with member != member', without a Python loop.
    g_starts, g_sizes = starts[multi], sizes[multi]
    member_start = np.repeat(g_starts, g_sizes)
    member_size = np.repeat(g_sizes, g_sizes)
    member_slot = member_start + np.arange(len(member_start)) - np.repeat(np.cumsum(g_sizes) - g_sizes, g_sizes)
    a = np.repeat(member_slot, member_size)
    within = np.arange(len(a)) - np.repeat(np.cumsum(member_size) - member_size, member_size)
    b = np.repeat(member_start, member_size) + within
    keep = a != b
    return order[a[keep]].astype(np.int64), positives[order[b[keep]]].astype(np.int64)


class _Plan(NamedTuple):
    """Everything both backends share: the column layout, pair order and the exclusion list.

    Columns are the distinct vectors of the background (and of positives outside it), each computed once:
    first those one background item has ("single"), then those several background items share (counted with
    their multiplicity ``weights``), then those only outside the background (scored, never counted).
    """

    cols: np.ndarray  # representative item of every GEMM column
    background: np.ndarray  # background item ids, as given
    bg_col: np.ndarray  # column of each background item
    n_single: int
    weights: np.ndarray  # int64, background items sharing each of the next len(weights) columns
    order: np.ndarray  # pairs in processing order (grouped by query)
    uq: np.ndarray  # unique query items, in processing order
    starts: np.ndarray  # first processed pair of each unique query (len(uq) + 1 entries)
    pair_row: np.ndarray  # unique-query index of each processed pair
    pair_col: np.ndarray  # column of each processed pair's positive
    excl_pair: np.ndarray  # processed pair of each exclusion (sorted)
    excl_col: np.ndarray  # column of the excluded background item (one entry per item, not per column)

    @property
    def n_counted(self) -> int:
        return self.n_single + len(self.weights)


def _group_identical(emb: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Group number of each id's vector: identical vectors (coordinate-wise ==) share one, by first appearance.

    Keys are (row sum, first coordinate), each computed on its own row (so equal rows get equal keys); rows
    with equal keys are compared in full, and the rare unequal ones with equal keys are split by ``np.unique``.
    """
    n = len(ids)
    if n == 0:
        return np.empty(0, np.int64)
    sums = np.empty(n, np.float32)
    first = np.empty(n, np.float32)
    for s, block in _row_chunks(emb, ids):
        sums[s : s + len(block)] = block.sum(axis=1)
        first[s : s + len(block)] = block[:, 0]
    order = np.lexsort((first, sums))
    ks, kf = sums[order], first[order]
    new_run = np.r_[True, (ks[1:] != ks[:-1]) | (kf[1:] != kf[:-1])]  # NaN keys never join a run
    run = np.cumsum(new_run) - 1
    run_start = np.flatnonzero(new_run)
    run_len = np.diff(np.r_[run_start, n])
    group_sorted = run.copy()
    in_multi = np.flatnonzero(run_len[run] > 1)
    if len(in_multi):
        leader = ids[order[run_start[run[in_multi]]]]
        member = ids[order[in_multi]]
        same = np.empty(len(in_multi), dtype=bool)
        step = 4096
        for s in range(0, len(in_multi), step):
            same[s : s + step] = (emb[member[s : s + step]] == emb[leader[s : s + step]]).all(axis=1)
        next_group = int(run[-1]) + 1
        for r in np.unique(run[in_multi[~same]]):  # equal keys, different vectors: split the run exactly
            at = np.arange(run_start[r], run_start[r] + run_len[r])
            _, inv = np.unique(emb[ids[order[at]]], axis=0, return_inverse=True)
            group_sorted[at] = next_group + inv.ravel()
            next_group += int(inv.max()) + 1
    group = np.empty(n, dtype=np.int64)
    group[order] = group_sorted
    _, first_at, inv = np.unique(group, return_index=True, return_inverse=True)
    renumber = np.empty(len(first_at), dtype=np.int64)
    renumber[np.argsort(first_at, kind="stable")] = np.arange(len(first_at))
    return renumber[inv.ravel()]


# long: the rank kernel's precomputation (columns, query groups, exclusions), kept whole
def _plan(
    emb: np.ndarray,
    queries: np.ndarray,
    positives: np.ndarray,
    background: np.ndarray,
    filter_other_positives: bool,
    exclude: np.ndarray | None = None,
) -> _Plan:
    n_items = emb.shape[0]
    for name, ids in (("queries", queries), ("positives", positives), ("background", background)):
        if len(ids) and (ids.min() < 0 or ids.max() >= n_items):
            raise ValueError(f"{name}: item ids must lie in [0, {n_items}) (the rows of emb)")
    n_bg = len(background)
    in_bg = np.zeros(n_items, dtype=bool)
    in_bg[background] = True
    if np.count_nonzero(in_bg) != n_bg:
        raise ValueError("background: item ids must be unique (a duplicate would be counted twice)")
    scored = np.concatenate([background, np.unique(positives[~in_bg[positives]])])

    # Columns: one per distinct vector. Identical vectors share a column, so an exact duplicate of y ties with
    # y on every backend (a GEMM may round the same dot product differently in two columns).
    group = _group_identical(emb, scored)
    n_groups = int(group.max()) + 1 if len(group) else 0
    weight = np.bincount(group[:n_bg], minlength=n_groups)
    rep = scored[np.unique(group, return_index=True)[1]]  # the first item of each group
    region = np.where(weight == 1, 0, np.where(weight > 1, 1, 2))
    col_order = np.argsort(region, kind="stable")
    col_of_group = np.empty(n_groups, dtype=np.int64)
    col_of_group[col_order] = np.arange(n_groups)
    col_of = np.full(n_items, -1, dtype=np.int64)
    col_of[scored] = col_of_group[group]

    order = np.argsort(queries, kind="stable")
    q_sorted = queries[order]
    first = np.r_[True, q_sorted[1:] != q_sorted[:-1]]
    uq = q_sorted[first]
    starts = np.r_[np.flatnonzero(first), len(order)]
    pair_row = np.cumsum(first) - 1
    p_sorted = positives[order]

    # Exclusions, per (pair, background item): x and y always; every positive of x when filtering.
    slot = np.empty(len(order), dtype=np.int64)
    slot[order] = np.arange(len(order))
    e_pair = [np.arange(len(order)), np.arange(len(order))]
    e_item = [q_sorted, p_sorted]
    if filter_other_positives:
        rows, others = _other_positive_pairs(queries, positives)
        e_pair.append(slot[rows])
        e_item.append(others)
    if exclude is not None:  # one more item per pair (-1: none), e.g. the query's own item in the document rows
        extra = exclude[order]
        keep = extra >= 0
        e_pair.append(np.arange(len(order))[keep])
        e_item.append(extra[keep])
    e_pair_all, e_item_all = np.concatenate(e_pair), np.concatenate(e_item)
    counted = in_bg[e_item_all]  # items outside the background are never counted anyway
    key = np.unique(e_pair_all[counted] * n_items + e_item_all[counted])  # one per item, sorted by pair
    return _Plan(
        cols=rep[col_order],
        background=background,
        bg_col=col_of[background],
        n_single=int(np.count_nonzero(region == 0)),
        weights=weight[col_order][region[col_order] == 1].astype(np.int64),
        order=order,
        uq=uq,
        starts=starts,
        pair_row=pair_row,
        pair_col=col_of[p_sorted],
        excl_pair=key // n_items,
        excl_col=col_of[key % n_items],
    )


def _row_chunks(emb: np.ndarray, ids: np.ndarray, step: int = 2048):
    """(offset, rows of ``emb``) in chunks gathered into one reused scratch: no large temporaries."""
    scratch = np.empty((min(step, len(ids)), emb.shape[1]), dtype=np.float32)
    for s in range(0, len(ids), step):
        block = scratch[: len(ids[s : s + step])]
        np.take(emb, ids[s : s + step], axis=0, out=block, mode="clip")
        yield s, block


def _block_sq_norms(block: np.ndarray) -> np.ndarray:
    """float64 squared norms, each row summed on its own: identical vectors get identical norms wherever they
    sit (a buffered or blocked reduction could split one row's sum at a different place than its twin's)."""
    b64 = block.astype(np.float64)
    np.multiply(b64, b64, out=b64)
    return b64.sum(axis=1)


def _sq_norms(emb: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """float64 squared norms of the given rows."""
    out = np.empty(len(ids), dtype=np.float64)
    for s, block in _row_chunks(emb, ids):
        out[s : s + len(block)] = _block_sq_norms(block)
    return out


def _is_identity(cols: np.ndarray, n: int) -> bool:
    return len(cols) == n and (n == 0 or (cols[0] == 0 and cols[-1] == n - 1 and np.array_equal(cols, np.arange(n))))


def _candidates(emb: np.ndarray, cols: np.ndarray, similarity: Similarity) -> tuple[np.ndarray, np.ndarray | None]:
    """The GEMM's right operand, and the per-column shift to add to each score row when it is not folded in.

    cos: (n_cols, d); over the whole table in order it is ``emb`` itself (no copy of a 1M-row background).
    l2: (n_cols, d + 1) with -||b||^2 / 2 as last coordinate, so the GEMM yields x.b - ||b||^2 / 2 directly; except
    when the background is the whole table and copying it would cost more than ``L2_COPY_LIMIT_BYTES``: then
    ``emb`` is used as it is and the shift (float32 [n_cols]) is added to each block (one pass over the block).
    """
    n, d = emb.shape
    identity = _is_identity(cols, n)
    if similarity == "cos":
        if identity:
            return emb, None
        return np.take(emb, cols, axis=0, out=_buffer("candidates", (len(cols), d), np.float32), mode="clip"), None
    if identity and emb.nbytes > L2_COPY_LIMIT_BYTES:
        return emb, (_sq_norms(emb, cols) * -0.5).astype(np.float32)
    cand = _buffer("candidates", (len(cols), d + 1), np.float32)
    for s, block in _row_chunks(emb, cols):
        cand[s : s + len(block), :d] = block
        cand[s : s + len(block), d] = _block_sq_norms(block) * -0.5
    return cand, None


def _finish(
    plan: _Plan,
    emb: np.ndarray,
    similarity: Similarity,
    above: np.ndarray,
    tied: np.ndarray,
    pos: np.ndarray,
    excl_val: np.ndarray,
    top: BlockTopK | None,
) -> RankCounts:
    """Subtract the excluded items' comparisons, derive scores, return in the caller's pair order."""
    pv = pos[plan.excl_pair]
    above -= np.bincount(plan.excl_pair[excl_val > pv], minlength=len(above))
    tied -= np.bincount(plan.excl_pair[excl_val == pv], minlength=len(tied))
    q_sq = _sq_norms(emb, plan.uq) if similarity == "l2" else None
    if q_sq is None:
        score = pos.astype(np.float32)
    else:  # pos = x.y - ||y||^2 / 2  ->  ||x - y||^2 = ||x||^2 - 2 pos
        d2 = np.maximum(q_sq[plan.pair_row] - 2.0 * pos.astype(np.float64), 0.0)
        score = (1.0 / (1.0 + np.sqrt(d2))).astype(np.float32)
    nb = top.result(similarity, q_sq) if top is not None else None
    out = RankCounts(np.empty_like(above), np.empty_like(tied), np.empty(len(above), np.float32), nb)
    out.above[plan.order] = above
    out.tied[plan.order] = tied
    out.score[plan.order] = score
    return out


def _block_rows(requested: int | None, dim: int, n_cols: int, max_block_bytes: int) -> int:
    rows = requested if requested is not None else sweet_spot_rows(dim)
    return max(1, min(rows, max_block_bytes // max(1, 4 * n_cols)))


def _counts_numpy(
    plan: _Plan, emb: np.ndarray, similarity: Similarity, rows: int, top: BlockTopK | None
) -> RankCounts:
    n_pairs, n_single, n_counted = len(plan.order), plan.n_single, plan.n_counted
    cand, shift = _candidates(emb, plan.cols, similarity)
    cand_t = cand.T  # BLAS reads the transpose in place
    d = emb.shape[1]
    n_uq = len(plan.uq)
    rows = min(rows, n_uq)
    q_buf = _buffer("queries", (rows, cand.shape[1]), np.float32)
    augmented = cand.shape[1] > d
    if augmented:
        q_buf[:, d] = 1.0
    s_buf = _buffer("scores", (rows, len(plan.cols)), np.float32)
    hit = _buffer("hit", (n_single,), np.bool_)
    weights = plan.weights.astype(np.float64)  # exact for counts below 2**53
    above = np.empty(n_pairs, dtype=np.int64)
    tied = np.empty(n_pairs, dtype=np.int64)
    pos = np.empty(n_pairs, dtype=np.float32)
    excl_val = np.empty(len(plan.excl_pair), dtype=np.float32)
    e_bounds = np.searchsorted(plan.excl_pair, plan.starts)
    count, gt, eq = np.count_nonzero, np.greater, np.equal
    for u0 in range(0, n_uq, rows):
        u1 = min(u0 + rows, n_uq)
        m = u1 - u0
        q = q_buf[:m]
        np.take(emb, plan.uq[u0:u1], axis=0, out=q[:, :d] if augmented else q, mode="clip")
        s = s_buf[:m]
        np.matmul(q, cand_t, out=s)
        if shift is not None:
            np.add(s, shift, out=s)
        if top is not None:
            top.add_numpy(u0, s)
        p0, p1 = plan.starts[u0], plan.starts[u1]
        local = plan.pair_row[p0:p1] - u0
        t_block = s[local, plan.pair_col[p0:p1]]
        pos[p0:p1] = t_block
        e0, e1 = e_bounds[u0], e_bounds[u1]
        excl_val[e0:e1] = s[plan.pair_row[plan.excl_pair[e0:e1]] - u0, plan.excl_col[e0:e1]]
        for p in range(p0, p1):  # every pair of a query reads the same row, while it is in cache
            row, t = s[local[p - p0], :n_single], pos[p]
            gt(row, t, out=hit)
            above[p] = count(hit)
            eq(row, t, out=hit)
            tied[p] = count(hit)
        if len(weights):  # columns shared by several background items count with their multiplicity
            shared = s[local, n_single:n_counted]  # a per-pair copy of these few columns only
            above[p0:p1] += ((shared > t_block[:, None]) @ weights).astype(np.int64)
            tied[p0:p1] += ((shared == t_block[:, None]) @ weights).astype(np.int64)
    return _finish(plan, emb, similarity, above, tied, pos, excl_val, top)


def _counts_one_blas_thread(
    plan: _Plan, emb: np.ndarray, similarity: Similarity, rows: int, top: BlockTopK | None
) -> RankCounts:
    """:func:`_counts_numpy` with the GEMM on one BLAS thread. A threaded GEMM splits the score matrix by thread
    count, and its float32 rounding — so which near-equal scores tie — then depends on how many threads the process
    has: a Ray worker (one thread per CPU share) and the in-process executor (every core) counted different ties for
    one model. On one thread the numbers do not depend on the executor; parallelism comes from the workers."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return _counts_numpy(plan, emb, similarity, rows, top)


def _torch_device(device: str) -> torch.device:
    """``device`` as a torch device; a CUDA device torch cannot see fails here, before anything is copied."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"rank kernel: device {device!r} asked for but torch sees no CUDA device; pass device='cpu' "
            "(or leave it unset) on a CPU worker"
        )
    return dev


class _TorchCounts:
    """The torch path over one call: the candidates and work buffers live on ``dev``, allocated once and reused by
    every block of unique query rows; each block's counts go into ``above`` / ``tied`` / ``pos`` / ``excl_val``."""

    def __init__(self, plan: _Plan, emb: np.ndarray, similarity: Similarity, dev: torch.device, rows: int) -> None:
        import torch

        self.plan, self.dev, self.d = plan, dev, emb.shape[1]
        n_pairs = len(plan.order)
        cand_np, shift_np = _candidates(emb, plan.cols, similarity)
        self.cand = torch.from_numpy(cand_np).to(dev)
        self.shift = None if shift_np is None else torch.from_numpy(shift_np).to(dev)
        self.emb_t = torch.from_numpy(np.ascontiguousarray(emb, dtype=np.float32))
        self.s_buf = torch.empty((rows, self.cand.shape[0]), dtype=torch.float32, device=dev)
        # l2: the last coordinate stays 1
        self.q_buf = torch.ones((rows, self.cand.shape[1]), dtype=torch.float32, device=dev)
        self.hit = torch.empty((rows, plan.n_single), dtype=torch.bool, device=dev)
        self.weights = torch.from_numpy(plan.weights.astype(np.float64)).to(dev)
        self.above = torch.empty(n_pairs, dtype=torch.int64, device=dev)
        self.tied = torch.empty(n_pairs, dtype=torch.int64, device=dev)
        self.pos = torch.empty(n_pairs, dtype=torch.float32, device=dev)
        self.excl_val = torch.empty(len(plan.excl_pair), dtype=torch.float32, device=dev)
        self.e_bounds = np.searchsorted(plan.excl_pair, plan.starts)
        # Slot of each processed pair within its query's group: slot 0 exists for every query row, so the first
        # comparison reads the block as it is; later slots gather only the rows of queries with that many pairs.
        self.slot = np.arange(n_pairs) - plan.starts[plan.pair_row]

    def put(self, x: np.ndarray) -> torch.Tensor:
        """Indices onto the device."""
        import torch

        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.int64)).to(self.dev)

    def scores(self, u0: int, u1: int) -> torch.Tensor:
        """The score block of unique query rows ``u0:u1`` against every column (one GEMM, shifted for l2)."""
        import torch

        q = self.q_buf[: u1 - u0]
        q[:, : self.d].copy_(self.emb_t[torch.from_numpy(self.plan.uq[u0:u1])])
        s = self.s_buf[: u1 - u0]
        torch.mm(q, self.cand.T, out=s)
        if self.shift is not None:
            s += self.shift
        return s

    def read_pairs(self, s: torch.Tensor, u0: int, u1: int, local: np.ndarray) -> None:
        """Each pair's own score and each excluded item's comparison, read from the block's rows."""
        plan = self.plan
        p0, p1 = int(plan.starts[u0]), int(plan.starts[u1])
        self.pos[p0:p1] = s[self.put(local), self.put(plan.pair_col[p0:p1])]
        e0, e1 = int(self.e_bounds[u0]), int(self.e_bounds[u1])
        if e1 > e0:
            rows, cols = self.put(plan.pair_row[plan.excl_pair[e0:e1]] - u0), self.put(plan.excl_col[e0:e1])
            self.excl_val[e0:e1] = s[rows, cols]

    def count_single(self, s: torch.Tensor, p0: int, p1: int, local: np.ndarray) -> None:
        """``above`` / ``tied`` over the columns of one background item each, one slot of pairs at a time."""
        import torch

        n_single = self.plan.n_single
        block_slot = self.slot[p0:p1]
        for j in range(int(block_slot.max()) + 1):
            sel = np.flatnonzero(block_slot == j)  # processed pairs (block-relative) in slot j
            pairs = self.put(p0 + sel)
            sj = s[:, :n_single] if j == 0 else s.index_select(0, self.put(local[sel]))[:, :n_single]
            t = self.pos[pairs][:, None]
            h = self.hit[: len(sel)]
            torch.gt(sj, t, out=h)
            self.above[pairs] = torch.count_nonzero(h, dim=1)
            torch.eq(sj, t, out=h)
            self.tied[pairs] = torch.count_nonzero(h, dim=1)

    def count_shared(self, s: torch.Tensor, p0: int, p1: int, local: np.ndarray) -> None:
        """The columns shared by several background items, counted with their multiplicity."""
        shared = s[self.put(local), self.plan.n_single : self.plan.n_counted]
        t_block = self.pos[p0:p1][:, None]
        self.above[p0:p1] += ((shared > t_block).double() @ self.weights).long()
        self.tied[p0:p1] += ((shared == t_block).double() @ self.weights).long()

    def finish(self, emb: np.ndarray, similarity: Similarity, top: BlockTopK | None) -> RankCounts:
        above, tied = self.above.cpu().numpy(), self.tied.cpu().numpy()
        return _finish(
            self.plan, emb, similarity, above, tied, self.pos.cpu().numpy(), self.excl_val.cpu().numpy(), top
        )


def _counts_torch(
    plan: _Plan, emb: np.ndarray, similarity: Similarity, device: str, rows: int, top: BlockTopK | None
) -> RankCounts:
    """The kernel on torch (CUDA; on the CPU with ``backend="torch"``): per block of unique query rows, the GEMM,
    then each pair's score and counts read from it on the device."""
    import torch

    dev = _torch_device(device)
    n_uq = len(plan.uq)
    rows = min(rows, n_uq)
    k = _TorchCounts(plan, emb, similarity, dev, rows)
    with torch.inference_mode():
        for u0 in range(0, n_uq, rows):
            u1 = min(u0 + rows, n_uq)
            s = k.scores(u0, u1)
            if top is not None:
                top.add_torch(u0, s)
            p0, p1 = int(plan.starts[u0]), int(plan.starts[u1])
            local = plan.pair_row[p0:p1] - u0
            k.read_pairs(s, u0, u1, local)
            k.count_single(s, p0, p1, local)
            if len(k.weights):
                k.count_shared(s, p0, p1, local)
    return k.finish(emb, similarity, top)


def _device_and_backend(device: str | None, backend: Backend | None) -> tuple[str, str]:
    """The device (:func:`pick_device`) and the backend that runs there: ``backend``, else numpy on the CPU and
    torch elsewhere."""
    dev = pick_device(device)
    use = backend or ("numpy" if _is_cpu(dev) else "torch")
    if use == "numpy" and not _is_cpu(dev):
        raise ValueError(f"backend 'numpy' runs on the CPU only, not on device {dev!r}")
    if use not in ("numpy", "torch"):
        raise ValueError(f"unknown backend {use!r} (numpy or torch)")
    return dev, use


def _no_counts(neighbours: int) -> RankCounts:
    """The counts of no pairs (and, with ``neighbours``, no query's neighbours)."""
    nb = None
    if neighbours:
        from evalfarm.scorers.neighbours import Neighbours

        nb = Neighbours(
            np.empty(0, np.int64), np.empty((0, neighbours), np.int64), np.empty((0, neighbours), np.float32)
        )
    return RankCounts(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32), nb)


def rank_counts(
    emb: np.ndarray,
    queries: np.ndarray,
    positives: np.ndarray,
    background: np.ndarray,
    similarity: Similarity,
    *,
    filter_other_positives: bool = False,
    device: str | None = None,
    backend: Backend | None = None,
    block_rows: int | None = None,
    max_block_bytes: int | None = None,
    neighbours: int = 0,
    exclude: np.ndarray | None = None,
) -> RankCounts:
    """``above`` / ``tied`` counts and the positive's score for every directed pair (x = queries[i], y = positives[i]).

    ``emb``: (n_items, d) float32, already preprocessed (centred / normalised as the protocol asks); ``queries``,
    ``positives``, ``background``: item ids (rows of ``emb``; the background must not repeat an id). ``device``:
    see :func:`pick_device`; ``backend`` forces "numpy" (CPU only) or "torch". ``block_rows`` overrides the
    sweet-spot block size, ``max_block_bytes`` caps the score block (both for tests and benchmarks).
    ``neighbours=k`` also returns each unique query's top-k background items, selected from the same score
    blocks (policy: :mod:`evalfarm.scorers.neighbours`). ``exclude``: per pair, one more item id that never counts
    (-1: none).
    """
    if similarity not in SIMILARITIES:
        raise ValueError(f"unknown similarity {similarity!r} (choose from {SIMILARITIES})")
    queries = np.asarray(queries, dtype=np.int64)
    positives = np.asarray(positives, dtype=np.int64)
    background = np.asarray(background, dtype=np.int64)
    if queries.shape != positives.shape or queries.ndim != 1:
        raise ValueError(f"queries and positives must be 1-D and aligned, got {queries.shape} and {positives.shape}")
    if emb.ndim != 2:
        raise ValueError(f"emb must be (n_items, d), got shape {emb.shape}")
    dev, use = _device_and_backend(device, backend)
    if len(queries) == 0:
        return _no_counts(neighbours)
    emb = np.ascontiguousarray(emb, dtype=np.float32)  # no copy when it already is
    if exclude is not None:
        exclude = np.asarray(exclude, dtype=np.int64)
        if exclude.shape != queries.shape:
            raise ValueError(f"exclude must align with the pairs, got {exclude.shape} for {queries.shape}")
        if len(exclude) and exclude.max() >= emb.shape[0]:
            raise ValueError(f"exclude: item ids must lie in [0, {emb.shape[0]}) or be -1")
    plan = _plan(emb, queries, positives, background, filter_other_positives, exclude)
    top = None
    if neighbours:
        from evalfarm.scorers.neighbours import BlockTopK

        top = BlockTopK(plan, neighbours)
    if max_block_bytes is None:
        max_block_bytes = DEFAULT_MAX_BLOCK_BYTES if _is_cpu(dev) else DEFAULT_MAX_BLOCK_BYTES_GPU
    if use == "numpy":
        return _counts_one_blas_thread(
            plan, emb, similarity, _block_rows(block_rows, emb.shape[1], len(plan.cols), max_block_bytes), top
        )
    gpu_rows = block_rows if block_rows is not None or _is_cpu(dev) else max_block_bytes // max(1, 4 * len(plan.cols))
    rows = _block_rows(gpu_rows, emb.shape[1], len(plan.cols), max_block_bytes)
    return _counts_torch(plan, emb, similarity, dev, rows, top)


def rank_pairs(
    emb: np.ndarray,
    queries: np.ndarray,
    positives: np.ndarray,
    background: np.ndarray,
    similarity: Similarity,
    *,
    ties: Ties = PAPER_TIES,
    filter_other_positives: bool = False,
    device: str | None = None,
    backend: Backend | None = None,
    block_rows: int | None = None,
    max_block_bytes: int | None = None,
    tied_out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact ranks and positive scores for preprocessed embeddings: a thin view over :func:`rank_counts`.

    Returns ``(ranks, scores)``: float64 ranks under ``ties`` (whole numbers unless ``ties="realistic"``) and
    s(x, y) as float32. When ``tied_out`` (int64, one slot per pair) is given it receives the ``tied`` counts.
    """
    check_ties(ties)
    counts = rank_counts(
        emb,
        queries,
        positives,
        background,
        similarity,
        filter_other_positives=filter_other_positives,
        device=device,
        backend=backend,
        block_rows=block_rows,
        max_block_bytes=max_block_bytes,
    )
    if tied_out is not None:
        tied_out[:] = counts.tied
    return counts.ranks(ties), counts.score


def rank_pairs_loop(
    emb: np.ndarray,
    queries: np.ndarray,
    positives: np.ndarray,
    background: np.ndarray,
    similarity: Similarity,
    *,
    ties: Ties = PAPER_TIES,
    filter_other_positives: bool = False,
    tied_out: np.ndarray | None = None,
) -> np.ndarray:
    """Reference implementation in float64: one Python iteration per pair, straight from the definition.

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
        ranks[i] = tie_ranks(np.array([1 + above]), np.array([tied]), ties)[0]
        if tied_out is not None:
            tied_out[i] = tied
    return ranks
