"""A live progress line for the driver: units done / failed / remaining, and an ETA.

With a :class:`~evalfarm.eta.Forecast` (the runner makes one from the warehouse's history of unit times), the ETA
is known before the first unit and counts down between units. Without one it extrapolates from units finished
*in this run* (skipped ones cost nothing and would make it optimistic), weighted by the planner's relative cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from evalfarm.eta import Forecast
from evalfarm.outcomes import Status


def fmt_seconds(s: float) -> str:
    s = max(0, int(round(s)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


@dataclass
class ProgressTracker:
    """Counts of a run's units; ``line()`` is what the CLI shows (and what logs get on a non-TTY)."""

    total: int
    skipped: int = 0
    done: int = 0
    failed: int = 0
    retries: int = 0
    workers: int = 0  # ready now (the scheduler's count, updated with every event)
    reviving: int = 0  # lost and being restarted
    cost_total: float = 0.0
    cost_finished: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    forecast: Forecast | None = None  # the history's estimates of the pending units (evalfarm.eta)
    planned_workers: int = 1  # the ETA's workers until the scheduler reports live ones

    @property
    def remaining(self) -> int:
        return self.total - self.skipped - self.done - self.failed

    def finish(
        self, status: Status, cost: float = 1.0, unit: tuple[str, str] | None = None, seconds: float | None = None
    ) -> None:
        """Count a unit's final status; a skipped unit's cost leaves the total (it costs nothing). ``unit`` (model,
        task) and the ``seconds`` it took move the forecast on."""
        if self.forecast is not None and unit is not None:
            self.forecast.finish(*unit, seconds if status == Status.DONE else None)
        if status == Status.DONE:
            self.done += 1
        elif status == Status.FAILED:
            self.failed += 1
        elif status == Status.SKIPPED:
            self.skipped += 1
            self.cost_total = max(0.0, self.cost_total - cost)
            return
        self.cost_finished += cost

    def eta(self) -> float | None:
        if self.remaining == 0:
            return 0.0
        if self.forecast is not None:
            return self.forecast.eta(self.workers or self.planned_workers)
        if self.cost_finished <= 0 or self.cost_total <= 0:
            return None
        elapsed = time.perf_counter() - self.started
        return elapsed * max(self.cost_total - self.cost_finished, 0.0) / self.cost_finished

    def line(self) -> str:
        eta = self.eta()
        parts = [
            f"units {self.done + self.skipped + self.failed}/{self.total}",
            f"{self.done} done",
            f"{self.skipped} skipped",
            f"{self.failed} failed",
            f"{self.remaining} remaining",
        ]
        if self.retries:
            parts.append(f"{self.retries} retried")
        if self.workers or self.reviving:
            parts.append(f"{self.workers} worker{'s' if self.workers != 1 else ''} alive")
        if self.reviving:
            parts.append(f"{self.reviving} restarting")
        parts.append(f"elapsed {fmt_seconds(time.perf_counter() - self.started)}")
        parts.append("ETA " + ("?" if eta is None else fmt_seconds(eta)))
        return " · ".join(parts)
