"""The scorer layer's contract: a task kind, the scorer that evaluates it, and what a score produces.

A scorer never loads a model. A task kind is one module: its spec (a pydantic :class:`TaskSpec` subclass), how to
read that task's files (``load``), which texts it needs embedded (``texts``), the parameters that enter its
fingerprint (``params``), ``score(task, data, vectors, params)`` -> metric rows plus optional detail tables, and its
declarations, each read by the framework:

- ``primary_metric`` (and :meth:`Scorer.is_primary` for a finer choice): which rows are the leaderboard's number; the
  executor marks them (:meth:`Scorer.evaluate`), a scorer never sets ``MetricRow.primary`` itself;
- ``higher_is_better``: the direction stored on every metrics row, which the leaderboard and the correlations sort by;
- ``description``: one line where task kinds are listed (:func:`evalfarm.scorers.task_kind_table`);
- ``detail_schemas``: the per-unit detail tables the scorer writes (the warehouse makes them, the scan checks them);
- ``views``: the SQL of the views over those tables (created after the core views of ``sql/``).

The runner, the scheduler and the embed stage know nothing else about it.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

import numpy as np

from evalfarm.catalog.specs import TaskSpec
from evalfarm.options import SIMILARITIES, RunOptions, Similarity  # re-exported: callers of the scorer layer
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

    @property
    def dim(self) -> int:
        return int(self.emb.shape[1])


@dataclass
class MetricRow:
    """One number. ``subset`` names a part of the task ('all' when there is one), ``variant`` the scorer's choice
    (similarity, protocol), ``ties`` the tie policy of a rank metric (None elsewhere). ``primary`` is not the
    scorer's to set: :meth:`Scorer.evaluate` derives it from the scorer's declaration."""

    metric: str
    value: float
    subset: str = "all"
    variant: str = ""
    ties: str | None = None
    primary: bool = field(default=False, init=False)


@dataclass
class ScoreResult:
    rows: list[MetricRow] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # table -> pyarrow.Table (Scorer.detail_schemas)
    notes: list[str] = field(default_factory=list)  # what a user should know (printed, not stored as numbers)


@runtime_checkable
class TaskData(Protocol):
    """What a scorer's ``load`` returns: at least the distinct texts the task needs embedded."""

    @property
    def texts(self) -> Sequence[str]: ...


class Scorer:
    """Base class of a scorer (subclass it, set the class attributes, implement ``load`` and ``score``)."""

    name: ClassVar[str]
    version: ClassVar[str]
    task_spec: ClassVar[type[TaskSpec]]
    primary_metric: ClassVar[str]
    higher_is_better: ClassVar[bool] = True
    description: ClassVar[str] = ""
    detail_schemas: ClassVar[Mapping[str, pa.Schema]] = MappingProxyType({})
    """Per-unit detail tables the scorer writes (``ScoreResult.details``), by name: each schema has the columns
    ``run_id``, ``model``, ``task`` and ``fingerprint``, which the executor fills."""
    views: ClassVar[str] = ""
    """SQL (``CREATE OR REPLACE VIEW`` statements only) of the views over the detail tables; ``{root}`` is the
    warehouse root. Inline, or a ``.sql`` file beside the module read with :func:`packaged_sql`."""

    @property
    def task_kind(self) -> str:
        return self.task_spec.model_fields["kind"].default

    def params(self, task: TaskSpec, options: RunOptions) -> dict[str, Any]:
        """The parameters that change this scorer's numbers on ``task`` (they enter the unit's fingerprint)."""
        return {}

    def load(self, task: TaskSpec) -> Any:
        """Read and verify the task's files; returns a :class:`TaskData`."""
        raise NotImplementedError

    def load_for(self, task: TaskSpec, options: RunOptions) -> Any:
        """The task's data for a run with ``options`` (what the executor calls): ``load(task)``, unless a run
        option changes which texts the task needs (downstream's ``full_downstream``)."""
        return self.load(task)

    def texts(self, data: Any) -> Sequence[str]:
        return data.texts

    def score(
        self, task: TaskSpec, data: Any, vectors: TextVectors, params: dict[str, Any], *, device: str | None = None
    ) -> ScoreResult:
        raise NotImplementedError

    def is_primary(self, row: MetricRow, task: TaskSpec | None, data: Any) -> bool:
        """Whether ``row`` is a primary number of the unit (the leaderboard's): by default every row of
        ``primary_metric``. Override to narrow it (STS: the task's primary subset only), never to widen it."""
        return row.metric == self.primary_metric

    def evaluate(
        self,
        task: TaskSpec | None,
        data: Any,
        vectors: TextVectors,
        params: dict[str, Any],
        *,
        device: str | None = None,
    ) -> ScoreResult:
        """What the executor calls: :meth:`score`, then each row's ``primary`` flag, from the declaration: a row of
        ``primary_metric`` that :meth:`is_primary` accepts."""
        result = self.score(task, data, vectors, params, device=device)  # type: ignore[arg-type]
        for row in result.rows:
            row.primary = row.metric == self.primary_metric and self.is_primary(row, task, data)
        return result


def packaged_sql(package: str, name: str) -> str:
    """The text of the SQL file ``name`` shipped in ``package`` (a scorer's views beside its module: from a
    checkout, an installed wheel, or a zipped one alike). The file must be listed in the package data."""
    return importlib.resources.files(package).joinpath(name).read_text(encoding="utf-8")


__all__ = [
    "SIMILARITIES",
    "MetricRow",
    "RunOptions",
    "ScoreResult",
    "Scorer",
    "Similarity",
    "TaskData",
    "TextVectors",
    "packaged_sql",
]
