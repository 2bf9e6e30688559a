"""The similarity baselines EvalRank is compared with: word similarity, STS, and STS similarity bands.

Each scores a model by the rank correlation between the cosine of its embeddings of two texts and a human gold
score. Three task kinds, one scorer each:

- ``word-similarity`` (words; first named ``wordsim``, which a catalog may still use): one word-similarity set
  (``w1 w2 score`` per line, lower-cased as the EvalRank toolkit reads it). Spearman and Pearson of cosine vs gold over
  the pairs whose two words the model knows (OOV pairs are skipped; ``coverage`` = share of pairs scored is always
  reported). Two variants: ``evalrank-word`` (the EvalRank protocol's vectors: centred on the vocabulary mean,
  normalised — what the paper's toolkit correlates; ``evalrank-word/no-center`` under ``center=False``) and ``raw``
  (the model's raw vectors: the usual word-similarity protocol).
- ``sts`` (sentences): STS12–16 (each subset; the pooled ``all``; ``mean`` and ``wmean``, SentEval's mean and
  pair-weighted mean of the subsets' correlations — the toolkit reports ``wmean``), STS-B and SICK-R (train / dev /
  test and pooled ``all``), STR. Spearman and Pearson of the raw cosine vs gold (SentEval's protocol).
- ``similarity-bands`` (sentences; the paper's Figure 2; first named ``sts-bands``, which a catalog may still use):
  STS-B pairs split by gold score into overlapping bands ([3, 5], [2, 4], [1, 3], [0, 2] by default, both ends
  inclusive), each band an equal-size seeded sample (the smallest band's size), Spearman per band: how well a model
  orders pairs that are all similar, or all dissimilar.

Correlations are NaN when fewer than 3 pairs are scored or either side is constant. Every Spearman and Pearson row
carries its 95 % confidence interval (``MetricRow.ci``: :func:`correlation_interval`, Fisher's z; for STS's ``mean``
and ``wmean``, :func:`mean_interval`), in closed form: no resampling, no seed, the same bytes under every executor.
Sentence cosines (STS, bands) are rounded to 6 decimals before ranking, so near-ties (identical token bags) are ties:
``COS_DECIMALS``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from evalfarm.analysis.comparisons import z_variance_factor
from evalfarm.catalog.specs import TaskSpec
from evalfarm.preprocess import Protocol, prepare
from evalfarm.scorers import register
from evalfarm.scorers.base import Interval, MetricRow, RunOptions, Scorer, ScoreResult, TextVectors, ThinRule

MIN_PAIRS = 3
MIN_RANKED_PAIRS = 5
"""Fewer scored pairs than this are too thin to rank (``thin_rules``): below 5 pairs no Spearman's rho, not even
1.0, is significant at 5 % two-sided (n = 4: p = 2/24), and n = 3 allows only the values 0, +-0.5 and +-1."""


# Why not scipy.stats.pearsonr / spearmanr (issue 24): they compute the same statistic by another float64 order of
# operations, so the stored metric values would move in the last bits: on 3,000 random cases (scipy 1.17.1) 26 % of
# Pearson's r and 48 % of Spearman's rho were bitwise equal, the rest off by up to 5.6e-16. scipy also warns
# (ConstantInputWarning) where these return NaN quietly, and raises below 2 pairs. tests/test_scorers.py checks both
# against scipy.stats to 1e-12; rankdata, the one piece that must follow a convention exactly, is scipy's.
def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho: Pearson's r of the average ranks (ties share their mean rank), NaN when undefined."""
    from scipy.stats import rankdata

    if len(x) < MIN_PAIRS:
        return float("nan")
    return pearson(rankdata(x), rankdata(y))


COS_DECIMALS = 6
"""Sentence cosines are rounded to 6 decimals before they are ranked (Spearman only; Pearson takes them as they
are): two texts with identical token bags have cos = 1 up to rounding (~1e-7 for float32 vectors), so without a
rule float summation order decides their ranks (STS12 SMTeuroparl moved by 4e-4 between float32 and float64).
Rounded, such near-ties are exact ties and share their mean rank, whatever the arithmetic."""


def rank_cosines(cos: np.ndarray) -> np.ndarray:
    """Cosines as Spearman ranks them: rounded to ``COS_DECIMALS`` decimals (near-ties become ties)."""
    return np.round(np.asarray(cos, dtype=np.float64), COS_DECIMALS)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r in float64, NaN when fewer than 3 pairs or a side is constant."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) < MIN_PAIRS:
        return float("nan")
    dx, dy = x - x.mean(), y - y.mean()
    denom = np.sqrt((dx * dx).sum() * (dy * dy).sum())
    return float((dx * dy).sum() / denom) if denom > 0 else float("nan")


