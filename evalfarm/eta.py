"""A run's ETA from the warehouse's own history of unit times.

The static cost model (:func:`evalfarm.plan.estimate_cost`) only orders the work: its costs are relative, so the
old progress line could give an ETA only after the first unit, extrapolating from it — and the first unit of a
model carries the whole model's load and embed time (48 min predicted for a 3.5-min run). The warehouse already
records every unit's embed and score seconds (the ``units`` view), so a run can say how long it will take before
it starts:

- each planned unit's seconds are its share of its model's embedding (which depends on the model kind and the
  texts) plus its scoring (which depends on the task), each looked up in the history; the estimate is named after
  the weaker of the two lookups: ``history`` (both from past units of the same model kind and task),
  ``history-kind`` (the embedding from the kind's seconds per text on other tasks times this task's text count),
  ``history-task`` (the scoring from the task's mean over every kind); when either is unknown (a kind or a task
  the history never saw), ``model`` (the static cost, in seconds per cost unit calibrated on the whole history),
  or ``built-in`` (a warehouse with no history: the static cost at :data:`DEFAULT_SECONDS_PER_COST`, plus the
  unit's texts at :data:`FALLBACK_EMBED_SECONDS_PER_TEXT` per unit of its kind's embedding cost and the model's
  load, since the run's first ETA then counts each task's texts: the full-data default embeds ~176k sentences per
  sentence model);
- a unit is looked up by its task *and* its scorer's cost variant (:meth:`Scorer.cost_variant`: downstream's
  training sample, ``max_train=N``, against the full data), so a history of quick-profile runs never prices a
  full-data run's classifiers (or its embedding of every training sentence) at the sample's seconds;
- a model's embed seconds (recorded on its first unit) are spread over its tasks by their text counts, so a unit's
  seconds are its share of the embedding plus its scoring; a model whose text store holds vectors already (a rerun,
  ``--force``, a new task, a run stopped mid-model) is estimated with the share of its texts still to embed;
- each model's load is priced apart, once (:func:`_with_load`): its own last load in the warehouse (the ``models``
  view's ``load_seconds``, :data:`LOADS_SQL`), else its kind's seconds per byte times its files' size, else its
  kind's mean load, else :func:`builtin_load`; the history's embed seconds have their loads taken out, so a word
  model's estimate is its load plus its texts, not its texts at a rate that hid a load;
- the run's start-up comes first (:func:`start_up_seconds`: a local Ray or a cluster connection, as the newest runs
  of that kind recorded it in their end summaries; built-in otherwise);
- the run's ETA is the start-up, then the remaining units' seconds over the workers, but never less than the
  largest remaining model (one worker embeds a model). While it runs it is what is left *now* (:class:`Forecast`):
  work not begun keeps its estimate (the clock never eats work nobody does: no ``ETA 1s`` with everything to do);
  a start-up, a load and a scoring count down from when they began; a model being embedded is its texts left at
  the rate it measured since its first text. What is measured corrects what is not begun: a model not started yet
  takes its estimate times its kind's measured / predicted embedding time (shrunk towards the run's overall ratio,
  and that towards 1, while little has been measured: one small model that took 6 s for a predicted 0.6 s says
  nothing of an encoder's minutes); scoring the finished units' actual / predicted seconds, shrunk the same way.

This module is pure (no warehouse, no Ray) except :func:`load_history`, :func:`load_loads` and
:func:`start_up_seconds`, which read the views.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol


class Readable(Protocol):
    """What the loaders read the views through: a :class:`~evalfarm.warehouse.Warehouse`, or one connection of it
    that a run's planner reads all three with (each ``Warehouse.query`` opens a connection of its own)."""

    def query(self, sql: str) -> Any: ...


log = logging.getLogger(__name__)

SOURCES = ("history", "history-kind", "history-task", "model", "built-in")
"""Where a unit's estimate came from, most specific first (``built-in``: no timings in the warehouse yet)."""

SOURCE_WORDS = {
    "history": "this warehouse's timings of the same kinds and tasks",
    "history-kind": "this warehouse's embedding rates per model kind",
    "history-task": "this warehouse's scoring times per task",
    "model": "the cost model, calibrated on this warehouse's timings",
    "built-in": "built-in rates per model kind (no timings in this warehouse yet)",
}
"""What each source means, in the words the first ETA line uses."""

DEFAULT_SECONDS_PER_COST = 9.0
"""Seconds per static cost unit when the history estimates nothing: one cost unit is one EvalRank sentence-pool
rank pass (cos + l2), ~9 s on one of 2 CPU cores (benchmarks/README.md, "Figures moved from the code")."""

