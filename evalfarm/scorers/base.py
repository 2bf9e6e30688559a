"""The scorer layer's contract: a task kind, the scorer that evaluates it, and what a score produces.

A scorer never loads a model. A task kind is one module: its spec (a pydantic :class:`TaskSpec` subclass), how to
read that task's files (``load``), which texts it needs embedded (``texts``), the parameters that enter its
fingerprint (``params``), ``score(task, data, vectors, params)`` -> metric rows plus optional detail tables, and its
declarations, each read by the framework:

- ``primary_metric`` (and :meth:`Scorer.is_primary` for a finer choice): which rows are the leaderboard's number; the
  executor marks them (:meth:`Scorer.evaluate`), a scorer never sets ``MetricRow.primary`` itself;
- ``declared_metrics``: what its own metrics are where :data:`evalfarm.metrics.METRICS` (every built-in metric's
  direction, range, aggregation, kind and whether the correlations carry it, declared once by name) does not say it:
  a plug-in's metric, or a shared one the scorer reads differently (EvalRank's hits@1 / hits@3, carried by the
  correlation views for the paper's layout). Every metric a scorer emits is declared in one or the other
  (:meth:`Scorer.metric_info`; the executor refuses an undeclared one); each stored row's ``higher_is_better`` is its
  metric's direction (NULL: none, a count or a space's geometry, never primary, so never on a leaderboard);
- ``role``: what its numbers are for (:data:`evalfarm.plugins.Role`): ``intrinsic`` (the default), ``downstream``
  (the correlations' columns, the boards' sample labels) or ``diagnostic`` (geometry, AG2016, HEROS, DefSent:
  ``evalfarm correlations`` shows its rows only when asked, ``--diagnostics``; the report gives it its own section).
  The views join on it (``scorer_role(scorer)``, the ``scorer_roles`` view), so a new downstream benchmark is one
  module;
- ``description``: one line where task kinds are listed (:func:`evalfarm.scorers.task_kind_table`);
- ``detail_schemas``: the per-unit detail tables the scorer writes (the warehouse makes them, the scan checks them);
- ``views``: the SQL of the views over those tables (created after the core views of ``sql/``);
- ``thin_rules``: when the unit's numbers rest on too little data to rank (:meth:`Scorer.thin`): the executor flags
  every metrics row of such a unit ``thin`` with the reason, and the leaderboards and correlations leave it out;
- ``prompt_type``, ``query_side``, ``asymmetric``: which prompt an instruction-tuned model puts before the task's
  texts (:mod:`evalfarm.catalog.prompts`): the kind's task type, whether it has a query side
  (:meth:`Scorer.query_texts`) and whether that side is embedded apart by default (:meth:`Scorer.task_prompts`).

The runner, the scheduler and the embed stage know nothing else about it.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, runtime_checkable

import numpy as np
from typing_extensions import TypeVar

from evalfarm.catalog.prompts import Prompts, TaskPrompts, TaskType, task_prompts
from evalfarm.catalog.specs import TaskSpec
from evalfarm.metrics import MetricInfo, lookup
from evalfarm.options import SIMILARITIES, RunOptions, Similarity  # re-exported: callers of the scorer layer
from evalfarm.plugins import DEFAULT_ROLE, Role
from evalfarm.ranking import Ties
from evalfarm.vocab import VocabStats

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class TextVectors:
    """A model's stored embeddings of a task's texts, in the order of ``TaskData.texts``.

    ``emb`` rows of OOV texts are zero (the preprocessing protocol decides what they become); ``vocab`` holds a word
    model's vocabulary statistics (None for sentence models).
    """

    level: Literal["word", "sentence"]
    emb: np.ndarray
    oov: np.ndarray
    vocab: VocabStats | None = None
    oov_policy: Literal["mean", "skip", "zero"] = "mean"  # the model's (ModelSpec.oov)
    query: QueryVectors | None = None  # an asymmetric task's query side, embedded under its own prompt
    binary: bool = False  # the model's vectors are signs (+1 / -1: postprocess binary): EvalRank adds Hamming ranks

    @property
    def dim(self) -> int:
        return int(self.emb.shape[1])


@dataclass
class QueryVectors:
    """The query side of an asymmetric task (:meth:`Scorer.query_texts`), embedded under the model's query prompt:
    row i is ``texts[i]``; :meth:`rows` maps texts to rows. ``TextVectors.emb`` then holds every text of the task
    under the document prompt."""

    texts: list[str]
    emb: np.ndarray
    oov: np.ndarray

    def rows(self, texts: Sequence[str]) -> np.ndarray:
        index = {t: i for i, t in enumerate(self.texts)}
        return np.array([index[t] for t in texts], dtype=np.int64)


@dataclass(frozen=True)
class Interval:
    """A confidence interval of one number (a correlation's): ``low``..``high`` and how it was computed (``method``,
    e.g. ``fisher-z 95%``), stored beside the value in the metrics row's ``ci_low`` / ``ci_high`` / ``ci_method``."""

    low: float
    high: float
    method: str