CI_CONFIDENCE = 0.95
"""The confidence of every correlation's interval (``ci_low`` / ``ci_high`` of its metrics row)."""
_Z = 1.959963984540054  # the standard normal's 0.975 quantile: statistics.NormalDist().inv_cdf(0.975)


def correlation_interval(r: float, n: int, *, rank: bool) -> Interval | None:
    """The 95 % confidence interval of a correlation ``r`` over ``n`` pairs, by Fisher's z-transform: ``tanh(atanh(r)
    +- 1.96 se)``, with ``se = 1 / sqrt(n - 3)`` for Pearson's r and Bonett & Wright's (2000) ``sqrt((1 + r^2 / 2) /
    (n - 3))`` for Spearman's rho (``rank``). Closed form, so it needs no seed and costs nothing; it assumes roughly
    bivariate-normal data, and is an approximation for small n. None when ``r`` is NaN or ``n`` < 4; ``r`` = +-1 gives
    the point interval [r, r] (its standard error in z is 0 from n pairs that all agree)."""
    if not math.isfinite(r) or n < 4:
        return None
    if abs(r) >= 1.0:
        return Interval(float(r), float(r), "fisher-z 95%")
    se = math.sqrt(z_variance_factor(r, rank=rank) / (n - 3))
    z = math.atanh(r)
    return Interval(math.tanh(z - _Z * se), math.tanh(z + _Z * se), "fisher-z 95%")


def mean_interval(parts: Sequence[tuple[float, int]], *, rank: bool, weighted: bool) -> tuple[float, Interval | None]:
    """The mean (``weighted``: by pair count) of the correlations of independent subsets ``(r, n)``, and its 95 %
    interval by the delta method: each r's variance ``(1 - r^2)^2 se_z^2`` (``se_z`` as in
    :func:`correlation_interval`), the mean's ``sum w_i^2 var_i``, the interval ``mean +- 1.96 sd`` clipped to [-1, 1].
    No interval when a part has none (NaN, or under 4 pairs)."""
    r = np.array([p[0] for p in parts], dtype=np.float64)
    n = np.array([p[1] for p in parts], dtype=np.float64)
    w = n / n.sum() if weighted else np.full(len(parts), 1.0 / len(parts))
    mean = float(np.average(r, weights=n)) if weighted else float(np.mean(r))
    if not np.isfinite(r).all() or (n < 4).any():
        return mean, None
    var_z = z_variance_factor(r, rank=rank) / (n - 3)
    sd = math.sqrt(float((w * w * (1 - r * r) ** 2 * var_z).sum()))
    return mean, Interval(max(-1.0, mean - _Z * sd), min(1.0, mean + _Z * sd), "delta fisher-z 95%")


def _paired_cosines(vectors: np.ndarray, rows1: np.ndarray, rows2: np.ndarray) -> np.ndarray:
    """Cosine of row pairs of already L2-normalised vectors (zero rows give 0), in float64."""
    a = vectors[rows1].astype(np.float64)
    b = vectors[rows2].astype(np.float64)
    return (a * b).sum(axis=1)


@dataclass
class PairData:
    """Scored text pairs, grouped in named subsets; ``texts`` lists each distinct text once."""

    subsets: dict[str, tuple[list[str], list[str], np.ndarray]]
    texts: list[str] = field(default_factory=list)
    primary_subset: str = "all"

    def __post_init__(self) -> None:
        if not self.texts:
            seen: dict[str, None] = {}
            for s1, s2, _ in self.subsets.values():
                for a, b in zip(s1, s2, strict=True):
                    seen.setdefault(a)
                    seen.setdefault(b)
            self.texts = list(seen)


# ---- word similarity ----------------------------------------------------------------------------------------------
class WordSimTask(TaskSpec):
    """One word-similarity set: ``files: {pairs: ...}``."""

    kind: Literal["word-similarity"] = "word-similarity"
    level: Literal["word"] = "word"
    former_kinds = ("wordsim",)


