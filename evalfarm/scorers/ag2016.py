"""Avraham & Goldberg (2016), "Improving Reliability of Word Similarity Evaluation by Redesigning Annotation Task
and Performance Measure" (RepEval, W16-2519): word similarity scored by the reliability of each annotation.

Task kind ``ag2016`` (word or sentence level: a sentence model embeds each word as a text). Each comparison is a
triplet (t; w1, w2) with R1, the share of annotators who judged w1 the more similar to t. With the cosine of the
model's raw vectors (float64):

- δ = +1 if sim(t, w1) > sim(t, w2), else −1 (a tie in sim takes the paper's "otherwise", δ = −1, and is counted:
  ``n_ties``);
- s = δ · (2·R1 − 1);
- score = Σ max(s, 0) / Σ |s| (NaN when Σ |s| = 0: nothing scored, or every comparison a 50/50 split).

Reported per file (subset = the file's role in the task), per file and comparison type (``<file>:positive``,
``:distractor``, ``:random``) and pooled over the files (``all``, ``all:<type>``); the primary number is ``all``.
A comparison with an out-of-vocabulary word (a word model that lacks t, w1 or w2) is skipped, as the reference
evaluator does; ``coverage`` (subset ``all``) is the share of comparisons scored. Language-agnostic: the files
decide the language (the shipped sets are Hebrew: an English word model covers almost nothing, and its unit is
flagged thin, and degenerate past the OOV bound of :mod:`evalfarm.quality`, never a number that looks like a
result).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from evalfarm.catalog.specs import TaskSpec
from evalfarm.preprocess import Protocol
from evalfarm.scorers import register
from evalfarm.scorers.base import MetricRow, RunOptions, Scorer, ScoreResult, TextVectors, ThinRule
from evalfarm.taskdata.ag2016 import COMPARISON_TYPES, Comparisons

MIN_COVERAGE = 0.5
"""Below half of the comparisons scored, the number is not the dataset's score (``thin_rules``)."""


class AG2016Task(TaskSpec):
    """Triplet files of the AG format, one role per file (the role names the file's subset)."""

    kind: Literal["ag2016"] = "ag2016"
    level: Literal["word", "sentence"]


@dataclass
class AGData:
    """The task's comparisons and the distinct words to embed."""

    comparisons: Comparisons
    texts: list[str]
    subsets: list[str]  # file roles, in task order


def ag_score(s: np.ndarray) -> float:
    """Σ max(s, 0) / Σ |s| (NaN when Σ |s| is 0)."""
    s = np.asarray(s, dtype=np.float64)
    denom = float(np.abs(s).sum())
    return float(np.clip(s, 0, None).sum() / denom) if denom > 0 else float("nan")


def triplet_scores(sim1: np.ndarray, sim2: np.ndarray, r1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(s, tie) per comparison: s = δ (2 R1 − 1), δ = +1 iff sim1 > sim2 strictly; tie: sim1 == sim2."""
    delta = np.where(sim1 > sim2, 1.0, -1.0)
    return delta * (2.0 * np.asarray(r1, dtype=np.float64) - 1.0), sim1 == sim2


def _unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


@register
class AG2016Scorer(Scorer[AG2016Task, AGData]):
    name = "ag2016"
    version = "1"
    task_spec = AG2016Task
    primary_metric = "ag_score"
    role = "diagnostic"
    description = (
        "Avraham & Goldberg 2016: triplet choices weighted by annotator agreement, Σmax(s,0)/Σ|s|, per file and "
        "comparison type"
    )
    thin_rules = (ThinRule("coverage", at_least=MIN_COVERAGE),)
    """Too thin when under half of the comparisons are scored (an English word model on the Hebrew sets covers a
    few per cent). The multilingual sentence encoders embed every word: coverage 1."""

    def params(self, task: AG2016Task, options: RunOptions) -> dict[str, Any]:
        return {
            "similarity": "cos",
            "protocol": Protocol("raw").key(),
            "oov": "comparisons skipped",
            "ties": "delta -1",
        }

    def load(self, task: AG2016Task) -> AGData:
        from evalfarm.taskdata.ag2016 import read_ag_file
        from evalfarm.taskdata.data import task_file

        comparisons = Comparisons()
        for role in task.files:
            read_ag_file(task_file(task, role), role, comparisons)
        return AGData(comparisons, comparisons.words(), list(task.files))

    def is_primary(self, row: MetricRow, task: AG2016Task | None, data: AGData) -> bool:
        """The pooled score only (subset ``all``)."""
        return super().is_primary(row, task, data) and row.subset == "all"

    def in_profile(self, metric: str, subset: str) -> bool:
        """The pooled score and its comparison types (``all``, ``all:<type>``); the per-file ones stay in metrics."""
        return super().in_profile(metric, subset) and (subset == "all" or subset.startswith("all:"))

    def score(
        self,
        task: AG2016Task,
        data: AGData,
        vectors: TextVectors,
        params: dict[str, Any],
        *,
        device: str | None = None,
    ) -> ScoreResult:
        c = data.comparisons
        index = {t: i for i, t in enumerate(data.texts)}
        t, a, b = (np.array([index[w] for w in col], dtype=np.int64) for col in (c.target, c.w1, c.w2))
        known = ~(vectors.oov[t] | vectors.oov[a] | vectors.oov[b])
        x = _unit(np.asarray(vectors.emb, dtype=np.float64))
        sim1 = (x[t] * x[a]).sum(axis=1)
        sim2 = (x[t] * x[b]).sum(axis=1)
        s, tie = triplet_scores(sim1, sim2, np.asarray(c.r1))
        kind = np.asarray(c.kind)
        subset = np.asarray(c.subset)
        groups: list[tuple[str, np.ndarray]] = [("all", np.ones(len(c), dtype=bool))]
        groups += [(f"all:{k}", kind == k) for k in COMPARISON_TYPES]
        for name in data.subsets:
            groups.append((name, subset == name))
            groups += [(f"{name}:{k}", (subset == name) & (kind == k)) for k in COMPARISON_TYPES]
        out = ScoreResult()
        for name, member in groups:
            if not member.any():  # a type the file does not have (basic/vb has no positives)
                continue
            scored = member & known
            out.rows += [
                MetricRow("ag_score", ag_score(s[scored]), subset=name, variant="cos"),
                MetricRow("n_comparisons", float(scored.sum()), subset=name, variant="cos"),
                MetricRow("n_ties", float((tie & scored).sum()), subset=name, variant="cos"),
            ]
        out.rows.append(MetricRow("coverage", float(known.mean()) if len(c) else 0.0, variant="cos"))
        n_ties = int((tie & known).sum())
        if n_ties:
            out.notes.append(f"{n_ties} comparisons tie in similarity (δ = −1, counted in n_ties)")
        return out
