"""HEROS minimal pairs (Chiang et al. 2023, "Revealing the Blind Spot of Sentence Encoder Evaluation by HEROS"):
what kind of similarity a sentence encoder captures, from pairs that differ in one word.

Task kind ``heros`` (sentences). Each original sentence has up to six minimal pairs (subsets ``synonym``,
``antonym``, ``typo``, ``random-word`` or the released set's ``random-mlm``, ``negation-main``,
``negation-antonym``). Score (HEROS Appendix D): the cosine of each pair's raw embeddings, normalised as

    (cos - cos_avg) / (1 - cos_avg),

where ``cos_avg`` is the mean cosine over the m x m pairs between the first m and the last m originals
(m = ``n_avg``, 500, or half the originals when there are fewer than 2m): how similar two unrelated sentences of the
set look to the model, so 0 means "as similar as unrelated sentences" and 1 "identical". Reported per subset: the
mean normalised similarity (``normalized_similarity``), the mean raw cosine (``cosine``) and the number of pairs
(``n_pairs``); and ``cos_avg`` itself (subset ``all``). An original or pair text the model cannot embed (OOV: a zero
vector) has cosine 0 with everything, and ``oov_rate`` says how many texts were.

The numbers are a profile, not a score: most subsets have no direction every user agrees on (a paraphrase model
should score ``antonym`` and ``negation-main`` low, a topic model high). The leaderboard's number is the one with a
direction: the ``synonym`` subset's normalised similarity (a meaning-preserving swap should keep the sentence near
itself; higher is better). Every other row is descriptive.

Data: ``format: evalfarm-build`` (default) names the generated set (``evalfarm data build heros``: the recipe in
:mod:`evalfarm.taskdata.build_heros`) by ``build`` (recipe, version, parameters, sha256) and lists the recipe's
inputs (GoEmotions dev / test) as ``files``; ``format: heros-released`` reads the released ``heros.tsv``
(``files: {pairs: ...}``): tab-separated with a header row, an ``Original`` column and one column per subset
(``Synonym``, ``Antonym``, ``Typo``, ``Random (MLM)``, ``Negation``, ``Negation of Antonym``; names are matched
case-insensitively, ``Negation`` is ``negation-main``; an empty cell is a missing pair).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from evalfarm.catalog.specs import TaskSpec
from evalfarm.preprocess import Protocol, prepare
from evalfarm.scorers import register
from evalfarm.scorers.base import MetricRow, RunOptions, Scorer, ScoreResult, TextVectors, ThinRule
from evalfarm.taskdata.build import BuildRef

N_AVG = 500
PRIMARY_SUBSET = "synonym"
RELEASED_COLUMNS = {
    "synonym": "synonym",
    "antonym": "antonym",
    "typo": "typo",
    "random (mlm)": "random-mlm",
    "random": "random-mlm",
    "mlm": "random-mlm",
    "negation": "negation-main",
    "negation (main)": "negation-main",
    "negation of antonym": "negation-antonym",
    "negation (antonym)": "negation-antonym",
    "antonym negation": "negation-antonym",
}
"""Released HEROS column name (lower-cased) -> subset."""


class HerosTask(TaskSpec):
    """A HEROS-style minimal-pair set: generated (``build``) or the released file (``files: {pairs: ...}``)."""

    kind: Literal["heros"] = "heros"
    level: Literal["sentence"] = "sentence"
    format: Literal["evalfarm-build", "heros-released"] = "evalfarm-build"
    build: BuildRef | None = None
    n_avg: int = N_AVG


@dataclass
class HerosData:
    """Originals and, per subset, each original's pair (None where the set has none)."""

    originals: list[str]
    subsets: dict[str, list[str | None]]
    texts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.texts:
            seen: dict[str, None] = dict.fromkeys(self.originals)
            for pairs in self.subsets.values():
                seen.update(dict.fromkeys(p for p in pairs if p))
            self.texts = list(seen)