@register
class WordSimilarityScorer(Scorer[WordSimTask, PairData]):
    name = "word-similarity"
    version = "1"
    task_spec = WordSimTask
    primary_metric = "spearman"
    description = "Spearman / Pearson of cosine vs gold word-pair similarity; OOV pairs skipped, coverage reported"
    thin_rules = (ThinRule("coverage", at_least=0.05), ThinRule("n_pairs", at_least=MIN_RANKED_PAIRS))
    """Too thin under 5 scored pairs or 5 % of the set's pairs (a 5-word model: 3 of RG-65's 65 pairs, coverage
    0.046, rho 1.0). The starter zoo's lowest: coverage 0.876 (GloVe on RW), 30 pairs (MC-30). The bounds are the
    loosest that stop the reported case: the 5000-word toy GloVe of the tests scores 6 RG-65 pairs (0.092)."""

    VARIANT_LABELS: ClassVar[dict[str, str]] = {
        "evalrank-word": "protocol vectors",
        "evalrank-word/no-center": "protocol vectors, not centred",
        "raw": "raw vectors",
    }
    """The variants in words: the vectors each correlation is taken on (the EvalRank word protocol's preprocessing:
    centred on the vocabulary mean, normalised; or the model's raw vectors). Not the protocol's name: beside a
    word-similarity set's Spearman, ``EvalRank word protocol 0.59`` read as an EvalRank score."""

    def variant_label(self, variant: str) -> str:
        return self.VARIANT_LABELS.get(variant, variant)

    def params(self, task: WordSimTask, options: RunOptions) -> dict[str, Any]:
        return {
            "variants": ["evalrank-word", "raw"],
            "center": options.center,
            "oov_pairs": "skip",
            "protocol": {**Protocol.for_level("word", center=options.center).key(), "oov": "pairs skipped"},
        }

    def load(self, task: WordSimTask) -> PairData:
        from evalfarm.taskdata.coverage import common_vocabulary, known_pair
        from evalfarm.taskdata.data import task_file
        from evalfarm.taskdata.wordsim import read_wordsim

        ws = read_wordsim(task_file(task, "pairs"), task.id)
        vocab = common_vocabulary(task)
        if vocab is None:
            return PairData({"all": (ws.word1, ws.word2, ws.gold)})
        keep = [i for i, (a, b) in enumerate(zip(ws.word1, ws.word2, strict=True)) if known_pair(vocab, a, b)]
        w1, w2 = [ws.word1[i] for i in keep], [ws.word2[i] for i in keep]
        return PairData({"all": (w1, w2, np.asarray(ws.gold)[keep])})  # coverage-controlled: common words only

    def score(
        self,
        task: WordSimTask,
        data: PairData,
        vectors: TextVectors,
        params: dict[str, Any],
        *,
        device: str | None = None,
    ) -> ScoreResult:
        out = ScoreResult()
        w1, w2, gold = data.subsets["all"]
        index = {t: i for i, t in enumerate(data.texts)}
        r1 = np.array([index[w] for w in w1])
        r2 = np.array([index[w] for w in w2])
        known = ~(vectors.oov[r1] | vectors.oov[r2])
        for variant in params["variants"]:
            protocol = (
                Protocol.for_level("word", center=params["center"]) if variant == "evalrank-word" else Protocol("raw")
            )
            x = prepare(vectors.emb, vectors.oov, protocol, similarity="cos", vocab=vectors.vocab).vectors
            cos = _paired_cosines(x, r1[known], r2[known])
            g = gold[known]
            name = protocol.label  # evalrank-word, evalrank-word/no-center or raw
            rho, r, n = spearman(cos, g), pearson(cos, g), len(g)
            out.rows += [
                MetricRow("spearman", rho, variant=name, ci=correlation_interval(rho, n, rank=True)),
                MetricRow("pearson", r, variant=name, ci=correlation_interval(r, n, rank=False)),
                MetricRow("coverage", float(known.mean()), variant=name),
                MetricRow("n_pairs", float(known.sum()), variant=name),
            ]
        return out


# ---- STS ----------------------------------------------------------------------------------------------------------
STSFormat = Literal["senteval-sts", "stsb", "sick-r", "str"]
_DEFAULT_PRIMARY = {"senteval-sts": "wmean", "stsb": "test", "sick-r": "test", "str": "test"}


class STSTaskSpec(TaskSpec):
    """A sentence-similarity set in one of SentEval's layouts; ``primary_subset`` is the leaderboard's subset
    (default: ``wmean`` for STS12–16, ``test`` for STS-B, SICK-R and STR)."""

    kind: Literal["sts"] = "sts"
    level: Literal["sentence"] = "sentence"
    format: STSFormat
    primary_subset: str | None = None


