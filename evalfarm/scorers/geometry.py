"""Embedding geometry and hubness: descriptive numbers of a model's space, over an EvalRank pool's items.

Task kind ``geometry`` (word or sentence level; ``files`` as the ``evalrank`` pool of that level). Computed on the
model's **raw** stored vectors (not EvalRank's centred ones, which remove anisotropy by construction), over the
items the model has a vector for (OOV items are left out; ``n_items`` counts the rest). With f(x) = x / ‖x‖:

- ``alignment`` (Wang & Isola 2020, α = 2): mean ‖f(x) − f(y)‖² over the pool's positive pairs;
- ``uniformity`` (Wang & Isola 2020, t = 2): log mean exp(−2 ‖f(x) − f(y)‖²) over ``background_pairs`` seeded
  random pairs of distinct items;
- ``anisotropy`` (Ethayarajh 2019): the mean cosine of the same random pairs;
- ``isotropy`` (Mu & Viswanath 2018, "All-but-the-Top", the partition-function ratio): with Z(c) = Σ_x exp(cᵀx)
  over the raw vectors and c over the eigenvectors u_i of XᵀX and their negatives (±u_i: an eigenvector's sign is
  arbitrary), min Z(c) / max Z(c) — 1 for an isotropic space, → 0 for a cone; computed in log space;
- ``effective_rank`` (Roy & Vetterli 2007): exp(H(p)), p_i = σ_i / Σσ_j the normalised singular values of the raw
  (uncentred) item matrix;
- ``hubness`` (Radovanović et al. 2010): the skewness (Fisher–Pearson, biased) of the k-occurrence distribution
  N_k(x) = how many items have x among their k nearest neighbours by cosine (the item itself excluded), k = 10,
  from a FAISS exact search (:func:`evalfarm.scorers.neighbours.top_neighbours`: the GPU index where faiss-gpu sees
  a GPU).

None of these has a direction (a more uniform space is not a better model): :data:`evalfarm.metrics.METRICS`
declares them so (no direction, correlated), so they are off every leaderboard, and ``evalfarm correlations
--diagnostics`` correlates them with the downstream tasks and with EvalRank as measured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from evalfarm.catalog.specs import TaskSpec
from evalfarm.scorers import register
from evalfarm.scorers.base import MetricRow, RunOptions, Scorer, ScoreResult, TextVectors

if TYPE_CHECKING:  # imported where a pool is loaded
    from evalfarm.taskdata.evalrank import RankPool

GEOMETRY_METRICS = ("alignment", "uniformity", "anisotropy", "isotropy", "effective_rank", "hubness")
COUNTS = ("n_items", "n_pairs", "n_background_pairs")


class GeometryTask(TaskSpec):
    """An EvalRank pool's files (``pairs`` and background roles), read for its items and positive pairs."""

    kind: Literal["geometry"] = "geometry"
    level: Literal["word", "sentence"]
    background_pairs: int = 100_000
    k: int = 10
    seed: int = 0


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to norm 1 in float64 (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def alignment(u: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Mean squared distance between the normalised rows ``u[a]`` and ``u[b]`` (NaN for no pairs)."""
    if len(a) == 0:
        return float("nan")
    d = u[a] - u[b]
    return float((d * d).sum(axis=1).mean())


def uniformity(u: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """log mean exp(−2 ‖u[a] − u[b]‖²) (NaN for no pairs), computed as a log-sum-exp."""
    if len(a) == 0:
        return float("nan")
    d = u[a] - u[b]
    z = -2.0 * (d * d).sum(axis=1)
    top = z.max()
    return float(top + np.log(np.exp(z - top).mean()))


def anisotropy(u: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Mean cosine of the row pairs of normalised ``u`` (NaN for no pairs)."""
    if len(a) == 0:
        return float("nan")
    return float((u[a] * u[b]).sum(axis=1).mean())


def isotropy(x: np.ndarray) -> float:
    """Mu & Viswanath's min_c Z(c) / max_c Z(c) over c = ±(eigenvectors of XᵀX), in log space (NaN when empty)."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape[0] == 0:
        return float("nan")
    _, vecs = np.linalg.eigh(x.T @ x)
    proj = x @ vecs  # items x directions
    logz = []
    for sign in (1.0, -1.0):
        p = sign * proj
        top = p.max(axis=0)
        logz.append(top + np.log(np.exp(p - top).sum(axis=0)))
    allz = np.concatenate(logz)
    return float(np.exp(allz.min() - allz.max()))


def effective_rank(x: np.ndarray) -> float:
    """exp of the entropy of the normalised singular values (Roy & Vetterli 2007); 0 for an empty or zero matrix."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return 0.0
    # the singular values as the square roots of XᵀX's eigenvalues: a d x d problem, not an SVD of n x d
    s = np.sqrt(np.clip(np.linalg.eigvalsh(x.T @ x), 0.0, None))
    total = s.sum()
    if total <= 0:
        return 0.0
    p = s[s > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


def k_occurrence(neighbour_ids: np.ndarray, n_items: int) -> np.ndarray:
    """N_k per item: how often each item id (0..n_items-1) appears in the neighbour lists (-1 padding ignored)."""
    ids = neighbour_ids.reshape(-1)
    return np.bincount(ids[ids >= 0], minlength=n_items).astype(np.float64)


def skewness(v: np.ndarray) -> float:
    """Fisher–Pearson skewness m3 / m2^1.5 (biased); NaN under 3 values or a constant vector."""
    v = np.asarray(v, dtype=np.float64)
    if len(v) < 3:
        return float("nan")
    d = v - v.mean()
    m2 = (d * d).mean()
    if m2 <= 0:
        return float("nan")
    return float((d**3).mean() / m2**1.5)


def hubness(u: np.ndarray, k: int, *, device: str | None = None) -> float:
    """Skewness of the k-occurrence over the rows of normalised ``u`` (cosine, self excluded), by FAISS exact k-NN."""
    from evalfarm.scorers.neighbours import top_neighbours

    n = u.shape[0]
    if n <= k:
        return float("nan")
    ids = np.arange(n, dtype=np.int64)
    nb, _ = top_neighbours(u.astype(np.float32), ids, ids, k=k, similarity="cos", device=_faiss_device(device))
    return skewness(k_occurrence(nb, n))


def _faiss_device(device: str | None) -> str | None:
    """The run's scoring device as FAISS can honour it: a CUDA device only where the installed FAISS has GPU support
    and sees a GPU (a GPU worker with faiss-cpu searches on its CPU, the same exact result); None lets
    :func:`~evalfarm.scorers.neighbours.top_neighbours` pick (the GPU index where there is one)."""
    if device is None or device.startswith("cpu"):
        return device
    from evalfarm.scorers.neighbours import _import_faiss, faiss_has_gpu

    return device if faiss_has_gpu(_import_faiss()) else "cpu"


def random_pairs(n: int, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` seeded pairs (i, j) of distinct indices below ``n`` (drawn with replacement across pairs)."""
    if n < 2 or count <= 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n, size=count)
    b = (a + rng.integers(1, n, size=count)) % n  # never a itself, uniform over the others
    return a.astype(np.int64), b.astype(np.int64)


@register
class GeometryScorer(Scorer[GeometryTask, "RankPool"]):
    name = "geometry"
    version = "1"
    task_spec = GeometryTask
    primary_metric = "uniformity"
    role = "diagnostic"
    prompt_type = "clustering"  # the shape of the space: an instruction model's clustering prompt
    description = (
        "raw-vector geometry over an EvalRank pool: alignment, uniformity, anisotropy, isotropy, effective rank, "
        "hubness (k-occurrence skewness, FAISS k-NN); descriptive, off the leaderboard"
    )

    def params(self, task: GeometryTask, options: RunOptions) -> dict[str, Any]:
        return {"vectors": "raw", "oov": "items left out", "similarity": "cos"}

    def load(self, task: GeometryTask) -> Any:
        from evalfarm.taskdata.evalrank import load_evalrank_pool

        return load_evalrank_pool(task)

    def score(
        self,
        task: GeometryTask,
        data: RankPool,
        vectors: TextVectors,
        params: dict[str, Any],
        *,
        device: str | None = None,
    ) -> ScoreResult:
        spec = task
        keep = np.flatnonzero(~np.asarray(vectors.oov, dtype=bool))
        x = np.asarray(vectors.emb, dtype=np.float64)[keep]
        u = unit_rows(x)
        position = np.full(len(vectors.oov), -1, dtype=np.int64)
        position[keep] = np.arange(len(keep))
        qa, pb = position[data.queries], position[data.positives]
        both = (qa >= 0) & (pb >= 0) & (data.queries != data.positives)
        a, b = random_pairs(len(keep), spec.background_pairs, spec.seed)
        values = {
            "alignment": alignment(u, qa[both], pb[both]),
            "uniformity": uniformity(u, a, b),
            "anisotropy": anisotropy(u, a, b),
            "isotropy": isotropy(x),
            "effective_rank": effective_rank(x),
            "hubness": hubness(u, spec.k, device=device),
            "n_items": float(len(keep)),
            "n_pairs": float(both.sum()),
            "n_background_pairs": float(len(a)),
        }
        return ScoreResult(rows=[MetricRow(m, v, variant="raw") for m, v in values.items()])
