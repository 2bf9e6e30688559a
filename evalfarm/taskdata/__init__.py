"""Task data: readers of each task kind's files (``evalrank``, ...), and ``data`` for fetching and checksumming them.

Scorers (``evalfarm.scorers``) call these readers from their ``load``; ``load_task`` loads any task through its
scorer, for scripts and tests.
"""

from __future__ import annotations

from typing import Any

from evalfarm.catalog.specs import TaskSpec
from evalfarm.taskdata.evalrank import RankPool, load_evalrank_pool


def load_task(spec: TaskSpec) -> Any:
    """Load a task's data through its scorer (an EvalRank pool gives a :class:`RankPool`)."""
    from evalfarm.plugins import task_kinds

    return task_kinds.get(spec.kind).load(spec)


__all__ = ["RankPool", "load_evalrank_pool", "load_task"]
