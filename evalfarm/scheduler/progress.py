"""A live progress line for the driver: units done / failed / remaining, texts embedded, workers, and an ETA.

A unit's embedding can run for many minutes (a sentence encoder over ~176k texts on CPU), so units alone cannot tell
progress from a hang: the embed stage reports each pass's texts (:class:`evalfarm.execute.EmbedTick`) to a
:class:`TextBoard` (in process: the runner's own; under Ray: an actor every worker reports to), and the tracker
reads it: texts done / to do, the rate, what each worker is on. :meth:`ProgressTracker.snapshot` is the same as
plain data: what the heartbeat file publishes (``evalfarm status``) and ``run --format json``'s progress events say.

With a :class:`~evalfarm.eta.Forecast` (the runner makes one from the warehouse's history of unit times), the ETA
is known before the first unit and follows what the workers measure. Without one it extrapolates from units finished
*in this run* (skipped ones cost nothing and would make it optimistic), weighted by the planner's relative cost.

A run is in one of three phases (:data:`PHASES`): ``planning`` (from its first second: the heartbeat says which step,
``planning · tasks 12/40 counted``), ``starting Ray`` (the workers are not ready yet) and ``running``.
:func:`progress_line` is the one place the line is laid out, for the run's live line, its log and ``evalfarm
status``: the phase, the units and the ETA first, then the counts, texts and workers; given a width (a terminal), it
drops the least useful fields first (:data:`FIELD_PRIORITY`) and never cuts one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from evalfarm.eta import Forecast, LivePass
from evalfarm.outcomes import Status

PLANNING, STARTING, RUNNING = "planning", "starting Ray", "running"
PHASES = (PLANNING, STARTING, RUNNING)
"""A run's phases as its line and ``evalfarm status`` name them: planning (catalog, units, the warehouse's done units,
text counts, the first ETA), starting Ray (no worker ready yet: the ETA counts the start-up down), running."""


def fmt_seconds(s: float) -> str:
    s = max(0, int(round(s)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


def fmt_count(n: float) -> str:
    """A count as people read it at a glance: 950, 1.9k, 412k, 2.1M."""
    n = float(n)
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            v = n / size
            return f"{v:.1f}{suffix}" if v < 10 and not v.is_integer() else f"{v:.0f}{suffix}"
    return f"{n:.0f}"


class TextBoard:
    """The embedding passes of a run as their workers last reported them: pass id -> the tick's fields, with the
    worker's name and when it was posted. In process the runner reads it directly; under Ray the same class runs as
    an actor (``num_cpus=0``) that every worker posts to and the driver polls."""

    def __init__(self) -> None:
        self.passes: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def put(self, worker: str, tick: dict[str, Any]) -> None:
        with self._lock:
            self.passes[str(tick["pass_id"])] = {**tick, "worker": worker, "at": time.time()}

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {k: dict(v) for k, v in self.passes.items()}


class TickSender:
    """A worker's side of the board: posts each pass's ticks, at most one every ``every`` seconds per pass but
    always the first, a phase change and the last (so the driver never misses a pass's start or end)."""

    def __init__(self, worker: str, post: Callable[[str, dict[str, Any]], Any], every: float = 1.0) -> None:
        self.worker, self.post, self.every = worker, post, every
        self._sent: dict[str, tuple[float, str]] = {}  # pass id -> (when, phase) of the last post

    def __call__(self, tick: Any) -> None:
        now = time.monotonic()
        last = self._sent.get(tick.pass_id)
        if last is not None and last[1] == tick.phase and not tick.finished and now - last[0] < self.every:
            return
        self._sent[tick.pass_id] = (now, tick.phase)
        self.post(self.worker, asdict(tick))


def _finished(p: Mapping[str, Any]) -> bool:
    """A pass (a board entry) that embedded all its texts."""
    return p["phase"] == "embed" and int(p["done"]) >= int(p["total"])


@dataclass
class ProgressTracker:
    """Counts of a run's units and texts; ``line()`` is what the CLI shows (and what logs get on a non-TTY)."""

    total: int
    run_id: str = ""
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
    texts_planned: dict[str, int] = field(default_factory=dict)  # model -> texts its embedding is expected to take
    passes: dict[str, dict[str, Any]] = field(default_factory=dict)  # the board's snapshot (TextBoard)
    embedded: set[str] = field(default_factory=set)  # models whose embedding is over (their scoring runs)
    jobs: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # worker -> (stage, model, task) it runs
    slowest: tuple[float, str, str] | None = None  # (seconds, model, task) of the slowest unit computed so far
    finished: set[tuple[str, str]] = field(default_factory=set)  # (model, task) of every unit that ended
    phase: str = RUNNING  # one of PHASES
    step: str = ""  # what the phase does now, in words (planning: "tasks 12/40 counted")

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
        if unit is not None:
            self.finished.add(unit)
        if status == Status.DONE:
            self.done += 1
            if unit is not None and seconds is not None and (self.slowest is None or seconds > self.slowest[0]):
                self.slowest = (seconds, *unit)
        elif status == Status.FAILED:
            self.failed += 1
        elif status == Status.SKIPPED:
            self.skipped += 1
            self.cost_total = max(0.0, self.cost_total - cost)
            return
        if unit is not None:
            self.embedded.add(unit[0])
            self._observe()
        self.cost_finished += cost

    # -- texts ----------------------------------------------------------------------------------------------------
    def job(self, worker: str, stage: str, model: str, task: str = "") -> None:
        """A job went to a worker; a score job says its model's embedding is over. The forecast hears of both: a
        job under way counts its own time down, work not started yet never does."""
        self.jobs[worker] = (stage, model, task)
        if self.forecast is not None:
            self.forecast.begin(model, task if stage == "score" else None)
        if stage == "score":
            self.embedded.add(model)
            self._observe()

    def observe_texts(self, passes: Mapping[str, Mapping[str, Any]]) -> None:
        """The board's passes (pass id -> the worker's last tick), as :class:`TextBoard.snapshot` returns them."""
        self.passes = {k: dict(v) for k, v in passes.items()}
        self._observe()

    def _latest(self) -> dict[str, dict[str, Any]]:
        """Each model's newest pass that an encoder runs (a post-processed model's derived pass left out)."""
        out: dict[str, dict[str, Any]] = {}
        for p in self.passes.values():
            if p.get("derived"):
                continue
            cur = out.get(p["model"])
            if cur is None or p.get("at", 0) >= cur.get("at", 0):
                out[p["model"]] = p
        return out

    def _observe(self) -> None:
        if self.forecast is None:
            return
        live = {
            m: LivePass(int(p["done"]), int(p["total"]), float(p["seconds"]), _finished(p), p["phase"] == "load")
            for m, p in self._latest().items()
        }
        self.forecast.observe(live, self.embedded)

    def texts(self) -> tuple[int, int]:
        """(texts embedded so far, texts this run embeds): a model's planned count until its pass reports the
        exact one; a model whose embedding is over counts what it embedded."""
        done_by: dict[str, int] = {}
        for p in self.passes.values():
            if not p.get("derived"):
                done_by[p["model"]] = done_by.get(p["model"], 0) + int(p["done"])
        latest = self._latest()
        total = 0
        for m in {*self.texts_planned, *done_by}:
            d = done_by.get(m, 0)
            last = latest.get(m)
            if m in self.embedded or (last is not None and _finished(last)):
                total += d
            elif last is not None:
                total += d + max(0, int(last["total"]) - int(last["done"]))
            else:
                total += max(d, self.texts_planned.get(m, 0))
        return sum(done_by.values()), total

    def text_rate(self) -> float:
        """Texts per second, all workers together: each pass that is embedding now at its own rate."""
        rate = 0.0
        for m, p in self._latest().items():
            running = p["phase"] == "embed" and p["done"] < p["total"] and m not in self.embedded
            if running and float(p["seconds"]) > 0:
                rate += int(p["done"]) / float(p["seconds"])
        return rate

    def doing(self) -> dict[str, str]:
        """What each worker runs now, in words: ``embedding M 41k/176k texts``, ``loading M``, ``scoring M · T``."""
        out: dict[str, str] = {}
        newest: dict[str, dict[str, Any]] = {}
        for p in self.passes.values():
            cur = newest.get(p["worker"])
            if cur is None or p.get("at", 0) >= cur.get("at", 0):
                newest[p["worker"]] = p
        for worker, (stage, model, task) in sorted(dict(self.jobs).items()):
            if stage == "score":
                out[worker] = "idle" if (model, task) in self.finished else f"scoring {model} · {task}"
                continue
            cur = newest.get(worker)
            if model in self.embedded:
                out[worker] = "idle"
            elif cur is not None and cur["model"] == model and _finished(cur):
                out[worker] = f"storing {model}'s vectors"
            elif cur is None or cur["model"] != model:
                out[worker] = f"embedding {model}"
            elif cur["phase"] == "load":
                out[worker] = f"loading {model} ({fmt_count(cur['total'])} texts to embed)"
            else:
                out[worker] = f"embedding {model} {fmt_count(cur['done'])}/{fmt_count(cur['total'])} texts"
        return out

    # -- the line -------------------------------------------------------------------------------------------------
    def eta(self) -> float | None:
        if self.remaining == 0:
            return 0.0
        if self.forecast is not None:
            return self.forecast.eta(self.workers or self.planned_workers)
        if self.cost_finished <= 0 or self.cost_total <= 0:
            return None
        elapsed = time.perf_counter() - self.started
        return elapsed * max(self.cost_total - self.cost_finished, 0.0) / self.cost_finished

    def line(self, width: int | None = None) -> str:
        """The progress line (:func:`progress_line`), fitted to ``width`` columns when given (a terminal)."""
        return progress_line(self.snapshot(), width)

    def snapshot(self) -> dict[str, Any]:
        """The same counts as plain data (JSON): units, texts, rate, each worker's job, the slowest unit, the ETA."""
        done, total = self.texts()
        eta = self.eta() if self.phase != PLANNING else None
        return {
            "run_id": self.run_id,
            "phase": self.phase,
            "step": self.step,
            "units": {
                "total": self.total,
                "done": self.done,
                "skipped": self.skipped,
                "failed": self.failed,
                "remaining": self.remaining,
            },
            "texts": {"done": done, "total": total, "per_second": round(self.text_rate(), 1)},
            "workers": {"alive": self.workers, "restarting": self.reviving, "doing": self.doing()},
            "retries": self.retries,
            "slowest": None
            if self.slowest is None
            else {"model": self.slowest[1], "task": self.slowest[2], "seconds": round(self.slowest[0], 1)},
            "elapsed_s": round(time.perf_counter() - self.started, 1),
            "eta_s": None if eta is None else round(eta, 1),
        }


FIELD_PRIORITY = {
    "phase": 0, "units": 0, "eta": 0, "step": 1, "failed": 1, "restarting": 2, "texts": 3, "elapsed": 4,
    "workers": 5, "skipped": 6, "remaining": 7, "rate": 7, "retried": 7, "done": 8,
}  # fmt: skip
"""Which fields of the line a narrow terminal keeps longest (0: always; the highest number goes first): the phase,
the units and the ETA are never dropped; the counts a user can work out from ``units x/N`` go first."""


def line_fields(snap: Mapping[str, Any], *, eta: bool = True) -> list[tuple[str, str]]:
    """The progress line's fields, in the order it shows them: (name, text). ``snap`` is
    :meth:`ProgressTracker.snapshot` (or the same keys read back from a heartbeat); ``eta``: show the ETA (a run
    that ended has none)."""
    out: list[tuple[str, str]] = []
    phase = snap.get("phase") or RUNNING
    if phase != RUNNING:
        out.append(("phase", phase))
        if snap.get("step"):
            out.append(("step", str(snap["step"])))
    if phase == PLANNING:
        if snap.get("elapsed_s") is not None:
            out.append(("elapsed", f"elapsed {fmt_seconds(float(snap['elapsed_s']))}"))
        return out
    u = snap.get("units") or {}
    n = {k: int(u.get(k) or 0) for k in ("total", "done", "skipped", "failed", "remaining")}
    out.append(("units", f"units {n['done'] + n['skipped'] + n['failed']}/{n['total']}"))
    out.append(("done", f"{n['done']} done"))
    out += [(k, f"{n[k]} {k}") for k in ("skipped", "failed") if n[k]]
    out.append(("remaining", f"{n['remaining']} remaining"))
    if eta:
        eta_s = snap.get("eta_s")
        out.append(("eta", "ETA " + ("?" if eta_s is None else fmt_seconds(float(eta_s)))))
    if snap.get("elapsed_s") is not None:
        out.append(("elapsed", f"elapsed {fmt_seconds(float(snap['elapsed_s']))}"))
    texts = snap.get("texts") or {}
    if texts.get("total"):
        out.append(("texts", f"texts {fmt_count(texts['done'])}/{fmt_count(texts['total'])}"))
        if texts.get("per_second"):
            out.append(("rate", f"{fmt_count(texts['per_second'])} texts/s"))
    if snap.get("retries"):
        out.append(("retried", f"{snap['retries']} retried"))
    w = snap.get("workers") or {}
    alive, restarting = int(w.get("alive") or 0), int(w.get("restarting") or 0)
    if alive or restarting:
        out.append(("workers", f"{alive} worker{'s' if alive != 1 else ''} alive"))
    if restarting:
        out.append(("restarting", f"{restarting} restarting"))
    return out


SEPARATOR = " · "


def fit_fields(fields: list[tuple[str, str]], width: int | None) -> str:
    """The fields joined, within ``width`` columns when given: the least useful (:data:`FIELD_PRIORITY`, the last
    of equals first) are dropped whole until the rest fits; those of priority 0 stay whatever the width."""
    kept = list(fields)
    while width is not None and len(SEPARATOR.join(t for _, t in kept)) > width:
        droppable = [i for i, (name, _) in enumerate(kept) if FIELD_PRIORITY.get(name, 9) > 0]
        if not droppable:
            break
        worst = max(droppable, key=lambda i: (FIELD_PRIORITY.get(kept[i][0], 9), i))
        del kept[worst]
    return SEPARATOR.join(t for _, t in kept)


def progress_line(snap: Mapping[str, Any], width: int | None = None, *, eta: bool = True) -> str:
    """The progress line of a snapshot (:func:`line_fields`), fitted to ``width`` (:func:`fit_fields`)."""
    return fit_fields(line_fields(snap, eta=eta), width)
