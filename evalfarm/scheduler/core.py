"""The driver loop: hand embed and score tasks to workers, retry what failed, record every unit once.

Job kinds:

- ``embed``: one model, every text its tasks need that its text store lacks. A worker loads the model once and
  writes one shard. Models are handed out largest-first (``ModelPlan.cost``) so a big model never starts last
  and becomes the straggler the run waits for; a post-processed sentence model waits for its base (it reuses
  the base's embeddings).
- ``score``: one unit, reading its task's vectors from the model's text store; small, so they fill the gaps between
  models and are preferred when a worker is free (a finished unit is worth more than a started one).
- ``embed`` as a *helper* (``Job.helper``): a worker with nothing else to do loads a model another worker is
  embedding and takes parts of its pass (:mod:`evalfarm.parts`: sent when its cost model says the parts left
  outlast a load; once per worker and pass); it reports no unit, the owner does.

Placement (the executor's, ``scheduler/placement.py`` for Ray on GPUs): ``Executor.suits`` says which worker may take
a job (a GPU model needs a worker whose GPU share holds it), ``Executor.refusals`` which models no worker can ever
hold (failed before anything loads, stage ``placement``), ``Executor.retired`` which idle workers it stopped to make
room (forgotten here).

Faults:

- A job whose units fail (load error, NaN, …) or whose worker dies (``WorkerLost``) is retried on another worker
  when there is one, up to ``max_attempts`` tries in all; only then are its ``failures`` rows written, once. Errors
  that cannot succeed on another attempt (a missing file, a checksum mismatch, bad data) are not retried. A job
  lost while the cluster itself does not answer is not charged an attempt (the job was not the cause).
- A dead worker is revived: the executor restarts it (Ray restarts actors, ``max_restarts``) and the scheduler
  sends it the run's context again. A worker Ray is still restarting answers "unavailable" at once; it is asked
  again with exponential backoff until ``revive_timeout`` seconds after it was lost, and only then given up.
- The executor's ``poll`` (each ``poll_interval``) adds workers as the cluster grows and raises ``ClusterLost``
  when the cluster's head stops answering; the run then ends (the runner records it as interrupted).
- With ``leases`` (see ``evalfarm.leases``), units and embed stages are claimed before they are computed, so
  concurrent runs on one warehouse split the work: a unit another live run holds is waited for (its result is
  taken as this run's, ``skipped``), and computed here only when that run releases it without a result or dies.

Results: a job's workers stage files and hand them back with its outcomes; the scheduler commits them in batches
(:class:`~evalfarm.warehouse.commits.CommitBatcher`: every few dozen units or seconds, and whatever is left when
the run ends, however it ends) and releases a unit's lease once its rows are committed. A job whose worker died
before it answered staged files no commit names: they are never read (``evalfarm warehouse vacuum`` removes them),
and the retried job stages its own.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from evalfarm.leases import Holder, Leases, embed_key, unit_key
from evalfarm.outcomes import Stage, Status, UnitOutcome, record_failure
from evalfarm.parts import PassState, worth_sharing
from evalfarm.plan import ModelPlan, Unit
from evalfarm.warehouse.commits import BATCH_SECONDS, BATCH_UNITS, CommitBatcher

if TYPE_CHECKING:
    from evalfarm.warehouse import Warehouse
    from evalfarm.warehouse.maintenance import BackgroundCompaction

log = logging.getLogger(__name__)


def _compaction(warehouse: Warehouse, run_id: str) -> BackgroundCompaction | None:
    """The run's compaction after its batch commits (:class:`~evalfarm.warehouse.maintenance.BackgroundCompaction`),
    for a warehouse in the Delta layout (None for another object: a test's stand-in, a layout-1 warehouse)."""
    from evalfarm.warehouse import Warehouse
    from evalfarm.warehouse.maintenance import BackgroundCompaction

    if not isinstance(warehouse, Warehouse) or warehouse.layout() != "delta":
        return None
    return BackgroundCompaction(warehouse.root, run_id)


class WorkerLost(RuntimeError):
    """The worker running a job died (killed, OOM, node lost) before answering. ``restarting``: the executor is
    restarting it (ask again later); otherwise it is gone for good."""

    def __init__(self, message: str, *, restarting: bool = False) -> None:
        super().__init__(message)
        self.restarting = restarting


class ClusterLost(RuntimeError):
    """The cluster's head stopped answering: no job can finish or start. The run ends, interrupted."""


@dataclass
class WorkerInfo:
    name: str
    node: str = ""
    host: str = ""
    pid: int = 0
    device: dict[str, Any] | None = None  # evalfarm.provenance.device_info() of the worker's process
    gpu_share: float = 0.0  # its Ray GPU share (placement: a fraction of one GPU; 0 on the CPU)
    gpu_ids: tuple[str, ...] = ()  # the GPU(s) Ray gave it


@dataclass
class Job:
    stage: Stage  # Stage.EMBED | Stage.SCORE
    plan: ModelPlan
    unit: Unit | None = None  # score tasks
    attempts: int = 0
    avoid: set[str] = field(default_factory=set)
    helper: str | None = None  # an embed job that helps with another worker's pass of the model (its pass id)

    @property
    def units(self) -> list[Unit]:
        return [self.unit] if self.unit is not None else list(self.plan.units)

    @property
    def label(self) -> str:
        return (
            f"{self.stage} {self.plan.model}"
            + (f" · {self.unit.task}" if self.unit else "")
            + (" (sharing its tail)" if self.helper else "")
        )


@dataclass
class Event:
    """What the scheduler reports: ``dispatch``, ``unit`` (a unit's final outcome), ``retry``, ``worker-lost`` (a
    worker died, or was given up on), ``worker-ready``, ``waiting`` (a unit another run holds), ``tick`` (no news;
    for the progress line). ``alive`` / ``reviving``: workers ready now / being restarted, after this event."""

    kind: str
    job: Job | None = None
    worker: WorkerInfo | None = None
    outcome: UnitOutcome | None = None  # a unit's final outcome (`unit`)
    message: str = ""
    alive: int = 0
    reviving: int = 0


class Executor(Protocol):
    """Runs one job on one named worker; everything else (order, retries, records) is the scheduler's."""

    def start(self) -> list[tuple[str, Any]]: ...  # (worker name, handle that resolves to WorkerInfo)

    def submit(self, worker: str, job: Job) -> Any: ...  # a handle

    def wait(self, handles: list[Any], timeout: float) -> list[Any]: ...  # the ready ones; [] after timeout

    def result(self, handle: Any) -> Any: ...  # list[UnitOutcome] or WorkerInfo; raises WorkerLost

    def revive(self, worker: str) -> Any | None: ...  # a handle resolving to WorkerInfo once restarted

    def poll(self, pending: list[ModelPlan]) -> list[tuple[str, Any]]: ...  # new workers; raises ClusterLost

    def reachable(self) -> bool: ...  # does the cluster answer right now (one quick probe)?

    def suits(self, worker: str, job: Job, alive: set[str]) -> bool: ...  # may this worker take this job now?

    def refusals(self) -> dict[str, str]: ...  # model -> why no worker can ever hold it (after start)

    def retired(self) -> list[str]: ...  # idle workers the executor stopped since asked (placement made room)

    def tails(self) -> list[PassState]: ...  # passes other workers may help with (evalfarm.parts)

    def close(self) -> None: ...


def _seconds_row(
    o: Any, stage: Stage, info: WorkerInfo, attempts: int, status: Status, fingerprint: str | None = None
) -> dict[str, Any]:
    """A ``units`` row; stage and status are stored as their plain string values."""
    return {
        "model": o.model,
        "task": o.task,
        "stage": str(stage),
        "worker": info.name,
        "node": info.node or info.host,
        "started_at": o.started_at,
        "seconds": float(o.seconds),
        "status": str(status),
        "attempts": attempts,
        "error": o.error,
        "fingerprint": fingerprint,
        "threads": json.dumps(o.threads, sort_keys=True) if getattr(o, "threads", None) else None,
    }


@dataclass
class _Revival:
    deadline: float
    tries: int = 0
    next_try: float | None = None  # None while a revive handle is in flight


class Scheduler:
    """Drive ``plans`` to completion on ``executor``; returns one final outcome per unit.

    ``clock`` (monotonic seconds) times revivals, polls and lease waits; a fake executor passes its own.
    """

    # long: the scheduler's options (one keyword each) and every field of its state, set in one place
    def __init__(
        self,
        plans: list[ModelPlan],
        executor: Executor,
        *,
        warehouse: Warehouse,
        run_id: str,
        base_of: dict[str, str | None],
        max_attempts: int = 2,
        on_event: Callable[[Event], None] | None = None,
        tick: float = 0.5,
        leases: Leases | None = None,
        force: bool = False,
        clock: Callable[[], float] = time.monotonic,
        revive_timeout: float = 120.0,
        revive_backoff: tuple[float, float] = (0.5, 8.0),
        start_timeout: float = 900.0,
        poll_interval: float = 1.0,
        lease_poll: float = 1.0,
        commit_units: int = BATCH_UNITS,
        commit_seconds: float = BATCH_SECONDS,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.executor = executor
        self.wh = warehouse
        self.run_id = run_id
        self.max_attempts = max_attempts
        self.on_event = on_event or (lambda e: None)
        self.tick = tick
        self.leases = leases
        self.force = force
        self.clock = clock
        self.revive_timeout = revive_timeout
        self.revive_backoff = revive_backoff
        self.start_timeout = start_timeout
        self.poll_interval = poll_interval
        self.lease_poll = lease_poll
        self.embed_queue: list[Job] = sorted((Job(Stage.EMBED, p) for p in plans), key=lambda t: -t.plan.cost)
        self.score_queue: list[Job] = []
        self.base_of = base_of
        self.running: dict[Any, tuple[Job | None, str]] = {}
        self.idle: list[str] = []
        self.workers: dict[str, WorkerInfo] = {}  # every worker that was ready at least once
        self.alive: set[str] = set()  # ready now (idle or busy)
        self.dead: set[str] = set()  # given up on
        self.reviving: dict[str, _Revival] = {}
        self.waiting: dict[str, tuple[Unit, Holder]] = {}  # fingerprint -> unit held by another live run
        self.outcomes: list[UnitOutcome] = []
        self._unit_rows: list[dict[str, Any]] = []  # `units` rows not yet written (see _flush_units)
        self._embed_seconds: dict[tuple[str, str], float] = {}
        self._cost: dict[str, float] = {p.model: p.cost / max(len(p.units), 1) for p in plans}
        self._plans = {p.model: p for p in plans}
        self._fingerprint = {(u.model, u.task): u.fingerprint for p in plans for u in p.units}
        self._claimed: set[str] = set()  # unit fingerprints this run holds leases on
        self._helped: set[tuple[str, str]] = set()  # (pass, worker): tail helpers sent
        self._embed_held: dict[str, int] = {}  # embed lease key -> embed tasks of this run running under it
        self._asked: dict[str, tuple[float, bool]] = {}  # lease key -> (ask again after, held elsewhere)
        self._no_worker_since = clock()
        self._no_workers = False  # set once every worker is gone for good
        self._next_poll = 0.0
        self._next_lease_poll = 0.0
        self._started_wall = time.time()
        self._jitter = random.Random(run_id)
        self.commits = CommitBatcher(
            warehouse, run_id, max_units=commit_units, max_seconds=commit_seconds, clock=clock
        )
        self.compaction = _compaction(warehouse, run_id)

    # -- the loop -------------------------------------------------------------------------------------------
    def run(self) -> list[Any]:
        deferred, self.wh.deferred = self.wh.deferred, True  # the driver's own rows go with the batches too
        finished = False
        try:
            self._loop()
            finished = True
            self._commit_last()
        except BaseException:
            if not finished:  # an interrupted run (Ctrl-C, a lost cluster, an executor error) keeps what finished
                self._commit_last(quiet=True)
            raise
        finally:
            self.wh.deferred = deferred
            if self.compaction is not None:
                self.compaction.close()
        return self.outcomes

    def _commit_last(self, *, quiet: bool = False) -> None:
        """Commit what is left. ``quiet``: another error propagates; a failure to commit is logged, and that error
        is the one raised."""
        try:
            self._flush_units()
            self.commits.flush()
        except Exception as exc:
            if not quiet:
                raise
            log.warning("the run's last batch was not committed (%s: %s)", type(exc).__name__, exc)

    def _loop(self) -> None:
        for name, handle in self.executor.start():
            self.running[handle] = (None, name)
        self._refuse()
        while self._work_left():
            self._poll()
            self._dispatch()
            self._flush_units()  # after dispatch: the write overlaps the workers' next tasks
            if self.commits.maybe_flush() and self.compaction is not None:
                self.compaction.poke()  # no table holds thousands of small files mid-run (every reader opens them)
            if not self.alive:
                if not self._workers_coming():
                    self._no_workers = True
                    self._fail_everything_left("no worker left alive to run it")
                elif self.clock() - self._no_worker_since > self.start_timeout:
                    self._no_workers = True
                    self._fail_everything_left(
                        f"no worker could start within {self.start_timeout:.0f} s (the cluster has no room for "
                        "one: check its resources or autoscaler)"
                    )
                if self._no_workers and not self._work_left():
                    break
            ready = self.executor.wait(list(self.running), self.tick)
            if not ready:
                self._emit("tick")
            for handle in ready:
                job, worker = self.running.pop(handle)
                if job is None:
                    self._worker_ready(handle, worker)
                else:
                    self._job_done(handle, job, worker)

    def _work_left(self) -> bool:
        return bool(
            self.embed_queue
            or self.score_queue
            or self.waiting
            or any(t is not None for t, _ in self.running.values())
        )

    def _workers_coming(self) -> bool:
        """A worker is starting (its handle is out) or waits for its next revival attempt."""
        return any(t is None for t, _ in self.running.values()) or bool(self.reviving)

    def _emit(self, kind: str, **kw: Any) -> None:
        self.on_event(Event(kind, alive=len(self.alive), reviving=len(self.reviving), **kw))

    def _flush_units(self) -> None:
        """Stage the buffered ``units`` rows: they commit with the next batch (timings are records, not results: a
        killed driver may lose the last few, as it loses the results of its last batch)."""
        if self._unit_rows:
            rows, self._unit_rows = self._unit_rows, []
            self.wh.write_units(self.run_id, rows)

    def _poll(self) -> None:
        now = self.clock()
        if now >= self._next_poll:
            self._next_poll = now + self.poll_interval
            for name, handle in self.executor.poll(self._pending_plans()):  # ClusterLost ends the run here
                self.running[handle] = (None, name)
            for worker in self.executor.retired():
                self._retire(worker)
        for worker, r in list(self.reviving.items()):
            if r.next_try is not None and now >= r.next_try:
                self._send_revive(worker, r)
        if self.leases is not None and self.waiting and now >= self._next_lease_poll:
            # at most ~100 lease checks a second (an object store answers each with a listing and a read)
            every = max(self.lease_poll, 0.01 * len(self.waiting))
            self._next_lease_poll = now + every * self._jitter.uniform(0.75, 1.25)
            self._poll_waiting()

    def _pending_plans(self) -> list[ModelPlan]:
        """Models with embed work queued, running or waited for (what the executor may size the cluster for)."""
        seen: dict[str, ModelPlan] = {}
        for t in self.embed_queue:
            seen.setdefault(t.plan.model, t.plan)
        for job, _ in self.running.values():
            if job is not None and job.stage == Stage.EMBED:
                seen.setdefault(job.plan.model, job.plan)
        for u, _ in self.waiting.values():
            seen.setdefault(u.model, self._plans[u.model])
        return list(seen.values())

    # -- workers --------------------------------------------------------------------------------------------
    def _worker_ready(self, handle: Any, worker: str) -> None:
        try:
            info = self.executor.result(handle)
        except WorkerLost as exc:
            now = self.clock()
            r = self.reviving.get(worker)
            if r is None and exc.restarting:  # crashed while starting, and being restarted
                r = self.reviving[worker] = _Revival(deadline=now + self.revive_timeout, tries=1)
            if r is not None and exc.restarting and now < r.deadline:
                first, cap = self.revive_backoff
                r.next_try = now + min(cap, first * 2 ** max(r.tries - 1, 0))
                return
            self.reviving.pop(worker, None)
            self.dead.add(worker)
            waited = f" after {self.revive_timeout:.0f} s" if r is not None and exc.restarting else ""
            self._emit(
                "worker-lost", worker=self.workers.get(worker, WorkerInfo(worker)), message=f"gave up on {worker}"
                f"{waited}: {exc}"
            )  # fmt: skip
            return
        self.reviving.pop(worker, None)
        self.dead.discard(worker)
        self.workers[worker] = info
        self.alive.add(worker)
        self.idle.append(worker)
        self._emit("worker-ready", worker=info)

    def _retire(self, worker: str) -> None:
        """An idle worker the executor stopped to make room for a larger one: gone, not lost."""
        if worker in self.idle:
            self.idle.remove(worker)
        self.alive.discard(worker)
        self.dead.add(worker)
        if not self.alive:
            self._no_worker_since = self.clock()

    def _refuse(self) -> None:
        """Models the executor can never place (no GPU of the cluster holds them): failed at once, before anything
        loads, with its reason; the rest of the run goes on."""
        refused = self.executor.refusals()
        for job in [j for j in self.embed_queue if j.plan.model in refused]:
            self.embed_queue.remove(job)
            rows = []
            for u in job.units:
                why = refused[job.plan.model]
                o = UnitOutcome(u.model, u.task, Status.FAILED, 0.0, why, Stage.PLACEMENT, detail=why, retryable=False)
                record_failure(self.wh, self.run_id, o)
                rows.append(_seconds_row(o, Stage.PLACEMENT, WorkerInfo("-"), 0, Status.FAILED))
                self._final(o)
            self._unit_rows += rows

    def _send_revive(self, worker: str, r: _Revival) -> None:
        r.next_try = None
        r.tries += 1
        handle = self.executor.revive(worker)
        if handle is None:
            self.reviving.pop(worker, None)
            self.dead.add(worker)
            return
        self.running[handle] = (None, worker)

    def _worker_lost(self, worker: str, info: WorkerInfo, exc: WorkerLost) -> None:
        self.alive.discard(worker)
        if not self.alive:
            self._no_worker_since = self.clock()
        r = self.reviving[worker] = _Revival(deadline=self.clock() + self.revive_timeout)
        self._emit("worker-lost", worker=info, message=str(exc))
        self._send_revive(worker, r)

    def _blocked(self, job: Job) -> bool:
        """A derived model waits while its base is still being embedded, here or by another live run."""
        base = self.base_of.get(job.plan.model)
        if base is None or base == job.plan.model:
            return False
        if base in self._embedding():
            return True
        if self.leases is None or base not in self._plans:
            return False
        key = embed_key(base, self._plans[base].store)
        return key not in self._embed_held and self._held_elsewhere(key)

    def _embedding(self) -> set[str]:
        models = {t.plan.model for t in self.embed_queue}
        models |= {t.plan.model for t, _ in self.running.values() if t is not None and t.stage == Stage.EMBED}
        return models | {u.model for u, _ in self.waiting.values()}

    def _pick(self, worker: str) -> Job | None:
        others = [w for w in self.workers if w not in self.dead]
        for queue in (self.score_queue, self.embed_queue):
            for t in list(queue):
                if t.stage == Stage.EMBED and self._blocked(t):
                    continue
                # Prefer a job that did not already fail on this worker, unless no other worker can take it.
                if worker in t.avoid and not all(w in t.avoid for w in others):
                    continue
                if not self.executor.suits(worker, t, self.alive):  # e.g. encoders wait for GPU workers
                    continue
                if t.stage == Stage.EMBED and self.leases is not None:
                    verdict = self._claim_embed(t)
                    if verdict == "gone":
                        queue.remove(t)
                        continue
                    if verdict == "wait":
                        continue
                queue.remove(t)
                return t
        return None

    def _dispatch(self) -> None:
        tails: list[PassState] | None = None  # asked at most once a round, and only when a worker has nothing else
        for worker in list(self.idle):
            job = self._pick(worker)
            if job is None:
                if tails is None:
                    tails = self.executor.tails()
                job = self._tail_job(worker, tails)
            if job is None:
                continue
            self.idle.remove(worker)
            job.attempts += 1
            self.running[self.executor.submit(worker, job)] = (job, worker)
            self._emit("dispatch", job=job, worker=self.workers.get(worker, WorkerInfo(worker)))

    def _tail_job(self, worker: str, tails: list[PassState]) -> Job | None:
        """Help with another worker's pass when the cost model says it pays (:func:`evalfarm.parts.worth_sharing`,
        counting the helpers already sent, loading or not); the pass with the most work left first."""
        helping: dict[str, int] = {}
        owners: dict[str, Job] = {}
        for job, _ in self.running.values():
            if job is not None and job.stage == Stage.EMBED:
                if job.helper is not None:
                    helping[job.helper] = helping.get(job.helper, 0) + 1
                else:
                    owners[job.plan.model] = job
        for t in sorted(tails, key=lambda t: -(t.unclaimed * (t.part_seconds or 0.0))):
            owner = owners.get(t.model)
            if owner is None:
                continue
            sent = helping.get(t.pass_id, 0)
            loading = max(0, sent - (t.workers - 1))  # sent, not joined yet (the owner is one of t.workers)
            if not worth_sharing(t.unclaimed, t.part_seconds, t.load_seconds, t.workers + loading):
                continue
            job = Job(Stage.EMBED, owner.plan, helper=t.pass_id)
            if (t.pass_id, worker) not in self._helped and self.executor.suits(worker, job, self.alive):
                self._helped.add((t.pass_id, worker))  # a worker helps a pass once: it loads the model once
                return job
        return None

    # -- leases ---------------------------------------------------------------------------------------------
    @property
    def _leases(self) -> Leases:
        """The run's leases: the methods below run only when the scheduler was given some."""
        if self.leases is None:
            raise RuntimeError("this scheduler runs without leases")
        return self.leases

    def _held_elsewhere(self, key: str) -> bool:
        """Is ``key`` held by another live run? (asked at most once per ``lease_poll``)"""
        now = self.clock()
        asked = self._asked.get(key)
        if asked is None or asked[0] <= now:
            holder = self._leases.holder(key)
            asked = self._asked[key] = (now + self.lease_poll, holder is not None and holder.run_id != self.run_id)
        return asked[1]

    def _claim_embed(self, job: Job) -> str:
        """Claim the units of an embed job and its model's embed stage: ``go``, ``wait`` (the embed stage is
        another run's right now) or ``gone`` (every unit is another run's, or already computed)."""
        units = []
        for u in job.plan.units:
            if u.fingerprint not in self._claimed:
                holder = self._leases.claim(unit_key(u.fingerprint))
                if holder is not None:
                    self._wait_for(u, holder)
                    continue
                self._claimed.add(u.fingerprint)
                if self._computed_elsewhere(u):
                    self._done_elsewhere(u, None)
                    continue
            units.append(u)
        if not units:
            return "gone"
        if len(units) < len(job.plan.units):
            plan = job.plan
            job.plan = replace(plan, units=units, cost=plan.cost * len(units) / len(plan.units))
        key = embed_key(job.plan.model, job.plan.store)
        if key not in self._embed_held:
            now = self.clock()
            if self._asked.get(key, (0.0, False))[0] > now:
                return "wait"
            holder = self._leases.claim(key)
            if holder is not None:
                self._asked[key] = (now + self.lease_poll, True)
                return "wait"
        self._embed_held[key] = self._embed_held.get(key, 0) + 1
        return "go"

    def _release_embed(self, plan: ModelPlan) -> None:
        key = embed_key(plan.model, plan.store)
        n = self._embed_held.get(key, 0) - 1
        if n > 0:
            self._embed_held[key] = n
            return
        self._embed_held.pop(key, None)
        self._release(key)

    def _release(self, key: str) -> None:
        try:
            self._leases.release(key)
        except OSError:  # an unwritable warehouse: the lease stays; other runs take it over once this run ends
            pass

    def _wait_for(self, unit: Unit, holder: Holder) -> None:
        first = unit.fingerprint not in self.waiting
        self.waiting[unit.fingerprint] = (unit, holder)
        if first:
            self._emit("waiting", message=f"{unit.model} · {unit.task}: run {holder.run_id} is computing it")

    def _computed_elsewhere(self, unit: Unit) -> bool:
        """It is computed (with ``force``: by another run, after this one started)."""
        return self.wh.is_done(unit, since=self._started_wall if self.force else None)

    def _done_elsewhere(self, unit: Unit, holder: Holder | None) -> None:
        by = f"run {holder.run_id}" if holder is not None else "another run"
        o = UnitOutcome(unit.model, unit.task, Status.SKIPPED, 0.0, stage=Stage.PLAN, detail=f"computed by {by}")
        self._unit_rows.append(_seconds_row(o, Stage.PLAN, WorkerInfo(by), 0, Status.SKIPPED))
        self._final(o)

    def _poll_waiting(self) -> None:
        """Units another run held: still held (wait), computed (take its result) or released / dead (compute)."""
        new: dict[str, list[Unit]] = {}
        for fp, (u, holder) in list(self.waiting.items()):
            got = self._leases.claim(unit_key(fp))
            if got is not None:
                self.waiting[fp] = (u, got)
                continue
            del self.waiting[fp]
            self._claimed.add(fp)
            if self._computed_elsewhere(u):
                self._done_elsewhere(u, holder)
            elif self._no_workers:
                job = Job(Stage.EMBED, replace(self._plans[u.model], units=[u]), attempts=self.max_attempts)
                self._retry_or_fail(job, "-", None, "no worker left alive to run it")
            else:
                new.setdefault(u.model, []).append(u)
        for model, units in new.items():
            plan = self._plans[model]
            self.embed_queue.append(
                Job(Stage.EMBED, replace(plan, units=units, cost=plan.cost * len(units) / len(plan.units)))
            )

    # -- results --------------------------------------------------------------------------------------------
    def _job_done(self, handle: Any, job: Job, worker: str) -> None:
        info = self.workers.get(worker, WorkerInfo(worker))
        if job.helper is not None:
            self._helper_done(handle, worker, info)
            return
        if job.stage == Stage.EMBED and self.leases is not None:
            self._release_embed(job.plan)
        try:
            outs = self.executor.result(handle)
        except WorkerLost as exc:
            self._worker_lost(worker, info, exc)
            charge = self.executor.reachable()
            self._retry_or_fail(job, worker, None, f"worker {worker} lost this job ({exc})", charge=charge)
            return
        self.idle.append(worker)
        failed = [o for o in outs if o.status == Status.FAILED]
        self.commits.add(
            [f for o in outs for f in getattr(o, "staged", ())], units=sum(o.status == Status.DONE for o in outs)
        )
        rows = []
        for o in outs:
            if o.status == Status.EMBEDDED:
                unit = next(u for u in job.units if u.task == o.task)
                self._embed_seconds[(o.model, o.task)] = o.seconds
                self.score_queue.append(Job(Stage.SCORE, job.plan, unit))
                rows.append(_seconds_row(o, Stage.EMBED, info, job.attempts, Status.DONE))
            elif o.status == Status.DONE:
                unit = next(u for u in job.units if u.task == o.task)
                rows.append(_seconds_row(o, Stage.SCORE, info, job.attempts, Status.DONE, unit.fingerprint))
                o.seconds += self._embed_seconds.get((o.model, o.task), 0.0)
                self._final(o)
        self._unit_rows += rows
        if failed:
            by_task = {o.task: o for o in failed}
            final = not all(getattr(o, "retryable", True) for o in failed)
            self._retry_or_fail(job, worker, by_task, "; ".join(sorted({o.error or "" for o in failed})), final=final)

    def _helper_done(self, handle: Any, worker: str, info: WorkerInfo) -> None:
        """A tail helper's job: its staged files join the commit, its units are the owner's (never retried: the
        owner takes back whatever a helper leaves)."""
        try:
            outs = self.executor.result(handle)
        except WorkerLost as exc:
            self._worker_lost(worker, info, exc)
            return
        self.idle.append(worker)
        self.commits.add([f for o in outs for f in getattr(o, "staged", ())], units=0)

    def _retry_or_fail(
        self,
        job: Job,
        worker: str,
        failed: dict[str, Any] | None,
        why: str,
        *,
        final: bool = False,
        charge: bool = True,
    ) -> None:
        units = [u for u in job.units if failed is None or u.task in failed]
        attempts = job.attempts if charge else job.attempts - 1
        if attempts < self.max_attempts and not final and not self._no_workers:
            plan = job.plan if job.stage == Stage.SCORE else replace(job.plan, units=units)
            again = Job(job.stage, plan, job.unit, attempts=attempts, avoid=job.avoid | {worker})
            (self.score_queue if job.stage == Stage.SCORE else self.embed_queue).insert(0, again)
            if charge:
                self._emit("retry", job=again, message=f"attempt {job.attempts} failed: {why}")
            return
        info = self.workers.get(worker, WorkerInfo(worker))
        rows = []
        for u in units:
            o = (failed or {}).get(u.task) or UnitOutcome(
                u.model, u.task, Status.FAILED, 0.0, why, job.stage, detail=why, started_at=None
            )
            record_failure(self.wh, self.run_id, o)
            rows.append(_seconds_row(o, job.stage, info, job.attempts, Status.FAILED))
            self._final(o)
        self._unit_rows += rows

    def _final(self, outcome: UnitOutcome) -> None:
        self.outcomes.append(outcome)
        fp = self._fingerprint.get((outcome.model, outcome.task))
        if self.leases is not None and fp in self._claimed:
            self._claimed.discard(fp)
            key = unit_key(fp)
            if outcome.status == Status.DONE:  # held until its rows are committed: a run waiting for it finds it done
                self.commits.after_commit(lambda: self._release(key))
            else:
                self._release(key)
        self._emit("unit", outcome=outcome, message=f"{self._cost.get(outcome.model, 1.0)}")

    def _fail_everything_left(self, why: str) -> None:
        """Queued tasks fail; units another run holds are still waited for (their results may yet come)."""
        for job in self.score_queue + self.embed_queue:
            job.attempts = self.max_attempts
            self._retry_or_fail(job, "-", None, why)
        self.score_queue.clear()
        self.embed_queue.clear()