FALLBACK_EMBED_SECONDS_PER_TEXT = 6.7e-4
"""Embedding seconds per text per unit of a kind's static embedding cost, for a warehouse with no history: the
static costs are per model, but a model's embedding grows with its texts (the full-data downstream default embeds
~126k sentences per sentence model, the quick profile ~15k). Calibrated on all-MiniLM-L6-v2 (kind cost 10): 495 s for
73,665 texts on one 2-core machine's worker in the nightly zoo run (``benchmarks/results/nightly-w7.json``'s
warehouse): 6.7 ms a text."""

BUILTIN_LOAD_SECONDS = 5.0
"""Seconds to load a model before its first text, for a warehouse with no history: GloVe 6B 50d's 400k-word table
and MiniLM's weights each take a few seconds on one of 2 CPU cores (the README's subset run: GloVe's one unit took
6.4 s where its 20 texts' share of a cost-0.02 kind predicted 0.6 s)."""
BUILTIN_LOAD_SECONDS_PER_MB = 0.1
"""Seconds per MB of a model's files to load it, for a kind the warehouse never loaded: the starter zoo's loads on
the shared 2-core machine under load ~10 (2026-12, ``load_encoder`` in one process): GloVe 6B 50d 84 MB in 2.2 s,
spaCy md 57 MB in 11.7 s, all-MiniLM-L6-v2 92 MB in 12.7 s (torch's import in it), the static model 20 MB in 3.6 s."""

POSTPROCESSED = "+postprocess"
"""Suffix of the history key of a post-processed model: it reuses its base's vectors, so it is far cheaper than
its kind (the ``models`` view's ``postprocess`` column; a planned model's own ``postprocess``)."""


def kind_key(kind: str | None, postprocessed: bool = False) -> str:
    """The key estimates are grouped by: the model kind, marked when the model is post-processed."""
    return (kind or "?") + (POSTPROCESSED if postprocessed else "")


@dataclass(frozen=True)
class PastUnit:
    """One computed unit of the history: its share of its model's embed seconds, its score seconds, what it was."""

    model: str
    key: str  # kind_key of the model
    task: str
    embed: float
    score: float
    texts: int | None = None  # the unit's text count (the ``quality`` view), None when unknown
    run_id: str = ""
    cost: float | None = None  # the static model's relative cost of the unit (as the planner computes it)
    variant: str = ""  # its scorer's cost variant (:func:`cost_variant`)

    @property
    def seconds(self) -> float:
        return self.embed + self.score

    @property
    def label(self) -> str:
        return task_label(self.task, self.variant)


@dataclass(frozen=True)
class PlannedUnit:
    """A unit about to run: what the history is looked up by, and the static model's relative cost."""

    model: str
    key: str
    task: str
    cost: float
    stored: float = 0.0  # the share of the model's texts its store holds already (1 or True: it embeds nothing)
    embed_cost: float = 0.0  # the model's static embedding cost (ModelPlan.embed_cost), for the text-scaled fallback
    variant: str = ""  # its scorer's cost variant (:func:`cost_variant`)
    score_cost: float | None = None  # the unit's static scoring cost alone (plan.SCORE_COST), when the planner knows
    load_bytes: int | None = None  # the size of the model's files (``source_bytes``), when known without loading

    @property
    def label(self) -> str:
        return task_label(self.task, self.variant)


@dataclass(frozen=True)
class PastLoad:
    """One model's load as the warehouse recorded it (``models.provenance``: ``load_seconds``, ``source_bytes``)."""

    model: str
    key: str
    seconds: float
    bytes: int | None = None


def task_label(task: str, variant: str = "") -> str:
    """What the history groups a unit's times by: the task, and its scorer's cost variant when there is one."""
    return f"{task}@{variant}" if variant else task


def cost_variant(scorer: str | None, params: str | Mapping[str, Any] | None) -> str:
    """The cost variant of a unit scored by ``scorer`` with ``params`` (canonical JSON or a dict):
    :meth:`evalfarm.scorers.base.Scorer.cost_variant`; ``""`` for a scorer this install does not know or params
    that do not parse (an old row: grouped with its task)."""
    if not scorer:
        return ""
    from evalfarm.scorers import scorers

    try:
        p = json.loads(params) if isinstance(params, str) else dict(params or {})
        return scorers()[scorer].cost_variant(p)
    except Exception:  # an unknown scorer, damaged params: no variant
        return ""


@dataclass(frozen=True)
class Estimate:
    seconds: float
    source: str  # one of SOURCES
    embed: float = field(default=0.0, compare=False)  # the unit's share of its model's embedding (in ``seconds``)
    load: float = field(default=0.0, compare=False)  # its model's load (in ``embed``; on the model's first unit)

    @property
    def rest(self) -> float:
        """Scoring: the seconds that are neither loading nor embedding."""
        return max(0.0, self.seconds - self.embed)


def _mean(values: dict[Any, list[float]]) -> dict[Any, float]:
    return {k: sum(v) / len(v) for k, v in values.items()}


