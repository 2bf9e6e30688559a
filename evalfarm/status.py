"""What a run is doing now, read from the warehouse alone: ``evalfarm status [RUN_ID]``.

A run's driver may be in another shell, on another machine, or inside a Ray job (``evalfarm submit``, the KubeRay
nightly), and its log is then somewhere else. Everything :func:`run_status` shows is in the warehouse, which every
node sees:

- the run's heartbeat (``evalfarm.leases``: rewritten every few seconds while the run lives) carries the driver's
  progress as it shows it: units, texts done / to do and their rate, what each worker is on, the slowest unit, the
  ETA (:meth:`evalfarm.scheduler.progress.ProgressTracker.snapshot`), where its Ray dashboard is;
- the ``runs`` view says when it started and, once it ended, how (and its end summary);
- ``units`` says what each worker computed and how long each unit took; ``failures`` what failed, and why.

A run writes its heartbeat from its first second, before it plans, and removes it only once its end is recorded:
while it plans, ``status`` says ``planning`` and what step it is at. A run is ``died`` only when its driver is gone:
its heartbeat's pid no longer runs on this host, or (a driver on another host) its heartbeat has not been rewritten
for :data:`DEAD_AFTER_S` seconds; or it has a start event but neither an end event nor a heartbeat. ``why`` says
which. Read-only: nothing here writes.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from evalfarm.leases import HOST, LEASE_TIMEOUT, heartbeats, is_live
from evalfarm.scheduler.progress import PLANNING, RUNNING, fmt_seconds, progress_line
from evalfarm.warehouse.query import rows_of

DEAD_AFTER_S = max(120.0, 4 * LEASE_TIMEOUT)
"""A driver on another host is called dead once its heartbeat (rewritten every few seconds, also while it plans)
has not changed for this long: 2 minutes, or four lease timeouts (``EVALFARM_LEASE_TIMEOUT``) when those are
longer. On the driver's own host its pid decides, at once."""

if TYPE_CHECKING:
    from evalfarm.warehouse import Warehouse
    from evalfarm.warehouse.store import ReadSession


class NoRun(LookupError):
    """The warehouse holds no run (of that id); the message says what it holds."""


@dataclass
class RunStatus:
    """One run as the warehouse shows it now (see the module docstring); ``to_dict()`` is ``--format json``."""

    run_id: str
    state: str  # running | ok | failed | interrupted | died (no end recorded, its driver gone: see why)
    phase: str | None = None  # a running run's phase: planning | starting Ray | running
    step: str = ""  # what a planning run does now ("tasks 12/40 counted")
    why: str | None = None  # a died run: how that is known
    started_at: str | None = None
    finished_at: str | None = None
    host: str | None = None
    pid: int | None = None
    catalog: str | None = None
    argv: list[str] | None = None
    heartbeat_age_s: float | None = None  # seconds since the heartbeat was written (a running run)
    units: dict[str, int] = field(default_factory=dict)  # total, done, skipped, failed, remaining
    texts: dict[str, float] | None = None  # done, total, per_second (from the heartbeat)
    workers: dict[str, Any] = field(default_factory=dict)  # alive, restarting, doing: worker -> what it runs now
    per_worker: list[dict[str, Any]] = field(default_factory=list)  # worker, node, units, seconds (units view)
    slowest: dict[str, Any] | None = None  # model, task, seconds
    failures: list[dict[str, Any]] = field(default_factory=list)  # model, task, stage, error (its first line)
    eta_s: float | None = None  # as of now (the heartbeat's, less its age)
    elapsed_s: float | None = None
    dashboard: str | None = None
    summary: dict[str, Any] | None = None  # the end event's summary (a finished run)
    other_live: list[str] = field(default_factory=list)  # other runs with a live heartbeat in this warehouse
    damaged: list[str] = field(default_factory=list)  # tables left out of the views: their logs cannot be trusted

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The status as a person reads it (``evalfarm status``)."""
        out = [self._head(), self._counts()]
        out += [f"  {worker}: {doing}" for worker, doing in (self.workers.get("doing") or {}).items()]
        if self.per_worker:
            each = (
                f"{w['worker']} {w['units']} unit{'s' if w['units'] != 1 else ''} in {fmt_seconds(w['seconds'])}"
                for w in self.per_worker
            )
            out.append("computed per worker: " + ", ".join(each))
        if self.slowest:
            so_far = " so far" if self.state == "running" else ""
            out.append(f"slowest unit{so_far}: {self.slowest['model']} · {self.slowest['task']} "
                       f"({fmt_seconds(self.slowest['seconds'])})")  # fmt: skip
        if self.failures:
            out.append(f"failures ({len(self.failures)}):")
            out += [f"  {f['model']} · {f['task']} [{f['stage']}] {f['error']}" for f in self.failures]
        if self.dashboard:
            out.append(f"Ray dashboard: {self.dashboard}")
        if self.state == "died":
            out.append(f"{self.why or 'no end recorded'}: the driver was killed; run the same command again to "
                       "resume (finished units are skipped)")  # fmt: skip
        if self.other_live:
            out.append(f"also running in this warehouse: {', '.join(self.other_live)} (evalfarm status RUN_ID)")
        out += [f"warning: {d} (left out; `evalfarm verify` names it)" for d in self.damaged]
        return out

    def _head(self) -> str:
        state = self.phase if self.state == "running" and self.phase else self.state
        head = f"run {self.run_id} · {state}"
        if self.host:
            shown = self.pid and self.state in ("running", "died")
            head += f" on {self.host}" + (f" (pid {self.pid})" if shown else "")
        if self.started_at:
            head += f" · started {self.started_at}"
        if self.finished_at:
            head += f" · finished {self.finished_at}"
        if self.heartbeat_age_s is not None and self.state == "running":
            head += f" · heartbeat {fmt_seconds(self.heartbeat_age_s)} ago"
        return head

    def _counts(self) -> str:
        """The same fields, in the same order, as the run's own progress line (one function lays out both)."""
        snap = {
            "phase": self.phase or RUNNING,
            "step": self.step,
            "units": self.units,
            "texts": self.texts,
            "workers": self.workers,
            "elapsed_s": self.elapsed_s,
            "eta_s": self.eta_s,
        }
        return progress_line(snap, eta=self.state == "running")


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def _iso(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="seconds")
    return str(value)


