"""The scorer layer's contract: a task kind, the scorer that evaluates it, and what a score produces.

A scorer never loads a model. It declares its task kind (a pydantic :class:`TaskSpec` subclass), how to read that
task's files (``load``), which texts it needs embedded (``texts``), the parameters that enter its fingerprint
(``params``), its primary metric and direction, and ``score(task, data, vectors, params)`` -> metric rows plus
optional detail tables. The runner, the scheduler and the embed stage know nothing else about it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import numpy as np

from evalfarm.catalog.specs import TaskSpec
from evalfarm.options import SIMILARITIES, RunOptions, Similarity  # re-exported: callers of the scorer layer
from evalfarm.vocab import VocabStats


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
    (similarity, protocol), ``ties`` the tie policy of a rank metric (None elsewhere)."""

    metric: str
    value: float
    subset: str = "all"
    variant: str = ""
    ties: str | None = None
    primary: bool = False


@dataclass
class ScoreResult:
    rows: list[MetricRow] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # table name -> pyarrow.Table (see warehouse.SCHEMAS)
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
    detail_tables: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""

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


__all__ = [
    "SIMILARITIES",
    "MetricRow",
    "RunOptions",
    "ScoreResult",
    "Scorer",
    "Similarity",
    "TaskData",
    "TextVectors",
]