@dataclass
class MetricRow:
    """One number. ``subset`` names a part of the task ('all' when there is one), ``variant`` the scorer's choice
    (similarity, protocol), ``ties`` the tie policy of a rank metric (:mod:`evalfarm.ranking`; None elsewhere),
    ``ci`` its confidence interval where the scorer computes one (correlations). ``primary`` is not the scorer's to
    set: :meth:`Scorer.evaluate` derives it from the scorer's declaration."""

    metric: str
    value: float
    subset: str = "all"
    variant: str = ""
    ties: Ties | None = None
    ci: Interval | None = None
    primary: bool = field(default=False, init=False)


@dataclass
class ScoreResult:
    rows: list[MetricRow] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # table -> pyarrow.Table (Scorer.detail_schemas)
    notes: list[str] = field(default_factory=list)  # what a user should know (printed, not stored as numbers)


@dataclass(frozen=True)
class ThinRule:
    """A bound on one of the scorer's own bookkeeping metrics (coverage, pair counts, OOV and tie shares) past which
    the unit's numbers are too thin to rank: a row of ``metric`` below ``at_least`` or above ``at_most`` makes the
    unit thin. A NaN or missing row never does (the rule judges only what was measured)."""

    metric: str
    at_least: float | None = None
    at_most: float | None = None

    def broken_by(self, row: MetricRow) -> str | None:
        """Why ``row`` breaks the rule (``metric value < bound`` and where), else None."""
        if row.metric != self.metric:
            return None
        where = "/".join(x for x in (row.subset if row.subset != "all" else "", row.variant) if x)
        at = f" ({where})" if where else ""
        if self.at_least is not None and row.value < self.at_least:
            return f"{self.metric} {row.value:.4g} < {self.at_least:g}{at}"
        if self.at_most is not None and row.value > self.at_most:
            return f"{self.metric} {row.value:.4g} > {self.at_most:g}{at}"
        return None


RETIRED_DECLARATIONS = frozenset({"higher_is_better", "descriptive_metrics", "correlated_metrics"})
"""What a scorer declared before each metric had its declaration (:mod:`evalfarm.metrics`): a subclass that still
sets one is refused (its direction would be silently ignored)."""


@runtime_checkable
class TaskData(Protocol):
    """What a scorer's ``load`` returns: at least the distinct texts the task needs embedded."""

    @property
    def texts(self) -> Sequence[str]: ...


SpecT = TypeVar("SpecT", bound=TaskSpec, default=Any)
"""The task spec a scorer reads (its ``task_spec``): ``Scorer[EvalRankTask, ...]``."""
DataT = TypeVar("DataT", bound=TaskData, default=Any)
"""What a scorer's ``load`` returns and its ``score`` reads (a :class:`TaskData`). A bare ``Scorer`` is a scorer of
any kind (``Scorer[Any, Any]``): the registry's, the executor's."""


