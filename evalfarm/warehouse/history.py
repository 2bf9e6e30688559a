"""History: the warehouse as it was after a run or at a time, and what moved between two runs.

Two views of the past, each exact for its own question:

- **Snapshots** (``evalfarm sql --as-of RUN_ID|TIME``, :func:`resolve_as_of`): every table read at the version it
  had then — a run's end event records the version of every table once its last rows were committed (its
  snapshot); a time reads each table's newest version committed at or before it. What a query sees is exactly
  what a reader saw then.
- **History views** (``sql/12_history.sql``): ``history`` places every value in every run's state (the newest
  computation of its unit computed by the run's end), ``changes`` lists each value as it moved with the reason, and
  the ``run_diff(a, b)`` table macro compares two runs; ``evalfarm diff`` prints the macro (:func:`diff_runs`).
  They place a value at the time it was computed, so they need no versions and work on a warehouse migrated from
  layout 1. (The two differ only for a run whose rows a concurrent run's batch committed after it ended.)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from evalfarm.warehouse.like import AsOfArg, WarehouseLike
from evalfarm.warehouse.query import rows_of

REASONS = (
    "new model",
    "new",
    "removed",
    "spec changed",
    "data changed",
    "scorer version changed",
    "parameters changed",
    "fingerprint changed",
    "nondeterminism",
)
"""Why a value moved, in the order ``run_diff`` and ``changes`` test them: a model or metric not there before, one
no longer computed, the model's spec (its hash), the task's data (checksum), the scorer's version, the scorer's
parameters, any other input of the unit's fingerprint (an embed or code version), and — the fingerprint unchanged —
the computation itself gave another number."""


@dataclass(frozen=True)
class AsOf:
    """A point in the warehouse's past: ``versions`` (table -> version, a run's recorded snapshot; tables it does
    not name are read at ``at``) or only ``at`` (each table's newest version committed at or before it)."""

    label: str
    at: datetime
    versions: dict[str, int | None] | None = None
    run_id: str | None = None


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def parse_time(text: str) -> datetime | None:
    """An ISO 8601 date or time (``2026-11-28``, ``2026-11-28T03:00``, with an offset or ``Z``; no zone: UTC)."""
    try:
        return _aware(datetime.fromisoformat(text.strip().replace("Z", "+00:00")))
    except ValueError:
        return None


def run_events(wh: WarehouseLike) -> list[dict[str, Any]]:
    """Every row of the ``runs`` table (start and end events), read from its newest snapshot."""
    snap = wh.tables.snapshot("runs")
    cols = ["run_id", "event", "at", "status", "snapshot", "catalog"]
    rows: list[dict[str, Any]] = []
    for f in snap.files:
        rows += rows_of(wh.read_columns(f.path, cols))  # no pandas: pyarrow's own timestamps import it
    return rows


def runs(wh: WarehouseLike) -> list[dict[str, Any]]:
    """One dict per run, oldest first: ``run_id``, ``started_at``, ``finished_at`` (None while running or after a
    kill), ``status``, ``snapshot`` (the end event's table versions, or None), ``catalog``."""
    out: dict[str, dict[str, Any]] = {}
    for r in run_events(wh):
        row = out.setdefault(r["run_id"], {"run_id": r["run_id"], "started_at": None, "finished_at": None,
                                           "status": "running", "snapshot": None, "catalog": None})  # fmt: skip
        if r["event"] == "start":
            row["started_at"], row["catalog"] = r["at"], r.get("catalog")
        elif r["event"] == "end":
            row["finished_at"], row["status"] = r["at"], r["status"] or "ok"
            row["snapshot"] = json.loads(r["snapshot"]) if r.get("snapshot") else None
    stamp = datetime.min.replace(tzinfo=UTC)
    return sorted(out.values(), key=lambda r: (r["started_at"] or stamp, r["run_id"]))


def _last_commits(
    wh: WarehouseLike, run_id: str, tables: tuple[str, ...] = ("metrics", "units", "runs")
) -> dict[str, tuple[int, datetime]]:
    """Table -> (version, time) of the newest commit naming ``run_id``, over ``tables`` (those a run writes)."""
    out: dict[str, tuple[int, datetime]] = {}
    for table in tables:
        for entry in wh.tables.history(table):  # newest first
            if entry.get("evalfarm.run_id") == run_id:
                ms = int(entry["timestamp"])
                at = datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)  # exact: no float
                out[table] = (int(entry["version"]), at)
                break
    return out


