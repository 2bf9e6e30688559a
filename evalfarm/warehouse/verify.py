"""Check a warehouse's data files against the manifests written with them (``evalfarm verify``, issue #23.6).

Every data file of every table is recorded before it is committed: path, sha256, size, and the unit(s) whose rows
it holds, in the ``manifests`` table (committed first in each batch, :meth:`Warehouse.commit`).
:func:`verify_warehouse` rehashes every file of every table's newest snapshot (the files the views read) and reports
what does not match:

- ``modified``: the bytes differ from the manifest row, or from the size the table's log recorded (a number edited
  after it was written);
- ``missing``: a file the snapshot names is gone;
- ``damaged``: the file is not whole Parquet (:meth:`Warehouse.file_problem`), or a unit's file holds rows of
  another unit than its manifest names;
- ``unrecorded``: a file no manifest names (committed by hand, or by another tool); an error only with ``strict``;
- ``bad-manifest``: a manifest file that cannot be read;
- ``damaged`` on a table (``tables/<table>``): its log cannot be trusted (an entry naming a path outside the
  table, a link on the way, a log file too large or not JSON: :class:`~evalfarm.warehouse.tables.DamagedTable`);
  none of its files is read;
- ``stale-current`` on the metrics table: the rows ``metrics`` reads (its current rows, kept apart by the refresh of
  :mod:`~evalfarm.warehouse.current`) are not the newest computations of its whole history.

It detects edits by anyone who changes a data file without also rewriting the manifests; the manifests live in the
same warehouse, so a writer who rewrites both is not caught by this check (see docs/operations.md, "Security").

``evalfarm verify --deep`` checks the numbers' meaning as well, from the SQL views only (never file names, so it
holds whatever layout the tables have). This module has the part that needs nothing but the views,
:func:`consistency_findings`: each current number against what it must be (``inconsistent``: a value out of its
declared range (:mod:`evalfarm.metrics`), Hits@k falling as k grows, an MRR that Hits@1 and Hits@k make
impossible, an MR below 1 / MRR, the tie policies out of order, a fingerprint that is not its inputs').
Recomputing numbers from the detail tables and from the stored embeddings needs the scorers
(:mod:`evalfarm.recompute`, a layer above).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from evalfarm.ranking import TIES_BY_RANK, is_ties, tie_step
from evalfarm.warehouse.base import MANIFEST_TABLE, LegacyWarehouse
from evalfarm.warehouse.manifests import ManifestRow, manifest_index, read_manifests
from evalfarm.warehouse.schemas import table_schemas
from evalfarm.warehouse.store import Warehouse
from evalfarm.warehouse.tables import DamagedTable

DEEP_ERRORS = ("inconsistent", "disagrees-with-ranks", "disagrees-with-embeddings")
"""What ``--deep`` finds: a number that contradicts another of its unit (or its fingerprint), one that its unit's
detail table (EvalRank's ``ranks``) gives otherwise, one that the scorer gives otherwise from the stored embeddings."""
ERRORS = ("modified", "missing", "damaged", "bad-manifest", "stale-current", *DEEP_ERRORS)
"""Problems that make a warehouse fail verification; ``unrecorded`` joins them under ``strict``."""


@dataclass(frozen=True)
class Finding:
    """One result file that does not match: its path (relative to the root), the problem, and why in words."""

    path: str
    problem: str
    detail: str
    table: str | None = None
    model: str | None = None
    task: str | None = None
    fingerprint: str | None = None


@dataclass(frozen=True)
class DeepSummary:
    """What ``--deep`` looked at: current numbers checked for consistency, numbers recomputed from the ``ranks``
    detail table, units recomputed from their stored embeddings, and the units it could not recompute (why)."""

    numbers: int = 0
    from_ranks: int = 0
    recomputed_units: tuple[str, ...] = ()
    skipped_units: tuple[str, ...] = ()


@dataclass(frozen=True)
class VerifyResult:
    """What :func:`verify_warehouse` found: files checked and matching, and every finding (sorted by path);
    ``deep``: what ``--deep`` checked besides (None: it did not run)."""

    warehouse: str
    checked: int
    verified: int
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    strict: bool = False
    deep: DeepSummary | None = None

    @property
    def errors(self) -> tuple[Finding, ...]:
        """The findings that fail verification (``unrecorded`` ones only under ``strict``)."""
        bad = ERRORS + (("unrecorded",) if self.strict else ())
        return tuple(f for f in self.findings if f.problem in bad)

    @property
    def ok(self) -> bool:
        return not self.errors

    def counts(self) -> dict[str, int]:
        """Findings by problem."""
        out: dict[str, int] = {}
        for f in self.findings:
            out[f.problem] = out.get(f.problem, 0) + 1
        return out

    def untrusted_units(self) -> set[tuple[str, str, str]]:
        """(model, task, fingerprint) of every unit with an error: rows to leave out, or units to rerun with
        ``--force``."""
        return {(f.model, f.task, f.fingerprint) for f in self.errors if f.model and f.task and f.fingerprint}


def _digest(wh: Warehouse, path: str) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    src = wh.open_input(path)
    try:
        while chunk := src.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    finally:
        src.close()
    return h.hexdigest(), size


def _where(table: str, entry: ManifestRow | None) -> dict[str, Any]:
    units = entry.units if entry is not None else ()
    one = units[0] if len(units) == 1 else (None, None, None, None)
    return {"table": table, "model": one[0], "task": one[1], "fingerprint": one[2]}


def _check_file(wh: Warehouse, table: str, path: str, logged_size: int, entry: ManifestRow | None) -> Finding | None:
    rel = wh.relative(path)
    where = _where(table, entry)
    if not wh.exists(path):
        return Finding(rel, "missing", f"table {table}'s snapshot names this file and it is gone", **where)
    why = wh.file_problem(path)
    if why is not None:
        return Finding(rel, "damaged", why, **where)
    try:
        sha, size = _digest(wh, path)
    except OSError as exc:
        return Finding(rel, "damaged", f"unreadable ({exc})", **where)
    if size != logged_size:
        return Finding(rel, "modified", f"{size} bytes, the table's log recorded {logged_size}", **where)
    if entry is None:
        return Finding(rel, "unrecorded", "no manifest names this file (not written by evalfarm?)", **where)
    if sha != entry.sha256 or size != entry.size:
        return Finding(
            rel,
            "modified",
            f"sha256 {sha[:12]}… ({size} bytes) is not the {entry.sha256[:12]}… ({entry.size} bytes) "
            f"recorded when it was written (run {entry.run_id})",
            **where,
        )
    return _check_unit(wh, table, path, entry, where)


def _check_unit(wh: Warehouse, table: str, path: str, entry: ManifestRow, where: dict[str, Any]) -> Finding | None:
    """A file recorded as one unit's must hold that unit's rows only (a recorded file renamed over another's)."""
    if len(entry.units) != 1 or "fingerprint" not in table_schemas().get(table, pa.schema([])).names:
        return None
    found = set(wh.read_columns(path, ["fingerprint"]).column(0).unique().to_pylist())
    if found and found != {entry.units[0][2]}:
        return Finding(
            wh.relative(path), "damaged",
            f"fingerprint column {sorted(map(str, found))[:3]} is not its unit's {entry.units[0][2]}", **where,
        )  # fmt: skip
    return None


def verify_warehouse(wh: Warehouse, *, model: str | None = None, strict: bool = False) -> VerifyResult:
    """Check every data file of every table's newest snapshot (of ``model``'s units only, if given: files that hold
    rows of the model) against the manifests and the tables' logs.

    Reads every file once (the hash needs the bytes); writes nothing. ``strict``: files no manifest names are errors
    too (by default they are reported as ``unrecorded`` and pass). A layout-1 warehouse is refused with the command
    that migrates it.
    """
    layout = wh.layout()
    if layout == "empty":
        raise FileNotFoundError(f"no warehouse at {wh.uri}")
    if layout == "legacy":
        raise LegacyWarehouse(wh.uri)
    findings: list[Finding] = []
    try:
        newest, unreadable = read_manifests(wh)
    except DamagedTable as exc:
        newest, unreadable = {}, []
        findings.append(_damaged(exc))
    findings += [Finding(path, "bad-manifest", why) for path, why in unreadable]
    checked = verified = 0
    for table in table_schemas():
        if table == MANIFEST_TABLE:
            continue
        try:
            files = wh.tables.snapshot(table).files
        except DamagedTable as exc:
            findings.append(_damaged(exc))
            continue
        for f in files:
            entry = newest.get(wh.relative(f.path))
            if model is not None and not any(u[0] == model for u in (entry.units if entry else ())):
                continue
            checked += 1
            finding = _check_file(wh, table, f.path, f.size, entry)
            if finding is None:
                verified += 1
            else:
                findings.append(finding)
    if model is None and not any(f.problem in ERRORS for f in findings):  # the files are whole: read them all
        findings += _current_findings(wh)
    findings.sort(key=lambda f: (f.path, f.problem))
    return VerifyResult(wh.uri, checked, verified, tuple(findings), strict)


def _current_findings(wh: Warehouse) -> list[Finding]:
    """The metrics table's current rows against the newest computations of its history
    (:func:`~evalfarm.warehouse.current.current_findings`), as findings."""
    from evalfarm.warehouse.current import current_findings

    return [Finding("tables/metrics", "stale-current", why, "metrics") for why in current_findings(wh)]


def _damaged(exc: DamagedTable) -> Finding:
    """A table whose log cannot be trusted, as one finding: the table's folder, the entry and why (none of its
    files was read)."""
    detail = f"its log cannot be trusted: {exc.entry}: {exc.why}; none of its files was read"
    return Finding(f"tables/{exc.table}", "damaged", detail, exc.table)


# -- --deep: the numbers against each other -----------------------------------------------------------------------
UNIT_LABEL = "unit {fingerprint}"
"""The ``path`` of a ``--deep`` finding: a unit, not a file (the check reads views, whatever the layout)."""
_EPS = 1e-9


def deep_finding(
    problem: str, unit: dict[str, Any], where: str, detail: str, *, fingerprint: str | None = None
) -> Finding:
    """A ``--deep`` finding on ``unit`` (a row with model, task, fingerprint), at ``where`` (scorer, variant …)."""
    fp = fingerprint or unit.get("fingerprint")
    return Finding(
        UNIT_LABEL.format(fingerprint=fp), problem, f"{where}: {detail}", "metrics", unit.get("model"),
        unit.get("task"), fp,
    )  # fmt: skip


def _above(a: float, b: float) -> bool:
    """``a > b`` beyond rounding."""
    return a > b + _EPS * max(1.0, abs(a), abs(b))


def _bound(x: float) -> str:
    return "∞" if x == math.inf else "-∞" if x == -math.inf else f"{x:g}"


def _range_problem(scorer: str, metric: str, value: float) -> str | None:
    """Why ``value`` cannot be ``scorer``'s ``metric``: infinite (no stored number is), or outside its declared
    range (:mod:`evalfarm.metrics`: the scorer's own declaration, else the shared one); else None. A metric nothing
    declares is checked for infinity only."""
    if math.isinf(value):
        return f"{metric} is {value}"
    if math.isnan(value):
        return None  # an empty unit's numbers are NaN (no pairs)
    from evalfarm.metrics import declaration
    from evalfarm.plugins import task_kinds

    scoped = next((getattr(s, "declared_metrics", None) for _, s in task_kinds.items() if s.name == scorer), None)
    info = declaration(metric, scoped)
    if info is not None and (_above(value, info.high) or _above(info.low, value)):
        return f"{metric} {value:.6g} is outside [{_bound(info.low)}, {_bound(info.high)}]"
    return None


def rank_metric_problems(ties: str | None, values: dict[str, float]) -> list[str]:
    """What MR, MRR and Hits@k of one tie policy cannot all be at once (ranks >= 1, whole or halves by policy):
    Hits@k grows with k; ranks up to k contribute at least 1/k to MRR; a rank above 1 contributes at most
    1 / (1 + step), one above k at most 1 / (k + step), so MRR <= (1 + Hits@1) / 2 for whole ranks; MR is at least
    1 / MRR (the arithmetic mean is at least the harmonic one) and at least what Hits@k's ranks would sum to."""
    step = tie_step(ties) if is_ties(ties) else 0.5  # the smallest step between two ranks: 1, or 1/2 (realistic)
    hits = sorted((int(m.split("@", 1)[1]), v) for m, v in values.items() if re.fullmatch(r"hits@\d+", m))
    hits = [(k, v) for k, v in hits if not math.isnan(v)]
    out = [f"hits@{k1} {v1:.6g} > hits@{k2} {v2:.6g}" for (k1, v1), (k2, v2) in zip(hits, hits[1:], strict=False)
           if _above(v1, v2)]  # fmt: skip
    mrr, mr = values.get("mrr", math.nan), values.get("mr", math.nan)
    h1 = dict(hits).get(1)
    if h1 is not None and not math.isnan(mrr):
        out += _mrr_problems(mrr, h1, hits, step)
    if not math.isnan(mr) and not math.isnan(mrr) and mrr > 0 and _above(1 / mrr, mr):
        out.append(f"mr {mr:.6g} < 1 / mrr = {1 / mrr:.6g}")
    if h1 is not None and not math.isnan(mr):
        for k, hk in hits:
            least = h1 + (hk - h1) * (1 + step) + (1 - hk) * (k + step) if k > 1 else h1 + (1 - h1) * (1 + step)
            if _above(least, mr):
                out.append(f"mr {mr:.6g} < {least:.6g}, the least hits@1 {h1:.6g} and hits@{k} {hk:.6g} allow")
                break
    return out


def _mrr_problems(mrr: float, h1: float, hits: list[tuple[int, float]], step: float) -> list[str]:
    """MRR between what Hits@1 and each Hits@k allow (see :func:`rank_metric_problems`); the first problem."""
    if _above(h1, mrr):
        return [f"mrr {mrr:.6g} < hits@1 {h1:.6g}"]
    for k, hk in hits:
        if k == 1:  # every rank above 1 contributes at most 1 / (1 + step)
            high = h1 + (1 - h1) / (1 + step)
            if _above(mrr, high):
                return [f"mrr {mrr:.6g} > {high:.6g}, the most hits@1 {h1:.6g} allows"]
            continue
        high = h1 + (hk - h1) / (1 + step) + (1 - hk) / (k + step)
        if _above(mrr, high):
            return [f"mrr {mrr:.6g} > {high:.6g}, the most hits@1 {h1:.6g} and hits@{k} {hk:.6g} allow"]
        low = h1 + (hk - h1) / k
        if _above(low, mrr):
            return [f"mrr {mrr:.6g} < {low:.6g}, the least hits@1 {h1:.6g} and hits@{k} {hk:.6g} allow"]
    return []


def _tie_order_problems(by_ties: dict[str, dict[str, float]]) -> list[str]:
    """Optimistic ranks are at most realistic ones, which are at most pessimistic ones (rank, + tied / 2, + tied:
    :data:`evalfarm.ranking.TIES_BY_RANK`): MRR and Hits@k fall along that order, MR rises, and realistic MR is
    exactly the mean of the other two."""
    out: list[str] = []
    order = [t for t in TIES_BY_RANK if t in by_ties]
    for a, b in zip(order, order[1:], strict=False):
        for metric in set(by_ties[a]) & set(by_ties[b]):
            va, vb = by_ties[a][metric], by_ties[b][metric]
            if math.isnan(va) or math.isnan(vb):
                continue
            if (metric == "mrr" or metric.startswith("hits@")) and _above(vb, va):
                out.append(f"{metric}: {b} {vb:.6g} > {a} {va:.6g}")
            elif metric == "mr" and _above(va, vb):
                out.append(f"mr: {a} {va:.6g} > {b} {vb:.6g}")
    mrs = [by_ties.get(t, {}).get("mr", math.nan) for t in TIES_BY_RANK]
    if not any(math.isnan(v) for v in mrs) and abs(mrs[1] - (mrs[0] + mrs[2]) / 2) > 1e-6 * max(1.0, mrs[1]):
        out.append(
            f"mr: realistic {mrs[1]:.6g} is not the mean of optimistic {mrs[0]:.6g} and pessimistic {mrs[2]:.6g}"
        )
    return out


CURRENT_NUMBERS_SQL = (
    "SELECT m.model, m.task, m.scorer, m.subset, m.variant, m.ties, m.metric, m.value, m.fingerprint, m.spec_hash, "
    "c.task_checksum, m.scorer_version, m.params FROM metrics m "
    "LEFT JOIN (SELECT DISTINCT fingerprint, task_checksum FROM metrics_history) c USING (fingerprint){where} "
    "ORDER BY m.model, m.task, m.scorer, m.subset, m.variant, m.ties, m.metric"
)


def current_numbers(wh: Warehouse, model: str | None = None) -> list[dict[str, Any]]:
    """Every current number (the ``metrics`` view), of ``model`` only if given: what ``--deep`` checks."""
    con = wh.connect()
    try:
        sql = CURRENT_NUMBERS_SQL.format(where=" WHERE m.model = ?" if model is not None else "")
        rows = con.execute(sql, [model] if model is not None else []).fetchall()
        names = [d[0] for d in con.description or ()]
    finally:
        con.close()
    return [dict(zip(names, row, strict=True)) for row in rows]


def consistency_findings(rows: list[dict[str, Any]]) -> list[Finding]:
    """``inconsistent`` findings over the current numbers ``rows`` (:func:`current_numbers`): each value in its
    metric's range, and each group of rank metrics (one unit, scorer, subset, variant) possible together."""
    out: list[Finding] = []
    groups: dict[tuple[Any, ...], dict[str, dict[str, float]]] = {}
    first: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        value = float(r["value"]) if r["value"] is not None else math.nan
        parts = (r["scorer"], r["subset"], r["variant"], r["ties"])
        where = "/".join(str(x) for x in parts if x not in (None, "", "all"))
        if why := _range_problem(r["scorer"], r["metric"], value):
            out.append(deep_finding("inconsistent", r, where, why))
        key = (r["model"], r["task"], r["fingerprint"], r["scorer"], r["subset"], r["variant"])
        groups.setdefault(key, {}).setdefault(r["ties"] or "", {})[r["metric"]] = value
        first.setdefault(key, r)
    for key, by_ties in groups.items():
        unit = first[key]
        where = "/".join(str(x) for x in key[3:] if x not in (None, "", "all"))
        problems = [
            f"{ties}: {p}" for ties, values in by_ties.items() if ties for p in rank_metric_problems(ties, values)
        ]
        problems += _tie_order_problems({t: v for t, v in by_ties.items() if t})
        out += [deep_finding("inconsistent", unit, where, p) for p in problems]
    return out


__all__ = [
    "DEEP_ERRORS",
    "ERRORS",
    "DeepSummary",
    "Finding",
    "ManifestRow",
    "VerifyResult",
    "consistency_findings",
    "current_numbers",
    "deep_finding",
    "manifest_index",
    "rank_metric_problems",
    "read_manifests",
    "verify_warehouse",
]
