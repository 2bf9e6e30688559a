"""What each metric is: its direction, range, aggregation, kind and whether the correlations carry it — declared once
per metric, here (lm-evaluation-harness declares ``higher_is_better`` and ``aggregation`` per metric the same way).

A scorer emits metric rows by name (``mrr``, ``n_pairs``, ``oov_rate`` ...). A name means one thing in every scorer
that emits it: :data:`METRICS` declares each built-in name once (``hits@{k}`` stands for every k). A scorer whose
metric differs from the shared declaration, or a plug-in's metric this module cannot know, declares it on the
scorer (``Scorer.declared_metrics``: name -> :class:`MetricInfo`), which :func:`lookup` reads first; EvalRank's
hits@1 and hits@3 are the one built-in case (the correlation views carry them, for the paper's layout; DefSent's
are not).

What reads a declaration:

- the executor stores ``higher_is_better`` on every metrics row from :attr:`MetricInfo.higher_is_better` (None:
  no direction), and refuses a row whose metric nothing declares (:class:`UndeclaredMetric`);
- the views order and orient numbers by it: :func:`sql_definitions` is created before the core views
  (:func:`evalfarm.warehouse.view_sources`): the ``metric_info`` view and the macros
  ``metric_higher_is_better(scorer, metric, stored)`` and ``metric_correlated(scorer, metric, stored)``, which fall
  back to ``stored`` (the row's own column) only for a metric no registered scorer declares (a retired plug-in's);
- the warehouse's schema version 4 (:mod:`evalfarm.warehouse.migrate`) rewrote the rows that versions before it
  stored with their scorer's one direction (EvalRank's ``mr``, ``tie_rate`` and ``oov_rate`` as higher-is-better).

Fields: ``direction`` (``higher``, ``lower`` or None: a number with no better end, a count, a space's geometry);
``low`` / ``high`` (the values it can take; ``inf`` where unbounded); ``aggregation`` (how a unit's number is made
from its items: ``mean`` of per-item values, ``sum`` of counts, a ``correlation`` over pairs, ``f1``, a
``statistic`` of the whole space, a ``setting`` chosen by the protocol); ``kind`` (``score``: a measured quality;
``rate``: a share of items, in [0, 1]; ``count``: a number of items; ``setting``: what the protocol chose);
``correlated`` (the correlation views carry it beside its scorer's primary metric: each model's number against
the downstream tasks; a scorer's primary metric is always carried).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Literal

Direction = Literal["higher", "lower"]
"""Which end of a metric is better."""
Aggregation = Literal["mean", "sum", "correlation", "f1", "statistic", "setting"]
"""How a unit's number is made from its items (module docstring)."""
Kind = Literal["score", "rate", "count", "setting"]
"""What a number is: a measured quality, a share of items, a number of items, a protocol's choice."""

INF = math.inf


@dataclass(frozen=True)
class MetricInfo:
    """One metric's declaration (module docstring)."""

    direction: Direction | None
    low: float
    high: float
    aggregation: Aggregation
    kind: Kind
    description: str
    correlated: bool = False

    def __post_init__(self) -> None:
        if self.direction not in ("higher", "lower", None):
            raise ValueError(f"a metric's direction is 'higher', 'lower' or None, not {self.direction!r}")
        if not self.low <= self.high:
            raise ValueError(f"a metric's range [{self.low}, {self.high}] is empty")
        if self.kind == "rate" and (self.low < 0 or self.high > 1):
            raise ValueError(f"a rate lies in [0, 1], not [{self.low}, {self.high}]")
        if self.kind == "count" and self.direction is not None:
            raise ValueError("a count has no direction (more items is not a better model)")

    @property
    def higher_is_better(self) -> bool | None:
        """The ``higher_is_better`` column of a stored row: True, False, or None (no direction)."""
        return None if self.direction is None else self.direction == "higher"

    def within(self, value: float) -> bool:
        """Whether ``value`` lies in the declared range (NaN, a number that says nothing, always does)."""
        return math.isnan(value) or self.low <= value <= self.high

    def carried(self) -> MetricInfo:
        """This declaration, carried by the correlation views (a scorer's :attr:`correlated` choice)."""
        return replace(self, correlated=True)