class Scorer(Generic[SpecT, DataT]):
    """Base class of a scorer (subclass it, set the class attributes, implement ``load`` and ``score``), generic in
    the spec it reads and the data it loads: ``class EvalRankScorer(Scorer[EvalRankTask, EvalRankPool])`` lets each
    method name its task's own fields, checked."""

    name: ClassVar[str]
    version: ClassVar[str]
    task_spec: ClassVar[type[TaskSpec]]
    primary_metric: ClassVar[str]
    declared_metrics: ClassVar[Mapping[str, MetricInfo]] = MappingProxyType({})
    """The scorer's own declarations of its metrics (name -> :class:`~evalfarm.metrics.MetricInfo`), read before
    the shared ones of :data:`evalfarm.metrics.METRICS` (module docstring)."""
    role: ClassVar[Role] = DEFAULT_ROLE
    """What the kind's numbers are for (module docstring): intrinsic, downstream or diagnostic."""
    description: ClassVar[str] = ""
    detail_schemas: ClassVar[Mapping[str, pa.Schema]] = MappingProxyType({})
    """Per-unit detail tables the scorer writes (``ScoreResult.details``), by name: each schema has the columns
    ``run_id``, ``model``, ``task`` and ``fingerprint``, which the executor fills."""
    views: ClassVar[str] = ""
    """SQL (``CREATE OR REPLACE VIEW`` statements only) of the views over the detail tables; ``{root}`` is the
    warehouse root. Inline, or a ``.sql`` file beside the module read with :func:`packaged_sql`."""
    thin_rules: ClassVar[tuple[ThinRule, ...]] = ()
    """When the unit's numbers are too thin to rank (:meth:`thin`); none: never. Each scorer's docstring says how
    far its bounds sit from the starter zoo's figures."""
    prompt_type: ClassVar[TaskType] = "similarity"
    """The kind of task its texts are embedded for (:data:`evalfarm.catalog.prompts.TASK_TYPES`): which prompt an
    instruction-tuned model puts before them."""
    query_side: ClassVar[bool] = False
    """The kind's texts have a query side (:meth:`query_texts`): a model's prompts may embed it apart."""
    asymmetric: ClassVar[bool] = False
    """The query side is embedded under the query prompt by default (DefSent: a definition asks for a word); with
    ``False`` only when a model's per-task prompts name the two sides (EvalRank)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        retired = sorted(RETIRED_DECLARATIONS & set(vars(cls)))
        if retired:
            raise TypeError(
                f"scorer {cls.__qualname__} declares {', '.join(retired)}: a direction is declared per metric now, "
                "in declared_metrics (name -> evalfarm.metrics.MetricInfo) where evalfarm/metrics.py's METRICS does "
                "not declare the metric"
            )

    @property
    def task_kind(self) -> str:
        return self.task_spec.model_fields["kind"].default

    def params(self, task: SpecT, options: RunOptions) -> dict[str, Any]:
        """The parameters that change this scorer's numbers on ``task`` (they enter the unit's fingerprint)."""
        return {}

    def cost_variant(self, params: Mapping[str, Any]) -> str:
        """A label for what in ``params`` (:meth:`params`, as stored) changes a unit's time by a factor, so the ETA
        keeps such units' history apart (:mod:`evalfarm.eta`); ``""``: nothing does (the default)."""
        return ""

    def variant_label(self, variant: str) -> str:
        """How a person reads ``variant`` beside a task's name (a unit's line, a correlation's row): the variant
        itself, unless it could be read as something else (word-similarity's ``evalrank-word`` is a protocol, not
        the EvalRank task). SQL shows the stored variant, with its ``scorer`` beside it."""
        return variant

    def load(self, task: SpecT) -> DataT:
        """Read and verify the task's files; returns a :class:`TaskData`."""
        raise NotImplementedError

    def load_for(self, task: SpecT, options: RunOptions) -> DataT:
        """The task's data for a run with ``options`` (what the executor calls): ``load(task)``, unless a run
        option changes which texts the task needs (downstream's ``quick_downstream``)."""
        return self.load(task)

    def texts(self, data: DataT) -> Sequence[str]:
        return data.texts

    def query_texts(self, data: DataT) -> Sequence[str]:
        """The distinct texts of the query side (kinds with ``query_side``): embedded under a model's query prompt
        when its prompts make the task asymmetric, beside every text under the document prompt."""
        raise NotImplementedError(f"task kind {self.name!r} has no query side")

    def task_prompts(self, task: TaskSpec, prompts: Prompts | None) -> TaskPrompts:
        """The prompts a model with ``prompts`` puts before this task's texts (:func:`evalfarm.catalog.prompts.
        task_prompts`, with the kind's declarations)."""
        return task_prompts(
            prompts, task=task.id, task_type=self.prompt_type, sides=self.query_side, asymmetric=self.asymmetric
        )

    def score(
        self, task: SpecT, data: DataT, vectors: TextVectors, params: dict[str, Any], *, device: str | None = None
    ) -> ScoreResult:
        raise NotImplementedError

    def metric_info(self, metric: str) -> MetricInfo:
        """What ``metric`` is (direction, range, aggregation, kind, correlated): the scorer's own declaration
        (:attr:`declared_metrics`), else the shared one (:data:`evalfarm.metrics.METRICS`);
        :class:`~evalfarm.metrics.UndeclaredMetric` when neither declares it."""
        return lookup(metric, self.declared_metrics, scorer=self.name)

    def is_primary(self, row: MetricRow, task: SpecT | None, data: DataT) -> bool:
        """Whether ``row`` is a primary number of the unit (the leaderboard's): by default every row of
        ``primary_metric``. Override to narrow it (STS: the task's primary subset only), never to widen it."""
        return row.metric == self.primary_metric

    def in_profile(self, metric: str, subset: str) -> bool:
        """Whether a stored number belongs to the kind's profile, what the report's diagnostics show (a model page's
        diagnostics table, the index's zoo-wide heatmap): by default the primary metric and the descriptive ones (no
        direction, carried by the correlations: a space's geometry), in every subset. Override to leave out detail
        (AG2016: the per-file subsets)."""
        info = self.metric_info(metric)
        return metric == self.primary_metric or (info.direction is None and info.correlated)

    def thin(self, rows: Sequence[MetricRow], task: SpecT | None) -> str | None:
        """Why the unit whose rows are ``rows`` is too thin to rank (a 5-word model's rho from 3 pairs), else None:
        every :attr:`thin_rules` bound the rows break, joined. Override for a rule that needs the task."""
        reasons = [why for rule in self.thin_rules for row in rows if (why := rule.broken_by(row))]
        return "; ".join(dict.fromkeys(reasons)) or None

    def evaluate(
        self,
        task: SpecT | None,
        data: DataT,
        vectors: TextVectors,
        params: dict[str, Any],
        *,
        device: str | None = None,
    ) -> ScoreResult:
        """What the executor calls: :meth:`score`, then each row's ``primary`` flag, from the declaration: a row of
        ``primary_metric`` that :meth:`is_primary` accepts (a metric with no direction is never primary).
        :class:`~evalfarm.metrics.UndeclaredMetric` when a row's metric is declared nowhere (:meth:`metric_info`)."""
        # a kind whose score reads no task is evaluated without one (tests, `evalfarm recompute` of such a unit)
        result = self.score(task, data, vectors, params, device=device)  # type: ignore[arg-type]  # task None
        for row in result.rows:
            info = self.metric_info(row.metric)
            row.primary = (
                row.metric == self.primary_metric and info.direction is not None and self.is_primary(row, task, data)
            )
        return result


def packaged_sql(package: str, name: str) -> str:
    """The text of the SQL file ``name`` shipped in ``package`` (a scorer's views beside its module: from a
    checkout, an installed wheel, or a zipped one alike). The file must be listed in the package data."""
    return importlib.resources.files(package).joinpath(name).read_text(encoding="utf-8")


__all__ = [
    "RETIRED_DECLARATIONS",
    "SIMILARITIES",
    "Interval",
    "MetricRow",
    "QueryVectors",
    "RunOptions",
    "ScoreResult",
    "Scorer",
    "Similarity",
    "TaskData",
    "TextVectors",
    "ThinRule",
    "packaged_sql",
]
