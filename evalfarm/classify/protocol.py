"""SentEval's evaluation protocols (cv, train_test, train_dev_test): folds, C selection, refits and results."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

from evalfarm.classify.engine import DEFAULT_DTYPE
from evalfarm.classify.features import Fit, pair_features
from evalfarm.classify.solvers import _Solver, predict_from_scores
from evalfarm.taskdata.downstream import DEFAULT_SUBSAMPLE_SEED, stratified_subsample

if TYPE_CHECKING:
    from evalfarm.taskdata.downstream import DownstreamTask


Backend = Literal["sklearn", "torch", "auto"]
C_GRID: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
DEFAULT_SEED = DEFAULT_SUBSAMPLE_SEED  # 1111, SentEval's


def cv_folds(labels: np.ndarray, k: int, seed: int = DEFAULT_SEED) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified, shuffled k-fold split (scikit-learn's, seeded): ``[(train_rows, test_rows), …]``."""
    labels = np.asarray(labels)
    from sklearn.model_selection import StratifiedKFold  # here: importing the scorers never loads sklearn

    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return [(tr.astype(np.int64), te.astype(np.int64)) for tr, te in skf.split(np.zeros(len(labels)), labels)]


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