def _rate(direction: Direction | None, description: str, aggregation: Aggregation = "mean") -> MetricInfo:
    return MetricInfo(direction, 0.0, 1.0, aggregation, "rate", description)


def _count(description: str) -> MetricInfo:
    return MetricInfo(None, 0.0, INF, "sum", "count", description)


def _geometry(low: float, high: float, description: str) -> MetricInfo:
    return MetricInfo(None, low, high, "statistic", "score", description, correlated=True)


HITS_PATTERN = "hits@{k}"
"""The name under which :data:`METRICS` declares Hits@k for every k (``hits@1``, ``hits@10`` ...)."""
_PATTERNS: dict[str, re.Pattern[str]] = {HITS_PATTERN: re.compile(r"hits@[1-9][0-9]*")}

METRICS: Mapping[str, MetricInfo] = MappingProxyType(
    {
        # rank metrics (EvalRank, DefSent: evalfarm/ranking.py computes them)
        "mr": MetricInfo("lower", 1.0, INF, "mean", "score", "mean rank of the positives (1 is best)"),
        "mrr": MetricInfo("higher", 0.0, 1.0, "mean", "score", "mean reciprocal rank of the positives"),
        HITS_PATTERN: _rate("higher", "share of positives ranked k or better"),
        "tie_rate": _rate("lower", "share of pairs whose positive ties with some candidate"),
        "oov_rate": _rate("lower", "share of the task's texts the model has no vector for"),
        "oov_pair_rate": _rate("lower", "share of pairs with a text the model has no vector for"),
        "coverage": _rate("higher", "share of the pairs (or comparisons) the model has vectors for"),
        # correlations with human judgements (word similarity, STS, similarity bands)
        "spearman": MetricInfo("higher", -1.0, 1.0, "correlation", "score", "Spearman's rho with the gold scores"),
        "pearson": MetricInfo("higher", -1.0, 1.0, "correlation", "score", "Pearson's r with the gold scores"),
        # downstream classification (SentEval's protocol; MTEB's imported numbers)
        "accuracy": _rate("higher", "test accuracy"),
        "dev_accuracy": _rate("higher", "cross-validated accuracy at the chosen C (the selection score)"),
        "accuracy_std": MetricInfo(None, 0.0, 1.0, "statistic", "score", "standard deviation of the folds' accuracy"),
        "f1": _rate("higher", "F1 of the positive class", aggregation="f1"),
        "f1_weighted": _rate("higher", "F1 weighted by class (MTEB)", aggregation="f1"),
        "ap": _rate("higher", "average precision (MTEB)"),
        "chosen_c": MetricInfo(None, 0.0, INF, "setting", "setting", "the regularisation C the protocol chose"),
        "backend_torch": MetricInfo(None, 0.0, 1.0, "setting", "setting", "1 when the torch solver ran, 0 numpy"),
        # diagnostics: AG2016 triplets, HEROS minimal pairs
        "ag_score": _rate("higher", "AG2016: sum max(s, 0) / sum |s| over the triplets (0.5 is chance)"),
        "normalized_similarity": MetricInfo(
            "higher", -INF, 1.0, "mean", "score", "HEROS: mean (cos - cos_avg) / (1 - cos_avg) of the minimal pairs"
        ),
        "cosine": MetricInfo(None, -1.0, 1.0, "mean", "score", "HEROS: mean raw cosine of the minimal pairs"),
        "cos_avg": MetricInfo(None, -1.0, 1.0, "mean", "score", "HEROS: mean cosine of unrelated sentences"),
        # a space's geometry: no direction, correlated as measured
        "alignment": _geometry(0.0, 4.0, "mean squared distance of normalised positive pairs"),
        "uniformity": _geometry(-INF, 0.0, "log mean exp(-2 d^2) over random pairs"),
        "anisotropy": _geometry(-1.0, 1.0, "mean cosine of random pairs"),
        "isotropy": _geometry(0.0, 1.0, "min Z(c) / max Z(c) over the principal directions"),
        "effective_rank": _geometry(1.0, INF, "exp of the entropy of the normalised singular values"),
        "hubness": _geometry(-INF, INF, "skewness of the k-occurrence distribution"),
        # counts: how much data a number rests on
        "n_pairs": _count("pairs scored"),
        "n_background": _count("background candidates each positive is ranked among"),
        "n_candidates": _count("distinct candidate words"),
        "n_items": _count("items with a vector"),
        "n_background_pairs": _count("random pairs of distinct items"),
        "n_comparisons": _count("triplet comparisons scored"),
        "n_ties": _count("comparisons whose two similarities tie"),
        "n_train": _count("training examples"),
        "n_test": _count("test examples"),
        "n_models": _count("classifiers trained"),
        "n_unconverged": _count("classifiers that stopped before converging"),
    }
)
"""Every built-in metric, declared once by name (``hits@{k}``: every Hits@k)."""


