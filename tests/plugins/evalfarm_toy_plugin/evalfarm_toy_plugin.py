"""A toy evalfarm plug-in: a model kind and two task kinds that live outside evalfarm, found through entry points.

- Model kind ``hashing-bow``: a sentence encoder without weights. Each text's character 3-grams (padded with a
  space; lower-cased with ``lowercase: true``) are hashed (CRC-32, the same in every process) into 64 buckets and
  counted, so the vector's norm grows with the text's length.
- Task kind ``length-agreement``: a text file of sentences (one per line, role ``texts``); the metric is the Spearman
  correlation between each sentence's embedding norm and its length in characters.
- Task kind ``length-classes``, a downstream benchmark (``role = "downstream"``): the same kind of file; the metric
  is the leave-one-out accuracy of a nearest-centroid classifier telling the sentences longer than the median from
  the others by their embeddings. Declaring the role is all it takes for evalfarm's correlation views and report to
  treat it as a downstream task beside the SentEval-style ones.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from evalfarm.catalog.specs import ModelSpec, TaskSpec
from evalfarm.metrics import MetricInfo
from evalfarm.plugins import LoadContext, ModelKind
from evalfarm.scorers.base import MetricRow, Scorer, ScoreResult, TextVectors

DIM = 64
N = 3
TEXTS = MetricInfo(None, 0.0, float("inf"), "sum", "count", "texts scored")
"""The kinds' own metric (``spearman`` and ``accuracy`` are evalfarm's declarations, evalfarm/metrics.py)."""


class HashingBow:
    """Counts of hashed character n-grams: deterministic, no weights, numpy only."""

    level: Literal["sentence"] = "sentence"
    dim = DIM

    def __init__(self, *, lowercase: bool = False) -> None:
        self.lowercase = lowercase
        self.spec_id = ""
        self.provenance: dict[str, Any] = {}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            padded = f" {text.lower() if self.lowercase else text} "
            for j in range(len(padded) - N + 1):
                out[i, zlib.crc32(padded[j : j + N].encode("utf-8")) % DIM] += 1.0
        return out


def _check(spec: ModelSpec) -> None:
    if "max_length" in spec.model_fields_set:
        raise ValueError(f"model {spec.id!r}: hashing-bow counts every n-gram; it truncates nothing ('max_length')")


def _load(spec: ModelSpec, ctx: LoadContext) -> tuple[HashingBow, dict[str, Any]]:
    return HashingBow(lowercase=spec.lowercase), {"buckets": DIM, "ngram": N}


HASHING_BOW = ModelKind(
    name="hashing-bow",
    description="Hashed character 3-gram counts in 64 buckets (a toy plug-in kind without weights).",
    levels=("sentence",),
    load=_load,
    check=_check,
    libraries=("numpy",),
    cost=0.01,
    small=True,
    needs_source=False,
    fields=("lowercase",),
)


class LengthTask(TaskSpec):
    """Sentences in a text file (role ``texts``), one per line."""

    kind: Literal["length-agreement"] = "length-agreement"


@dataclass
class Sentences:
    texts: list[str]


class LengthAgreement(Scorer):
    """Spearman correlation of embedding norm and text length."""

    name = "length-agreement"
    version = "1"
    task_spec = LengthTask
    primary_metric = "spearman"
    declared_metrics = {"texts": TEXTS}
    description = "Spearman correlation between a sentence's embedding norm and its length in characters."

    def load(self, task: TaskSpec) -> Sentences:
        from evalfarm.taskdata.data import task_file

        lines = task_file(task, "texts").read_text(encoding="utf-8").splitlines()
        return Sentences(list(dict.fromkeys(line.strip() for line in lines if line.strip())))

    def score(
        self,
        task: TaskSpec,
        data: Sentences,
        vectors: TextVectors,
        params: dict[str, Any],
        *,
        device: str | None = None,
    ) -> ScoreResult:
        from scipy.stats import spearmanr

        norms = np.linalg.norm(vectors.emb, axis=1)
        lengths = np.array([len(t) for t in data.texts], dtype=np.float64)
        rho = float(spearmanr(norms, lengths).statistic)
        return ScoreResult([MetricRow("spearman", rho), MetricRow("texts", float(len(data.texts)))])


class LengthClassesTask(TaskSpec):
    """Sentences in a text file (role ``texts``), one per line: classified as longer than the median or not."""

    kind: Literal["length-classes"] = "length-classes"


class LengthClasses(Scorer):
    """Leave-one-out nearest-centroid accuracy on long vs short sentences: a downstream benchmark."""

    name = "length-classes"
    version = "1"
    task_spec = LengthClassesTask
    primary_metric = "accuracy"
    declared_metrics = {"texts": TEXTS}
    role = "downstream"
    description = "Leave-one-out nearest-centroid accuracy telling sentences longer than the median from the rest."

    def load(self, task: TaskSpec) -> Sentences:
        return LengthAgreement().load(task)

    def score(
        self,
        task: TaskSpec,
        data: Sentences,
        vectors: TextVectors,
        params: dict[str, Any],
        *,
        device: str | None = None,
    ) -> ScoreResult:
        lengths = np.array([len(t) for t in data.texts], dtype=np.float64)
        labels = lengths > np.median(lengths)
        x = vectors.emb.astype(np.float64)
        right = 0
        for i in range(len(x)):
            keep = np.arange(len(x)) != i
            centroids = [x[keep & (labels == c)].mean(0) for c in (False, True)]
            guess = int(np.argmin([np.linalg.norm(x[i] - c) for c in centroids]))
            right += int(bool(guess) == labels[i])
        return ScoreResult([MetricRow("accuracy", right / len(x)), MetricRow("texts", float(len(x)))])
