"""SentEval-style logistic regression on frozen embeddings: numpy float32 matrices in, accuracies out.

Protocols (chosen by the parts given to :func:`evaluate`, as SentEval's three classifiers):

- ``train_dev_test`` (SST2, SST5, SICK-E, SciCite): one model per C of the grid on ``train``; the C with the
  best ``dev`` accuracy is kept (the first one on ties, i.e. the strongest penalty) and its ``test`` accuracy
  is reported. SentEval refits the same model on the same rows; the fit is deterministic, so it is reused.
- ``train_test`` (TREC, MRPC): C is chosen by the mean accuracy over an inner stratified ``inner_k``-fold split
  of ``train``; the model refit on all of ``train`` with that C gives the ``test`` accuracy (and F1 of the
  positive class when ``f1_label`` is set: MRPC).
- ``cv`` (MR, CR, SUBJ, MPQA): stratified ``k``-fold cross-validation (k = 10); inside each training fold C is
  chosen by an inner stratified ``inner_k``-fold split, then refit on the training fold and scored on the held
  out fold. ``accuracy`` is the mean over the k folds, ``accuracy_std`` their standard deviation (ddof = 0).

Every model standardises its features with the mean and standard deviation (ddof 0) of its own training rows
only (:func:`standardisation`, one definition for both backends, computed once per training set and shared by
all its C values); a column whose deviation is at most ``CONSTANT_REL`` (1e-6) of the largest column's is constant
for that model and dropped (weight 0) — all-MiniLM-L6-v2 has dimensions of magnitude ~1e-32 that
``StandardScaler`` would blow up to unit variance. Folds come from scikit-learn's
``StratifiedKFold(shuffle=True, random_state=seed)``; nothing else is random, so the same inputs give the same
numbers. ``inner_k`` defaults to 5 (SentEval uses 10 there; 5 halves the cost of choosing C).

Two stages, as SentEval's protocol needs: every selection model (per C and inner fold, or per C on a dev split)
in one solve; then one refit per outer fold, at its chosen C only (MR: 10 × (5 × 6 + 1) = 310 models).

The model and its penalty, identical in both backends: multinomial logistic regression (binary logistic with
one weight vector for two classes, as scikit-learn) with an unpenalised intercept, minimising
``mean_i CE_i + (lam / 2) * ||W||^2`` over the n training rows, where ``lam = 1 / (C * n)``: exactly
scikit-learn's ``C * sum_i CE_i + ||W||^2 / 2`` divided by ``C * n``, so one C means the same model in both.
``C_GRID`` spans 1e-4 … 10 on standardised features (SentEval's 2^-2 … 2^3 was meant for raw features).

Backends, behind the one function:

- ``torch`` (the engine; ``auto``): every model of a stage stacked in a batch dimension and solved by a batched,
  preconditioned L-BFGS (own history and Armijo step per model), on CPU as on CUDA. The training folds are row
  masks over one shared feature matrix and each model's standardisation is folded into its weights, so an
  iteration is one ``[X, 1] @ W`` and one ``[X, 1].T @ R`` product over all models (gradients by hand, no
  autograd; a binary model's rows carry the sign of their label, so its logits are the loss's margins). The
  L-BFGS initial inverse Hessian is each model's Hessian at ``W = 0`` with intercepts at the class priors
  (``A ⊗ Σ + lam I``: ``Σ`` the covariance of the model's standardised training rows, ``A`` the priors' softmax
  curvature), applied through ``Σ``'s and ``A``'s eigenvectors: the features' correlations and the penalty no
  longer set the iteration count, and an iteration costs the same two products plus two ``d × d`` ones. A solve
  with few training sets gives each set its own ``Σ``; one with many (``SHARED_BASIS_MIN_SETS``: the CV tasks' 50
  inner folds) takes every set's ``Σ`` as the union's, one eigendecomposition per task and one product for all
  models (version 4's per-model factors cost 3× the CPU time on all-MiniLM-L6-v2's CR). Wide features (``d >=
  LOWRANK_MIN_DIM``: the 1,536-d pair features of a 384-d encoder) replace ``Σ`` by its top ``LOWRANK_RANK``
  eigenpairs plus one value for the rest (a seeded randomised Nyström sketch): forming and factoring the ``d × d``
  Grams cost more there than the whole solve. Where the training sets have few rows per dimension
  (``DENSE_MIN_ROWS_PER_DIM``, ``LOWRANK_MIN_ROWS_PER_DIM``: a 384-d encoder's 1,000-row quick-profile samples) the
  set-up costs more than it saves and the solve runs unpreconditioned. Models that share a training set are solved
  along the C path (strongest penalty first, each warm-started from the previous C's solution) where a round still
  batches many models (``PATH_MIN_SETS``), a refit from the mean of its C's inner-fold solutions. C is chosen on
  accuracies that differ by a few predictions, so the engine must reach scikit-learn's optimum (``tol=1e-6``).
  ``dtype="mixed"`` (the default since downstream scorer version 6): the two products over the rows (and the
  preconditioner's basis products) run in float32, on ``[X, 1]`` stored in float32, while the weights, the loss, the
  gradient's assembly and the L-BFGS state stay in float64. The products read the matrix at half the bytes (measured
  on one thread: 1.5–1.8× less CPU time on TREC, MRPC and SICK-E, ``benchmarks/results/HISTORY.md``, wave 11); their
  rounding leaves the gradient within ~5e-9 of float64's, 200 times below ``tol``, but the objective's value only
  within ~1e-9, so near the optimum the line search also accepts a step by Hager & Zhang's approximate Wolfe
  condition (:func:`batched_lbfgs`), and every model is then checked (and if need be finished) in float64 with the
  float64 stopping rules: each model meets float64's rule, as a float64 solve's would. ``dtype="float64"``: every
  product in float64 (versions 2–5). ``dtype="float32"`` runs everything in float32, the optimiser's state included;
  measured against float64 it stalls at gradients ~1e-5 (a float32 weight cannot take the last steps) and moved MR's
  accuracy by 0.1 point (``benchmarks/results/HISTORY.md``, wave 7), so it is an option for GPUs without fast
  float64, not the default. The device is ``device`` (CUDA when available).
- ``sklearn``: the reference, ``LogisticRegression(solver="lbfgs")`` per fit, float64, on the same standardised
  features.

Both backends stop a model when the largest gradient entry of the (mean-scaled) objective is at most ``tol``
or an iteration no longer decreases it relatively by more than 64 float64 machine epsilons (scipy's L-BFGS-B
rules, which scikit-learn uses). The two agree within 0.1 accuracy point on every one of the ten tasks
(``tests/test_classify.py``, ``benchmarks/bench_classify.py``).

``max_train`` cuts the training part (``train``, or the whole set for CV) to a seeded, stratified sample
(:func:`evalfarm.taskdata.downstream.stratified_subsample`); ``None`` (the default) uses every row.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

from evalfarm.taskdata.downstream import DEFAULT_SUBSAMPLE_SEED, stratified_subsample

if TYPE_CHECKING:
    import torch

    from evalfarm.taskdata.downstream import DownstreamTask

Backend = Literal["sklearn", "torch", "auto"]
C_GRID: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
DEFAULT_DTYPE = "mixed"  # the engine's arithmetic (DTYPES)
DEFAULT_SEED = DEFAULT_SUBSAMPLE_SEED  # 1111, SentEval's


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``[u, v, |u - v|, u * v]`` per row, for MRPC and SICK-E (InferSent's pair features, as issue #10 asks;
    SentEval and the EvalRank toolkit's copy of it use ``[|u - v|, u * v]`` only: ``mrpc.py``, ``sick.py``)."""
    u = np.asarray(u, dtype=np.float32)
    v = np.asarray(v, dtype=np.float32)
    if u.shape != v.shape or u.ndim != 2:
        raise ValueError(f"pair features need two (n, d) matrices of one shape, got {u.shape} and {v.shape}")
    return np.hstack([u, v, np.abs(u - v), u * v])


def cv_folds(labels: np.ndarray, k: int, seed: int = DEFAULT_SEED) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified, shuffled k-fold split (scikit-learn's, seeded): ``[(train_rows, test_rows), …]``."""
    labels = np.asarray(labels)
    from sklearn.model_selection import StratifiedKFold  # here: importing the scorers never loads sklearn

    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return [(tr.astype(np.int64), te.astype(np.int64)) for tr, te in skf.split(np.zeros(len(labels)), labels)]


@dataclass(frozen=True, eq=False)
class Fit:
    """One model to train: its training rows, its C, and the rows whose labels it must predict."""

    train: np.ndarray
    c: float
    evaluate: np.ndarray


@dataclass(frozen=True)
class ClassifyResult:
    """Test accuracy (fractions in [0, 1]), the fold spread for CV, F1 where asked, and how C was chosen."""

    protocol: str
    backend: str
    accuracy: float
    accuracy_std: float  # over the outer folds (cv); NaN for a single test split
    dev_accuracy: float  # the selection score at the chosen C (mean over folds for cv)
    chosen_c: tuple[float, ...]  # one per outer fold (cv), else one value
    fold_accuracies: tuple[float, ...]
    n_train: int
    n_test: int
    n_models: int
    f1: float | None = None
    c_grid: tuple[float, ...] = field(default=C_GRID)
    n_unconverged: int = 0  # fits (selection and refits) stopped before their stopping rule held: used as they were

    def metrics(self) -> dict[str, float]:
        """``accuracy``, ``accuracy_std`` (CV only) and ``f1`` (where asked), for the metrics table."""
        out = {"accuracy": self.accuracy}
        if not math.isnan(self.accuracy_std):
            out["accuracy_std"] = self.accuracy_std
        if self.f1 is not None:
            out["f1"] = self.f1
        return out


# --- protocols -------------------------------------------------------------------------------------------


def _check_part(role: str, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X)
    y = np.asarray(y)
    if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0]:
        raise ValueError(f"{role}: features must be (n, d) and labels (n,), got {X.shape} and {y.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{role}: no rows")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise ValueError(f"{role}: labels must be integers 0..K-1 (got dtype {y.dtype}, min {y.min()})")
    X = X.astype(np.float32, copy=False)
    if not np.isfinite(X).all():
        bad = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
        raise ValueError(f"{role}: row {bad} has a NaN or infinite feature; fix the embeddings first")
    return X, y.astype(np.int64, copy=False)


