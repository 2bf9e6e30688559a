"""Post-processing transforms fitted on a model's own embeddings: ABTT, PC removal, whitening (and, for sentence
embedders, Matryoshka truncation and int8 / binary quantisation: :mod:`evalfarm.encoders.compress`).

Everything is fitted from the ``dim x dim`` second-moment matrix, accumulated in float64 over row chunks, so a
400k x 300 vocabulary costs one pass and ~1 GB less memory than an SVD of the full matrix. The eigenvectors of
the (centred) second-moment matrix are the right singular vectors of the (centred) data matrix.

Fitting and applying run on one BLAS thread (:func:`_one_blas_thread`): LAPACK's eigensolver and SVD round
differently with the number of threads (the removed directions of a 300-d model differed in their last bits
between one and two threads), so a Ray worker (one thread per CPU share) and the in-process executor (every core)
would store different numbers for one post-processed model (issue 23.5).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np

from evalfarm.catalog.specs import PostProcess
from evalfarm.encoders.compress import Compression, ScalarQuantiser, SignBits, Truncation
from evalfarm.encoders.word_vectors import NonFiniteVectors, WordVectors

_CHUNK = 65536


@dataclass(frozen=True)
class FittedTransform:
    """A fitted post-processing transform; :meth:`apply` maps rows to float32.

    - ``abtt``: ``Y' = (Y - mean) - (Y - mean) C^T C``
    - ``pcr``: ``Y' = Y - Y C^T C``
    - ``whitening``: ``Y' = (Y - mean) W``
    where ``C`` holds the removed directions as rows (``components``, ``(d, dim)``).
    """

    method: Literal["abtt", "pcr", "whitening"]
    mean: np.ndarray | None
    components: np.ndarray | None = None
    W: np.ndarray | None = None
    n_fit: int = 0

    @property
    def in_dim(self) -> int:
        return int(self.W.shape[0] if self.W is not None else self._removed().shape[1])

    @property
    def out_dim(self) -> int:
        return int(self.W.shape[1]) if self.W is not None else self.in_dim

    def _removed(self) -> np.ndarray:
        """``components``: every transform without ``W`` (abtt, pcr) has them."""
        if self.components is None:
            raise ValueError(f"{self.method}: a fitted transform needs W or components, it has neither")
        return self.components

    def apply(self, Y: np.ndarray) -> np.ndarray:
        """Transform rows of ``Y`` (any float dtype; processed in float64 chunks) into float32."""
        Y = np.asarray(Y)
        if Y.ndim != 2 or Y.shape[1] != self.in_dim:
            raise ValueError(f"{self.method}: expected an (n, {self.in_dim}) matrix, got shape {Y.shape}")
        out = np.empty((Y.shape[0], self.out_dim), dtype=np.float32)
        with _one_blas_thread():
            for start in range(0, Y.shape[0], _CHUNK):
                block = Y[start : start + _CHUNK].astype(np.float64)
                if self.mean is not None:
                    block -= self.mean
                if self.W is not None:
                    block = block @ self.W
                else:
                    C = self._removed()
                    block -= (block @ C.T) @ C
                out[start : start + _CHUNK] = block
        return out


@contextmanager
def _one_blas_thread() -> Iterator[None]:
    """BLAS and LAPACK on one thread while fitting or applying: the same bits whatever the process's thread pool
    (the rank kernel pins its GEMM the same way); parallelism comes from the workers."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _moments(X: np.ndarray, center: bool) -> tuple[np.ndarray | None, np.ndarray]:
    """``(mean or None, M)`` with ``M = sum_i (x_i - mean)(x_i - mean)^T`` in float64."""
    n, dim = X.shape
    mean = None
    if center:
        acc = np.zeros(dim, dtype=np.float64)
        for start in range(0, n, _CHUNK):
            acc += X[start : start + _CHUNK].sum(axis=0, dtype=np.float64)
        mean = acc / n
    M = np.zeros((dim, dim), dtype=np.float64)
    for start in range(0, n, _CHUNK):
        block = X[start : start + _CHUNK].astype(np.float64)
        if mean is not None:
            block -= mean
        M += block.T @ block
    return mean, M