class History:
    """Unit times grouped the ways :func:`estimate` looks them up, by task label (:func:`task_label`: the task and
    its cost variant; ``texts``, ``score_t`` and the pairs' second member are labels). One unit counts once per
    (model, label): its newest run's scoring (``rows`` are taken in order, later rows replacing earlier ones) and its
    largest embedding (a rerun over a complete text store embeds nothing, which says nothing of a fresh embedding).

    A unit's time has two parts that depend on different things: embedding depends on the model kind and the
    texts, scoring on the task (and a little on the vectors' size). They are looked up apart."""

    def __init__(self, rows: Iterable[PastUnit], loads: Iterable[PastLoad] = ()) -> None:
        self.loads = list(loads)
        by_kind: dict[str, list[float]] = defaultdict(list)
        sized: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for ld in self.loads:
            by_kind[ld.key].append(ld.seconds)
            if ld.bytes:
                sized[ld.key][0] += ld.seconds
                sized[ld.key][1] += ld.bytes
        self.load_model = {(ld.model, ld.key): ld.seconds for ld in self.loads}  # the model itself, loaded before
        self.load_kind = _mean(by_kind)  # a kind's mean load
        self.load_per_byte = {k: sec / n for k, (sec, n) in sized.items() if n > 0}  # a kind's load per byte
        latest: dict[tuple[str, str], PastUnit] = {}
        for r in rows:
            k = (r.model, r.label)
            latest[k] = replace(r, embed=max(r.embed, latest[k].embed)) if k in latest else r
        self.units = list(latest.values())
        embed_kt: dict[tuple[str, str], list[float]] = defaultdict(list)
        score_kt: dict[tuple[str, str], list[float]] = defaultdict(list)
        score_t: dict[str, list[float]] = defaultdict(list)
        per_text: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.texts: dict[str, int] = {}
        for u in self.units:
            embed_kt[(u.key, u.label)].append(u.embed)
            score_kt[(u.key, u.label)].append(u.score)
            score_t[u.label].append(u.score)
            if u.texts:
                acc = per_text[u.key]
                acc[0] += u.embed
                acc[1] += u.texts
                self.texts[u.label] = max(self.texts.get(u.label, 0), u.texts)
        self.embed_kt, self.score_kt, self.score_t = _mean(embed_kt), _mean(score_kt), _mean(score_t)
        self.kind_rate = {k: s / n for k, (s, n) in per_text.items() if n > 0}  # embed seconds per text
        costed = [u for u in self.units if u.cost]
        cost = sum(u.cost or 0.0 for u in costed)
        self.per_cost = sum(u.seconds for u in costed) / cost if cost > 0 else None  # the static model, calibrated

    def __len__(self) -> int:
        return len(self.units)

    def load(self, model: str, key: str, size: int | None) -> float | None:
        """Seconds to load ``model`` (of kind key ``key``, ``size`` bytes of files): its own last load, else its
        kind's seconds per byte times its size, else its kind's mean load; None when the history loaded no model
        of its kind."""
        if (model, key) in self.load_model:
            return self.load_model[(model, key)]
        if size and key in self.load_per_byte:
            return self.load_per_byte[key] * size
        return self.load_kind.get(key)


def _worse(a: str, b: str) -> str:
    return max(a, b, key=SOURCES.index)


def _left_to_embed(u: PlannedUnit) -> float:
    """The share of the unit's embedding still to do: 1 for a fresh model, 0 for a complete store."""
    return 1.0 - min(1.0, max(0.0, float(u.stored)))


def _from_history(u: PlannedUnit, history: History, texts: Mapping[str, int]) -> Estimate | None:
    """Embed part: the same kind on the same task, else the kind's seconds per text times the task's texts. Score
    part: the same kind on the same task, else the task's mean over every kind. None when either is unknown.
    ``texts``: counts by task label, else by task id (a run's own counts, taken under its options)."""
    kt = (u.key, u.label)
    n = texts.get(u.label) or texts.get(u.task)
    left = _left_to_embed(u)
    if left == 0.0:
        embed, e_src = 0.0, "history"  # its vectors are stored: nothing (or only a new task's texts) to embed
    elif kt in history.embed_kt:
        embed, e_src = history.embed_kt[kt] * left, "history"
    elif n and u.key in history.kind_rate:
        embed, e_src = history.kind_rate[u.key] * n * left, "history-kind"
    else:
        return None
    if kt in history.score_kt:
        score, s_src = history.score_kt[kt], "history"
    elif u.label in history.score_t:
        score, s_src = history.score_t[u.label], "history-task"
    else:
        return None
    return Estimate(embed + score, _worse(e_src, s_src), embed=embed)