def _elapsed(started: Any, finished: Any) -> float | None:
    if not isinstance(started, datetime):
        return None
    end = finished if isinstance(finished, datetime) else datetime.now(UTC)
    return max(0.0, (end - started).total_seconds())


def run_status(wh: Warehouse, run_id: str | None = None) -> RunStatus:
    """The status of run ``run_id`` (default: the newest run with a live heartbeat, else the newest run)."""
    beats = heartbeats(wh)
    with wh.session(STATUS_QUERIES) as session:  # one connection a refresh: the runs, units and failures tables
        return _status(wh, session, beats, run_id)


RUNS_SQL = "SELECT * FROM runs ORDER BY started_at"
PER_WORKER_SQL = (
    "SELECT worker, any_value(node) AS node, count(*) FILTER (WHERE stage = 'score' AND status = 'done') "
    "AS units, round(sum(seconds), 1) AS seconds FROM units "
    "WHERE run_id = {rid} AND stage IN ('embed', 'score') GROUP BY worker ORDER BY worker"
)
SLOWEST_SQL = (
    "SELECT model, task, round(sum(seconds), 1) AS seconds FROM units "
    "WHERE run_id = {rid} AND stage IN ('embed', 'score') AND status = 'done' "
    "GROUP BY model, task ORDER BY seconds DESC LIMIT 1"
)
FAILURES_SQL = (
    "SELECT model, task, stage, error FROM failures WHERE run_id = {rid} "
    "AND stage <> 'embed-quality' ORDER BY model, task"
)
STATUS_QUERIES = [q.format(rid="''") for q in (RUNS_SQL, PER_WORKER_SQL, SLOWEST_SQL, FAILURES_SQL)]
"""What a status refresh asks the warehouse (the connection binds the views and tables these name, no more)."""


