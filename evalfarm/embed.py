"""Embed stage: a loaded model's embeddings of one pool's items, checked, written to Parquet atomically.

- Sentence texts are fed to the encoder sorted by length (batches of similar length pad less), then put back
  in item order.
- Word models report out-of-vocabulary items: their rows are null in Parquet with ``oov = true`` and the
  OOV policy (``mean`` / ``skip`` / ``zero``) is applied by the rank stage, so changing it needs no re-embed.
- Quality: any NaN/inf value fails the unit (nothing is ranked). All-zero rows that are not OOV (e.g. a
  bag-of-words sentence with no known word) are reported as an ``embed-quality`` failure row and handled like
  OOV rows, never silently ranked as if they were real vectors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evalfarm.pools.evalrank import RankPool
from evalfarm.warehouse import atomic_write_table, embeddings_table, now, read_embeddings


class EmbeddingQualityError(RuntimeError):
    """Embeddings that must not be ranked (NaN/inf, wrong shape)."""


@dataclass
class EmbedResult:
    path: Path
    n_items: int
    dim: int
    oov_count: int
    zero_count: int
    seconds: float
    metadata: dict[str, Any] = field(default_factory=dict)


def _encode_sorted(
    encode: Callable[[list[str]], np.ndarray], texts: list[str], chunk: int, progress: Callable[[int], None] | None
) -> np.ndarray:
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: np.ndarray | None = None
    for start in range(0, len(order), chunk):
        idx = order[start : start + chunk]
        vecs = np.asarray(encode([texts[i] for i in idx]), dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[0] != len(idx):
            raise EmbeddingQualityError(f"encoder returned shape {vecs.shape} for {len(idx)} texts")
        if out is None:
            out = np.empty((len(texts), vecs.shape[1]), dtype=np.float32)
        out[idx] = vecs
        if progress:
            progress(len(idx))
    assert out is not None
    return out


def compute_embeddings(
    encoder: Any,
    texts: list[str],
    *,
    chunk: int = 2048,
    progress: Callable[[int], None] | None = None,
    base_embeddings: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(matrix, oov mask, extra metadata) for ``texts``. Handles word lookup and sentence post-processing."""
    extra: dict[str, Any] = {}
    if hasattr(encoder, "lookup"):
        # The word protocol (evalfarm.preprocess): lower-cased keys, first occurrence wins, lower-cased lookups;
        # the raw vectors are stored and the vocabulary statistics travel with them.
        from evalfarm.preprocess import lowercased_view, vocab_stats

        view = lowercased_view(encoder)
        emb, oov = view.lookup(texts)
        emb = np.asarray(emb, dtype=np.float32)
        oov = np.asarray(oov, dtype=bool)
        try:
            extra["vocab_stats"] = vocab_stats(view.vectors, view.word_rows).to_meta()
        except ValueError as exc:  # NaN / inf anywhere in the vocabulary, not only in the pool's words
            raise EmbeddingQualityError(f"{exc}; nothing from this model is ranked") from None
        extra["vocab_size"] = int(view.vocab_size())
        if progress:
            progress(len(texts))
        return emb, oov, extra
    pp = getattr(encoder, "postprocess", None)
    if pp is not None:
        from evalfarm.encoders.postprocess import fit_postprocess

        base = base_embeddings
        if base is None:
            base = _encode_sorted(encoder.base.encode, texts, chunk, progress)
        elif progress:
            progress(len(texts))
        finite = np.isfinite(base).all(axis=1)
        if not finite.all():
            raise EmbeddingQualityError(f"base model produced NaN/inf for {int((~finite).sum())} items")
        emb = fit_postprocess(base, pp).apply(base).astype(np.float32)
        extra["postprocess_fitted_on"] = f"{len(texts)} pool items"
        return emb, np.zeros(len(texts), dtype=bool), extra
    emb = _encode_sorted(encoder.encode, texts, chunk, progress)
    return emb, np.zeros(len(texts), dtype=bool), extra


def embed_pool(
    encoder: Any,
    pool: RankPool,
    path: str | Path,
    *,
    metadata: dict[str, Any],
    filesystem: Any = None,
    progress: Callable[[int], None] | None = None,
    base_embeddings: np.ndarray | None = None,
) -> EmbedResult:
    """Embed every item of ``pool`` and write ``path`` atomically. Raises EmbeddingQualityError on NaN/inf."""
    t0 = time.perf_counter()
    texts = pool.items
    emb, oov, extra = compute_embeddings(encoder, texts, progress=progress, base_embeddings=base_embeddings)
    if emb.shape[0] != len(texts):
        raise EmbeddingQualityError(f"{emb.shape[0]} vectors for {len(texts)} items")
    bad = ~np.isfinite(emb).all(axis=1)
    if bad.any():
        examples = [texts[i] for i in np.flatnonzero(bad)[:3]]
        raise EmbeddingQualityError(
            f"{int(bad.sum())} of {len(texts)} vectors contain NaN/inf "
            f"(e.g. {examples}); nothing from this unit is ranked"
        )
    zero = (~oov) & ~np.any(emb != 0, axis=1)
    oov_all = oov | zero
    seconds = time.perf_counter() - t0
    meta = dict(metadata)
    meta.update(extra)
    meta.update(
        {
            "pool": pool.id,
            "dim": int(emb.shape[1]),
            "dtype": "float32",
            "n_items": len(texts),
            "oov_count": int(oov.sum()),
            "zero_count": int(zero.sum()),
            "seconds": round(seconds, 3),
            "created_at": now().isoformat(),
        }
    )
    table = embeddings_table(np.arange(len(texts)), texts, emb, oov_all, meta)
    atomic_write_table(table, path, filesystem=filesystem)
    return EmbedResult(
        path=Path(path),
        n_items=len(texts),
        dim=int(emb.shape[1]),
        oov_count=int(oov.sum()),
        zero_count=int(zero.sum()),
        seconds=seconds,
        metadata=meta,
    )


def load_embeddings(path: str | Path, *, filesystem: Any = None) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(matrix with OOV rows zero, OOV mask, metadata) of an embeddings file (local or on ``filesystem``)."""
    _, emb, oov, meta = read_embeddings(path, filesystem=filesystem)
    return emb, oov, meta