def estimate(units: Sequence[PlannedUnit], history: History, texts: Mapping[str, int] | None = None) -> list[Estimate]:
    """Seconds of each planned unit (see the module docstring for the sources). ``texts``: text counts by task id
    (the run's, for labels the history has not seen: the history's own counts win)."""
    counts = {**(texts or {}), **history.texts}
    found = [_from_history(u, history, counts) for u in units]
    per_cost = history.per_cost
    if per_cost is None:  # a history without static costs: calibrate on the units it estimated
        known = [(u, e) for u, e in zip(units, found, strict=True) if e is not None]
        cost_known = sum(u.cost for u, _ in known)
        per_cost = sum(e.seconds for _, e in known) / cost_known if cost_known > 0 else None
    out = []
    for u, e in zip(units, found, strict=True):
        if e is None:
            if per_cost is not None:
                e = Estimate(u.cost * per_cost, "model")
            else:  # no history at all: the static cost, plus the embedding its texts take (when they are counted)
                n = (counts.get(u.label) or counts.get(u.task, 0)) * _left_to_embed(u)
                embed = u.embed_cost * n * FALLBACK_EMBED_SECONDS_PER_TEXT
                # the static cost holds the model's embedding too: with the texts counted, only its scoring is added
                static = u.score_cost if u.score_cost is not None and n else u.cost
                e = Estimate(static * DEFAULT_SECONDS_PER_COST + embed, "built-in", embed=embed)
        out.append(e)
    return _with_load(units, out, history)


def _with_load(units: Sequence[PlannedUnit], ests: list[Estimate], history: History | None = None) -> list[Estimate]:
    """Add each model's load to its first unit, when it loads an encoder and has texts to embed: from the
    warehouse's own load timings (:meth:`History.load`: the model's, else its kind's by size), else
    :func:`builtin_load` (the history's embed seconds have their loads taken out: ``history_rows``)."""
    seen: set[str] = set()
    out = []
    for u, e in zip(units, ests, strict=True):
        if u.embed_cost > 0 and _left_to_embed(u) > 0 and u.model not in seen:
            seen.add(u.model)
            known = history.load(u.model, u.key, u.load_bytes) if history is not None else None
            load = builtin_load(u.key, u.load_bytes) if known is None else known
            e = Estimate(e.seconds + load, e.source, embed=e.embed + load, load=load)
        out.append(e)
    return out


def builtin_load(key: str, size: int | None) -> float:
    """A model's load when the warehouse never loaded one of its kind: :data:`BUILTIN_LOAD_SECONDS`, or its files at
    :data:`BUILTIN_LOAD_SECONDS_PER_MB` when that is longer (GloVe's 400k-word table takes far longer to read than a
    small encoder's weights)."""
    return max(BUILTIN_LOAD_SECONDS, (size or 0) / 1e6 * BUILTIN_LOAD_SECONDS_PER_MB)


def sources(estimates: Iterable[Estimate]) -> dict[str, int]:
    """How many estimates came from each source (in :data:`SOURCES` order, those used only)."""
    n = {s: 0 for s in SOURCES}
    for e in estimates:
        n[e.source] += 1
    return {s: c for s, c in n.items() if c}


def makespan(seconds_by_model: Mapping[str, float], workers: int) -> float:
    """The time ``workers`` need for models of these total seconds: their sum over the workers, but at least the
    largest model (a model's embedding runs on one worker)."""
    if not seconds_by_model:
        return 0.0
    return max(sum(seconds_by_model.values()) / max(1, workers), max(seconds_by_model.values()))


LIVE_MIN_SECONDS = 5.0
"""A pass's own rate replaces its estimate once it has embedded for this long (and embedded something)."""
SHRINK_KIND_S = 30.0
"""Seconds of measured embedding that weigh as much as the kind's prior ratio: one kind's correction is shrunk
towards the run's overall one while less than about this much of it has been measured."""
SHRINK_RUN_S = 120.0
"""The same for the run's overall embedding ratio, shrunk towards 1 (the estimate as it stands)."""
SHRINK_REST_S = 60.0
"""The same for the scoring and loading ratio of finished units."""
RATIO_BOUNDS = (0.2, 5.0)
"""No correction moves an estimate by more than this factor: a noisy first minute must not say 10x."""


@dataclass(frozen=True)
class LivePass:
    """A model's embedding as its worker last reported it (:class:`evalfarm.execute.EmbedTick`): ``loading`` while
    its model loads (no text embedded yet)."""

    done: int
    total: int
    seconds: float
    finished: bool = False
    loading: bool = False


def _shrunk(actual: float, predicted: float, weight: float, prior: float = 1.0) -> float:
    """``actual / predicted`` pulled towards ``prior`` by ``weight`` seconds of pseudo-evidence, within the bounds."""
    lo, hi = RATIO_BOUNDS
    return min(hi, max(lo, (actual + weight * prior) / (predicted + weight))) if predicted + weight > 0 else prior