def read_released(path: Path) -> HerosData:
    """The released ``heros.tsv`` (see the module docstring for its columns)."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    if not rows:
        raise ValueError(f"{path}: empty HEROS file")
    head = [h.strip().lower() for h in rows[0]]
    if "original" not in head:
        raise ValueError(f"{path}: no 'Original' column (columns: {', '.join(rows[0])})")
    oi = head.index("original")
    cols = {i: RELEASED_COLUMNS[h] for i, h in enumerate(head) if h in RELEASED_COLUMNS}
    unknown = [rows[0][i] for i, h in enumerate(head) if i != oi and h not in RELEASED_COLUMNS]
    if unknown:
        raise ValueError(f"{path}: unknown HEROS column(s) {unknown} (known: Original, {', '.join(RELEASED_COLUMNS)})")
    body = [r for r in rows[1:] if len(r) > oi and r[oi].strip()]
    originals = [r[oi].strip() for r in body]
    subsets: dict[str, list[str | None]] = {}
    for i, name in cols.items():
        subsets[name] = [(r[i].strip() or None) if len(r) > i else None for r in body]
    return HerosData(originals, subsets)


def read_built(path: Path) -> HerosData:
    """A file written by ``evalfarm data build heros`` (any version): the columns named in its column line, an empty
    cell a missing pair (version 2 leaves a subset's cell empty where no right pair could be made)."""
    from evalfarm.taskdata.build import read_table
    from evalfarm.taskdata.build_heros import SUBSETS

    columns, rows = read_table(path)
    at = {c: i for i, c in enumerate(columns)}
    missing = [c for c in ("original", *SUBSETS) if c not in at]
    if missing:
        raise ValueError(f"{path}: no column {', '.join(missing)} (columns: {', '.join(columns)})")
    return HerosData([r[at["original"]] for r in rows], {s: [r[at[s]] or None for r in rows] for s in SUBSETS})


def cos_avg(x: np.ndarray, originals: np.ndarray, m: int) -> float:
    """Mean cosine over the m x m pairs between the first m and the last m originals (rows of normalised ``x``)."""
    if m < 1:
        return float("nan")
    a = x[originals[:m]].astype(np.float64)
    b = x[originals[-m:]].astype(np.float64)
    return float((a @ b.T).mean())


def normalise(cos: np.ndarray, avg: float) -> np.ndarray:
    """HEROS Appendix D: (cos - cos_avg) / (1 - cos_avg); NaN where cos_avg is 1 (every sentence looks the same)."""
    if not avg < 1.0:
        return np.full(len(cos), np.nan)
    return (np.asarray(cos, dtype=np.float64) - avg) / (1.0 - avg)


def _mean(v: np.ndarray) -> float:
    return float(np.mean(v)) if len(v) else float("nan")


@register
class HerosScorer(Scorer[HerosTask, HerosData]):
    name = "heros"
    version = "1"
    task_spec = HerosTask
    primary_metric = "normalized_similarity"
    role = "diagnostic"
    description = (
        "HEROS minimal pairs: per subset the mean normalised cosine (cos - cos_avg) / (1 - cos_avg) and raw cosine"
    )
    thin_rules = (ThinRule("n_pairs", at_least=5),)
    """Too thin under 5 pairs in a subset (the generated set, version 2: 76 to 1,000 in each)."""
    views = """
-- heros: each model's HEROS profile, one row per task and subset: the mean normalised similarity
-- (cos - cos_avg) / (1 - cos_avg), the mean raw cosine and the number of pairs (HEROS Appendix D).
CREATE OR REPLACE VIEW heros AS
SELECT model, task, subset,
       max(value) FILTER (WHERE metric = 'normalized_similarity') AS normalized_similarity,
       max(value) FILTER (WHERE metric = 'cosine') AS cosine,
       max(value) FILTER (WHERE metric = 'n_pairs') AS n_pairs
FROM metrics WHERE scorer = 'heros' AND metric IN ('normalized_similarity', 'cosine', 'n_pairs')
GROUP BY model, task, subset;
"""

    def params(self, task: HerosTask, options: RunOptions) -> dict[str, Any]:
        return {"similarity": "cos", "protocol": Protocol("raw").key(), "n_avg": task.n_avg}

    def is_primary(self, row: MetricRow, task: HerosTask | None, data: HerosData) -> bool:
        """The synonym subset's normalised similarity only (module docstring)."""
        return super().is_primary(row, task, data) and row.subset == PRIMARY_SUBSET

    def load(self, task: HerosTask) -> HerosData:
        from evalfarm.taskdata.build import built_file
        from evalfarm.taskdata.data import task_file

        spec = task
        if spec.format == "heros-released":
            return read_released(task_file(task, "pairs"))
        if spec.build is None:
            raise ValueError(f"task {task.id!r}: format evalfarm-build needs 'build' (evalfarm data build heros)")
        inputs = {role: task_file(task, role) for role in sorted(task.files)}
        return read_built(built_file(spec.build, inputs=inputs))

    def score(
        self,
        task: HerosTask,
        data: HerosData,
        vectors: TextVectors,
        params: dict[str, Any],
        *,
        device: str | None = None,
    ) -> ScoreResult:
        out = ScoreResult()
        x = prepare(vectors.emb, vectors.oov, Protocol("raw"), similarity="cos").vectors
        index = {t: i for i, t in enumerate(data.texts)}
        orig = np.array([index[t] for t in data.originals], dtype=np.int64)
        m = min(int(params.get("n_avg", N_AVG)), len(orig) // 2)
        avg = cos_avg(x, orig, m)
        out.rows.append(MetricRow("cos_avg", avg))
        for name, pairs in data.subsets.items():
            have = np.array([p is not None for p in pairs], dtype=bool)
            rows2 = np.array([index[p] for p in pairs if p is not None], dtype=np.int64)
            cos = (x[orig[have]].astype(np.float64) * x[rows2].astype(np.float64)).sum(axis=1)
            out.rows += [
                MetricRow("normalized_similarity", _mean(normalise(cos, avg)), subset=name),
                MetricRow("cosine", _mean(cos), subset=name),
                MetricRow("n_pairs", float(len(cos)), subset=name),
            ]
        out.rows.append(MetricRow("oov_rate", float(vectors.oov.mean()) if len(vectors.oov) else 0.0))
        return out
