"""The ``local`` executor: the in-process loop, one worker, no Ray. The baseline the Ray executor is measured
against (same scheduler, same ``embed_model`` / ``score_unit``, so both produce identical warehouses)."""

from __future__ import annotations

import os
import platform
import time
from typing import TYPE_CHECKING

from evalfarm.outcomes import Stage
from evalfarm.parts import PassState
from evalfarm.scheduler.core import Job, WorkerInfo

if TYPE_CHECKING:
    from evalfarm.execute import ExecContext
    from evalfarm.outcomes import UnitOutcome
    from evalfarm.plan import ModelPlan


class LocalExecutor:
    """Runs each job synchronously on submit; ``wait`` then returns it as ready."""

    name = "local-0"

    def __init__(self, ctx: ExecContext) -> None:
        self.ctx = ctx
        self._results: dict[int, WorkerInfo | list[UnitOutcome]] = {}
        self._next = 0

    def _handle(self, value: WorkerInfo | list[UnitOutcome]) -> int:
        self._next += 1
        self._results[self._next] = value
        return self._next

    def start(self) -> list[tuple[str, int]]:
        from evalfarm.provenance import process_device

        device = process_device(self.ctx.options.device)
        info = WorkerInfo(self.name, node=platform.node(), host=platform.node(), pid=os.getpid(), device=device)
        return [(self.name, self._handle(info))]

    def submit(self, worker: str, job: Job) -> int:
        from evalfarm.execute import embed_model, score_unit

        if job.stage == Stage.EMBED:
            return self._handle(embed_model(job.plan, self.ctx))
        assert job.unit is not None
        return self._handle([score_unit(job.plan, job.unit, self.ctx)])

    def wait(self, handles: list[int], timeout: float) -> list[int]:
        if not handles:  # nothing runs here: the scheduler waits for another run's units
            time.sleep(timeout)
        return list(handles)

    def result(self, handle: int) -> WorkerInfo | list[UnitOutcome]:
        return self._results.pop(handle)

    def revive(self, worker: str) -> None:
        return None

    def poll(self, pending: list[ModelPlan]) -> list[tuple[str, int]]:
        return []

    def reachable(self) -> bool:
        return True

    def suits(self, worker: str, job: Job, alive: set[str]) -> bool:
        return True

    def refusals(self) -> dict[str, str]:
        return {}  # one worker, one model at a time: a model too large for its device fails when it loads

    def retired(self) -> list[str]:
        return []

    def tails(self) -> list[PassState]:
        return []  # one worker: nobody to share a tail with

    def close(self) -> None:
        self._results.clear()