@dataclass
class Forecast:
    """A run's ETA: the planned units' estimates, corrected by what the run measures as it goes.

    ``start_up`` seconds come first (a Ray cluster starting: :meth:`ready` ends them); ``begin`` each job as a
    worker takes it, ``finish`` each unit as it ends, ``observe`` the embedding passes as the workers report them.
    :meth:`eta` is what is left, now:

    - work not started yet keeps its whole (corrected) estimate: the clock never eats work nobody does, so a
      late start-up or a long load never brings the ETA down to ``1s`` with everything to do;
    - a model being loaded counts its predicted load down from when its job began (then nothing more: the load
      is late), and keeps its texts' estimate until it embeds;
    - a model being embedded is its texts left at the rate measured since its first text (once that has run for
      :data:`LIVE_MIN_SECONDS`): never shorter than the work left at the rate measured so far;
    - a unit being scored counts its scoring estimate down from when its job began.

    Corrections (see the module docstring): a model not started yet takes its kind's measured / predicted
    embedding time, shrunk towards the run's; scoring the finished units' ratio, shrunk towards 1 — each bounded by
    :data:`RATIO_BOUNDS`. Remaining seconds per model go over the workers (:func:`makespan`)."""

    estimates: dict[tuple[str, str], Estimate]
    workers: int = 1  # planned; ``eta(workers=…)`` takes the live count
    clock: Callable[[], float] = time.monotonic
    keys: dict[str, str] = field(default_factory=dict)  # model -> its kind key (kind_key): corrections per kind
    start_up: float = 0.0  # seconds before any worker can start (a Ray cluster starting): counted down until ready()
    actual: dict[tuple[str, str], float] = field(default_factory=dict)  # finished units: their seconds
    dropped: set[tuple[str, str]] = field(default_factory=set)  # failed / skipped: out of the calibration
    live: dict[str, LivePass] = field(default_factory=dict)  # model -> its embedding as last reported
    embedded: set[str] = field(default_factory=set)  # models whose embedding is over (their scoring runs)
    began: dict[str, float] = field(default_factory=dict)  # model -> clock() when its embed job began
    scoring: dict[tuple[str, str], float] = field(default_factory=dict)  # unit -> clock() when its scoring began
    seen: dict[str, float] = field(default_factory=dict)  # model -> clock() when its pass last changed
    first_text: dict[str, tuple[int, float]] = field(default_factory=dict)  # model -> (done, seconds), 1st embed tick

    def __post_init__(self) -> None:
        self.created = self.clock()
        self.ready_at: float | None = None if self.start_up > 0 else self.created
        self._embed_pred: dict[str, float] = defaultdict(float)  # the texts' part (loading left out)
        self._load_pred: dict[str, float] = defaultdict(float)
        for (m, _), e in self.estimates.items():
            self._embed_pred[m] += e.embed - e.load
            self._load_pred[m] += e.load

    @property
    def total(self) -> float:
        """The first estimate of the whole run (nothing started yet): the start-up, then the units."""
        return self.start_up + makespan(self._by_model(self.estimates.keys(), 1.0), self.workers)

    def ready(self) -> None:
        """The first worker is ready: the start-up is over."""
        if self.ready_at is None:
            self.ready_at = self.clock()

    def begin(self, model: str, task: str | None = None) -> None:
        """A worker took ``model``'s embed job (``task`` None) or the scoring of (``model``, ``task``)."""
        self.ready()
        if task is None:
            self.began.setdefault(model, self.clock())
        else:
            self.scoring[(model, task)] = self.clock()

    def finish(self, model: str, task: str, seconds: float | None) -> None:
        """A unit ended: ``seconds`` it took when computed, None when it failed or was skipped (not calibrated)."""
        key = (model, task)
        if key not in self.estimates:
            return
        if seconds is None:
            self.dropped.add(key)
        self.actual[key] = seconds or 0.0

    def observe(self, passes: Mapping[str, LivePass], embedded: Iterable[str] = ()) -> None:
        """The embedding passes as the workers last reported them (model -> pass) and the models whose embedding
        is over."""
        now = self.clock()
        for m, p in passes.items():
            if m not in self._embed_pred or self.live.get(m) == p:
                continue
            self.seen[m] = now
            self.began.setdefault(m, now - p.seconds)
            if not p.loading and p.done > 0 and m not in self.first_text:
                self.first_text[m] = (p.done, p.seconds)
            self.ready()
        self.live = {m: p for m, p in passes.items() if m in self._embed_pred}
        self.embedded = set(embedded) & set(self._embed_pred)

    # -- corrections ------------------------------------------------------------------------------------------
    def _rate(self, model: str) -> tuple[float, int] | None:
        """(seconds, texts) the pass embedded since its first text, once that is :data:`LIVE_MIN_SECONDS` long
        (or the pass is over); None before."""
        p, first = self.live.get(model), self.first_text.get(model)
        if p is None or first is None or p.done <= first[0]:
            if p is not None and p.finished and p.done > 0 and p.seconds > 0:
                return p.seconds, p.done  # a pass seen only at its end: its whole time
            return None
        seconds = p.seconds - first[1]
        if not p.finished and seconds < LIVE_MIN_SECONDS:
            return None
        return max(seconds, 1e-9), p.done - first[0]

    def _measured(self, model: str) -> tuple[float, float] | None:
        """(seconds measured, seconds predicted for the same texts) of a model's embedding, when there is a rate."""
        got = self._rate(model)
        p = self.live.get(model)
        pred = self._embed_pred.get(model, 0.0)
        if got is None or p is None or pred <= 0 or p.total <= 0:
            return None
        return got[0], pred * min(1.0, got[1] / p.total)

    def embed_ratios(self) -> tuple[dict[str, float], float]:
        """(per kind key, overall) measured / predicted embedding seconds, shrunk (see the module docstring)."""
        by_key: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for m in self.live:
            got = self._measured(m)
            if got is not None:
                acc = by_key[self.keys.get(m, "?")]
                acc[0] += got[0]
                acc[1] += got[1]
        a = sum(v[0] for v in by_key.values())
        p = sum(v[1] for v in by_key.values())
        overall = _shrunk(a, p, SHRINK_RUN_S)
        return {k: _shrunk(v[0], v[1], SHRINK_KIND_S, overall) for k, v in by_key.items()}, overall

    def _embed_left(self, model: str, left: list[tuple[str, str]], ratios: tuple[dict[str, float], float]) -> float:
        """Seconds of ``model``'s loading and embedding still to come, now (see the class docstring)."""
        p = self.live.get(model)
        if model in self.embedded or (p is not None and p.finished):
            return 0.0
        texts = sum(self.estimates[k].embed - self.estimates[k].load for k in left)
        texts *= ratios[0].get(self.keys.get(model, "?"), ratios[1])
        if p is not None and not p.loading and p.done > 0:
            rate = self._rate(model)
            if rate is not None:  # the texts left at the pass's own rate
                return max(0, p.total - p.done) * rate[0] / max(rate[1], 1)
            return texts * (1.0 - min(1.0, p.done / max(p.total, 1)))
        load = self._load_pred.get(model, 0.0)
        if model in self.began:  # loading: its load counts down, the texts wait
            load = max(0.0, load - (self.clock() - self.began[model]))
        return load + texts

    def rest_ratio(self, ratios: tuple[dict[str, float], float] | None = None) -> float:
        """Finished units' actual / predicted seconds beside their embedding and loading (scoring), shrunk to 1.
        Per model: the first unit to finish carries the model's whole embedding (the scheduler counts it there),
        so a model's finished units together hold all of it: its measured pass plus its predicted load, else its
        estimate times the kind's ratio."""
        ratios = ratios or self.embed_ratios()
        by_model: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for k in self.actual:
            if k not in self.dropped:
                by_model[k[0]].append(k)
        a = p = 0.0
        for m, ks in by_model.items():
            measured = self._measured(m)
            if measured is not None and measured[1] > 0:
                embed = measured[0] * self._embed_pred[m] / measured[1]  # the pass's seconds for all its texts
            else:
                embed = self._embed_pred[m] * ratios[0].get(self.keys.get(m, "?"), ratios[1])
            a += max(0.0, sum(self.actual[k] for k in ks) - embed - self._load_pred[m])
            p += sum(self.estimates[k].rest for k in ks)
        return _shrunk(a, p, SHRINK_REST_S)

    def ratio(self) -> float:
        """The correction of what is left as a single number (remaining corrected / remaining as estimated)."""
        left = [k for k in self.estimates if k not in self.actual]
        plain = sum(self.estimates[k].seconds for k in left)
        corrected = sum(self._by_model_corrected(left).values())
        return corrected / plain if plain > 0 else 1.0

    def _by_model(self, keys: Iterable[tuple[str, str]], ratio: float) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for k in keys:
            out[k[0]] += self.estimates[k].seconds * ratio
        return out

    def _score_left(self, key: tuple[str, str], rest: float) -> float:
        seconds = self.estimates[key].rest * rest
        if key in self.scoring:
            seconds = max(0.0, seconds - (self.clock() - self.scoring[key]))
        return seconds

    def _by_model_corrected(self, left: list[tuple[str, str]]) -> dict[str, float]:
        ratios = self.embed_ratios()
        rest = self.rest_ratio(ratios)
        by_model: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for k in left:
            by_model[k[0]].append(k)
        return {
            m: self._embed_left(m, ks, ratios) + sum(self._score_left(k, rest) for k in ks)
            for m, ks in by_model.items()
        }

    def start_up_left(self) -> float:
        """Seconds of the start-up still to come (0 once a worker is ready, or when it runs late)."""
        if self.ready_at is not None:
            return 0.0
        return max(0.0, self.start_up - (self.clock() - self.created))

    def remaining(self, workers: int | None = None) -> float:
        """Seconds of the units not finished, over the workers, from now."""
        left = [k for k in self.estimates if k not in self.actual]
        return self.start_up_left() + makespan(self._by_model_corrected(left), workers or self.workers)

    def eta(self, workers: int | None = None) -> float:
        """The remaining time (at least 1 s while units remain)."""
        if len(self.actual) == len(self.estimates):
            return 0.0
        return max(1.0, self.remaining(workers))


