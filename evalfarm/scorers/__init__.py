"""Scorers: one module per evaluator, each registering its task kind in :data:`evalfarm.plugins.task_kinds`.

A scorer module defines its task kind (a :class:`~evalfarm.catalog.specs.TaskSpec` subclass with
``kind: Literal["..."]``) and a :class:`~evalfarm.scorers.base.Scorer` subclass decorated with :func:`register`.
The registry finds every module of this package the first time it is asked, and installed plug-ins through the
``evalfarm.task_kinds`` entry-point group. It refuses two scorers with one name or one task kind.
``rank_kernel`` and ``neighbours`` are helpers that register nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from evalfarm.metrics import MetricInfo, declaration, lookup
from evalfarm.plugins import RegistryError, task_kinds, task_spec_adapter
from evalfarm.scorers.base import Scorer


def register(scorer_cls: type[Scorer]) -> type[Scorer]:
    """Class decorator: register one scorer under its task kind (its name and its task kind must be new)."""
    name = scorer_cls.name
    for kind in task_kinds.names():
        other = task_kinds.get(kind)
        if other.name == name and type(other).__qualname__ != scorer_cls.__qualname__:
            raise RegistryError(f"two scorers are named {name!r}: {type(other)} and {scorer_cls}")
    try:
        task_kinds.register(scorer_cls)
    except RegistryError as exc:
        raise RegistryError(str(exc).replace("two task kinds are named", "task kind")) from None
    return scorer_cls


def scorers() -> dict[str, Scorer]:
    """Every registered scorer by name (the whole :class:`Scorer` interface: what the executor and planner call)."""
    return {s.name: cast(Scorer, s) for _, s in task_kinds.items()}


def scorer_for(kind: str) -> Scorer:
    """The scorer of a task kind."""
    try:
        return cast(Scorer, task_kinds.get(kind))  # registered as a TaskKind (plugins.py); a scorer is a Scorer
    except RegistryError:
        if kind in task_kinds:
            raise
        raise RegistryError(f"no scorer for task kind {kind!r} (known: {', '.join(task_kinds.names())})") from None


@dataclass(frozen=True)
class TaskKindInfo:
    """One task kind as its scorer declares it: what docs and listings show."""

    kind: str
    scorer: str
    version: str
    primary_metric: str
    higher_is_better: bool | None
    """The primary metric's direction (:mod:`evalfarm.metrics`; None: it has none)."""
    description: str
    detail_tables: tuple[str, ...]
    origin: str


def task_kind_table() -> list[TaskKindInfo]:
    """Every registered task kind with its declarations, by kind (the docs' table of task kinds is made from it; the
    views each kind adds are listed by :func:`evalfarm.warehouse.view_sources`)."""
    return [
        TaskKindInfo(
            kind=kind,
            scorer=s.name,
            version=s.version,
            primary_metric=s.primary_metric,
            higher_is_better=metric_info(s.name, s.primary_metric).higher_is_better,
            description=s.description,
            detail_tables=tuple(s.detail_schemas),
            origin=task_kinds.origin(kind),
        )
        for kind, s in task_kinds.items()
    ]


def _scoped(scorer: str) -> Mapping[str, MetricInfo]:
    for _, s in task_kinds.items():
        if s.name == scorer:
            return getattr(s, "declared_metrics", {})
    return {}


def metric_info(scorer: str, metric: str) -> MetricInfo:
    """What ``metric`` of ``scorer`` is (:mod:`evalfarm.metrics`): the registered scorer's own declaration, else the
    shared one; :class:`~evalfarm.metrics.UndeclaredMetric` when neither declares it."""
    return lookup(metric, _scoped(scorer), scorer=scorer)


def metric_declaration(scorer: str, metric: str) -> MetricInfo | None:
    """:func:`metric_info`, or None where nothing declares the metric (a retired plug-in's row)."""
    return declaration(metric, _scoped(scorer))


def declared_metrics() -> dict[str, Mapping[str, MetricInfo]]:
    """Every registered scorer's own declarations (``Scorer.declared_metrics``), by scorer name: what the views'
    ``metric_info`` adds to the shared declarations (:func:`evalfarm.metrics.sql_definitions`)."""
    return {s.name: dict(table) for _, s in task_kinds.items() if (table := getattr(s, "declared_metrics", {}))}


def task_adapter() -> Any:
    """A pydantic adapter validating a task entry as the discriminated union (by ``kind``) of registered kinds."""
    return task_spec_adapter()


__all__ = [
    "RegistryError",
    "Scorer",
    "TaskKindInfo",
    "declared_metrics",
    "metric_declaration",
    "metric_info",
    "register",
    "scorer_for",
    "scorers",
    "task_adapter",
    "task_kind_table",
]
