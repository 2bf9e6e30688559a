"""Schedulers: the driver loop shared by every executor, and the executors (``local`` in-process, ``ray``).

``core.Scheduler`` owns the plan → embed → rank state machine: largest-first assignment, bounded retries,
failure and timing rows. An executor (``local_executor.LocalExecutor``, ``ray_executor.RayExecutor``) only runs
one job on one worker. ``evalfarm.runner.run_catalog`` picks one and records the run.
"""

from __future__ import annotations

from evalfarm.scheduler.progress import ProgressTracker

EXECUTORS = ("ray", "local")

__all__ = ["EXECUTORS", "ProgressTracker"]
