"""Scorers: one module per evaluator, found by scanning this package (as MTEB scans its tasks).

A scorer module defines its task kind (a :class:`~evalfarm.catalog.specs.TaskSpec` subclass with
``kind: Literal["..."]``), a :class:`~evalfarm.scorers.base.Scorer` subclass, and registers the scorer with
:func:`register`. Catalog task entries are validated against the union of registered kinds. The registry refuses two
scorers with one name or one task kind. ``rank_kernel`` and ``neighbours`` are helpers, not scorers.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Annotated, Any, Union

from pydantic import Field, TypeAdapter

from evalfarm.scorers.base import Scorer

_SCORERS: dict[str, Scorer] = {}
_BY_KIND: dict[str, Scorer] = {}
_HELPERS = {"base", "rank_kernel", "neighbours"}


class RegistryError(ValueError):
    """Two scorers with one name or one task kind, or an unknown name / kind."""


def register(scorer_cls: type[Scorer]) -> type[Scorer]:
    """Class decorator: register one scorer (its name and its task kind must be new)."""
    scorer = scorer_cls()
    kind = scorer.task_kind
    if scorer.name in _SCORERS and type(_SCORERS[scorer.name]) is not scorer_cls:
        raise RegistryError(f"two scorers are named {scorer.name!r}: {type(_SCORERS[scorer.name])} and {scorer_cls}")
    if kind in _BY_KIND and type(_BY_KIND[kind]) is not scorer_cls:
        raise RegistryError(f"task kind {kind!r} already belongs to scorer {_BY_KIND[kind].name!r}")
    _SCORERS[scorer.name] = scorer
    _BY_KIND[kind] = scorer
    task_adapter.cache_clear()
    return scorer_cls


@cache
def _discover() -> None:
    for mod in pkgutil.iter_modules(__path__):
        if mod.name not in _HELPERS and not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")


def scorers() -> dict[str, Scorer]:
    """Every registered scorer by name."""
    _discover()
    return dict(_SCORERS)


def scorer_for(kind: str) -> Scorer:
    """The scorer of a task kind."""
    _discover()
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise RegistryError(f"no scorer for task kind {kind!r} (known: {', '.join(sorted(_BY_KIND))})") from None


@cache
def task_adapter() -> TypeAdapter[Any]:
    """A pydantic adapter validating a task entry as the discriminated union (by ``kind``) of registered kinds."""
    _discover()
    specs = tuple(s.task_spec for s in _BY_KIND.values())
    union = specs[0] if len(specs) == 1 else Annotated[Union[specs], Field(discriminator="kind")]  # noqa: UP007
    return TypeAdapter(union)


__all__ = ["RegistryError", "Scorer", "register", "scorer_for", "scorers", "task_adapter"]