def _accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    return float(np.mean(pred == gold))


def _f1(pred: np.ndarray, gold: np.ndarray, positive: int) -> float:
    tp = int(np.sum((pred == positive) & (gold == positive)))
    fp = int(np.sum((pred == positive) & (gold != positive)))
    fn = int(np.sum((pred != positive) & (gold == positive)))
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def _best(scores: list[float]) -> int:
    """Index of the best selection score; the first on ties (the strongest penalty in an ascending grid)."""
    return int(np.argmax(np.asarray(scores)))


def evaluate(
    data: Mapping[str, tuple[np.ndarray, np.ndarray]],
    *,
    backend: Backend = "auto",
    c_grid: Sequence[float] = C_GRID,
    k: int = 10,
    inner_k: int = 5,
    seed: int = DEFAULT_SEED,
    max_train: int | None = None,
    f1_label: int | None = None,
    n_classes: int | None = None,
    tol: float = 1e-6,
    max_iter: int = 2000,
    device: str | None = None,
    dtype: str = DEFAULT_DTYPE,
    threads: int | None = None,
) -> ClassifyResult:
    """Evaluate frozen features on one task: ``data`` is ``{"cv": (X, y)}`` or ``{"train", "dev"?, "test"}``.

    ``X`` are float32 features (rows = samples), ``y`` integer labels 0..K-1. ``backend``: ``torch`` is the
    batched engine (on ``device``: CUDA when available, else the CPU), ``sklearn`` the per-fit scikit-learn
    reference, ``auto`` the engine. ``dtype`` only concerns torch. ``threads`` caps the BLAS / OpenMP / torch
    threads during the call (None: unchanged): the per-fold problems are small, and on a loaded machine spinning
    thread pools can cost far more than they bring.

    Two stages: every selection model (per C and inner fold, or per C with a dev split) in one solve; then,
    where C was chosen on inner folds, one refit per outer fold at its chosen C (warm-started from the mean of
    that C's inner-fold solutions) — SentEval's protocol, with no model trained that it does not need.
    """
    protocol = _protocol(set(data))
    c_grid = tuple(float(c) for c in c_grid)
    if not c_grid or any(c <= 0 for c in c_grid):
        raise ValueError(f"c_grid must hold positive values, got {c_grid}")
    parts = _checked_parts(data, "cv" if protocol == "cv" else "train", max_train, seed)
    top = max(int(y.max()) for _, y in parts.values())
    K = n_classes or top + 1
    if K < 2 or top >= K:
        raise ValueError(f"labels run up to {top}: need 2 <= n_classes (got {K}) and every label < n_classes")
    if backend == "auto":
        backend = "torch"
    if backend not in ("sklearn", "torch"):
        raise ValueError(f"unknown backend {backend!r}: use 'sklearn', 'torch' or 'auto'")
    X, y, blocks, n_train, n_test = _layout(protocol, parts, c_grid, k, inner_k, seed)
    solve = _Solver(X, y, K, backend, tol=tol, max_iter=max_iter, device=device, dtype=dtype, threads=threads)
    selection = [f for block in blocks for f in block.fits]
    scores, thetas = solve(selection, None)
    start = 0
    for block in blocks:  # each block reads its own slice of the one batched solve
        block.offset, start = start, start + len(block.fits)
        block.select([predict_from_scores(z) for z in scores[block.offset : start]], y)
    refits = [b for b in blocks if b.inner is not None]
    if refits:
        fits = [b.refit() for b in refits]
        init = None if thetas is None else np.stack([b.warm_start(thetas) for b in refits])
        for block, z in zip(refits, solve(fits, init)[0], strict=True):
            block.test_pred = predict_from_scores(z)
    result = _result(protocol, backend, c_grid, blocks, y, f1_label, n_train, n_test)
    return replace(result, n_unconverged=solve.unconverged)


def _result(
    protocol: str,
    backend: str,
    c_grid: tuple[float, ...],
    blocks: list[_Block],
    y: np.ndarray,
    f1_label: int | None,
    n_train: int,
    n_test: int,
) -> ClassifyResult:
    """Each block's chosen C and test score, averaged over the blocks (the outer folds of ``cv``)."""
    accs, f1s = [], []
    for block in blocks:
        gold = y[block.test_rows]
        accs.append(_accuracy(block.test_pred, gold))
        if f1_label is not None:
            f1s.append(_f1(block.test_pred, gold, f1_label))
    return ClassifyResult(
        protocol=protocol,
        backend=backend,
        accuracy=float(np.mean(accs)),
        accuracy_std=float(np.std(accs)) if protocol == "cv" else math.nan,
        dev_accuracy=float(np.mean([b.score for b in blocks])),
        chosen_c=tuple(c_grid[b.best] for b in blocks),
        fold_accuracies=tuple(accs),
        n_train=n_train,
        n_test=n_test,
        n_models=sum(len(b.fits) + (b.inner is not None) for b in blocks),
        f1=float(np.mean(f1s)) if f1s else None,
        c_grid=c_grid,
    )


def _protocol(roles: set[str]) -> str:
    """The protocol the parts given name (see the module's docstring)."""
    if roles == {"cv"}:
        return "cv"
    if roles == {"train", "test"}:
        return "train_test"
    if roles == {"train", "dev", "test"}:
        return "train_dev_test"
    raise ValueError(f"data must hold 'cv', or 'train' + 'test' (+ 'dev'); got {sorted(roles)}")