def forecast(
    units: Sequence[PlannedUnit],
    history: History,
    *,
    workers: int = 1,
    texts: Mapping[str, int] | None = None,
    clock: Callable[[], float] = time.monotonic,
    start_up: float = 0.0,
) -> Forecast:
    """The :class:`Forecast` of ``units`` over ``workers`` after ``start_up`` seconds; logs (INFO: ``-v``) each
    model's estimate and sources."""
    ests = estimate(units, history, texts)
    by_model: dict[str, list[tuple[PlannedUnit, Estimate]]] = defaultdict(list)
    for u, e in zip(units, ests, strict=True):
        by_model[u.model].append((u, e))
    for model, pairs in by_model.items():
        used = ", ".join(f"{u.task} {e.seconds:.1f}s ({e.source})" for u, e in pairs)
        load = sum(e.load for _, e in pairs)
        log.info("ETA estimate · %s [%s]: %.0f s (load %.0f s): %s", model, pairs[0][0].key,
                 sum(e.seconds for _, e in pairs), load, used)  # fmt: skip
    return Forecast(
        {(u.model, u.task): e for u, e in zip(units, ests, strict=True)},
        workers=workers,
        clock=clock,
        keys={u.model: u.key for u in units},
        start_up=start_up,
    )


HISTORY_SQL = """
WITH t AS (
    SELECT run_id, model, task,
           sum(seconds) FILTER (WHERE stage = 'embed') AS embed_s,
           sum(seconds) FILTER (WHERE stage = 'score') AS score_s,
           any_value(fingerprint) FILTER (WHERE stage = 'score') AS fingerprint,
           max(started_at) AS at
    FROM units
    WHERE status = 'done' AND stage IN ('embed', 'score')
    GROUP BY run_id, model, task
), nu AS (SELECT fingerprint, max(n_texts) AS texts FROM quality GROUP BY fingerprint),
n AS (SELECT task, max(n_texts) AS texts FROM quality GROUP BY task),
s AS (SELECT DISTINCT model, task, scorer FROM metrics),
p AS (SELECT fingerprint, any_value(params) AS params FROM metrics_history GROUP BY fingerprint)
SELECT t.run_id, t.model, t.task, coalesce(t.embed_s, 0) AS embed_s, t.score_s, t.at,
       coalesce(nu.texts, n.texts) AS texts, m.kind, m.level, m.postprocess IS NOT NULL AS post, s.scorer, p.params,
       TRY_CAST(json_extract_string(m.provenance, '$.load_seconds') AS DOUBLE) AS load_s
FROM t LEFT JOIN nu USING (fingerprint) LEFT JOIN n USING (task) LEFT JOIN models m USING (model)
LEFT JOIN s USING (model, task) LEFT JOIN p USING (fingerprint)
WHERE t.score_s IS NOT NULL
ORDER BY t.at NULLS FIRST, t.run_id, t.model, t.task
"""
"""Per (run, model, task): its seconds, and through the score unit's fingerprint (which the params and the task's
checksum enter) its params and text count; ``load_s``, the model's last load (the ``models`` view's provenance). By
fingerprint, not by run: ``run --force`` rewrites a unit's metrics and quality files under the same fingerprint with
the new run's id, and the earlier run's timing still describes them."""


