"""The scheduler's state machine against a fake, deterministic executor (milliseconds, no Ray).

The fake executor keeps a clock of its own that only ``wait`` advances, runs a script of what each task does on
each attempt (ok, a retryable failure, a non-retryable one, a killed worker), and restarts killed workers after a
delay, answering "restarting" until then — what Ray does. The warehouse is real (a temporary folder), and so are
the leases of the concurrent-run tests: a second run is played by a second ``Leases`` object on the same folder.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from evalfarm.leases import Leases, embed_key, unit_key
from evalfarm.outcomes import Stage, Status, UnitOutcome
from evalfarm.parts import PassState
from evalfarm.plan import ModelPlan, Unit
from evalfarm.scheduler.core import ClusterLost, Event, Job, Scheduler, WorkerInfo, WorkerLost
from evalfarm.warehouse import Warehouse


def _plan(model: str, tasks: list[str], cost: float = 1.0) -> ModelPlan:
    units = [Unit(model, t, "s", "word", f"h-{model}", "c", "{}", f"fp-{model}-{t}") for t in tasks]
    return ModelPlan(model, f"h-{model}", "word", f"st-{model}", units, cost)


class FakeExecutor:
    """Runs each task for ``seconds`` of fake time. ``script[(stage, model)]`` lists, per attempt, ``ok``,
    ``fail`` (retryable), ``fatal`` (not retryable) or ``kill`` (the worker dies; Ray restarts it after
    ``restart`` seconds, or never when ``restart`` is None). ``at`` schedules callbacks at fake times."""

    def __init__(
        self,
        workers: list[str],
        script: dict[tuple[str, str], list[str]] | None = None,
        *,
        seconds: float = 1.0,
        restart: float | None = 2.0,
        start_after: float = 0.1,
    ) -> None:
        self.clock = 0.0
        self.names = workers
        self.script = script or {}
        self.seconds = seconds
        self.restart = restart
        self.start_after = start_after
        self.tries: dict[tuple[str, str], int] = {}
        self.pending: dict[int, tuple[float, Any]] = {}
        self.back_at: dict[str, float | None] = {}  # killed worker -> when Ray has restarted it (None: never)
        self.ids = itertools.count()
        self.log: list[tuple[float, str, str]] = []  # (time, worker, task label) of every submit
        self.revives: list[tuple[float, str]] = []
        self.timers: list[tuple[float, Callable[[], Any]]] = []
        self.new_workers: list[tuple[float, str]] = []  # (when, name) a worker joins (autoscaling)
        self.lost_at: float | None = None  # the head stops answering at this time
        self.unreachable = False
        self.cpu_only: set[str] = set()  # workers that must leave `gpu_models`' embed tasks alone
        self.gpu_models: set[str] = set()
        self.refused: dict[str, str] = {}  # model -> why no worker can hold it (placement)
        self.retire_at: list[tuple[float, str]] = []  # (when, worker): the executor stops an idle worker
        self.passes: dict[str, PassState] = {}  # model -> its open pass while its embed job runs (tail sharing)
        self.embedding: set[str] = set()  # models whose (owner) embed job is running now

    def now(self) -> float:
        return self.clock

    def at(self, t: float, fn: Callable[[], Any]) -> None:
        self.timers.append((t, fn))
        self.timers.sort(key=lambda x: x[0])

    def _handle(self, delay: float, value: Any) -> int:
        h = next(self.ids)
        self.pending[h] = (self.clock + delay, value)
        return h

    def _info(self, name: str) -> WorkerInfo:
        return WorkerInfo(name, node="n-" + name, host="host", pid=1)

    def start(self) -> list[tuple[str, Any]]:
        return [(w, self._handle(self.start_after, self._info(w))) for w in self.names]

    def submit(self, worker: str, job: Job) -> Any:
        self.log.append((self.clock, worker, job.label))
        if job.helper is not None:  # a tail helper: its parts are the owner's units
            return self._handle(self.seconds / 2, [UnitOutcome(job.plan.model, "", Status.SKIPPED, 0.1)])
        if job.stage == "embed":
            self.embedding.add(job.plan.model)
            self.at(self.clock + self.seconds, lambda m=job.plan.model: self.embedding.discard(m))
        key = (job.stage, job.plan.model)
        attempt = self.tries.get(key, 0)
        self.tries[key] = attempt + 1
        plan = self.script.get(key, [])
        what = plan[attempt] if attempt < len(plan) else "ok"
        if what == "kill":
            self.back_at[worker] = None if self.restart is None else self.clock + self.seconds / 2 + self.restart
            return self._handle(self.seconds / 2, WorkerLost(f"{worker} killed", restarting=self.restart is not None))
        outs = []
        for u in job.units:
            if what in ("fail", "fatal"):
                outs.append(
                    UnitOutcome(u.model, u.task, Status.FAILED, 0.1, f"boom {attempt}", Stage(job.stage),
                                retryable=what == "fail")
                )  # fmt: skip
            elif job.stage == "embed":
                outs.append(UnitOutcome(u.model, u.task, Status.EMBEDDED, 0.1))
            else:
                outs.append(UnitOutcome(u.model, u.task, Status.DONE, 0.1))
        return self._handle(self.seconds, outs)

    def wait(self, handles: list[Any], timeout: float) -> list[Any]:
        ready = [h for h in handles if self.pending[h][0] <= self.clock]
        if not ready:
            soonest = min([self.pending[h][0] for h in handles] + [self.clock + timeout])
            self.clock = max(self.clock, soonest)
            ready = [h for h in handles if self.pending[h][0] <= self.clock]
        while self.timers and self.timers[0][0] <= self.clock:
            self.timers.pop(0)[1]()
        return ready

    def result(self, handle: Any) -> Any:
        _, value = self.pending.pop(handle)
        if isinstance(value, BaseException):
            raise value
        return value

    def revive(self, worker: str) -> Any | None:
        self.revives.append((self.clock, worker))
        back = self.back_at.get(worker, 0.0)
        if back is None:
            return self._handle(0.01, WorkerLost(f"{worker} is dead", restarting=False))
        if self.clock < back:
            return self._handle(0.0, WorkerLost(f"{worker} is restarting", restarting=True))
        return self._handle(0.2, self._info(worker))

    def poll(self, pending: list[ModelPlan]) -> list[tuple[str, Any]]:
        if self.lost_at is not None and self.clock >= self.lost_at:
            raise ClusterLost("the head is gone")
        joined = [n for t, n in self.new_workers if t <= self.clock]
        self.new_workers = [(t, n) for t, n in self.new_workers if t > self.clock]
        return [(n, self._handle(0.1, self._info(n))) for n in joined]

    def reachable(self) -> bool:
        return not self.unreachable

    def suits(self, worker: str, job: Job, alive: set[str]) -> bool:
        return not (worker in self.cpu_only and job.stage == "embed" and job.plan.model in self.gpu_models)

    def refusals(self) -> dict[str, str]:
        return dict(self.refused)

    def retired(self) -> list[str]:
        due = [w for t, w in self.retire_at if t <= self.clock]
        self.retire_at = [(t, w) for t, w in self.retire_at if t > self.clock]
        return due

    def tails(self) -> list[PassState]:
        return [p for m, p in self.passes.items() if m in self.embedding]

    def close(self) -> None:
        pass


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "wh").init()


def _run(
    plans: list[ModelPlan], executor: FakeExecutor, wh: Warehouse, **kw: Any
) -> tuple[Scheduler, list[Any], list[Event]]:
    events: list[Event] = []
    kw.setdefault("base_of", {})
    sched = Scheduler(plans, executor, warehouse=wh, run_id=kw.pop("run_id", "run-a"), on_event=events.append,
                      clock=executor.now, **kw)  # fmt: skip
    outcomes = sched.run()
    return sched, outcomes, events


def _q(wh: Warehouse, sql: str) -> list[dict]:
    return wh.query(sql).to_pylist()


def _final(outcomes: list[Any]) -> dict[tuple[str, str], str]:
    assert len({(o.model, o.task) for o in outcomes}) == len(outcomes), "a unit has two final outcomes"
    return {(o.model, o.task): str(o.status) for o in outcomes}


def test_every_unit_done_once_largest_first_scores_before_new_models(wh):
    plans = [_plan("small", ["a", "b"], 1.0), _plan("big", ["a", "b"], 5.0), _plan("mid", ["a"], 3.0)]
    fb = FakeExecutor(["w0", "w1"])
    sched, outcomes, events = _run(plans, fb, wh)
    assert _final(outcomes) == {(m, t): "done" for m, ts in [("small", "ab"), ("big", "ab"), ("mid", "a")] for t in ts}
    embeds = [label for _, _, label in fb.log if label.startswith("embed")]
    assert embeds == ["embed big", "embed mid", "embed small"]
    # once big's embed is done its score tasks go first, before the last model starts
    first_small = next(i for i, (_, _, label) in enumerate(fb.log) if label == "embed small")
    assert any(label.startswith("score big") for _, _, label in fb.log[:first_small])
    assert {e.alive for e in events if e.kind == "dispatch"} == {2}
    assert _q(wh, "SELECT count(*) n FROM failures") == [{"n": 0}]


def test_a_failed_task_is_retried_on_the_other_worker_then_succeeds(wh):
    fb = FakeExecutor(["w0", "w1"], {("embed", "m"): ["fail"]})
    sched, outcomes, events = _run([_plan("m", ["a"])], fb, wh, max_attempts=2)
    assert _final(outcomes) == {("m", "a"): "done"}
    (w_first,) = [w for _, w, label in fb.log if label == "embed m"][:1]
    w_second = [w for _, w, label in fb.log if label == "embed m"][1]
    assert w_first != w_second  # the avoided worker
    assert [e.kind for e in events].count("retry") == 1
    rows = _q(wh, "SELECT stage, status, attempts FROM units ORDER BY stage")
    assert rows == [
        {"stage": "embed", "status": "done", "attempts": 2},
        {"stage": "score", "status": "done", "attempts": 1},
    ]
    assert {type(e.job.stage) for e in events if e.job is not None} == {Stage}  # enums in memory,
    assert wh.query("SELECT typeof(stage) t, typeof(status) s FROM units LIMIT 1").to_pylist() == [  # strings stored
        {"t": "VARCHAR", "s": "VARCHAR"}
    ]
    assert _q(wh, "SELECT count(*) n FROM failures") == [{"n": 0}]


def test_a_lone_worker_takes_its_own_retry(wh):
    fb = FakeExecutor(["w0"], {("embed", "m"): ["fail"]})
    _, outcomes, _ = _run([_plan("m", ["a"])], fb, wh, max_attempts=2)
    assert _final(outcomes) == {("m", "a"): "done"}
    assert [w for _, w, label in fb.log if label == "embed m"] == ["w0", "w0"]


def test_attempts_exhausted_write_one_failures_row_per_unit(wh):
    fb = FakeExecutor(["w0", "w1"], {("embed", "m"): ["fail", "fail", "fail"]})
    _, outcomes, events = _run([_plan("m", ["a", "b"]), _plan("ok", ["a"])], fb, wh, max_attempts=3)
    assert _final(outcomes) == {("m", "a"): "failed", ("m", "b"): "failed", ("ok", "a"): "done"}
    assert fb.tries[("embed", "m")] == 3
    assert _q(wh, "SELECT model, task, error FROM failures ORDER BY task") == [
        {"model": "m", "task": "a", "error": "boom 2"},
        {"model": "m", "task": "b", "error": "boom 2"},
    ]
    assert _q(wh, "SELECT DISTINCT attempts FROM units WHERE status = 'failed'") == [{"attempts": 3}]


def test_a_non_retryable_error_fails_at_once(wh):
    fb = FakeExecutor(["w0", "w1"], {("embed", "m"): ["fatal", "ok"]})
    _, outcomes, events = _run([_plan("m", ["a"])], fb, wh, max_attempts=3)
    assert _final(outcomes) == {("m", "a"): "failed"}
    assert fb.tries[("embed", "m")] == 1 and not [e for e in events if e.kind == "retry"]
    assert _q(wh, "SELECT count(*) n FROM failures") == [{"n": 1}]


def test_a_derived_model_waits_for_its_base(wh):
    plans = [_plan("base", ["a"], 1.0), _plan("derived", ["a"], 9.0)]  # derived first by cost, but it must wait
    fb = FakeExecutor(["w0", "w1"])
    _run(plans, fb, wh, base_of={"derived": "base", "base": None})
    t_base_done = next(t for t, _, label in fb.log if label == "score base · a")  # after base's embed returned
    t_derived = next(t for t, _, label in fb.log if label == "embed derived")
    assert t_derived >= t_base_done > 0


def test_a_killed_worker_is_revived_with_backoff_and_reused(wh):
    """--workers 1, the worker killed mid-task: Ray answers "restarting" for 3 s, then the worker is back."""
    fb = FakeExecutor(["w0"], {("embed", "m"): ["kill"]}, restart=3.0)
    sched, outcomes, events = _run([_plan("m", ["a"]), _plan("n", ["a"])], fb, wh, max_attempts=2)
    assert _final(outcomes) == {("m", "a"): "done", ("n", "a"): "done"}
    assert [w for _, w, _ in fb.log] == ["w0"] * len(fb.log)  # the same worker did everything
    times = [t for t, _ in fb.revives]
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(times)]
    assert len(times) >= 3 and gaps == sorted(gaps)  # asked again and again, backing off
    assert times[-1] - times[0] >= 3.0 - 1e-9
    kinds = [(e.kind, e.alive, e.reviving) for e in events if e.kind.startswith("worker")]
    assert kinds == [("worker-ready", 1, 0), ("worker-lost", 0, 1), ("worker-ready", 1, 0)]
    assert not sched.dead and _q(wh, "SELECT count(*) n FROM failures") == [{"n": 0}]


def test_both_workers_killed_the_run_still_finishes(wh):
    fb = FakeExecutor(["w0", "w1"], {("embed", "m"): ["kill"], ("embed", "n"): ["kill"]}, restart=1.0)
    sched, outcomes, events = _run([_plan("m", ["a"], 2.0), _plan("n", ["a"], 1.0)], fb, wh, max_attempts=2)
    assert _final(outcomes) == {("m", "a"): "done", ("n", "a"): "done"}
    alive = [e.alive for e in events if e.kind.startswith("worker")]
    assert min(alive) == 0 and alive[-1] == 2  # both gone at once, both back
    assert [e.kind for e in events].count("retry") == 2


def test_a_worker_that_never_comes_back_is_given_up_after_the_timeout(wh):
    fb = FakeExecutor(["w0", "w1"], {("embed", "m"): ["kill"]}, restart=1000.0)
    plans = [_plan("m", ["a"], 9.0)] + [_plan(f"n{i}", ["a"]) for i in range(20)]  # 40 s of work for w1
    sched, outcomes, events = _run(plans, fb, wh, revive_timeout=20.0)
    assert set(_final(outcomes).values()) == {"done"} and len(outcomes) == 21
    assert {w for t, w, _ in fb.log if t > 1.0} == {"w1"}
    (gave_up,) = [e for e in events if e.kind == "worker-lost" and "gave up" in e.message]
    assert gave_up.worker.name in sched.dead and gave_up.alive == 1 and gave_up.reviving == 0
    assert 20.0 <= fb.revives[-1][0] - fb.revives[0][0] <= 20.0 + 8.0 + 1e-9


def test_no_worker_left_fails_what_is_left_once(wh):
    fb = FakeExecutor(["w0"], {("embed", "m"): ["kill"]}, restart=None)
    _, outcomes, _ = _run([_plan("m", ["a"]), _plan("n", ["a", "b"])], fb, wh, max_attempts=3)
    assert set(_final(outcomes).values()) == {"failed"} and len(outcomes) == 3
    errors = {r["error"] for r in _q(wh, "SELECT error FROM failures")}
    assert errors == {"no worker left alive to run it"}
    assert _q(wh, "SELECT count(*) n FROM failures") == [{"n": 3}]


def test_a_task_lost_while_the_cluster_does_not_answer_is_not_charged(wh):
    fb = FakeExecutor(["w0"], {("embed", "m"): ["kill"]}, restart=1.0)
    fb.unreachable = True  # the worker died because the head did: not the model's fault
    _, outcomes, events = _run([_plan("m", ["a"])], fb, wh, max_attempts=1)
    assert _final(outcomes) == {("m", "a"): "done"}
    assert fb.tries[("embed", "m")] == 2 and not [e for e in events if e.kind == "retry"]


def test_workers_that_join_get_work(wh):
    fb = FakeExecutor(["w0"], seconds=4.0)
    fb.new_workers = [(1.0, "g0"), (2.0, "g1")]
    plans = [_plan(f"m{i}", ["a"]) for i in range(6)]
    sched, outcomes, events = _run(plans, fb, wh)
    assert len(outcomes) == 6 and set(_final(outcomes).values()) == {"done"}
    assert {w for _, w, _ in fb.log} == {"w0", "g0", "g1"}
    assert [e.alive for e in events if e.kind == "worker-ready"] == [1, 2, 3]


def test_a_lost_cluster_ends_the_run_and_keeps_what_finished(wh):
    fb = FakeExecutor(["w0"], seconds=1.0)
    fb.lost_at = 4.5
    sched = Scheduler([_plan(f"m{i}", ["a"]) for i in range(5)], fb, warehouse=wh, run_id="r", base_of={},
                      clock=fb.now)  # fmt: skip
    with pytest.raises(ClusterLost):
        sched.run()
    assert 1 <= len(sched.outcomes) < 5 and {str(o.status) for o in sched.outcomes} == {"done"}
    assert len(_q(wh, "SELECT * FROM units WHERE stage = 'score'")) == len(sched.outcomes)  # flushed on the way out
    assert _q(wh, "SELECT count(*) n FROM failures") == [{"n": 0}]


def test_workers_that_never_start_fail_the_run_after_the_start_timeout(wh):
    fb = FakeExecutor(["w0"], start_after=1e9)  # a pending actor no node can hold
    _, outcomes, _ = _run([_plan("m", ["a"])], fb, wh, start_timeout=60.0)
    assert _final(outcomes) == {("m", "a"): "failed"}
    assert "no worker could start within 60 s" in _q(wh, "SELECT error FROM failures")[0]["error"]
    assert 60.0 <= fb.clock <= 61.0


# -- leases: a second run on the same warehouse, played by its own Leases object --------------------------------
def _other_run(wh: Warehouse, fb: FakeExecutor, run_id: str = "run-b") -> Leases:
    return Leases(wh, run_id, timeout=10.0, clock=fb.now).start()


def _leases(wh: Warehouse, fb: FakeExecutor) -> Leases:
    return Leases(wh, "run-a", timeout=10.0, clock=fb.now).start()


def _write_result(wh: Warehouse, unit: Unit, at: datetime | None = None) -> None:
    """Run-b's result of ``unit``, committed by run-b's own warehouse object (run-a's is deferred while it runs)."""
    Warehouse(wh.root).write("metrics", [{"run_id": "run-b", "model": unit.model, "task": unit.task, "metric": "m",
                                          "value": 1.0, "fingerprint": unit.fingerprint, "spec_hash": unit.spec_hash,
                                          "created_at": at or datetime.now(UTC)}])  # fmt: skip


def test_units_another_live_run_holds_are_waited_for_not_computed(wh):
    fb = FakeExecutor(["w0"])
    other = _other_run(wh, fb)
    m = _plan("m", ["a", "b"])
    assert other.claim(unit_key(m.units[0].fingerprint)) is None  # run-b computes m·a
    for t in range(1, 8):
        fb.at(t, other.beat)

    def b_finishes() -> None:
        _write_result(wh, m.units[0])
        other.release(unit_key(m.units[0].fingerprint))

    fb.at(6.0, b_finishes)
    sched, outcomes, events = _run([m], fb, wh, leases=_leases(wh, fb))
    assert _final(outcomes) == {("m", "a"): "skipped", ("m", "b"): "done"}
    assert [label for _, _, label in fb.log] == ["embed m", "score m · b"]  # m·a never computed here
    assert "computed by run run-b" in next(o.detail for o in outcomes if o.task == "a")
    assert [e.message for e in events if e.kind == "waiting"] == ["m · a: run run-b is computing it"]
    rows = _q(wh, "SELECT worker, status FROM units WHERE task = 'a'")
    assert rows == [{"worker": "run run-b", "status": "skipped"}]
    assert not list((Path(wh.base) / "leases" / "unit").glob("*.json"))  # run-a released its own


def test_a_unit_released_without_a_result_is_computed_here(wh):
    fb = FakeExecutor(["w0"])
    other = _other_run(wh, fb)
    m = _plan("m", ["a"])
    other.claim(unit_key(m.units[0].fingerprint))
    fb.at(3.0, lambda: other.release(unit_key(m.units[0].fingerprint)))  # run-b failed it, or was stopped
    _, outcomes, _ = _run([m], fb, wh, leases=_leases(wh, fb))
    assert _final(outcomes) == {("m", "a"): "done"}
    assert [label for t, _, label in fb.log] == ["embed m", "score m · a"] and fb.log[0][0] >= 3.0


def test_a_dead_runs_lease_is_taken_over_after_the_timeout(wh):
    fb = FakeExecutor(["w0"])
    other = _other_run(wh, fb)  # claims, then its heartbeat stops (it never beats again)
    m = _plan("m", ["a"])
    other.claim(unit_key(m.units[0].fingerprint))
    _, outcomes, _ = _run([m], fb, wh, leases=_leases(wh, fb))
    assert _final(outcomes) == {("m", "a"): "done"}
    assert 10.0 <= fb.log[0][0] <= 13.0  # one lease timeout (of run-a's own clock) after it first looked


def test_an_embed_stage_another_run_holds_is_waited_for(wh):
    fb = FakeExecutor(["w0"])
    other = _other_run(wh, fb)
    m, n = _plan("m", ["a"], 5.0), _plan("n", ["a"], 1.0)
    other.claim(embed_key("m", m.store))  # run-b embeds m for tasks of its own
    for t in range(1, 6):
        fb.at(t, other.beat)
    fb.at(5.0, lambda: other.release(embed_key("m", m.store)))
    _, outcomes, _ = _run([m, n], fb, wh, leases=_leases(wh, fb))
    assert set(_final(outcomes).values()) == {"done"}
    order = [(t, label) for t, _, label in fb.log if label.startswith("embed")]
    assert order[0][1] == "embed n" and order[1][1] == "embed m" and order[1][0] >= 5.0  # n went first meanwhile


def test_a_derived_model_waits_for_a_base_another_run_is_embedding(wh):
    fb = FakeExecutor(["w0", "w1"])
    other = _other_run(wh, fb)
    base, derived = _plan("base", ["a"]), _plan("derived", ["b"])
    other.claim(embed_key("base", base.store))
    other.claim(unit_key(base.units[0].fingerprint))
    for t in range(1, 6):
        fb.at(t, other.beat)

    def b_done() -> None:
        _write_result(wh, base.units[0])
        other.release(unit_key(base.units[0].fingerprint))
        other.release(embed_key("base", base.store))

    fb.at(4.0, b_done)
    _, outcomes, _ = _run([base, derived], fb, wh, base_of={"derived": "base"}, leases=_leases(wh, fb))
    assert _final(outcomes) == {("base", "a"): "skipped", ("derived", "b"): "done"}
    assert [label for _, _, label in fb.log][0] == "embed derived" and fb.log[0][0] >= 4.0


def test_force_waits_for_the_other_runs_result_even_if_an_old_one_exists(wh):
    fb = FakeExecutor(["w0"])
    m = _plan("m", ["a"])
    _write_result(wh, m.units[0], datetime.now(UTC) - timedelta(hours=1))  # an old result; --force recomputes it
    other = _other_run(wh, fb)
    other.claim(unit_key(m.units[0].fingerprint))
    fb.at(2.0, lambda: other.release(unit_key(m.units[0].fingerprint)))  # released, but no new result
    _, outcomes, _ = _run([m], fb, wh, leases=_leases(wh, fb), force=True)
    assert _final(outcomes) == {("m", "a"): "done"}  # the stale file did not count as the other run's result


def test_a_task_the_backend_says_a_worker_does_not_suit_goes_to_another(wh):
    fb = FakeExecutor(["cpu0", "gpu0"], seconds=1.0)
    fb.cpu_only, fb.gpu_models = {"cpu0"}, {"big", "bigger"}
    plans = [_plan("bigger", ["a"], 9.0), _plan("big", ["a"], 8.0), _plan("small", ["a"], 1.0)]
    _, outcomes, _ = _run(plans, fb, wh)
    assert set(_final(outcomes).values()) == {"done"}
    embeds = {label.split()[1]: w for _, w, label in fb.log if label.startswith("embed")}
    assert embeds == {"bigger": "gpu0", "big": "gpu0", "small": "cpu0"}


# -- placement and tails (issue 50) --------------------------------------------------------------------------------
def test_a_model_no_gpu_can_hold_fails_at_once_and_alone(wh):
    fb = FakeExecutor(["w0", "w1"])
    fb.refused = {"huge": "model 'huge' needs 97.0 GiB of GPU memory; the largest GPU of this cluster has 79.6 GiB"}
    plans = [_plan("huge", ["a", "b"], 9.0), _plan("ok", ["a"], 1.0)]
    _, outcomes, _ = _run(plans, fb, wh)
    assert _final(outcomes) == {("huge", "a"): "failed", ("huge", "b"): "failed", ("ok", "a"): "done"}
    assert not [label for _, _, label in fb.log if "huge" in label]  # never dispatched: nothing loaded
    rows = _q(wh, "SELECT task, stage, error FROM failures ORDER BY task")
    assert [(r["task"], r["stage"]) for r in rows] == [("a", "placement"), ("b", "placement")]
    assert all("97.0 GiB" in r["error"] for r in rows)
    assert _q(wh, "SELECT DISTINCT stage, status, attempts FROM units WHERE model = 'huge'") == [
        {"stage": "placement", "status": "failed", "attempts": 0}
    ]


def test_a_worker_the_executor_retires_gets_no_more_work(wh):
    fb = FakeExecutor(["w0", "w1"], seconds=1.0)
    fb.retire_at = [(0.5, "w1")]
    plans = [_plan(f"m{i}", ["a"], float(10 - i)) for i in range(4)]
    _, outcomes, _ = _run(plans, fb, wh)
    assert set(_final(outcomes).values()) == {"done"}
    assert all(w == "w0" for t, w, _ in fb.log if t > 0.5)


def _pass(model: str, *, unclaimed: int, part_seconds: float | None, load: float, workers: int = 1) -> PassState:
    return PassState(f"pass-{model}", model, "w0", unclaimed + 1, unclaimed, 1, 0, workers, part_seconds, load)


def test_an_idle_worker_helps_a_long_tail_when_the_cost_model_says_it_pays(wh):
    fb = FakeExecutor(["w0", "w1", "w2"], seconds=10.0)
    # 9 parts left of 4 s each: 36 s for one worker > a 2 s load + a 4 s part: both idle workers are sent
    fb.passes = {"big": _pass("big", unclaimed=9, part_seconds=4.0, load=2.0)}
    _, outcomes, events = _run([_plan("big", ["a"])], fb, wh)
    assert _final(outcomes) == {("big", "a"): "done"}
    helpers = [(w, label) for _, w, label in fb.log if label.endswith("(sharing its tail)")]
    assert sorted(w for w, _ in helpers) == ["w1", "w2"]
    assert _q(wh, "SELECT count(*) n FROM units WHERE model = 'big' AND stage = 'embed'") == [{"n": 1}]


def test_no_helper_when_the_load_costs_more_than_the_tail(wh):
    fb = FakeExecutor(["w0", "w1"], seconds=10.0)
    # 2 parts of 1 s left: 2 s, less than a 5 s load + a 1 s part; and a pass with no finished part yet
    fb.passes = {"m": _pass("m", unclaimed=2, part_seconds=1.0, load=5.0)}
    fb.passes["n"] = _pass("n", unclaimed=50, part_seconds=None, load=0.1)
    _run([_plan("m", ["a"], 2.0), _plan("n", ["a"], 1.0)], fb, wh)
    assert not [label for _, _, label in fb.log if "tail" in label]


def test_a_lost_helper_is_not_retried_and_the_owner_reports_the_units(wh):
    fb = FakeExecutor(["w0", "w1"], {("embed", "big"): ["ok"]}, seconds=10.0)
    fb.passes = {"big": _pass("big", unclaimed=9, part_seconds=4.0, load=2.0)}
    real_submit = fb.submit

    def submit(worker: str, job: Job) -> Any:
        if job.helper is not None:
            fb.log.append((fb.clock, worker, job.label))
            fb.back_at[worker] = fb.clock + 1.0
            return fb._handle(1.0, WorkerLost(f"{worker} killed", restarting=True))
        return real_submit(worker, job)

    fb.submit = submit  # type: ignore[method-assign]
    _, outcomes, events = _run([_plan("big", ["a"])], fb, wh)
    assert _final(outcomes) == {("big", "a"): "done"}
    assert [e.kind for e in events].count("retry") == 0
    assert _q(wh, "SELECT count(*) n FROM failures") == [{"n": 0}]