def _folder(task: TaskSpec) -> Path:
    """Verify every file of ``task`` and return the folder holding them (the readers read a folder's layout)."""
    from evalfarm.taskdata.data import task_file

    paths = [task_file(task, role) for role in sorted(task.files)]
    folders = {p.parent for p in paths}
    if len(folders) != 1:
        raise ValueError(f"task {task.id!r}: its files must share one folder, got {sorted(map(str, folders))}")
    return folders.pop()


def raw_cosines(data: PairData, vectors: TextVectors) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per subset: (cosine of the raw embeddings of each pair, gold), SentEval's STS protocol."""
    x = prepare(vectors.emb, vectors.oov, Protocol("raw"), similarity="cos").vectors
    index = {t: i for i, t in enumerate(data.texts)}
    out = {}
    for name, (s1, s2, gold) in data.subsets.items():
        out[name] = (_paired_cosines(x, np.array([index[t] for t in s1]), np.array([index[t] for t in s2])), gold)
    return out


SUMMARY_SUBSETS = ("all", "mean", "wmean")
"""What STS reports besides each subset when a task has several: pooled, mean and size-weighted mean."""


def primary_subset(data: PairData) -> str | None:
    """The subset of an STS task's primary number: the task's ``primary_subset`` when it reports one (a summary only
    exists with several subsets), else its first subset."""
    names = list(data.subsets) + (list(SUMMARY_SUBSETS) if len(data.subsets) > 1 else [])
    return data.primary_subset if data.primary_subset in names else next(iter(names), None)


def load_sts(task: Any) -> PairData:
    from evalfarm.taskdata import sts

    if task.format == "senteval-sts":
        folder = _folder(task)
        year = folder.name.split("-")[0]
        loaded = sts.load_sts_year(folder, year)
    elif task.format == "stsb":
        loaded = sts.load_stsb(_folder(task))
    elif task.format == "sick-r":
        loaded = sts.load_sick_r(_folder(task))
    else:
        from evalfarm.taskdata.data import task_file

        loaded = sts.load_str(task_file(task, "data"))
    subsets = {name: (s.sent1, s.sent2, s.gold) for name, s in loaded.subsets.items()}
    return PairData(subsets, primary_subset=task.primary_subset or _DEFAULT_PRIMARY[task.format])


@register
class STSScorer(Scorer[STSTaskSpec, PairData]):
    name = "sts"
    version = "2"  # 2: cosines rounded to COS_DECIMALS before ranking (issue 22)
    task_spec = STSTaskSpec
    primary_metric = "spearman"
    description = "Spearman / Pearson of the cosine of raw sentence embeddings vs gold (SentEval's STS protocol)"
    thin_rules = (ThinRule("n_pairs", at_least=MIN_RANKED_PAIRS),)
    """Too thin under 5 pairs in any subset (the starter zoo's smallest: STS13 FNWN, 189 pairs)."""

    def params(self, task: STSTaskSpec, options: RunOptions) -> dict[str, Any]:
        return {"similarity": "cos", "protocol": Protocol("raw").key()}

    def load(self, task: STSTaskSpec) -> PairData:
        return load_sts(task)

    def is_primary(self, row: MetricRow, task: STSTaskSpec | None, data: PairData) -> bool:
        """The primary subset's Spearman only (the task's ``primary_subset``, default by format)."""
        return super().is_primary(row, task, data) and row.subset == primary_subset(data)

    def score(
        self,
        task: STSTaskSpec,
        data: PairData,
        vectors: TextVectors,
        params: dict[str, Any],
        *,
        device: str | None = None,
    ) -> ScoreResult:
        out = ScoreResult()
        per: dict[str, tuple[float, float, int]] = {}
        all_cos, all_gold = [], []
        for name, (cos, gold) in raw_cosines(data, vectors).items():
            per[name] = (spearman(rank_cosines(cos), gold), pearson(cos, gold), len(gold))
            all_cos.append(cos)
            all_gold.append(gold)
        rows = {name: (sp, _ci(sp, n, True), pe, _ci(pe, n, False), n) for name, (sp, pe, n) in per.items()}
        if len(per) > 1:  # the summaries of SUMMARY_SUBSETS
            cos, gold = np.concatenate(all_cos), np.concatenate(all_gold)
            sp, pe, n = spearman(rank_cosines(cos), gold), pearson(cos, gold), len(gold)
            rows["all"] = (sp, _ci(sp, n, True), pe, _ci(pe, n, False), n)
            total = sum(v[2] for v in per.values())
            for summary, weighted in (("mean", False), ("wmean", True)):
                sp_m, sp_ci = mean_interval([(v[0], v[2]) for v in per.values()], rank=True, weighted=weighted)
                pe_m, pe_ci = mean_interval([(v[1], v[2]) for v in per.values()], rank=False, weighted=weighted)
                rows[summary] = (sp_m, sp_ci, pe_m, pe_ci, total)
        for name, (sp_v, sp_ci, pe_v, pe_ci, n_v) in rows.items():
            out.rows += [
                MetricRow("spearman", sp_v, subset=name, variant="cos", ci=sp_ci),
                MetricRow("pearson", pe_v, subset=name, variant="cos", ci=pe_ci),
                MetricRow("n_pairs", float(n_v), subset=name, variant="cos"),
            ]
        return out