def _status(wh: Warehouse, session: ReadSession, beats: dict[str, Any], run_id: str | None) -> RunStatus:
    live = {r: b for r, b in beats.items() if is_live(b, DEAD_AFTER_S)}
    try:
        runs = {r["run_id"]: r for r in rows_of(session.query(RUNS_SQL))}
    except Exception:  # a warehouse without a runs table yet (nothing recorded)
        runs = {}
    damaged = [str(d) for d in wh.damaged]  # tables the views left out: one line each, never a traceback
    if run_id is None:
        if live:
            run_id = max(live, key=lambda r: str(live[r].get("started") or ""))
        elif runs:
            run_id = list(runs)[-1]
        else:
            raise NoRun(f"no run recorded in the warehouse {wh.uri}" + "".join(f"; {d}" for d in damaged))
    row = runs.get(run_id)
    beat = beats.get(run_id)
    if row is None and beat is None:
        known = ", ".join(list(runs)[-5:]) or "none"
        raise NoRun(f"no run {run_id!r} in the warehouse {wh.uri} (newest: {known})")
    st = RunStatus(run_id=run_id, state="running")
    if row is not None:
        st.state = row["status"]
        st.started_at, st.finished_at = _iso(row["started_at"]), _iso(row["finished_at"])
        st.host, st.catalog = row["host"], row["catalog"]
        st.argv = json.loads(row["argv"]) if row.get("argv") else None
        st.elapsed_s = _elapsed(row["started_at"], row["finished_at"])
        if row.get("summary"):
            st.summary = json.loads(row["summary"])
        if row["status"] != "running":
            n = {k: int(row.get(f"n_{k}") or 0) for k in ("done", "skipped", "failed")}
            st.units = {"total": int(row.get("n_units") or 0), **n}
            st.units["remaining"] = max(0, st.units["total"] - sum(n.values()))
    if beat is not None and (row is None or row["status"] == "running"):
        _from_heartbeat(st, beat, live=run_id in live)
    elif row is not None and row["status"] == "running":
        st.state, st.why = "died", "no end recorded and no heartbeat"
    _from_views(session, st)
    st.other_live = sorted(r for r in live if r != run_id)
    st.damaged = sorted(set(damaged) | {str(d) for d in wh.damaged})
    return st


def _from_heartbeat(st: RunStatus, beat: dict[str, Any], *, live: bool) -> None:
    """A running run's numbers, as its driver published them (the same as its heartbeat line)."""
    progress = beat.get("progress") or {}
    age = beat.get("age_s")
    st.state = "running" if live else "died"
    st.phase = progress.get("phase") or beat.get("phase") or RUNNING
    st.step = str(progress.get("step") or "")
    st.host, st.pid = beat.get("host") or st.host, beat.get("pid")
    if not live:
        st.why = _why_dead(beat)
    st.started_at = st.started_at or beat.get("started")
    st.catalog, st.argv = st.catalog or beat.get("catalog"), st.argv or beat.get("argv")
    st.heartbeat_age_s = age
    st.units = dict(progress.get("units") or st.units)
    st.texts = progress.get("texts")
    st.workers = dict(progress.get("workers") or {})
    st.slowest = progress.get("slowest")
    st.dashboard = beat.get("dashboard")
    if progress.get("elapsed_s") is not None:
        st.elapsed_s = float(progress["elapsed_s"]) + float(age or 0.0)
    eta = progress.get("eta_s")
    if eta is not None and st.phase != PLANNING:
        st.eta_s = max(1.0 if st.units.get("remaining") else 0.0, float(eta) - float(age or 0.0))


def _why_dead(beat: dict[str, Any]) -> str:
    """How a heartbeat shows its driver is gone: its pid on this host, or its age on another."""
    host, pid, age = beat.get("host"), beat.get("pid"), beat.get("age_s")
    if host == HOST and pid:
        return f"no end recorded and process {pid} is gone on {host}"
    quiet = "never" if age is None else f"{fmt_seconds(float(age))} ago"
    return (f"no end recorded and its heartbeat from {host or 'another host'} was last written {quiet} "
            f"(a driver on another host is taken for dead after {fmt_seconds(DEAD_AFTER_S)} without one)")  # fmt: skip


def _from_views(session: ReadSession, st: RunStatus) -> None:
    """What the run recorded so far: units per worker, its slowest unit, its failures (first line of each)."""
    rid = _sql_text(st.run_id)
    try:
        st.per_worker = rows_of(session.query(PER_WORKER_SQL.format(rid=rid)))
        if st.slowest is None:
            rows = rows_of(session.query(SLOWEST_SQL.format(rid=rid)))
            st.slowest = rows[0] if rows else None
        failures = rows_of(session.query(FAILURES_SQL.format(rid=rid)))
    except Exception:  # a warehouse that recorded nothing yet
        return
    st.failures = [{**f, "error": _first_line(f["error"])} for f in failures]
    if not st.units:  # a run that died before its heartbeat said anything
        done = sum(int(w["units"] or 0) for w in st.per_worker)
        st.units = {"total": 0, "done": done, "skipped": 0, "failed": len(st.failures), "remaining": 0}


def watch(wh: Warehouse, run_id: str | None, every: float, show: Any, *, stop: Any = None) -> RunStatus:
    """``evalfarm status --watch``: ``show(status)`` every ``every`` seconds until the run is no longer running
    (planning, starting Ray and running are all running), or ``stop()`` says so; returns the last status."""
    while True:
        st = run_status(wh, run_id)
        run_id = st.run_id  # follow this run, not a newer one that starts meanwhile
        show(st)
        if st.state != "running" or (stop is not None and stop()):
            return st
        time.sleep(every)
