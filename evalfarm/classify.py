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

Every model standardises its features with the mean and standard deviation of its own training rows only
(zero-variance columns are left unscaled, as ``StandardScaler`` does). Folds come from scikit-learn's
``StratifiedKFold(shuffle=True, random_state=seed)``; nothing else is random, so the same inputs give the same
numbers. ``inner_k`` defaults to 5 (SentEval uses 10 there; 5 halves the cost of choosing C).

The model and its penalty, identical in both backends: multinomial logistic regression (binary logistic with
one weight vector for two classes, as scikit-learn) with an unpenalised intercept, minimising
``mean_i CE_i + (lam / 2) * ||W||^2`` over the n training rows, where ``lam = 1 / (C * n)``: exactly
scikit-learn's ``C * sum_i CE_i + ||W||^2 / 2`` divided by ``C * n``, so one C means the same model in both.
``C_GRID`` spans 1e-4 … 10 on standardised features (SentEval's 2^-2 … 2^3 was meant for raw features).

Backends, behind the one function:

- ``sklearn``: ``StandardScaler`` + ``LogisticRegression(solver="lbfgs")`` per (fold, C), float64, on CPU.
- ``torch``: every model of the protocol (all folds, inner folds and C values: 360 for a 10×5-fold CV over 6 C)
  stacked in a batch dimension and solved at once by a batched L-BFGS (own history and Armijo step per model).
  The training folds are row masks over one shared feature matrix, and each model's standardisation is folded
  into its weights, so every iteration is a single ``X @ W`` product over all models. Meant for GPU workers;
  it runs on CPU with the same code, and is faster than scikit-learn there too on the CV tasks (360 models;
  ``benchmarks/bench_classify.py``). Float64 by default: C is chosen on accuracies that differ by a few
  predictions, so both backends must reach the same optimum (``tol=1e-6``). ``dtype="float32"`` (for GPUs
  without fast float64) stops earlier, when the float32 loss no longer resolves a decrease, so its accuracies can
  differ from scikit-learn's by a fraction of a point (``benchmarks/README.md``).

Both backends stop a model when the largest gradient entry of the (mean-scaled) objective is at most ``tol``
or an iteration no longer decreases it relatively by more than 64 machine epsilons (scipy's L-BFGS-B rules,
which scikit-learn uses). With these settings the two agree on every one of the ten tasks on GloVe
bag-of-words features (``tests/test_classify.py``).

``max_train`` cuts the training part (``train``, or the whole set for CV) to a seeded, stratified sample
(:func:`evalfarm.taskdata.downstream.stratified_subsample`); ``None`` (the default) uses every row.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from evalfarm.taskdata.downstream import DEFAULT_SUBSAMPLE_SEED, stratified_subsample

if TYPE_CHECKING:
    from evalfarm.taskdata.downstream import DownstreamTask

Backend = Literal["sklearn", "torch", "auto"]
C_GRID: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
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
    backend: Backend = "sklearn",
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
    dtype: str = "float64",
    threads: int | None = None,
) -> ClassifyResult:
    """Evaluate frozen features on one task: ``data`` is ``{"cv": (X, y)}`` or ``{"train", "dev"?, "test"}``.

    ``X`` are float32 features (rows = samples), ``y`` integer labels 0..K-1. ``backend="auto"`` takes torch
    when CUDA is available, scikit-learn otherwise; ``device`` and ``dtype`` only concern torch. ``threads``
    caps the BLAS / OpenMP / torch threads during the call (None: unchanged): the per-fold problems are small,
    and on a loaded machine spinning thread pools can cost far more than they bring.
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
        backend = "torch" if _cuda_available() else "sklearn"
    if backend not in ("sklearn", "torch"):
        raise ValueError(f"unknown backend {backend!r}: use 'sklearn', 'torch' or 'auto'")
    X, y, blocks, n_train, n_test = _layout(protocol, parts, c_grid, k, inner_k, seed)
    fits = [f for block in blocks for f in block.fits]
    scores = decision_values(
        X,
        y,
        fits,
        n_classes=K,
        backend=backend,
        tol=tol,
        max_iter=max_iter,
        device=device,
        dtype=dtype,
        threads=threads,
    )
    preds = [predict_from_scores(z) for z in scores]
    start = 0
    for block in blocks:  # each block reads its own slice of the one batched solve
        block.offset, start = start, start + len(block.fits)
    return _result(protocol, backend, c_grid, blocks, preds, y, f1_label, n_train, n_test)


def _result(
    protocol: str,
    backend: str,
    c_grid: tuple[float, ...],
    blocks: list[_Block],
    preds: list[np.ndarray],
    y: np.ndarray,
    f1_label: int | None,
    n_train: int,
    n_test: int,
) -> ClassifyResult:
    """Each block's chosen C and test score, averaged over the blocks (the outer folds of ``cv``)."""
    accs, f1s, dev, chosen = [], [], [], []
    for block in blocks:
        best, score, pred = block.choose(preds, y)
        gold = y[block.test_rows]
        accs.append(_accuracy(pred, gold))
        if f1_label is not None:
            f1s.append(_f1(pred, gold, f1_label))
        dev.append(score)
        chosen.append(c_grid[best])
    return ClassifyResult(
        protocol=protocol,
        backend=backend,
        accuracy=float(np.mean(accs)),
        accuracy_std=float(np.std(accs)) if protocol == "cv" else math.nan,
        dev_accuracy=float(np.mean(dev)),
        chosen_c=tuple(chosen),
        fold_accuracies=tuple(accs),
        n_train=n_train,
        n_test=n_test,
        n_models=sum(len(b.fits) for b in blocks),
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

    ``fits`` holds, in order, one selection model per (C, inner fold) — or per C with a dev split — and, for
    inner folds, one refit per C on all the training rows (only the chosen one is scored)."""

    fits: list[Fit]
    test_rows: np.ndarray
    n_c: int
    inner: list[tuple[np.ndarray, np.ndarray]] | None  # None: dev split
    dev_rows: np.ndarray | None = None
    offset: int = 0

    @classmethod
    def dev_split(cls, train: np.ndarray, dev: np.ndarray, test: np.ndarray, c_grid: tuple[float, ...]) -> _Block:
        # one model per C predicts dev and test: SentEval refits the chosen C on the same rows, the same model
        evaluate_rows = np.concatenate([dev, test])
        return cls([Fit(train, c, evaluate_rows) for c in c_grid], test, len(c_grid), None, dev)

    @classmethod
    def inner_cv(
        cls, y: np.ndarray, train: np.ndarray, test: np.ndarray, c_grid: tuple[float, ...], inner_k: int, seed: int
    ) -> _Block:
        inner = [(train[a], train[b]) for a, b in cv_folds(y[train], inner_k, seed)]
        fits = [Fit(a, c, b) for c in c_grid for a, b in inner] + [Fit(train, c, test) for c in c_grid]
        return cls(fits, test, len(c_grid), inner)

    def choose(self, preds: list[np.ndarray], y: np.ndarray) -> tuple[int, float, np.ndarray]:
        """(index of the chosen C, its selection accuracy, the test predictions of its model)."""
        mine = preds[self.offset : self.offset + len(self.fits)]
        if self.inner is None:
            assert self.dev_rows is not None  # a dev split (dev_split) holds its dev rows
            n_dev = len(self.dev_rows)
            scores = [_accuracy(p[:n_dev], y[self.dev_rows]) for p in mine]
            best = _best(scores)
            return best, scores[best], mine[best][n_dev:]
        k = len(self.inner)
        scores = [
            float(np.mean([_accuracy(mine[ci * k + j], y[held]) for j, (_, held) in enumerate(self.inner)]))
            for ci in range(self.n_c)
        ]
        best = _best(scores)
        return best, scores[best], mine[self.n_c * k + best]


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


# --- backends --------------------------------------------------------------------------------------------


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
    dtype: str = "float64",
    threads: int | None = None,
) -> list[np.ndarray]:
    """Train every fit (standardised on its own training rows) and return its decision values on its
    ``evaluate`` rows: ``(m,)`` logits of class 1 for two classes, ``(m, K)`` class logits otherwise.

    The building block of :func:`evaluate`; the torch backend solves all fits in one batch.
    """
    fits = list(fits)
    with _limit_threads(threads, torch_too=backend == "torch"):
        if backend == "sklearn":
            return _solve_sklearn(X, y, n_classes, fits, tol=tol, max_iter=max_iter)
        if backend == "torch":
            return _solve_torch(X, y, n_classes, fits, tol=tol, max_iter=max_iter, device=device, dtype=dtype)
    raise ValueError(f"unknown backend {backend!r}: use 'sklearn' or 'torch'")


def _solve_sklearn(
    X: np.ndarray, y: np.ndarray, n_classes: int, fits: list[Fit], *, tol: float, max_iter: int
) -> list[np.ndarray]:
    """One ``StandardScaler`` + ``LogisticRegression`` per fit, in float64 (the reference). Returns each fit's
    decision values on its ``evaluate`` rows: ``(m,)`` for two classes, ``(m, K)`` otherwise."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    X64 = X.astype(np.float64)
    groups: dict[int, list[int]] = {}  # fits sharing one training-row array share one scaler
    for i, f in enumerate(fits):
        groups.setdefault(id(f.train), []).append(i)
    out: list[np.ndarray] = [np.empty(0)] * len(fits)
    for members in groups.values():
        train = fits[members[0]].train
        scaler = StandardScaler().fit(X64[train])
        Xtr = scaler.transform(X64[train])
        for i in members:
            f = fits[i]
            clf = LogisticRegression(C=f.c, tol=tol, max_iter=max_iter).fit(Xtr, y[train])
            Xe = scaler.transform(X64[f.evaluate])
            if len(clf.classes_) == n_classes:
                out[i] = clf.decision_function(Xe)
            else:  # a class absent from this training set can never be predicted
                out[i] = np.full((len(Xe), n_classes), -np.inf)
                out[i][:, clf.classes_] = clf.predict_log_proba(Xe)
    return out


# The logits of one batch (rows x models x classes) stay under this many elements; larger protocols are
# solved in several batches of models (same results: the models are independent).
TORCH_BATCH_ELEMENTS = 1 << 24


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
) -> list[np.ndarray]:
    import torch

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tdtype = {"float32": torch.float32, "float64": torch.float64}[dtype]
    # Conditioning only: centre and scale by the rows that train some model. Each model re-standardises with
    # its own training rows on top of this, and standardisation is invariant to a prior per-column affine map,
    # so the models are exactly those fitted on the raw features; the products just lose less precision.
    rows = np.unique(np.concatenate([f.train for f in fits]))
    m = X[rows].mean(axis=0, dtype=np.float64)
    s = X[rows].std(axis=0, dtype=np.float64)
    s[s < 1e-12] = 1.0

    def to_device(idx: np.ndarray):
        return torch.from_numpy((X[idx] - m) / s).to(dev, tdtype)

    # Models are fitted on the rows that train some model only, and predict the rows some model evaluates:
    # held-out test rows never enter the training products.
    X_train, y_train = to_device(rows), torch.from_numpy(y[rows]).to(dev)
    local = np.full(len(y), -1, dtype=np.int64)
    local[rows] = np.arange(len(rows))
    eval_rows = np.unique(np.concatenate([f.evaluate for f in fits]))
    X_eval = to_device(eval_rows)
    eval_local = np.full(len(y), -1, dtype=np.int64)
    eval_local[eval_rows] = np.arange(len(eval_rows))
    K = 1 if n_classes == 2 else n_classes
    per_batch = max(1, TORCH_BATCH_ELEMENTS // (max(len(rows), len(eval_rows)) * K))
    out: list[np.ndarray] = []
    for start in range(0, len(fits), per_batch):
        batch = [Fit(local[f.train], f.c, eval_local[f.evaluate]) for f in fits[start : start + per_batch]]
        out += _torch_batch(X_train, y_train, X_eval, K, batch, tol=tol, max_iter=max_iter)
    return out


def _torch_batch(Xt, yt, X_eval, K: int, fits: list[Fit], *, tol: float, max_iter: int) -> list[np.ndarray]:
    """Fit a batch of models on rows of ``Xt`` (``fit.train`` indexes them); decision values on rows of ``X_eval``."""
    import torch
    import torch.nn.functional as F

    n, d = Xt.shape
    B = len(fits)
    dev, dt = Xt.device, Xt.dtype
    M64, nb64, mu, sd = _fold_standardisation(Xt, fits)
    Mt = M64.T.to(dt).contiguous()  # (n, B)
    nb = nb64.to(dt)
    lam = torch.tensor([1.0 / f.c for f in fits], dtype=torch.float64, device=dev) / nb64
    lam = lam.to(dt)
    P = d * K + K
    yf = yt.to(dt)[:, None]
    every = torch.arange(B, device=dev)

    def logits(theta: torch.Tensor, X: torch.Tensor, models: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (rows of X, len(models), K) of the given models, and their weights W."""
        m = len(models)
        W = theta[:, : d * K].view(m, d, K)
        b = theta[:, d * K :]
        mu_m, sd_m = mu[models], sd[models]
        V = W / sd_m[:, :, None]
        c = b - torch.einsum("bd,bdk->bk", mu_m / sd_m, W)
        Z = (X @ V.permute(1, 0, 2).reshape(d, m * K)).view(X.shape[0], m, K) + c[None]
        return Z, W

    def fg(theta: torch.Tensor, models: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.enable_grad():
            theta = theta.detach().requires_grad_(True)
            Z, W = logits(theta, Xt, models)
            if K == 1:
                z = Z[..., 0]
                loss = F.softplus(z) - yf * z
            else:
                loss = torch.logsumexp(Z, dim=-1) - Z.gather(2, yt.view(n, 1, 1).expand(n, len(models), 1)).squeeze(2)
            mask = Mt if len(models) == B else Mt[:, models]
            f = (loss * mask).sum(0) / nb[models] + 0.5 * lam[models] * (W * W).sum(dim=(1, 2))
            (g,) = torch.autograd.grad(f.sum(), theta)
        return f.detach(), g

    theta = torch.zeros(B, P, dtype=dt, device=dev)
    ftol = 64 * torch.finfo(dt).eps  # scipy's L-BFGS-B stopping rule on the relative decrease, as scikit-learn's
    theta, converged, gmax = batched_lbfgs(fg, theta, tol=tol, ftol=ftol, max_iter=max_iter)
    if not bool(converged.all()):
        warnings.warn(
            f"torch logistic regression: {int((~converged).sum())} of {B} models stopped before the gradient "
            f"fell below tol={tol} (largest gradient entry {float(gmax.max()):.2e}); raise max_iter or tol",
            stacklevel=3,
        )
    with torch.no_grad():
        Z, _ = logits(theta, X_eval, every)
        scores = (Z[..., 0] if K == 1 else Z).to(torch.float64).cpu().numpy()  # (rows of X_eval, B[, K])
    return [scores[f.evaluate, b] for b, f in enumerate(fits)]


def _fold_standardisation(Xt, fits: list[Fit]):
    """Each model's training-row mask (B, n) and row count in float64, and the mean and standard deviation of its
    own training rows in ``Xt``'s dtype (computed in float64: E[x^2] - mu^2 must not cancel badly)."""
    import torch

    mask_np = np.zeros((len(fits), Xt.shape[0]), dtype=np.float64)
    for b, f in enumerate(fits):
        mask_np[b, f.train] = 1.0
    M64 = torch.from_numpy(mask_np).to(Xt.device)
    nb64 = M64.sum(1)
    X64 = Xt.to(torch.float64)
    mu64 = (M64 @ X64) / nb64[:, None]
    var64 = (M64 @ (X64 * X64)) / nb64[:, None] - mu64 * mu64
    sd64 = var64.clamp_min(0).sqrt()
    sd64 = torch.where(sd64 < 1e-6, torch.ones_like(sd64), sd64)  # constant within the fold: left unscaled
    return M64, nb64, mu64.to(Xt.dtype), sd64.to(Xt.dtype)


def batched_lbfgs(
    fg: Callable,
    theta,
    *,
    tol: float,
    max_iter: int,
    ftol: float = 0.0,
    history: int = 10,
    max_halvings: int = 40,
):
    """Minimise B independent smooth objectives at once; ``fg(theta_rows, rows) -> (f, grad)`` evaluates the
    objectives ``rows`` (an index tensor) at ``theta_rows`` (len(rows), P).

    Each row has its own L-BFGS memory, initial scaling and backtracking (Armijo) step. A row converges when
    its largest gradient entry is at most ``tol``, or when a step decreases it by no more than
    ``ftol * max(|f|, |f_new|, 1)`` (scipy's L-BFGS-B rules); it stops unconverged when no step decreases it.
    Each ``fg`` call evaluates only the rows still moving, so converged models cost nothing while the slow
    ones (weak penalties) finish. Returns ``(theta, converged (B,) bool, max |grad| (B,))``.
    """
    import torch

    B, P = theta.shape
    every = torch.arange(B, device=theta.device)
    f, g = fg(theta, every)
    S = theta.new_zeros(history, B, P)
    Y = theta.new_zeros(history, B, P)
    rho = theta.new_zeros(history, B)
    gamma = theta.new_ones(B)
    gmax = g.abs().amax(dim=1)
    active = gmax > tol
    flat = torch.zeros_like(active)  # rows stopped by the relative-decrease rule
    stored = 0
    for _ in range(max_iter):
        if not bool(active.any()):
            break
        direction, gd = _lbfgs_direction(g, S, Y, rho, gamma, stored)
        new_theta, new_f, new_g, stalled = _armijo(fg, theta, f, g, direction, gd, active, max_halvings)
        done = active & ~stalled
        gamma = _remember(S, Y, rho, gamma, stored % history, new_theta - theta, new_g - g, done)
        stored += 1
        decrease = f - new_f
        scale = torch.maximum(torch.maximum(f.abs(), new_f.abs()), torch.ones_like(f))
        flat = flat | (done & (decrease <= ftol * scale))
        theta, f, g = new_theta, new_f, new_g
        gmax = g.abs().amax(dim=1)
        active = done & ~flat & (gmax > tol)
    converged = (gmax <= tol) | flat
    return theta, converged, gmax


def _lbfgs_direction(g, S, Y, rho, gamma, stored: int):
    """Each row's L-BFGS direction from its stored pairs (the two-loop recursion, newest pair first; an empty slot
    has rho = 0 and changes nothing), steepest descent where that points uphill. Returns (direction, g·direction)."""
    import torch

    history = S.shape[0]
    q = g.clone()
    order = [(stored - 1 - j) % history for j in range(min(stored, history))]
    alphas = []
    for j in order:
        a = rho[j] * (S[j] * q).sum(1)
        q -= a[:, None] * Y[j]
        alphas.append(a)
    r = gamma[:, None] * q
    for j, a in zip(reversed(order), reversed(alphas), strict=True):
        beta = rho[j] * (Y[j] * r).sum(1)
        r += (a - beta)[:, None] * S[j]
    direction = -r
    gd = (g * direction).sum(1)
    uphill = gd >= 0  # lost curvature information: fall back to steepest descent
    if bool(uphill.any()):
        direction = torch.where(uphill[:, None], -g, direction)
        gd = (g * direction).sum(1)
    return direction, gd


def _armijo(fg: Callable, theta, f, g, direction, gd, active, max_halvings: int):
    """Backtracking (Armijo) line search over the moving rows only, each row halving its own step. Returns the new
    (theta, f, grad) (unchanged for rows that found no decrease) and those stalled rows."""
    import torch

    step = theta.new_ones(theta.shape[0])
    pending = active.clone()
    new_theta, new_f, new_g = theta.clone(), f.clone(), g.clone()
    for _ in range(max_halvings):
        idx = pending.nonzero().squeeze(1)
        cand = theta[idx] + step[idx, None] * direction[idx]
        fc, gc = fg(cand, idx)
        ok = fc <= f[idx] + 1e-4 * step[idx] * gd[idx]
        won = idx[ok]
        new_theta[won], new_f[won], new_g[won] = cand[ok], fc[ok], gc[ok]
        pending[won] = False
        if not bool(pending.any()):
            break
        step = torch.where(pending, step * 0.5, step)
    return new_theta, new_f, new_g, pending


def _remember(S, Y, rho, gamma, slot: int, s, yv, done):
    """Store each row's step ``s`` and gradient change ``yv`` in ``slot`` where the curvature condition holds (an
    empty pair elsewhere); returns the new initial scaling ``gamma``."""
    import torch

    sy = (s * yv).sum(1)
    yy = (yv * yv).sum(1)
    valid = done & (sy > 1e-10 * yy) & (yy > 0)
    S[slot] = s * valid[:, None]
    Y[slot] = yv * valid[:, None]
    rho[slot] = torch.where(valid, 1.0 / torch.where(valid, sy, torch.ones_like(sy)), torch.zeros_like(sy))
    return torch.where(valid, sy / torch.where(valid, yy, torch.ones_like(yy)), gamma)