def static_cost(kind: str | None, level: str, scorer: str, postprocessed: bool, n_units: int) -> float:
    """The static model's relative cost of one of a model's ``n_units`` units, as the planner computes it
    (:func:`evalfarm.plan.estimate_cost` spread evenly over the units)."""
    from evalfarm.plan import SCORE_COST, embed_cost

    return embed_cost(kind, level, postprocessed) / max(1, n_units) + SCORE_COST.get((scorer, level), 0.05)


def history_rows(
    records: Iterable[Mapping[str, Any]], cost: Callable[[Mapping[str, Any], int], float] | None = None
) -> list[PastUnit]:
    """:class:`PastUnit` rows from per-(run, model, task) records (``embed_s``, ``score_s``, ``texts``, ``kind``,
    ``post``, ``scorer`` and ``params`` for the cost variant, ``load_s``, …): each model's embed seconds of a run,
    less its load (``load_s``: the ETA prices loads apart, :class:`PastLoad`), spread over that run's tasks of it by
    text count (equally when a count is unknown). ``cost(record, units of its model in its run)``: the unit's
    static cost."""
    recs = list(records)
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in recs:
        groups[(r["run_id"], r["model"])].append(r)
    out = []
    for r in recs:
        group = groups[(r["run_id"], r["model"])]
        embed = sum(float(g["embed_s"] or 0.0) for g in group)
        embed = max(0.0, embed - float(r.get("load_s") or 0.0)) if embed > 0 else 0.0
        counts = [g.get("texts") for g in group]
        share = embed * float(r["texts"]) / float(sum(c for c in counts if c)) if all(counts) else embed / len(group)
        out.append(
            PastUnit(
                model=r["model"],
                key=kind_key(r.get("kind"), bool(r.get("post"))),
                task=r["task"],
                embed=share,
                score=float(r["score_s"] or 0.0),
                texts=int(r["texts"]) if r.get("texts") else None,
                run_id=r["run_id"],
                cost=cost(r, len(group)) if cost is not None else None,
                variant=cost_variant(r.get("scorer"), r.get("params")),
            )
        )
    return out


