"""The solver fronts: scikit-learn's per-fit reference and the torch engine's batched pass (:class:`_Solver`,
:func:`decision_values`), with the thread limits they run under."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

import numpy as np

from evalfarm.classify.engine import DEFAULT_DTYPE, DTYPES, _c_path_rounds, _Problem
from evalfarm.classify.features import Fit, _inverse_scales, _moments, _train_sets, standardisation

if TYPE_CHECKING:
    import torch


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
