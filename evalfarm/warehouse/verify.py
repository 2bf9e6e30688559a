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
- ``bad-manifest``: a manifest file that cannot be read.

It detects edits by anyone who changes a data file without also rewriting the manifests; the manifests live in the
same warehouse, so a writer who rewrites both is not caught by this check (see docs/operations.md, "Security").
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from evalfarm.warehouse.base import MANIFEST_TABLE, LegacyWarehouse
from evalfarm.warehouse.manifests import ManifestRow, manifest_index, read_manifests
from evalfarm.warehouse.schemas import table_schemas
from evalfarm.warehouse.store import Warehouse

ERRORS = ("modified", "missing", "damaged", "bad-manifest")
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
class VerifyResult:
    """What :func:`verify_warehouse` found: files checked and matching, and every finding (sorted by path)."""

    warehouse: str
    checked: int
    verified: int
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    strict: bool = False

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
    newest, unreadable = read_manifests(wh)
    findings = [Finding(path, "bad-manifest", why) for path, why in unreadable]
    checked = verified = 0
    for table in table_schemas():
        if table == MANIFEST_TABLE:
            continue
        for f in wh.tables.snapshot(table).files:
            entry = newest.get(wh.relative(f.path))
            if model is not None and not any(u[0] == model for u in (entry.units if entry else ())):
                continue
            checked += 1
            finding = _check_file(wh, table, f.path, f.size, entry)
            if finding is None:
                verified += 1
            else:
                findings.append(finding)
    findings.sort(key=lambda f: (f.path, f.problem))
    return VerifyResult(wh.uri, checked, verified, tuple(findings), strict)


__all__ = ["ERRORS", "Finding", "ManifestRow", "VerifyResult", "manifest_index", "read_manifests", "verify_warehouse"]
