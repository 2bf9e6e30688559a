"""The driver loop: hand embed and score tasks to workers, retry what failed, record every unit once.

Task kinds:

- ``embed``: one model, every text its tasks need that its text store lacks. A worker loads the model once and
  writes one shard. Models are handed out largest-first (``ModelPlan.cost``) so a big model never starts last
  and becomes the straggler the run waits for; a post-processed sentence model waits for its base (it reuses
  the base's embeddings).
- ``score``: one unit, reading its task's vectors from the model's text store; small, so they fill the gaps between
  models and are preferred when a worker is free (a finished unit is worth more than a started one).

Faults: a task whose worker dies (``WorkerLost``) or whose units fail (load error, NaN, …) is retried on
another worker when there is one, up to ``max_attempts`` tries in all; only then are its ``failures`` rows
written, once. Errors that cannot succeed on another attempt (a missing file, a checksum mismatch, bad data) are
not retried. Results are idempotent (files named by fingerprint, written atomically), so a retried or
duplicated task can never leave a unit twice in the warehouse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from evalfarm.plan import ModelPlan, Unit


class WorkerLost(RuntimeError):
    """The worker running a task died (killed, OOM, node lost) before answering."""


@dataclass
class WorkerInfo:
    name: str
    node: str = ""
    host: str = ""
    pid: int = 0


@dataclass
class Task:
    stage: str  # embed | score
    plan: ModelPlan
    unit: Unit | None = None  # score tasks
    attempts: int = 0
    avoid: set[str] = field(default_factory=set)

    @property
    def units(self) -> list[Unit]:
        return [self.unit] if self.unit is not None else list(self.plan.units)

    @property
    def label(self) -> str:
        return f"{self.stage} {self.plan.model}" + (f" · {self.unit.task}" if self.unit else "")


@dataclass
class Event:
    """What the scheduler reports: ``dispatch``, ``unit`` (a unit's final outcome), ``retry``, ``worker-lost``,
    ``worker-ready``, ``tick`` (no news; for the progress line)."""

    kind: str
    task: Task | None = None
    worker: WorkerInfo | None = None
    outcome: Any = None  # UnitOutcome for `unit`
    message: str = ""


class Backend(Protocol):
    """Runs one task on one named worker; everything else (order, retries, records) is the scheduler's."""

    def start(self) -> list[tuple[str, Any]]: ...  # (worker name, handle that resolves to WorkerInfo)

    def submit(self, worker: str, task: Task) -> Any: ...  # a handle

    def wait(self, handles: list[Any], timeout: float) -> list[Any]: ...  # the ready ones

    def result(self, handle: Any) -> Any: ...  # list[UnitOutcome] or WorkerInfo; raises WorkerLost

    def revive(self, worker: str) -> Any | None: ...  # a handle resolving to WorkerInfo once restarted

    def close(self) -> None: ...


def _seconds_row(
    o: Any, stage: str, info: WorkerInfo, attempts: int, status: str, fingerprint: str | None = None
) -> dict[str, Any]:
    return {
        "model": o.model,
        "task": o.task,
        "stage": stage,
        "worker": info.name,
        "node": info.node or info.host,
        "started_at": o.started_at,
        "seconds": float(o.seconds),
        "status": status,
        "attempts": attempts,
        "error": o.error,
        "fingerprint": fingerprint,
    }


class Scheduler:
    """Drive ``plans`` to completion on ``backend``; returns one final outcome per unit."""

    def __init__(
        self,
        plans: list[ModelPlan],
        backend: Backend,
        *,
        warehouse: Any,
        run_id: str,
        base_of: dict[str, str | None],
        max_attempts: int = 2,
        on_event: Callable[[Event], None] | None = None,
        tick: float = 0.5,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.backend = backend
        self.wh = warehouse
        self.run_id = run_id
        self.max_attempts = max_attempts
        self.on_event = on_event or (lambda e: None)
        self.tick = tick
        self.embed_queue: list[Task] = sorted((Task("embed", p) for p in plans), key=lambda t: -t.plan.cost)
        self.score_queue: list[Task] = []
        self.embedding: set[str] = {p.model for p in plans}  # models whose embed stage is not resolved
        self.base_of = base_of
        self.running: dict[Any, tuple[Task | None, str]] = {}
        self.idle: list[str] = []
        self.workers: dict[str, WorkerInfo] = {}
        self.dead: set[str] = set()
        self.outcomes: list[Any] = []
        self._unit_rows: list[dict[str, Any]] = []  # `units` rows not yet written (see _flush_units)
        self._embed_seconds: dict[tuple[str, str], float] = {}
        self._cost: dict[str, float] = {p.model: p.cost / max(len(p.units), 1) for p in plans}

    # -- the loop -------------------------------------------------------------------------------------------
    def run(self) -> list[Any]:
        for name, handle in self.backend.start():
            self.running[handle] = (None, name)
        try:
            while self.embed_queue or self.score_queue or any(t is not None for t, _ in self.running.values()):
                self._dispatch()
                self._flush_units()  # after dispatch: the write overlaps the workers' next tasks
                if not self.running:
                    self._fail_everything_left("no worker left alive to run it")
                    break
                ready = self.backend.wait(list(self.running), self.tick)
                if not ready:
                    self.on_event(Event("tick"))
                for handle in ready:
                    task, worker = self.running.pop(handle)
                    if task is None:
                        self._worker_ready(handle, worker)
                    else:
                        self._task_done(handle, task, worker)
        finally:  # an interrupted run (Ctrl-C, a backend error) still records what finished
            self._flush_units()
        return self.outcomes

    def _flush_units(self) -> None:
        """Write the buffered ``units`` rows (timings are records, not results: a killed driver may lose the last
        few; the results themselves are written by the workers, each unit's metrics file last)."""
        if self._unit_rows:
            rows, self._unit_rows = self._unit_rows, []
            self.wh.write_units(self.run_id, rows)

    def _worker_ready(self, handle: Any, worker: str) -> None:
        try:
            info = self.backend.result(handle)
        except WorkerLost as exc:
            self.dead.add(worker)
            self.on_event(Event("worker-lost", worker=WorkerInfo(worker), message=f"gave up on {worker}: {exc}"))
            return
        self.workers[worker] = info
        self.idle.append(worker)
        self.on_event(Event("worker-ready", worker=info))

    def _blocked(self, task: Task) -> bool:
        base = self.base_of.get(task.plan.model)
        return base is not None and base in self.embedding and base != task.plan.model

    def _pick(self, worker: str) -> Task | None:
        alive = [w for w in self.workers if w not in self.dead]
        for queue in (self.score_queue, self.embed_queue):
            candidates = [t for t in queue if not (t.stage == "embed" and self._blocked(t))]
            # Prefer a task that did not already fail on this worker, unless no other worker can take it.
            for t in candidates:
                if worker not in t.avoid or all(w in t.avoid for w in alive):
                    queue.remove(t)
                    return t
        return None

    def _dispatch(self) -> None:
        for worker in list(self.idle):
            task = self._pick(worker)
            if task is None:
                continue
            self.idle.remove(worker)
            task.attempts += 1
            self.running[self.backend.submit(worker, task)] = (task, worker)
            self.on_event(Event("dispatch", task=task, worker=self.workers.get(worker, WorkerInfo(worker))))

    # -- results --------------------------------------------------------------------------------------------
    def _task_done(self, handle: Any, task: Task, worker: str) -> None:
        info = self.workers.get(worker, WorkerInfo(worker))
        try:
            outs = self.backend.result(handle)
        except WorkerLost as exc:
            self.on_event(Event("worker-lost", task=task, worker=info, message=str(exc)))
            revive = self.backend.revive(worker)
            if revive is None:
                self.dead.add(worker)
            else:
                self.running[revive] = (None, worker)
            self._retry_or_fail(task, worker, None, f"worker {worker} lost this task ({exc})")
            return
        self.idle.append(worker)
        failed = [o for o in outs if o.status == "failed"]
        rows = []
        for o in outs:
            if o.status == "embedded":
                unit = next(u for u in task.units if u.task == o.task)
                self._embed_seconds[(o.model, o.task)] = o.seconds
                self.score_queue.append(Task("score", task.plan, unit))
                rows.append(_seconds_row(o, "embed", info, task.attempts, "done"))
            elif o.status == "done":
                unit = next(u for u in task.units if u.task == o.task)
                rows.append(_seconds_row(o, "score", info, task.attempts, "done", unit.fingerprint))
                o.seconds += self._embed_seconds.get((o.model, o.task), 0.0)
                self._final(o)
        self._unit_rows += rows
        if failed:
            by_task = {o.task: o for o in failed}
            final = not all(getattr(o, "retryable", True) for o in failed)
            self._retry_or_fail(task, worker, by_task, "; ".join(sorted({o.error or "" for o in failed})), final=final)
        elif task.stage == "embed":
            self.embedding.discard(task.plan.model)

    def _retry_or_fail(
        self, task: Task, worker: str, failed: dict[str, Any] | None, why: str, *, final: bool = False
    ) -> None:
        units = [u for u in task.units if failed is None or u.task in failed]
        if task.attempts < self.max_attempts and not final:
            plan = task.plan if task.stage == "score" else replace(task.plan, units=units)
            again = Task(task.stage, plan, task.unit, attempts=task.attempts, avoid=task.avoid | {worker})
            (self.score_queue if task.stage == "score" else self.embed_queue).insert(0, again)
            self.on_event(Event("retry", task=again, message=f"attempt {task.attempts} failed: {why}"))
            return
        from evalfarm.outcomes import Stage, Status, UnitOutcome, record_failure

        info = self.workers.get(worker, WorkerInfo(worker))
        rows = []
        for u in units:
            o = (failed or {}).get(u.task) or UnitOutcome(
                u.model, u.task, Status.FAILED, 0.0, why, Stage(task.stage), detail=why, started_at=None
            )
            record_failure(self.wh, self.run_id, o)
            rows.append(_seconds_row(o, task.stage, info, task.attempts, "failed"))
            self._final(o)
        self._unit_rows += rows
        if task.stage == "embed":
            self.embedding.discard(task.plan.model)

    def _final(self, outcome: Any) -> None:
        self.outcomes.append(outcome)
        self.on_event(Event("unit", outcome=outcome, message=f"{self._cost.get(outcome.model, 1.0)}"))

    def _fail_everything_left(self, why: str) -> None:
        for task in self.score_queue + self.embed_queue:
            task.attempts = self.max_attempts
            self._retry_or_fail(task, "-", None, why)
        self.score_queue.clear()
        self.embed_queue.clear()