def resolve_as_of(wh: WarehouseLike, as_of: AsOfArg) -> AsOf:
    """``as_of`` (a run id of this warehouse, a ``datetime``, or an ISO 8601 text) as a point to read at. A run that
    ended: its recorded snapshot. A run without an end event (still running, or killed): the state at its newest
    commit. Anything else is an error naming what was expected."""
    if isinstance(as_of, datetime):
        t = _aware(as_of)
        return AsOf(t.isoformat(), t)
    text = str(as_of).strip()
    known = {r["run_id"]: r for r in runs(wh)}
    run = known.get(text)
    if run is not None:
        if run["finished_at"] is not None and run["snapshot"]:
            versions = {k: (int(v) if v is not None else None) for k, v in run["snapshot"].items()}
            # `runs` is read at the end event's own commit (the snapshot was taken just before it)
            ends = _last_commits(wh, text, ("runs",))
            if "runs" in ends:
                versions["runs"] = ends["runs"][0]
            return AsOf(f"run {text}", _aware(ends.get("runs", (0, run["finished_at"]))[1]), versions, text)
        # never ended (running, or killed): each table it committed to at its last commit there, the others by time
        last = _last_commits(wh, text)
        at = max((t for _, t in last.values()), default=run["finished_at"] or run["started_at"])
        return AsOf(f"run {text}", _aware(at), {t: v for t, (v, _) in last.items()} or None, text)
    when = parse_time(text)
    if when is None:
        recent = ", ".join(list(known)[-3:]) or "none yet"
        raise ValueError(
            f'as of {text!r}: not a run id of this warehouse (the newest: {recent}; `evalfarm sql "SELECT run_id '
            'FROM runs"` lists them) nor a time (ISO 8601, e.g. 2026-11-28T03:00Z)'
        )
    return AsOf(when.isoformat(), when)


def last_two_runs(wh: WarehouseLike, known: list[dict[str, Any]] | None = None) -> tuple[str, str]:
    """The two newest runs that ended (the default of ``evalfarm diff``), older first (of ``known``, :func:`runs`
    read already)."""
    ended = [r["run_id"] for r in (runs(wh) if known is None else known) if r["finished_at"] is not None]
    if len(ended) < 2:
        raise ValueError(
            f"`evalfarm diff` compares two runs and warehouse {wh.uri} has {len(ended)} that ended: name them "
            "(evalfarm diff RUN_A RUN_B), or run again"
        )
    return ended[-2], ended[-1]


@dataclass(frozen=True)
class Diff:
    """What moved between two runs (``run_diff``), with the tolerance it was read under."""

    run_a: str
    run_b: str
    rows: list[dict[str, Any]]
    tolerance: float

    @property
    def nondeterministic(self) -> list[dict[str, Any]]:
        """Values that moved while their unit's fingerprint stayed the same."""
        return [r for r in self.rows if r["reason"] == "nondeterminism"]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r["reason"]] = out.get(r["reason"], 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_a": self.run_a,
            "run_b": self.run_b,
            "tolerance": self.tolerance,
            "counts": self.counts(),
            "changes": self.rows,
        }


def moved(a: float | None, b: float | None, tolerance: float) -> bool:
    """Whether ``a`` -> ``b`` is a move: one missing, NaN against a number, or a difference beyond ``tolerance``
    relative to the larger magnitude (at least 1: near zero it is absolute)."""
    if a is None or b is None:
        return (a is None) != (b is None)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) != math.isnan(b)
    return abs(a - b) > tolerance * max(1.0, abs(a), abs(b))


DEFAULT_TOLERANCE = 1e-9
"""Relative change below which two values of one unit count as the same number (a sum in another order)."""


def diff_runs(
    wh: WarehouseLike, run_a: str | None = None, run_b: str | None = None, *, tolerance: float = DEFAULT_TOLERANCE
) -> Diff:
    """What moved between runs ``run_a`` and ``run_b`` (default: the two newest that ended), read through the
    ``run_diff`` macro: every value new, removed, or different beyond ``tolerance``, with its reason."""
    every = runs(wh)  # once: the runs table's files, read by this process
    if run_a is None or run_b is None:
        last_a, last_b = last_two_runs(wh, every)
        run_a, run_b = run_a or last_a, run_b or last_b
    known = {r["run_id"] for r in every}
    for r in (run_a, run_b):
        if r not in known:
            raise ValueError(f'no run {r!r} in warehouse {wh.uri} (`evalfarm sql "SELECT * FROM runs"` lists them)')
    # run_diff reads history_of with the two runs: their grid only, not every run's (sql/12_history.sql)
    table: pa.Table = wh.query(f"SELECT * FROM run_diff('{_quoted(run_a)}', '{_quoted(run_b)}')")
    rows = [r for r in rows_of(table) if r["reason"] != "same" and _kept(r, tolerance)]
    rows.sort(key=lambda r: (REASONS.index(r["reason"]) if r["reason"] in REASONS else 99, r["model"], r["task"],
                             str(r["metric"])))  # fmt: skip
    return Diff(run_a, run_b, rows, tolerance)


def _kept(row: dict[str, Any], tolerance: float) -> bool:
    if row["reason"] in ("new", "new model", "removed"):
        return True
    return moved(row["value_a"], row["value_b"], tolerance)


def _quoted(text: str) -> str:
    return text.replace("'", "''")


__all__ = [
    "DEFAULT_TOLERANCE",
    "REASONS",
    "AsOf",
    "Diff",
    "diff_runs",
    "last_two_runs",
    "moved",
    "parse_time",
    "resolve_as_of",
    "run_events",
    "runs",
]