def record_cost(r: Mapping[str, Any], n_units: int) -> float:
    """:func:`static_cost` of a :data:`HISTORY_SQL` record."""
    return static_cost(r.get("kind"), r.get("level") or "", r.get("scorer") or "", bool(r.get("post")), n_units)


def load_history(wh: Readable, *, exclude_run: str | None = None) -> list[PastUnit]:
    """The warehouse's computed units, oldest first (the ``units``, ``models``, ``quality`` and ``metrics``
    views). An empty list when the warehouse has none or cannot be read: the ETA then falls back, the run goes on."""
    try:
        rows = wh.query(HISTORY_SQL).to_pylist()
    except Exception as exc:  # a new or damaged warehouse: no history, never a failed run
        log.info("ETA: no history read from the warehouse (%s: %s)", type(exc).__name__, exc)
        return []
    return history_rows((r for r in rows if r["run_id"] != exclude_run), record_cost)


LOADS_SQL = """
SELECT model, kind, postprocess IS NOT NULL AS post,
       TRY_CAST(json_extract_string(provenance, '$.load_seconds') AS DOUBLE) AS seconds,
       TRY_CAST(json_extract_string(provenance, '$.source_bytes') AS BIGINT) AS bytes
FROM models
WHERE TRY_CAST(json_extract_string(provenance, '$.load_seconds') AS DOUBLE) IS NOT NULL
"""
"""Each model's last load (the ``models`` view: its newest row), in seconds, and the size of its files."""


def load_loads(wh: Readable) -> list[PastLoad]:
    """The warehouse's recorded model loads (:data:`LOADS_SQL`); empty when it has none or cannot be read."""
    try:
        rows = wh.query(LOADS_SQL).to_pylist()
    except Exception as exc:  # a new or damaged warehouse: no history, never a failed run
        log.info("ETA: no load timings read from the warehouse (%s: %s)", type(exc).__name__, exc)
        return []
    return [
        PastLoad(r["model"], kind_key(r["kind"], bool(r["post"])), float(r["seconds"]), r["bytes"] or None)
        for r in rows
    ]


BUILTIN_START_UP_S = {"local-ray": 20.0, "cluster": 5.0, "local": 0.0}
"""Seconds before a run's first worker is ready, where the warehouse recorded none: a local Ray started by the run
(``ray.init``, then each worker actor importing torch; 8–65 s on the shared 2-core machine, most of it under load),
a cluster that is already up (connecting, then the actors), the in-process loop."""
START_UP_RUNS = 5
"""The recorded start-ups of the newest runs of the same kind that the estimate takes the median of."""


def start_up_where(executor: str, address: str | None) -> str:
    """Which start-up a run has: ``local`` (the in-process loop), ``local-ray`` (a Ray it starts), ``cluster``."""
    import os

    if executor == "local":
        return "local"
    return "cluster" if (address or os.environ.get("RAY_ADDRESS")) else "local-ray"


def start_up_seconds(wh: Readable, where: str) -> tuple[float, str]:
    """(seconds, source) of a run's start-up (:func:`start_up_where`): the median of the newest
    :data:`START_UP_RUNS` runs' recorded ones (their end summaries' ``start_up_s``), else
    :data:`BUILTIN_START_UP_S`."""
    if where == "local":
        return 0.0, "built-in"
    try:
        rows = wh.query(
            "SELECT summary FROM runs WHERE summary IS NOT NULL ORDER BY finished_at DESC LIMIT 200"
        ).to_pylist()
    except Exception:
        rows = []
    seen: list[float] = []
    for r in rows:
        try:
            s = json.loads(r["summary"])
        except (TypeError, ValueError):
            continue
        up = s.get("start_up") if isinstance(s, dict) else None  # null: a run that started no Ray
        if isinstance(up, dict) and up.get("where") == where and up.get("seconds"):
            seen.append(float(up["seconds"]))
        if len(seen) == START_UP_RUNS:
            break
    if not seen:
        return BUILTIN_START_UP_S[where], "built-in"
    seen.sort()
    return seen[len(seen) // 2], "history"