class UndeclaredMetric(KeyError):
    """A metric nothing declares: neither its scorer (``declared_metrics``) nor :data:`METRICS`."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "undeclared metric"


def declaration(metric: str, scoped: Mapping[str, MetricInfo] | None = None) -> MetricInfo | None:
    """The declaration of ``metric``: ``scoped`` (a scorer's ``declared_metrics``) first, then :data:`METRICS`, by
    name or by pattern (``hits@3`` is ``hits@{k}``); None when neither declares it."""
    for table in (scoped or {}, METRICS):
        if metric in table:
            return table[metric]
        for pattern, info in table.items():
            rx = _PATTERNS.get(pattern)
            if rx is not None and rx.fullmatch(metric):
                return info
    return None


def lookup(metric: str, scoped: Mapping[str, MetricInfo] | None = None, *, scorer: str = "") -> MetricInfo:
    """:func:`declaration`, or :class:`UndeclaredMetric` naming the metric (and ``scorer``) and where to declare it."""
    info = declaration(metric, scoped)
    if info is None:
        who = f"scorer {scorer!r} emits " if scorer else ""
        raise UndeclaredMetric(
            f"{who}metric {metric!r}, which nothing declares: declare it in evalfarm/metrics.py's METRICS (a built-in "
            "metric) or in the scorer's declared_metrics (name -> evalfarm.metrics.MetricInfo)"
        )
    return info


def _sql(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return "'inf'::DOUBLE" if value == INF else "'-inf'::DOUBLE" if value == -INF else f"CAST({value!r} AS DOUBLE)"
    return "'" + str(value).replace("'", "''") + "'"


_CODES = {True: "'t'", False: "'f'", None: "'n'"}
"""A declared value as the lookup's text (a map cannot hold a NULL that means "no direction" apart from "absent")."""


def _pattern_sql(pattern: str, code: str) -> str:
    """``code`` where ``metric`` matches ``pattern`` (``hits@{k}``), else NULL: the prefix first, so the regular
    expression runs on the rows that have it only."""
    rx = _sql(_PATTERNS[pattern].pattern)
    prefix = _sql(pattern.split("{")[0])
    return (
        f"CASE WHEN starts_with(metric, {prefix}) THEN CASE WHEN regexp_full_match(metric, {rx}) THEN {code} END END"
    )


def _map(entries: Mapping[str, str]) -> str:
    return "MAP {" + ", ".join(f"{_sql(k)}: {v}" for k, v in entries.items()) + "}"


def _lookup(scoped: Mapping[str, Mapping[str, MetricInfo]], field: str, fallback: str) -> str:
    """SQL of ``field`` of the declaration of (``scorer``, ``metric``), as :func:`declaration` finds it (a scorer's
    own, then the shared one; names, then patterns), else ``fallback``. Map lookups, not a CASE over every name:
    measured on 460,560 rows (benchmarks/bench_warehouse.py's 1,000 models), 0.029 CPU-s against 0.007 for reading
    the stored column and about 0.04 for a CASE chain over the names (2 shared cores, load ~15)."""
    steps = []
    own = {_sql(scorer): _map({m: _CODES[getattr(i, field)] for m, i in t.items() if m not in _PATTERNS})
           for scorer, t in sorted(scoped.items()) if any(m not in _PATTERNS for m in t)}  # fmt: skip
    if own:
        steps.append("MAP {" + ", ".join(f"{k}: {v}" for k, v in own.items()) + "}[scorer][metric]")
    for scorer, table in sorted(scoped.items()):
        steps += [f"CASE WHEN scorer = {_sql(scorer)} THEN {_pattern_sql(m, _CODES[getattr(i, field)])} END"
                  for m, i in table.items() if m in _PATTERNS]  # fmt: skip
    steps.append(f"{_map({m: _CODES[getattr(i, field)] for m, i in METRICS.items() if m not in _PATTERNS})}[metric]")
    steps += [_pattern_sql(m, _CODES[getattr(i, field)]) for m, i in METRICS.items() if m in _PATTERNS]
    return (
        f"CASE coalesce({', '.join(steps)}) WHEN 't' THEN true WHEN 'f' THEN false WHEN 'n' THEN NULL "
        f"ELSE {fallback} END"
    )


def sql_definitions(scoped: Mapping[str, Mapping[str, MetricInfo]] | None = None) -> str:
    """The SQL of the declarations (created before the core views, so every view reads them from here): the
    ``metric_info`` view and the macros ``metric_higher_is_better(scorer, metric, stored)`` (True, False, or NULL:
    no direction) and ``metric_correlated(scorer, metric, stored)``. ``scoped``: the registered scorers' own
    declarations, by scorer. ``stored`` is the row's ``higher_is_better`` column, read only for a metric nothing
    declares (a retired plug-in's): its direction is the stored one, and it is correlated when it has none."""
    scoped = scoped or {}
    rows = [
        (scorer, name, info)
        for scorer, table in [(None, METRICS), *sorted(scoped.items())]
        for name, info in table.items()
    ]
    values = ",\n    ".join(
        "("
        + ", ".join(
            _sql(v)
            for v in (
                scorer,
                name,
                info.direction,
                info.higher_is_better,
                float(info.low),
                float(info.high),
                info.aggregation,
                info.kind,
                info.correlated,
                info.description,
            )  # fmt: skip
        )
        + ")"
        for scorer, name, info in rows
    )
    direction = _lookup(scoped, "higher_is_better", "stored")
    correlated = _lookup(scoped, "correlated", "stored IS NULL")
    return f"""-- metric_info: every declared metric (evalfarm/metrics.py): its direction (higher, lower, NULL: none)
-- and higher_is_better, the range [low, high] of its values, how a unit's number is made from its items
-- (aggregation), its kind (score, rate, count, setting) and whether the correlation views carry it beside its
-- scorer's primary metric (correlated). scorer NULL: the shared declaration of the name (hits@{{k}}: every
-- Hits@k); a scorer's own declaration of a name wins over it. Views read them through
-- metric_higher_is_better(scorer, metric, stored) and metric_correlated(scorer, metric, stored); `stored` (a row's
-- higher_is_better) counts only where nothing declares the metric.
CREATE OR REPLACE VIEW metric_info AS
SELECT * FROM (VALUES
    {values}
) AS t(scorer, metric, direction, higher_is_better, low, high, aggregation, kind, correlated, description);

CREATE OR REPLACE MACRO metric_higher_is_better(scorer, metric, stored) AS {direction};
CREATE OR REPLACE MACRO metric_correlated(scorer, metric, stored) AS {correlated};
"""


__all__ = [
    "HITS_PATTERN",
    "METRICS",
    "Aggregation",
    "Direction",
    "Kind",
    "MetricInfo",
    "UndeclaredMetric",
    "declaration",
    "lookup",
    "sql_definitions",
]