def _top_eigvecs(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (descending) and eigenvectors as rows of a symmetric PSD matrix."""
    vals, vecs = np.linalg.eigh(M)
    order = np.argsort(vals)[::-1]
    return np.clip(vals[order], 0.0, None), vecs[:, order].T


Transform = FittedTransform | Compression
"""What :func:`fit_postprocess` returns: each has ``apply(rows) -> float32 rows``."""


def fit_postprocess(X: np.ndarray | None, pp: PostProcess, *, eps: float = 1e-9) -> Transform:
    """Fit ``pp`` on the rows of ``X`` (``n x dim``), on one BLAS thread (see the module's docstring).

    Whitening follows Su et al. (2021): ``cov = np.cov(X - mean)``, ``U, S = svd(cov)``,
    ``W = U / sqrt(S + eps * S[0])`` keeping the first ``pp.d`` columns; ``eps`` is relative to the largest
    eigenvalue so rank-deficient inputs (fewer rows than dims) stay finite. ``truncate``, ``int8`` and ``binary``
    are :mod:`evalfarm.encoders.compress`'s (int8 calibrated on ``X``; the other two fit nothing: ``X`` may be
    None).
    """
    if pp.method == "truncate":
        assert pp.d is not None
        return Truncation(pp.d, layer_norm=pp.layer_norm)
    if pp.method == "binary":
        return SignBits()
    if X is None:
        raise ValueError(f"post-processing {pp.method!r} is fitted on a set of vectors; none given")
    if pp.method == "int8":
        return ScalarQuantiser.calibrate(X)
    with _one_blas_thread():
        return _fit(X, pp, eps)


def _fit(X: np.ndarray, pp: PostProcess, eps: float) -> FittedTransform:
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"post-processing needs a 2-D matrix, got shape {X.shape}")
    n, dim = X.shape
    if n == 0:
        raise ValueError("post-processing needs at least one row to fit on")
    if pp.d is not None and pp.d > dim:
        raise ValueError(f"{pp.method}: d={pp.d} exceeds the embedding dimension {dim}")
    if pp.method in ("abtt", "pcr"):
        mean, M = _moments(X, center=pp.method == "abtt")
        _require_finite(pp.method, X, mean=mean, moments=M)
        _, vecs = _top_eigvecs(M)
        t = FittedTransform(pp.method, mean, components=vecs[: pp.d].copy(), n_fit=n)
        _require_finite(pp.method, X, components=t.components)
        return t
    if pp.method == "whitening":
        if n < 2:
            raise ValueError("whitening needs at least two rows to estimate a covariance")
        mean, M = _moments(X, center=True)
        _require_finite(pp.method, X, mean=mean, covariance=M)
        cov = M / (n - 1)
        U, S, _ = np.linalg.svd(cov)
        k = pp.d or dim
        W = U[:, :k] / np.sqrt(S[:k] + eps * max(float(S[0]), 1e-300))
        _require_finite(pp.method, X, W=W)
        return FittedTransform("whitening", mean, W=W, n_fit=n)
    raise ValueError(f"unknown post-processing method {pp.method!r}")


def _require_finite(method: str, X: np.ndarray, **parts: np.ndarray | None) -> None:
    """A fitted transform with NaN or inf would turn every embedding it touches into NaN: an error naming why."""
    bad = [name for name, a in parts.items() if a is not None and not np.isfinite(a).all()]
    if not bad:
        return
    rows: list[int] = []
    n_bad = 0
    for start in range(0, X.shape[0], _CHUNK):
        idx = np.flatnonzero(~np.isfinite(X[start : start + _CHUNK]).all(axis=1)) + start
        n_bad += len(idx)
        rows.extend(idx[: 5 - len(rows)].tolist())
    why = (
        f"{n_bad} of the {X.shape[0]} input rows hold NaN or inf (rows {rows}{' ...' if n_bad > len(rows) else ''})"
        if n_bad
        else "the input is finite but its values overflow float64"
    )
    raise NonFiniteVectors(
        f"{method} post-processing: the fitted {' and '.join(bad)} hold NaN or inf: {why}. Fix the base model's "
        "vectors; a non-finite transform is never applied"
    )


class PostProcessedWordVectors(WordVectors):
    """A word model whose whole matrix is transformed once at load, fitted on the full vocabulary matrix.

    The vocabulary index is shared with the base model; OOV words still come back as zero rows.
    """

    def __init__(self, base: WordVectors, pp: PostProcess) -> None:
        if not isinstance(base, WordVectors):
            raise TypeError(f"word-level post-processing needs a word-vector model with a matrix, got {base!r}")
        self.transform = fit_postprocess(base.vectors, pp)
        super().__init__(
            None,
            self.transform.apply(base.vectors),
            index=base.index,
            lowercase=base.lowercase,
            name=f"{base.name}+{pp.method}",
        )
        self.base = base
        self.postprocess = pp