def _checked_parts(
    data: Mapping[str, tuple[np.ndarray, np.ndarray]], train_role: str, max_train: int | None, seed: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every part checked (:func:`_check_part`), of one feature dimension, the training part cut to ``max_train``."""
    parts = {role: _check_part(role, *xy) for role, xy in data.items()}
    dims = {X.shape[1] for X, _ in parts.values()}
    if len(dims) != 1:
        raise ValueError(f"all parts must have the same feature dimension, got {dims}")
    if max_train is not None and max_train < len(parts[train_role][1]):
        Xt, yt = parts[train_role]
        idx = stratified_subsample(yt, max_train, seed)
        parts[train_role] = (Xt[idx], yt[idx])
    return parts


def _layout(
    protocol: str,
    parts: dict[str, tuple[np.ndarray, np.ndarray]],
    c_grid: tuple[float, ...],
    k: int,
    inner_k: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, list[_Block], int, int]:
    """One feature matrix and label vector for the whole protocol (train, dev, test stacked in that order), its
    blocks of models, and the numbers of training and test rows."""
    if protocol == "cv":
        X, y = parts["cv"]
        blocks = [_Block.inner_cv(y, otr, ote, c_grid, inner_k, seed) for otr, ote in cv_folds(y, k, seed)]
        return X, y, blocks, len(y), len(y)
    (Xtr, ytr), (Xte, yte) = parts["train"], parts["test"]
    Xdv, ydv = parts.get("dev", (Xtr[:0], ytr[:0]))
    X = np.vstack([Xtr, Xdv, Xte])
    y = np.concatenate([ytr, ydv, yte])
    ntr, ndv = len(ytr), len(ydv)
    rows_tr, rows_dv, rows_te = np.arange(ntr), np.arange(ntr, ntr + ndv), np.arange(ntr + ndv, len(y))
    if protocol == "train_dev_test":
        blocks = [_Block.dev_split(rows_tr, rows_dv, rows_te, c_grid)]
    else:
        blocks = [_Block.inner_cv(y, rows_tr, rows_te, c_grid, inner_k, seed)]
    return X, y, blocks, ntr, len(yte)


@dataclass
class _Block:
    """The models behind one test score: C chosen on ``dev`` rows or by inner folds, then scored on test.

    ``fits`` holds the selection models, in order: one per (C, inner fold), or one per C with a dev split (that
    model also predicts the test rows: SentEval refits the chosen C on the same rows, the same model). With inner
    folds, :meth:`refit` is the one model on all the training rows at the chosen C."""

    fits: list[Fit]
    test_rows: np.ndarray
    n_c: int
    inner: list[tuple[np.ndarray, np.ndarray]] | None  # None: dev split
    train_rows: np.ndarray
    c_grid: tuple[float, ...]
    dev_rows: np.ndarray | None = None
    offset: int = 0
    best: int = 0  # the chosen C's index in the grid
    score: float = math.nan  # its selection accuracy
    test_pred: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    @classmethod
    def dev_split(cls, train: np.ndarray, dev: np.ndarray, test: np.ndarray, c_grid: tuple[float, ...]) -> _Block:
        evaluate_rows = np.concatenate([dev, test])
        return cls([Fit(train, c, evaluate_rows) for c in c_grid], test, len(c_grid), None, train, c_grid, dev)

    @classmethod
    def inner_cv(
        cls, y: np.ndarray, train: np.ndarray, test: np.ndarray, c_grid: tuple[float, ...], inner_k: int, seed: int
    ) -> _Block:
        inner = [(train[a], train[b]) for a, b in cv_folds(y[train], inner_k, seed)]
        fits = [Fit(a, c, b) for c in c_grid for a, b in inner]
        return cls(fits, test, len(c_grid), inner, train, c_grid)

    def select(self, preds: list[np.ndarray], y: np.ndarray) -> None:
        """Choose C from the selection models' predictions (the first best: the strongest penalty on ties)."""
        if self.inner is None:
            assert self.dev_rows is not None  # a dev split (dev_split) holds its dev rows
            n_dev = len(self.dev_rows)
            scores = [_accuracy(p[:n_dev], y[self.dev_rows]) for p in preds]
            self.best = _best(scores)
            self.score, self.test_pred = scores[self.best], preds[self.best][n_dev:]
            return
        k = len(self.inner)
        scores = [
            float(np.mean([_accuracy(preds[ci * k + j], y[held]) for j, (_, held) in enumerate(self.inner)]))
            for ci in range(self.n_c)
        ]
        self.best = _best(scores)
        self.score = scores[self.best]

    def refit(self) -> Fit:
        return Fit(self.train_rows, self.c_grid[self.best], self.test_rows)

    def warm_start(self, thetas: np.ndarray) -> np.ndarray:
        """The mean of the chosen C's inner-fold solutions: a start close to the refit's optimum."""
        k = len(self.inner or ())
        first = self.offset + self.best * k
        return thetas[first : first + k].mean(axis=0)


def task_features(
    task: DownstreamTask, embed: Callable[[list[str]], np.ndarray]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-part ``(features, labels)`` of a task: each distinct text embedded once by ``embed(texts)``;
    pair tasks (MRPC, SICK-E) get :func:`pair_features`."""
    texts = task.texts()
    E = np.asarray(embed(texts), dtype=np.float32)
    if E.ndim != 2 or E.shape[0] != len(texts):
        raise ValueError(f"task {task.name!r}: embed returned shape {E.shape} for {len(texts)} texts")
    index = {t: i for i, t in enumerate(texts)}
    out = {}
    for role, part in task.parts().items():
        u = E[[index[t] for t in part.text1]]
        X = u if part.text2 is None else pair_features(u, E[[index[t] for t in part.text2]])
        out[role] = (X, part.labels)
    return out


def classify_task(
    task: DownstreamTask,
    embed: Callable[[list[str]], np.ndarray],
    *,
    max_train: int | None = None,
    seed: int = DEFAULT_SEED,
    **options,
) -> ClassifyResult:
    """Embed a task's texts and evaluate it. ``max_train`` samples the training part *before* embedding, so
    the skipped sentences are never encoded; the rows are those ``evaluate(..., max_train=)`` would draw."""
    task = task.subsample_train(max_train, seed)
    return evaluate(task_features(task, embed), seed=seed, f1_label=task.f1_label, n_classes=task.n_classes, **options)


@contextmanager
def _limit_threads(threads: int | None, *, torch_too: bool) -> Iterator[None]:
    if threads is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    if not torch_too:
        with threadpool_limits(limits=threads):
            yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            yield
    finally:
        torch.set_num_threads(before)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return torch.cuda.is_available()


def predict_from_scores(z: np.ndarray) -> np.ndarray:
    """Labels from decision values: ``z > 0`` for a binary model's one column, else the arg-max class."""
    return (z > 0).astype(np.int64) if z.ndim == 1 else z.argmax(axis=1).astype(np.int64)


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


# --- backends --------------------------------------------------------------------------------------------


class _Solver:
    """Fits lists of models on one task's features with one backend: ``solver(fits, init) -> (decision values
    per fit, solutions (B, P) or None)``; the torch engine keeps the features on its device between calls."""

    def __init__(
        self,
        X: np.ndarray,
        y: np.ndarray,
        n_classes: int,
        backend: str,
        *,
        tol: float,
        max_iter: int,
        device: str | None,
        dtype: str,
        threads: int | None,
    ) -> None:
        self.X, self.y, self.n_classes, self.backend = X, y, n_classes, backend
        self.tol, self.max_iter, self.device, self.dtype, self.threads = tol, max_iter, device, dtype, threads
        self.unconverged = 0  # fits of every call so far that stopped unconverged (max_iter, or no decreasing step)

    def __call__(self, fits: list[Fit], init: np.ndarray | None) -> tuple[list[np.ndarray], np.ndarray | None]:
        with _limit_threads(self.threads, torch_too=self.backend == "torch"):
            if self.backend == "sklearn":
                scores, stopped = _solve_sklearn(
                    self.X, self.y, self.n_classes, fits, tol=self.tol, max_iter=self.max_iter
                )
                self.unconverged += stopped
                return scores, None
            if self.backend == "torch":
                scores, theta, stopped = _solve_torch(
                    self.X, self.y, self.n_classes, fits, tol=self.tol, max_iter=self.max_iter,
                    device=self.device, dtype=self.dtype, init=init,
                )  # fmt: skip
                self.unconverged += stopped
                return scores, theta
        raise ValueError(f"unknown backend {self.backend!r}: use 'sklearn' or 'torch'")


def decision_values(
    X: np.ndarray,
    y: np.ndarray,
    fits: Sequence[Fit],
    *,
    n_classes: int,
    backend: Literal["sklearn", "torch"] = "sklearn",
    tol: float = 1e-6,
    max_iter: int = 2000,
    device: str | None = None,
    dtype: str = DEFAULT_DTYPE,
    threads: int | None = None,
) -> list[np.ndarray]:
    """Train every fit (standardised on its own training rows: :func:`standardisation`) and return its decision
    values on its ``evaluate`` rows: ``(m,)`` logits of class 1 for two classes, ``(m, K)`` class logits otherwise.

    The building block of :func:`evaluate`; the torch backend solves all fits in one batched solve (fits that share
    a training-row array are solved along their C path where that batches enough models: ``PATH_MIN_SETS``).
    """
    solve = _Solver(X, y, n_classes, backend, tol=tol, max_iter=max_iter, device=device, dtype=dtype, threads=threads)
    return solve(list(fits), None)[0]


def _solve_sklearn(
    X: np.ndarray, y: np.ndarray, n_classes: int, fits: list[Fit], *, tol: float, max_iter: int
) -> tuple[list[np.ndarray], int]:
    """One scikit-learn ``LogisticRegression(lbfgs)`` per fit, in float64, on features standardised by
    :func:`standardisation` (the reference). Returns each fit's decision values on its ``evaluate`` rows, and how
    many fits stopped unconverged (scikit-learn's ``ConvergenceWarning``: ``max_iter``, or a failed line search)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    X64 = X.astype(np.float64)
    sets, of = _train_sets(fits)
    mean, inv = standardisation(X, sets)
    out: list[np.ndarray] = []
    stopped = 0
    for i, f in enumerate(fits):
        s = of[i]
        clf = LogisticRegression(C=f.c, tol=tol, max_iter=max_iter)
        with warnings.catch_warnings(record=True) as caught:  # counted instead, and warned once per call below
            warnings.simplefilter("always", ConvergenceWarning)
            clf.fit((X64[f.train] - mean[s]) * inv[s], y[f.train])
        stopped += any(issubclass(w.category, ConvergenceWarning) for w in caught)
        Xe = (X64[f.evaluate] - mean[s]) * inv[s]
        if len(clf.classes_) == n_classes:
            out.append(clf.decision_function(Xe))
        else:  # a class absent from this training set can never be predicted
            z = np.full((len(Xe), n_classes), -np.inf)
            z[:, clf.classes_] = clf.predict_log_proba(Xe)
            out.append(z)
    if stopped:
        warnings.warn(
            f"scikit-learn logistic regression: {stopped} of {len(fits)} models stopped before converging "
            f"(max_iter={max_iter}, tol={tol})", stacklevel=4,
        )  # fmt: skip
    return out, stopped


# The logits of one batch (rows x models x classes) stay under this many elements; larger rounds are solved in
# several batches of models (same results: the models are independent).
TORCH_BATCH_ELEMENTS = 1 << 24


# long: the batched solver's one pass (conditioning, C-path rounds), kept whole; bit-identical
def _solve_torch(
    X: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    fits: list[Fit],
    *,
    tol: float,
    max_iter: int,
    device: str | None,
    dtype: str,
    init: np.ndarray | None = None,
) -> tuple[list[np.ndarray], np.ndarray, int]:
    """The batched engine: decision values of every fit, the solutions (B, P) in float64 (each model's weights on
    its standardised features, then its intercepts), for warm starts, and how many stopped unconverged."""
    import torch

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    tdtype = torch.float32 if dtype == "float32" else torch.float64
    # Models are fitted on the rows that train some model only, and predict the rows some model evaluates:
    # held-out test rows never enter the training products. Conditioning only: the shared matrix is centred and
    # scaled by those rows (each model's own standardisation is folded into its weights on top of that).
    rows = np.unique(np.concatenate([f.train for f in fits]))
    eval_rows = np.unique(np.concatenate([f.evaluate for f in fits]))
    sets, of = _train_sets(fits)
    moments = _moments(X, sets)
    mean, inv = moments[0][:-1], _inverse_scales(moments[1][:-1])  # standardisation(X, sets)
    m, s = moments[0][-1], moments[1][-1].copy()  # the union's: the shared matrix's conditioning
    s[s == 0] = 1.0

    mt, st = torch.from_numpy(m).to(dev, tdtype), torch.from_numpy(s).to(dev, tdtype)

    def to_device(idx: np.ndarray) -> torch.Tensor:  # one converted copy, centred and scaled in place
        return torch.from_numpy(X[idx]).to(dev, tdtype).sub_(mt).div_(st)

    local = np.full(len(y), -1, dtype=np.int64)
    local[rows] = np.arange(len(rows))
    eval_local = np.full(len(y), -1, dtype=np.int64)
    eval_local[eval_rows] = np.arange(len(eval_rows))
    problem = _Problem(
        X=to_device(rows),
        y=torch.from_numpy(y[rows]).to(dev),
        K=1 if n_classes == 2 else n_classes,
        mean=torch.from_numpy((mean - m) / s).to(dev, tdtype),  # the sets' statistics in conditioned units
        inv=torch.from_numpy(inv * s).to(dev, tdtype),
        masks=[local[t] for t in sets],
        fast=torch.float32 if dtype == "mixed" else None,
    )
    P = X.shape[1] * problem.K + problem.K
    theta = np.zeros((len(fits), P)) if init is None else np.asarray(init, dtype=np.float64).copy()
    per_batch = max(1, TORCH_BATCH_ELEMENTS // (len(rows) * problem.K))
    unconverged = 0
    for batch, start in _c_path_rounds(fits, of):
        for lo in range(0, len(batch), per_batch):
            part = batch[lo : lo + per_batch]
            t0 = theta[[i if (j := start[i]) is None else j for i in part]]
            theta[part], stopped = problem.solve(of[part], [fits[i].c for i in part], t0, tol=tol, max_iter=max_iter)
            unconverged += stopped
    X_eval = to_device(eval_rows)
    scores = problem.decision_values(X_eval, theta, of)
    return [scores[eval_local[f.evaluate], i] for i, f in enumerate(fits)], theta, unconverged


DTYPES = ("float64", "mixed", "float32")
"""The engine's arithmetic: ``float64`` everywhere; ``mixed`` (the default): the products over the rows in float32,
everything else in float64, each model checked and finished in float64 (the module's docstring); ``float32``:
everything in float32 (the objective still accumulates in float64), for GPUs without fast float64."""

MIXED_NOISE = 1e-6
"""The ``mixed`` phase's allowance for the objective's rounding, relative (Hager & Zhang's ``epsilon``): float32
products round the logits, so ``f`` is off by ~1e-9 (measured: all-MiniLM-L6-v2's SICK-E at the float64 optimum,
1e-10 to 1e-8 per model) while the gradient is off by ~5e-9, 200 times below ``tol``."""
APPROX_WOLFE_DELTA = 0.1

LOWRANK_MIN_DIM = 1024
"""From this feature dimension on (the 1,536-d pair features of a 384-d encoder), the preconditioner approximates
the covariance by its top ``LOWRANK_RANK`` eigenpairs (:meth:`_Problem.basis`, one sketch shared by every set)
instead of forming and factoring the ``d × d`` Gram: measured on all-MiniLM-L6-v2's MRPC and SICK-E, the Grams and
factorisations cost more than every iteration of the solve (``benchmarks/README.md``)."""
LOWRANK_RANK = 128

DENSE_MIN_ROWS_PER_DIM = 3
LOWRANK_MIN_ROWS_PER_DIM = 2
"""Precondition only where it pays: the smallest training set of a solve must have at least this many rows per
feature dimension (dense path, ``d < LOWRANK_MIN_DIM``; low-rank path), else the solve runs plain L-BFGS (the
version-2 engine). The preconditioner's set-up (a ``d × d`` Gram per training set and a factorisation per model,
or the sketch) is paid once, an unpreconditioned iteration costs ``n × d`` per model: with few rows per dimension
the penalty already conditions the problem and the set-up dominates. Measured on one thread (2-core machine,
quiet, ``benchmarks/README.md``): with the 1,000-row quick-profile samples all-MiniLM-L6-v2 (384-d, ~2 rows per
dimension) ran MR in 1.4 s plain against 10.8 s preconditioned, TREC 1.0 s against 3.3 s, MRPC and SICK-E pair
features (1,536-d, low-rank path) 0.85 s and 1.5 s against 2.2 s and 3.2 s; on full data (20 rows per dimension)
preconditioning wins (MR 6.5 s against 16.4 s, TREC 11.1 s against 15.3 s), as does the low-rank path on full
MRPC (~2.1 rows per dimension, 1.5× fewer CPU seconds than plain); GloVe samples run faster preconditioned:
50-d (18 rows per dimension) 3–10×, its 200-d MRPC pair features (~3.6 rows per dimension) 0.11 s against 0.51 s."""

ROW_BLOCK_BYTES = 4 << 20
"""On the CPU an objective evaluation runs over row blocks of ``[X, 1]`` of about this size, each block's logits
and its gradient products back to back, so that the second product reads the block from cache instead of memory
(a task's matrix, 13–55 MB for a 384-d encoder, is read once per evaluation instead of twice). Each block is stored
transposed, ``(d + 1, rows)`` contiguous (:meth:`_Problem.augmented_blocks`), and both products put the few
columns (``K m``: the models still moving, times the classes) on the left: the logits ``Vᵀ Xbᵀ`` come out
transposed, ``(K m, rows)``, and the gradient products accumulate transposed, ``Gᵀ += R Xb``. MKL's products with
few columns (the tail of a solve, where one to five weak-penalty models are still moving) run 1.3–4.8× faster with
the narrow operand on the left than on the right on this machine (AMD EPYC, one thread: SICK-E's pair features at
one model, a block's gradient product 426 → 294 µs; TREC's dense preconditioner bases, which take the same order,
895 → 400 µs a ``bmm``). The layout changes the order of sums inside the products, not what they compute: results
agree to rounding (``tests/test_classify.py``)."""

EIGEN_FLOOR = 1e-3
"""A shared basis's eigenvalues (:meth:`_Problem.preconditioner`: the union's covariance, used by many training
sets or a low-rank sketch) are raised to at least this fraction of the largest. Without a floor a direction the
union all but lacks is stepped at ``1 / lam`` (``C n``: 72,000 at C = 10 on SUBJ), the right curvature only if
every model has exactly no variance there; a model whose own rows or standardisation give it some has not, and
L-BFGS overshoots by orders of magnitude and backtracks. Encoders whose features lie near a lower-dimensional
subspace in rotated coordinates (a whitened encoder; an int8-quantised one) showed it: all-MiniLM-L6-v2 whitened,
one thread, SUBJ 9.3 → 3.4 CPU s and MR 3.8 → 2.5 with the floor, its int8 ONNX SUBJ 5.3 → 2.5 and MR 3.9 → 2.3,
every accuracy the same; a floor of 1e-2 helped some tasks more and slowed the int8 model's pair tasks (SICK-E 5.1
→ 6.1), so 1e-3. A basis of the model's own training set (TREC's folds, a dev split below ``LOWRANK_MIN_DIM``) is
exact for it and left as it is. Any positive definite preconditioner leaves the optimum where it is."""

SHARED_BASIS_MIN_SETS = 8
"""From this many training sets in one solve (the CV tasks' 50 inner folds) the preconditioner uses one basis for
all of them, the union's (:meth:`_Problem.preconditioner`); below it each dense set its own. Measured on
all-MiniLM-L6-v2, one thread, CPU seconds: CR 2.4 s with the shared basis against 4.1 s with a basis per set
(its 50 Grams and eigendecompositions) and 7.7 s with version 4's per-model factors; TREC (5 inner folds and the
refit) 812 batched calls with the union's basis against 474 with each set's, so few dense sets keep their own.
The low-rank path (pair features) always shares one sketch: MRPC 11.2 s against 13.5 s, the same 343 calls."""

PATH_MIN_SETS = 8
"""Warm starts along the C path serialise the grid into rounds; they pay where each round still batches many
models (the CV tasks' 50 inner folds), while a task with few training sets (a dev split, TREC's 5 inner folds)
solves its whole grid in one batch instead: per-iteration overhead, not arithmetic, dominates those."""


def _c_path_rounds(fits: list[Fit], of: np.ndarray) -> list[tuple[list[int], dict[int, int | None]]]:
    """The fits in rounds along the C path: round r holds the r-th strongest penalty of every training set, and
    each fit starts from its set's previous fit on the path (``start[i]``; None: from its own given start). With
    fewer than ``PATH_MIN_SETS`` training sets, one round of every fit."""
    by_set: dict[int, list[int]] = {}
    for i in sorted(range(len(fits)), key=lambda i: fits[i].c):
        by_set.setdefault(int(of[i]), []).append(i)
    if len(by_set) < PATH_MIN_SETS:
        return [(list(range(len(fits))), dict.fromkeys(range(len(fits))))]
    rounds = []
    for r in range(max((len(v) for v in by_set.values()), default=0)):
        path = [v for v in by_set.values() if len(v) > r]
        rounds.append(([v[r] for v in path], {v[r]: (v[r - 1] if r else None) for v in path}))
    return rounds


@dataclass
class _Problem:
    """One task's training rows on the torch device, and the standardisation of each training set (conditioned
    units; ``inv`` 0 drops a constant column). A model's weights ``W`` act on its standardised features, so its
    logits are ``X @ (W * inv) + (b - (mean * inv) @ W)``: every model reads the one shared matrix."""

    X: torch.Tensor  # (n, d)
    y: torch.Tensor  # (n,) int64
    K: int  # 1 for a binary model (one logit), else the number of classes
    mean: torch.Tensor  # (S, d)
    inv: torch.Tensor  # (S, d)
    masks: list[np.ndarray]  # each set's rows of X
    bases: dict[int | None, tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = field(default_factory=dict)
    fast: torch.dtype | None = None  # mixed precision: the first phase's dtype (DTYPES)
    xa_blocks: dict[tuple[torch.dtype, int], list[torch.Tensor]] = field(default_factory=dict)

    def augmented(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``[X, 1]`` (n, d + 1) in ``dtype`` (default X's), so that one product gives logits with intercepts; for
        a binary model each row times ``1 - 2 y`` (the logit's sign flipped for class 1), so that the product is
        the loss's margin. The whole-matrix layout (CUDA): a transposed view of the one block of every row of
        :meth:`augmented_blocks` (cuBLAS takes a transposed operand by its flag, without a copy), so both layouts are
        built by one function."""
        (block,) = self.augmented_blocks(dtype or self.X.dtype, max(1, len(self.X)))
        return block.T

    def augmented_blocks(self, dtype: torch.dtype, step: int) -> list[torch.Tensor]:
        """:meth:`augmented` in row blocks of ``step`` rows, each stored transposed and contiguous, ``(d + 1,
        rows)``: the CPU path's layout (``ROW_BLOCK_BYTES``). Built once per (dtype, step), straight from ``X``."""
        import torch

        key = (dtype, step)
        if key not in self.xa_blocks:  # block by block: no full-size intermediate copies of a big task's matrix
            blocks = []
            for lo in range(0, len(self.X), step):
                xb = self.X[lo : lo + step]
                b = torch.empty(xb.shape[1] + 1, len(xb), dtype=dtype, device=xb.device)
                b[:-1] = xb.T
                b[-1] = 1
                if self.K == 1:
                    b *= (1 - 2 * self.y[lo : lo + step].to(dtype))[None, :]
                blocks.append(b)
            self.xa_blocks[key] = blocks
        return self.xa_blocks[key]

    def basis(self, s: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The eigenpairs of training set ``s``'s covariance ``Σ_s`` of its standardised rows (None: the covariance
        of the union of every set's rows in the conditioned units, which every set's standardisation is close to),
        computed once per set: ``(E (r,), U (d, r), rest)``. Below ``LOWRANK_MIN_DIM`` dimensions all of them (``r =
        d``, ``rest`` None) from the ``d × d`` Gram; from there the top ``LOWRANK_RANK`` of a seeded randomised
        Nyström sketch (Tropp et al. 2017, the stable form with a small shift: one ``2 n d r`` product instead of
        the ``n d²`` Gram), ``rest`` the smallest kept eigenvalue standing for the rest of the spectrum (Frangella,
        Tropp & Udell's Nyström preconditioner). Seeded: the same features give the same preconditioner, hence
        the same iterates."""
        import torch

        if s not in self.bases:
            X, dt = self.X, self.X.dtype
            d = X.shape[1]
            scale = torch.ones(d, dtype=dt, device=X.device)
            if s is not None:
                X, scale = X[torch.from_numpy(self.masks[s]).to(X.device)], self.inv[s]
            n = X.shape[0]
            mu = X.mean(dim=0)
            if d < LOWRANK_MIN_DIM:
                cov = (X.T @ X / n - mu[:, None] * mu[None, :]) * scale[:, None] * scale[None, :]
                E, U = torch.linalg.eigh(cov)
                self.bases[s] = (E.clamp(min=0), U, None)
            else:
                r = min(LOWRANK_RANK, d)
                gen = torch.Generator().manual_seed(0)
                omega = torch.linalg.qr(torch.randn(d, r, generator=gen, dtype=torch.float64))[0].to(X.device, dt)
                Om = omega * scale[:, None]  # Σ Ω = D (Xᵀ X / n - μ μᵀ) D Ω
                Y = scale[:, None] * (X.T @ (X @ Om) / n - mu[:, None] * (mu @ Om)[None, :])
                nu = torch.finfo(dt).eps * float(torch.linalg.matrix_norm(Y)) * d
                Y = Y + nu * omega
                core = omega.T @ Y
                L = torch.linalg.cholesky(0.5 * (core + core.T))
                Bt = torch.linalg.solve_triangular(L, Y.T, upper=False)  # (r, d): (Y L⁻ᵀ)ᵀ
                U, sv, _ = torch.linalg.svd(Bt.T, full_matrices=False)
                E = (sv * sv - nu).clamp(min=0)
                self.bases[s] = (E, U, E[-1])
        return self.bases[s]

    # long: numerical kernel (Kronecker Hessian approximation), whole to read with its derivation; bit-identical
    def preconditioner(
        self, sets: np.ndarray, lam: torch.Tensor, products: torch.dtype | None = None
    ) -> Callable | None:
        """An approximate inverse of each model's Hessian at ``W = 0`` with its intercepts at the class priors
        ``p``, ``A ⊗ Σ_s + lam I`` with ``A = p (1 - p)`` (binary) or ``diag(p) - p pᵀ`` (multinomial) and
        ``Σ_s`` the covariance of the model's standardised training rows, returned as ``q -> M q`` on stacked
        parameter rows: the L-BFGS initial inverse Hessian (scaled by the usual ``sᵀy / yᵀMy``). Through ``Σ_s = U
        diag(E) Uᵀ`` (:meth:`basis`) and ``A = V diag(α) Vᵀ``: ``M = (V ⊗ U) diag(1 / (α E + lam)) (V ⊗ U)ᵀ``, two
        ``d × r`` products over all the models of one basis at once (with a low-rank basis, the rest of the
        spectrum at ``rest``).

        Few training sets (fewer than ``SHARED_BASIS_MIN_SETS``: a dev split, TREC's five inner folds and refit):
        each set its own basis, exact. Many (the CV tasks' 50 inner folds), or a low-rank basis (already an
        approximation): one basis for all, the union's covariance ``Σ`` in the conditioned units, and each model's
        own standardisation ``D_s`` (``inv``) folded in around it: ``A ⊗ D_s Σ D_s + lam I ≈ D_s (A ⊗ Σ + lam I)
        D_s`` (``D_s ≈ I`` there), so ``M_s = D_s⁻¹ M D_s⁻¹``; what is left is an inner fold's sampling noise, which
        the L-BFGS updates absorb. Version 5 added the ``D_s`` (version 4 applied the union's ``M`` as it stands): an
        inner fold's column scales differ from the union's by ~1 %, which turns the union's near-null directions
        (the raw hidden states of a transformer layer lie close to a hyperplane) into directions the fold has real
        variance along, where ``M`` stepped ``1 / lam``: all-mpnet-base-v2's layer-8 CLS on MPQA ran its 50 C = 1
        inner folds past ``max_iter`` (``benchmarks/README.md``). Version 4 factored ``A ⊗ Σ_s + lam I`` per
        model and solved with the factor per iteration: on all-MiniLM-L6-v2's CR those triangular solves were 54 %
        of the engine's time, the per-set Grams and factorisations 20 % (``benchmarks/README.md``). A column a set
        drops (``inv`` 0) has only the penalty's curvature: ``M q = q / lam`` there. The intercepts decouple (the
        standardised features are centred): ``A⁻¹``, a pseudo-inverse along the classes' common direction, whose
        gradient is zero."""
        import torch

        d, K, dev, dt = self.X.shape[1], self.K, self.X.device, self.X.dtype
        idx = torch.from_numpy(np.asarray(sets)).to(dev)
        yc = self.y.cpu().numpy()
        prior = np.stack([np.bincount(yc[self.masks[s]], minlength=max(K, 2)) / len(self.masks[s]) for s in sets])
        rows = min(len(self.masks[s]) for s in sets)
        if rows < (LOWRANK_MIN_ROWS_PER_DIM if d >= LOWRANK_MIN_DIM else DENSE_MIN_ROWS_PER_DIM) * d:
            return None  # too few rows per dimension for the set-up to pay (DENSE_MIN_ROWS_PER_DIM)
        distinct = sorted({int(s) for s in sets})
        share = len(distinct) >= SHARED_BASIS_MIN_SETS or d >= LOWRANK_MIN_DIM
        keys: list[int | None] = [None] if share else list(distinct)
        bases = [self.basis(k) for k in keys]
        group = torch.from_numpy(np.array([0 if keys[0] is None else keys.index(int(s)) for s in sets])).to(dev)
        E = torch.stack([b[0] for b in bases])[group]  # (B, r): each model's eigenvalues
        rest = None if bases[0][2] is None else torch.stack([b[2] for b in bases])[group]  # type: ignore[misc]
        E, rest = _floored(E, rest) if share else (E, rest)  # the union's near-null directions: not every model's
        keep, scale = _kept_columns(self.inv[idx], shared=share)
        drop = (1 - keep) / lam[:, None]
        alpha, V, inv_alpha = _class_curvature(torch.from_numpy(prior).to(dev, dt), K)
        Vt = V.transpose(1, 2).contiguous()
        top = 1 / (E[:, :, None] * alpha[:, None, :] + lam[:, None, None])  # (B, r, K)
        low = None if rest is None else 1 / (rest[:, None] * alpha + lam[:, None])  # (B, K)
        pd = products or dt  # the basis products' dtype (``mixed``: float32, as the objective's)
        Us = [(b[1].to(pd), b[1].T.contiguous().to(pd)) for b in bases]

        def across(MT: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
            """``M @ Q[b]`` for every model ``b`` of ``Q`` (m, k, K) as one product, given ``MT = Mᵀ``
            contiguous: (m, rows of M, K). Computed as ``Qᵀ Mᵀ``, the few columns as the left operand
            (``ROW_BLOCK_BYTES``)."""
            m = Q.shape[0]
            out = (Q.transpose(1, 2).reshape(m * K, Q.shape[1]).to(pd) @ MT).to(dt)
            return out.view(m, K, MT.shape[1]).transpose(1, 2)

        def one_basis(Qs: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            """``M Qs`` (the kept columns) for the models ``b`` (batch indices) of the one basis."""
            U, Ut = Us[0]
            Vm, Vtm = V[b], Vt[b]
            C = across(U, Qs)  # (m, r, K): the scaled gradient in the basis, Uᵀ Qs
            if low is None:
                return across(Ut, ((C @ Vm) * top[b]) @ Vtm)
            # the spectrum outside the basis at `rest`: U (top - low) Uᵀ + low I, so two products, not three
            lb = low[b][:, None, :]
            return across(Ut, ((C @ Vm) * (top[b] - lb)) @ Vtm) + ((Qs @ Vm) * lb) @ Vtm

        if len(bases) > 1:  # dense bases of their own (few sets): every basis in one batched product
            U_all = torch.stack([u for u, _ in Us])  # (G, d, d)
            Ut_all = torch.stack([ut for _, ut in Us])

        def many_bases(Qs: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            """``M Qs`` for models of several dense bases, one ``bmm`` per side (:func:`_by_basis`)."""
            C = _by_basis(U_all, Qs, group[b], pd)  # (m, d, K): the scaled gradient in each model's basis, Uᵀ Qs
            return _by_basis(Ut_all, ((C @ V[b]) * top[b]) @ Vt[b], group[b], pd)

        def apply(q: torch.Tensor, models: torch.Tensor) -> torch.Tensor:
            m = q.shape[0]
            b = torch.arange(m, device=dev) if m == len(sets) else models
            Q = q[:, : d * K].view(m, d, K)
            Qs = Q * scale[b][:, :, None]
            R = one_basis(Qs, b) if len(bases) == 1 else many_bases(Qs, b)
            R = R * scale[b][:, :, None] + Q * drop[b][:, :, None]
            Vm = V[b]
            c = ((q[:, d * K :, None] * Vm).sum(1) * inv_alpha[b])[:, None, :] * Vm
            return torch.cat([R.reshape(m, d * K), c.sum(2)], dim=1)

        return apply

    def row_weights(self, sets: np.ndarray, cs: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
        """The models ``(sets[b], cs[b])``'s row weights ``Mn`` (n, B), ``1 / n_b`` on set ``b``'s rows and 0
        elsewhere, and penalties ``lam = 1 / (C n_b)`` (B,), on X's device in X's dtype."""
        import torch

        X = self.X
        mask = np.zeros((X.shape[0], len(sets)))
        for b, s in enumerate(sets):
            mask[self.masks[s], b] = 1.0
        nb = mask.sum(0)
        Mn = torch.from_numpy(mask / nb).to(X.device, X.dtype)
        return Mn, torch.from_numpy(1.0 / (np.asarray(cs) * nb)).to(X.device, X.dtype)

    def solve(
        self, sets: np.ndarray, cs: Sequence[float], theta0: np.ndarray, *, tol: float, max_iter: int
    ) -> tuple[np.ndarray, int]:
        """Minimise ``mean CE + ||W||^2 / (2 C n)`` for each (set, C) from ``theta0``; returns the solutions.
        With ``fast`` (``mixed``) a first phase runs the products in that dtype (everything else in X's) to ``tol``
        by the gradient, accepting steps under the objective's rounding (``MIXED_NOISE``); a float64 phase then
        checks every model with the float64 stopping rules and finishes any that is not done, within what is left
        of ``max_iter``. Also returns how many models stopped unconverged (``max_iter``, or no decreasing step)."""
        import torch

        dt, dev = self.X.dtype, self.X.device
        Mn, lam = self.row_weights(sets, cs)
        B = len(sets)
        theta = torch.from_numpy(theta0).to(dev, dt)
        ftol = 64 * float(np.finfo(np.float64).eps)  # scipy's L-BFGS-B rule on the relative decrease (scikit-learn's)
        with torch.no_grad():
            precondition = self.preconditioner(sets, lam, self.fast)
            left = max_iter
            if self.fast is not None and self.fast != dt:  # products in float32, everything else in float64
                info: dict[str, int] = {}
                theta, _, _ = batched_lbfgs(
                    self._objective(sets, Mn, lam, dt, products=self.fast), theta, tol=tol, ftol=-math.inf,
                    max_iter=max_iter, precondition=precondition, noise=MIXED_NOISE, info=info,
                )  # fmt: skip
                left = max_iter - info["iterations"]
            theta, converged, gmax = batched_lbfgs(
                self._objective(sets, Mn, lam, dt), theta, tol=tol, ftol=ftol, max_iter=left,
                precondition=precondition,
            )  # fmt: skip
        if not bool(converged.all()):
            warnings.warn(
                f"torch logistic regression: {int((~converged).sum())} of {B} models stopped before the gradient "
                f"fell below tol={tol} (largest gradient entry {float(gmax.max()):.2e}); raise max_iter or tol",
                stacklevel=4,
            )
        return theta.to(torch.float64).cpu().numpy(), int((~converged).sum())

    # long: numerical kernel (batched loss and gradient), whole with its derivation; bit-identical
    def _objective(
        self, sets: np.ndarray, Mn: torch.Tensor, lam: torch.Tensor, dtype: torch.dtype,
        products: torch.dtype | None = None,
    ) -> Callable:  # fmt: skip
        """``fg(theta_rows, rows) -> (f, grad)`` of the models ``sets`` (row weights ``Mn``, penalties ``lam``),
        in ``dtype``; the objective accumulates in float64 whatever the products' dtype: the line search and the
        relative-decrease rule compare values a float32 sum could not resolve. ``products``: the dtype of the two
        products over the rows only (``[X, 1]`` stored in it; the weights rounded to it on the way in, logits and
        gradient products back to ``dtype`` on the way out), the ``mixed`` engine's float32 phase: the loss, the
        gradient's assembly and the optimiser's state stay in ``dtype``."""
        import torch

        n, d = self.X.shape
        K, B = self.K, len(sets)
        idx_sets = torch.from_numpy(np.asarray(sets)).to(self.X.device)
        inv = self.inv[idx_sets].to(dtype)
        mi = (self.mean * self.inv)[idx_sets].to(dtype)
        Mn, lam = Mn.to(dtype), lam.to(dtype)
        f64 = torch.float64
        y = self.y
        pd = products or dtype
        cast = pd != dtype
        on_cpu = self.X.device.type == "cpu"
        step = max(64, ROW_BLOCK_BYTES // ((d + 1) * torch.finfo(pd).bits // 8)) if on_cpu else n
        blocks = [(lo, min(n, lo + step)) for lo in range(0, n, step)]
        if on_cpu:  # row blocks that stay in cache between the logits' product and the gradient's
            XaT = self.augmented_blocks(pd, step)
            MnT = Mn.T.contiguous()  # (B, n): a block's weights are a slice of each model's row
        else:
            Xa = self.augmented(pd)

        def fg(theta: torch.Tensor, models: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            m = len(models)
            every = m == B
            W = theta[:, : d * K].view(m, d, K)
            inv_m, mi_m = (inv, mi) if every else (inv[models], mi[models])
            c = theta[:, d * K :] - torch.einsum("md,mdk->mk", mi_m, W)
            # columns class-major (K, m): the softmax runs over a middle dimension, which torch vectorises over
            # the models (over a last dimension of a few classes it is several times slower)
            V = torch.cat([(W * inv_m[:, :, None]).permute(1, 2, 0).reshape(d, K * m), c.T.reshape(1, K * m)])
            lam_m = lam if every else lam[models]
            if not on_cpu:
                w = Mn if every else Mn[:, models]  # (n, m)
                f, Rw = _loss((Xa @ V.to(pd)).to(dtype), w, y, K)  # one product for every model's logits
                G = (Xa.T @ Rw.to(pd)).to(dtype)  # (d + 1, K * m)
            else:  # blocks stored transposed: measured, MKL's products with a few columns (a tail of one or two
                # models) run up to 2x faster with the block as the contiguous (d + 1, rows) operand
                wT = MnT if every else MnT[models]  # (m, n)
                Vt = V.T.contiguous().to(pd)
                f = torch.zeros(m, dtype=f64)
                GT = V.new_zeros(K * m, d + 1)  # the gradient products transposed: few rows on the left
                for (lo, hi), XbT in zip(blocks, XaT, strict=True):
                    Zt = Vt @ XbT
                    fb, Rt = _loss_transposed(Zt.to(dtype) if cast else Zt, wT[:, lo:hi], y[lo:hi], K)
                    f += fb
                    if cast:  # the block's product accumulates in float32, the sum over blocks in dtype
                        GT.add_(Rt.to(pd) @ XbT.T)
                    else:
                        GT.addmm_(Rt, XbT.T)
                G = GT.T
            f = f + 0.5 * lam_m.double() * (W.double() ** 2).sum(dim=(1, 2))
            GV = G[:d].reshape(d, K, m).permute(2, 0, 1)  # (m, d, K)
            gc = G[d].reshape(K, m).T
            GW = GV * inv_m[:, :, None] - mi_m[:, :, None] * gc[:, None, :] + lam_m[:, None, None] * W
            return f, torch.cat([GW.reshape(m, d * K), gc], dim=1)

        return fg

    def decision_values(self, X_eval: torch.Tensor, theta: np.ndarray, of: np.ndarray) -> np.ndarray:
        """(rows of ``X_eval``, B) logits of class 1 for a binary model, else (rows, B, K)."""
        import torch

        d, K, B = X_eval.shape[1], self.K, len(theta)
        idx = torch.from_numpy(of).to(X_eval.device)
        th = torch.from_numpy(theta).to(X_eval.device, torch.float64)
        W = th[:, : d * K].view(B, d, K)
        inv, mean = self.inv[idx].to(torch.float64), self.mean[idx].to(torch.float64)
        c = th[:, d * K :] - torch.einsum("bd,bdk->bk", mean * inv, W)
        V = (W * inv[:, :, None]).permute(1, 0, 2).reshape(d, B * K)
        with torch.no_grad():
            Z = (X_eval.to(torch.float64) @ V).view(len(X_eval), B, K) + c[None]
        return (Z[..., 0] if K == 1 else Z).cpu().numpy()


def _loss(Z: torch.Tensor, w: torch.Tensor, yb: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows' weighted loss per model (m,) from their logits ``Z`` (rows, K * m; columns class-major) and weights
    ``w`` (rows, m), and its gradient in the logits, weighted (rows, K * m). ``K == 1``: the rows carry the sign
    ``1 - 2 y`` (:meth:`_Problem.augmented`), so ``Z`` is the margin, softplus its loss, sigmoid its derivative."""
    import torch

    f64 = torch.float64
    if K == 1:
        return (torch.nn.functional.softplus(Z) * w).sum(0, dtype=f64), torch.sigmoid(Z) * w
    rows, m = Z.shape[0], w.shape[1]
    R = torch.softmax(Z.view(rows, K, m), dim=1)
    yi = yb[:, None, None].expand(rows, 1, m)
    f = (-torch.log(R.gather(1, yi)[:, 0]) * w).sum(0, dtype=f64)
    R.scatter_add_(1, yi, torch.full_like(R[:, :1], -1.0))
    return f, (R * w[:, None, :]).view(rows, K * m)


def _loss_transposed(Zt: torch.Tensor, wt: torch.Tensor, yb: torch.Tensor, K: int) -> tuple[torch.Tensor, ...]:
    """:func:`_loss` on transposed logits ``Zt`` (K * m, rows) and weights ``wt`` (m, rows): the loss per model
    (m,) and the weighted gradient in the logits, (K * m, rows) (the CPU path's layout, ``ROW_BLOCK_BYTES``)."""
    import torch

    f64 = torch.float64
    if K == 1:
        return (torch.nn.functional.softplus(Zt) * wt).sum(1, dtype=f64), torch.sigmoid(Zt) * wt
    m, rows = wt.shape
    R = torch.softmax(Zt.view(K, m, rows), dim=0)
    yi = yb[None, None, :].expand(1, m, rows)
    f = (-torch.log(R.gather(0, yi)[0]) * wt).sum(1, dtype=f64)
    R.scatter_add_(0, yi, torch.full_like(R[:1], -1.0))
    return f, (R * wt[None]).view(K * m, rows)


def _by_basis(MT: torch.Tensor, Q: torch.Tensor, g_of: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``M[g_of[b]] @ Q[b]`` for every model ``b`` of ``Q`` (m, d, K), given ``MT`` (G, d, d) the transposes of one
    matrix per basis, contiguous: each basis's models padded to the largest group, one ``bmm`` in ``dtype`` instead
    of a product per basis (in a solve's tail a few models cost as much Python overhead per basis as many), as
    ``Qᵀ Mᵀ`` with the few columns on the left (``ROW_BLOCK_BYTES``)."""
    import torch

    G, (m, d, K) = MT.shape[0], Q.shape
    counts = torch.bincount(g_of, minlength=G)
    order = torch.argsort(g_of, stable=True)
    slot = torch.empty_like(g_of)
    slot[order] = torch.arange(m, device=Q.device) - (torch.cumsum(counts, 0) - counts)[g_of[order]]
    w = int(counts.max())
    padded = Q.new_zeros(G, w, K, d)
    padded[g_of, slot] = Q.transpose(1, 2)
    out = torch.bmm(padded.view(G, w * K, d).to(dtype), MT).to(Q.dtype)
    return out.view(G, w, K, d)[g_of, slot].transpose(1, 2)


def _floored(E: torch.Tensor, rest: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each model's eigenvalues ``E`` (B, r) and the rest of its spectrum ``rest`` (B,) raised to at least
    ``EIGEN_FLOOR`` times its largest eigenvalue."""
    import torch

    floor = EIGEN_FLOOR * E.amax(dim=1, keepdim=True)
    return torch.maximum(E, floor), None if rest is None else torch.maximum(rest, floor[:, 0])


def _kept_columns(inv: torch.Tensor, *, shared: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per model (B, d): 1 where its standardisation keeps a column (``inv > 0``), and what the preconditioner
    multiplies a vector by on both sides of its basis: a shared basis is the union's covariance in the conditioned
    units, so a model's own standardisation ``D_s`` (``inv``) folds in around it, ``M_s = D_s⁻¹ M D_s⁻¹``; a basis
    of its own has ``D_s`` inside already (the kept columns' 1). Dropped columns: 0 either way."""
    import torch

    keep = (inv > 0).to(inv.dtype)
    return keep, torch.where(inv > 0, 1 / inv.clamp(min=1e-300), 0.0) if shared else keep


def _class_curvature(prior: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The loss's curvature in the logits at the class priors ``p`` (B, classes), ``A = V diag(α) Vᵀ`` per model:
    ``p (1 - p)`` for a binary model (one logit; at least 1e-3), ``diag(p) - p pᵀ`` for a multinomial one. Returns
    ``α`` (B, K), ``V`` (B, K, K) and ``A``'s pseudo-inverse eigenvalues (0 along the classes' common direction)."""
    import torch

    if K == 1:
        alpha = (prior[:, 1] * prior[:, 0]).clamp(min=1e-3)[:, None]
        V = torch.ones(len(prior), 1, 1, dtype=prior.dtype, device=prior.device)
    else:
        alpha, V = torch.linalg.eigh(torch.diag_embed(prior) - prior[:, :, None] * prior[:, None, :])
        alpha = alpha.clamp(min=0)
    inv_alpha = torch.where(alpha > 1e-9, 1 / alpha.clamp(min=1e-9), torch.zeros_like(alpha))
    return alpha, V, inv_alpha


# long: numerical kernel (batched L-BFGS), kept whole to read as the algorithm; bit-identical
def batched_lbfgs(
    fg: Callable,
    theta,
    *,
    tol: float,
    max_iter: int,
    ftol: float = 0.0,
    history: int = 10,
    max_cuts: int = 40,
    precondition: Callable | None = None,
    noise: float = 0.0,
    info: dict[str, int] | None = None,
):
    """Minimise B independent smooth objectives at once; ``fg(theta_rows, rows) -> (f, grad)`` evaluates the
    objectives ``rows`` (an index tensor) at ``theta_rows`` (len(rows), P).

    Each row has its own L-BFGS memory, initial scaling and backtracking (Armijo) step. A row converges when
    its largest gradient entry is at most ``tol``, or when a step decreases it by no more than
    ``ftol * max(|f|, |f_new|, 1)`` (scipy's L-BFGS-B rules); it stops unconverged when no step decreases it.
    A row that stops never moves again, so the solver's state (iterates, memory) is compacted to the rows still
    moving whenever one stops: converged models cost nothing while the slow ones (weak penalties) finish, and the
    tail of a solve works on its few rows only. Returns ``(theta, converged (B,) bool, max |grad| (B,))``;
    ``info``, when given, gets ``iterations``, the iterations run.

    ``precondition(q, rows) -> M q``, linear: the initial inverse Hessian ``gamma M``. It is applied once per
    iteration, to the new gradient: the memory keeps ``M y`` beside each ``y`` (``M y = M g_new - M g_old``),
    so the two-loop recursion and the scaling ``gamma = sᵀy / yᵀMy`` need no other application (``M q`` for the
    recursion's ``q = g - Σ a_j y_j`` is ``M g - Σ a_j M y_j``).

    ``noise`` > 0: the objective's values carry rounding of about ``noise * |f|`` (float32 products) while the
    gradient is exact to far below ``tol``, so near the optimum a true decrease can be smaller than the values'
    error and the Armijo test fails on rounding. A step is then also accepted under Hager & Zhang's (2005)
    approximate Wolfe condition, which reads the gradient instead: ``f_new <= f + noise |f|`` and a directional
    derivative at most ``(2 delta - 1)`` times the initial one (``delta`` 0.1; on a quadratic, Armijo's own
    condition). Such a step may not decrease ``f``, which the relative-decrease rule would read as flat: the mixed
    phase passes ``ftol=-inf`` and runs to ``tol`` by the gradient.
    """
    import torch

    B, P = theta.shape
    ids = torch.arange(B, device=theta.device)  # the original rows of the state's rows (the moving ones)
    f, g = fg(theta, ids)
    out_theta = theta.clone()
    out_gmax = g.abs().amax(dim=1)
    converged = out_gmax <= tol
    S = theta.new_zeros(history, B, P)
    Y = theta.new_zeros(history, B, P)
    MY = None if precondition is None else theta.new_zeros(history, B, P)
    rho = theta.new_zeros(history, B)
    gamma = theta.new_ones(B)
    Mg = g if precondition is None else precondition(g, ids)
    stored = 0
    iterations = 0
    keep = ~converged
    for _ in range(max_iter + 1):
        if not bool(keep.all()):  # compact the state to the rows still moving
            ids, theta, f, g, Mg, gamma = ids[keep], theta[keep], f[keep], g[keep], Mg[keep], gamma[keep]
            S, Y, rho = S[:, keep], Y[:, keep], rho[:, keep]
            MY = None if MY is None else MY[:, keep]
        if len(ids) == 0 or iterations == max_iter:
            break
        iterations += 1
        direction, gd = _lbfgs_direction(g, S, Y, rho, gamma, stored, MY, Mg)
        new_theta, new_f, new_g, stalled = _armijo(fg, ids, theta, f, g, direction, gd, max_cuts, noise)
        moved = ~stalled
        if precondition is None:
            new_Mg = new_g
        else:  # M at the new gradient, the one application of this iteration
            new_Mg = Mg.clone()
            at = moved.nonzero().squeeze(1)
            if len(at):
                new_Mg[at] = precondition(new_g[at], ids[at])
        yv = new_g - g
        My = yv if precondition is None else new_Mg - Mg
        gamma = _remember(S, Y, MY, rho, gamma, stored % history, new_theta - theta, yv, My, moved)
        stored += 1
        decrease = f - new_f
        scale = torch.maximum(torch.maximum(f.abs(), new_f.abs()), torch.ones_like(f))
        flat = moved & (decrease <= ftol * scale)
        theta, f, g, Mg = new_theta, new_f, new_g, new_Mg
        gmax = g.abs().amax(dim=1)
        out_theta[ids], out_gmax[ids] = theta, gmax
        converged[ids] = (gmax <= tol) | flat
        keep = moved & ~flat & (gmax > tol)
    if info is not None:
        info["iterations"] = iterations
    return out_theta, converged, out_gmax


def _lbfgs_direction(g, S, Y, rho, gamma, stored: int, MY=None, Mg=None):
    """Each row's L-BFGS direction from its stored pairs (the two-loop recursion, newest pair first; an empty slot
    has rho = 0 and changes nothing), with the initial inverse Hessian ``gamma M``: ``MY`` the stored ``M y`` and
    ``Mg`` = ``M g`` (None: ``M = I``). Preconditioned steepest descent where the direction points uphill.
    Returns (direction, g·direction)."""
    import torch

    history = S.shape[0]
    order = [(stored - 1 - j) % history for j in range(min(stored, history))]
    if MY is None:
        MY, Mg = Y, g
    q = g.clone()
    Mq = Mg.clone()
    alphas = []
    for j in order:
        a = rho[j] * (S[j] * q).sum(1)
        q -= a[:, None] * Y[j]
        Mq -= a[:, None] * MY[j]  # M q, M linear: no application of M here
        alphas.append(a)
    r = gamma[:, None] * Mq
    for j, a in zip(reversed(order), reversed(alphas), strict=True):
        beta = rho[j] * (Y[j] * r).sum(1)
        r += (a - beta)[:, None] * S[j]
    direction = -r
    gd = (g * direction).sum(1)
    uphill = gd >= 0  # lost curvature information: fall back to (preconditioned) steepest descent
    if bool(uphill.any()):
        direction = torch.where(uphill[:, None], -Mg, direction)
        gd = (g * direction).sum(1)
    return direction, gd


def _armijo(fg: Callable, ids, theta, f, g, direction, gd, max_cuts: int, noise: float = 0.0):
    """Backtracking (Armijo) line search, each row (original row ``ids``) cutting its own step and evaluated only
    while it has no step yet; with ``noise`` also Hager & Zhang's approximate Wolfe condition
    (:func:`batched_lbfgs`). Returns the new (theta, f, grad) (unchanged for rows that found no acceptable step)
    and those stalled rows.

    A rejected step ``t`` is cut to the minimiser of the quadratic through ``f(0)``, the initial slope and ``f(t)``,
    kept within ``[0.1 t, 0.5 t]`` (Nocedal & Wright, section 3.5), at most ``max_cuts`` of them. Halving
    alone cost up to 14 evaluations an iteration where L-BFGS overshoots by orders of magnitude, as on a whitened
    encoder's weak penalties (all-MiniLM-L6-v2 whitened, SUBJ's C = 10 round: 1,005 batched calls halving, 462
    interpolating)."""
    import torch

    step = theta.new_ones(theta.shape[0])
    pending = torch.ones(theta.shape[0], dtype=torch.bool, device=theta.device)
    new_theta, new_f, new_g = theta.clone(), f.clone(), g.clone()
    for _ in range(max_cuts):
        idx = pending.nonzero().squeeze(1)
        cand = theta[idx] + step[idx, None] * direction[idx]
        fc, gc = fg(cand, ids[idx])
        ok = fc <= f[idx] + 1e-4 * step[idx] * gd[idx]
        if noise > 0:  # approximate Wolfe: the gradient's slope along the direction, f only to its rounding
            slope = (gc * direction[idx]).sum(1)
            ok |= (fc <= f[idx] + noise * f[idx].abs()) & (slope <= (2 * APPROX_WOLFE_DELTA - 1) * gd[idx])
        won = idx[ok]
        new_theta[won], new_f[won], new_g[won] = cand[ok], fc[ok], gc[ok]
        pending[won] = False
        if not bool(pending.any()):
            break
        # the minimiser of the quadratic through f(0), its slope and f(step), kept within [0.1, 0.5] of the step
        t = step[idx]
        curve = fc - f[idx] - gd[idx] * t
        trial = torch.where(curve > 0, -gd[idx] * t * t / (2 * curve.clamp(min=1e-300)), 0.5 * t)
        trial = torch.where(torch.isfinite(fc), trial, 0.1 * t)  # an overflowing step: the largest cut
        step[idx] = torch.minimum(torch.maximum(trial, 0.1 * t), 0.5 * t)
    return new_theta, new_f, new_g, pending


def _remember(S, Y, MY, rho, gamma, slot: int, s, yv, Myv, done):
    """Store each row's step ``s``, gradient change ``yv`` and its preconditioned ``Myv`` (``MY`` None: no
    preconditioner) in ``slot`` where the curvature condition holds (an empty pair elsewhere); returns the new
    initial scaling ``gamma = sᵀy / yᵀMy``."""
    import torch

    sy = (s * yv).sum(1)
    yy = (yv * Myv).sum(1)
    valid = done & (sy > 1e-10 * yy) & (yy > 0)
    S[slot] = s * valid[:, None]
    Y[slot] = yv * valid[:, None]
    if MY is not None:
        MY[slot] = Myv * valid[:, None]
    rho[slot] = torch.where(valid, 1.0 / torch.where(valid, sy, torch.ones_like(sy)), torch.zeros_like(sy))
    return torch.where(valid, sy / torch.where(valid, yy, torch.ones_like(yy)), gamma)