def _ci(r: float, n: int, rank: bool) -> Interval | None:
    return correlation_interval(r, n, rank=rank)


# ---- similarity bands ---------------------------------------------------------------------------------------------
class STSBandsTask(TaskSpec):
    """STS-B's train/dev/test pairs (``files`` as the ``stsb`` task), split into gold-score bands."""

    kind: Literal["similarity-bands"] = "similarity-bands"
    level: Literal["sentence"] = "sentence"
    former_kinds = ("sts-bands",)
    bands: tuple[tuple[float, float], ...] = ((3.0, 5.0), (2.0, 4.0), (1.0, 3.0), (0.0, 2.0))
    sample: int | None = None  # pairs per band (default: the smallest band's size)
    seed: int = 0


def band_name(low: float, high: float) -> str:
    return f"{low:g}-{high:g}"


def band_samples(gold: np.ndarray, bands: Sequence[tuple[float, float]], sample: int | None, seed: int) -> dict:
    """Indices of each band's equal-size seeded sample (sorted), by band name."""
    members = {band_name(lo, hi): np.flatnonzero((gold >= lo) & (gold <= hi)) for lo, hi in bands}
    size = sample or min(len(m) for m in members.values())
    out = {}
    for i, (name, idx) in enumerate(members.items()):
        if len(idx) < size:
            raise ValueError(f"band {name} has {len(idx)} pairs, fewer than the sample size {size}")
        rng = np.random.default_rng([seed, i])
        out[name] = np.sort(rng.choice(idx, size=size, replace=False))
    return out


@register
class STSBandsScorer(Scorer[STSBandsTask, PairData]):
    name = "similarity-bands"
    version = "2"  # 2: cosines rounded to COS_DECIMALS before ranking (issue 22)
    task_spec = STSBandsTask
    primary_metric = "spearman"
    thin_rules = (ThinRule("n_pairs", at_least=MIN_RANKED_PAIRS),)
    """Too thin under 5 pairs in a band (the starter zoo: 3148 pairs in every band)."""
    description = "Spearman within gold-score bands of STS-B (equal-size seeded samples; the paper's Figure 2)"

    def params(self, task: STSBandsTask, options: RunOptions) -> dict[str, Any]:
        return {"similarity": "cos", "protocol": Protocol("raw").key()}

    def load(self, task: STSBandsTask) -> PairData:
        from evalfarm.taskdata import sts

        loaded = sts.load_stsb(_folder(task))
        s1 = [t for s in loaded.subsets.values() for t in s.sent1]
        s2 = [t for s in loaded.subsets.values() for t in s.sent2]
        gold = np.concatenate([s.gold for s in loaded.subsets.values()])
        picks = band_samples(gold, task.bands, task.sample, task.seed)
        subsets = {name: ([s1[i] for i in idx], [s2[i] for i in idx], gold[idx]) for name, idx in picks.items()}
        return PairData(subsets)

    def score(
        self,
        task: STSBandsTask,
        data: PairData,
        vectors: TextVectors,
        params: dict[str, Any],
        *,
        device: str | None = None,
    ) -> ScoreResult:
        out = ScoreResult()
        for name, (cos, gold) in raw_cosines(data, vectors).items():
            rho = spearman(rank_cosines(cos), gold)
            out.rows += [
                MetricRow(
                    "spearman", rho, subset=name, variant="cos", ci=correlation_interval(rho, len(gold), rank=True)
                ),
                MetricRow("n_pairs", float(len(gold)), subset=name, variant="cos"),
            ]
        return out
