"""Check a warehouse's result files against the manifests their runs wrote (``evalfarm verify``, issue #23.6).

Every unit's result files (its metrics file and its per-unit tables: ``quality`` and a kind's detail tables) are
recorded when written: path, sha256 and size in ``tables/manifests/<run_id>/<uuid>.parquet``. A path written more
than once (a ``--force`` rerun) is judged by its newest row. :func:`verify_warehouse` rehashes every result file and
reports what does not match:

- ``modified``: the bytes differ from the newest manifest row (a number edited after its run wrote it);
- ``missing``: a manifest row names a file that is gone;
- ``damaged``: the file is not a whole unit file (:meth:`Warehouse.file_problem`: unreadable Parquet, no rows in a
  metrics file, a ``fingerprint`` column other than the file's name);
- ``unrecorded``: a file no manifest names (written before manifests existed, or by a worker killed between its
  metrics file and its manifest); an error only with ``strict``;
- ``bad-manifest``: a manifest file that cannot be read.

It detects edits by anyone who changes a result file without also rewriting the manifests; the manifests live in the
same warehouse, so a writer who rewrites both is not caught (see docs/operations.md, "Security").
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from evalfarm.warehouse.schemas import unit_tables
from evalfarm.warehouse.store import MANIFEST_TABLE, Warehouse

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


def _unit_parts(rel: str) -> tuple[str, str, str, str] | None:
    """(table, model, task, fingerprint) of ``tables/<table>/model=<m>/task=<t>/<fingerprint>.parquet``, else None."""
    parts = rel.split("/")
    if len(parts) != 5 or parts[0] != "tables" or not parts[4].endswith(".parquet"):
        return None
    if not (parts[2].startswith("model=") and parts[3].startswith("task=")):
        return None
    return parts[1], parts[2][len("model=") :], parts[3][len("task=") :], parts[4][: -len(".parquet")]


def _digest(wh: Warehouse, path: str) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with wh.fs.open_input_stream(path) as src:
        while chunk := src.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def read_manifests(wh: Warehouse, model: str | None = None) -> tuple[dict[str, dict[str, Any]], list[Finding]]:
    """The newest manifest row of each recorded path (of ``model``'s files only, if given), and a finding for each
    manifest file that cannot be read."""
    newest: dict[str, dict[str, Any]] = {}
    bad: list[Finding] = []
    for path, _, _ in sorted(wh._walk(wh._p("tables", MANIFEST_TABLE))):
        try:
            rows = wh.read_table(path).to_pylist()
        except (pa.ArrowException, OSError, ValueError) as exc:
            bad.append(Finding(wh.relative(path), "bad-manifest", f"unreadable manifest ({exc})".splitlines()[0]))
            continue
        for row in rows:
            if not row.get("path") or (model is not None and row.get("model") != model):
                continue
            old = newest.get(row["path"])
            if old is None or (row["created_at"], row["run_id"] or "") >= (old["created_at"], old["run_id"] or ""):
                newest[row["path"]] = row
    return newest, bad


def _check_file(wh: Warehouse, path: str, entry: dict[str, Any] | None) -> Finding | None:
    rel = wh.relative(path)
    table, model, task, fingerprint = _unit_parts(rel) or (None, None, None, None)
    where = {"table": table, "model": model, "task": task, "fingerprint": fingerprint}
    why = wh.file_problem(path)
    if why is not None:
        return Finding(rel, "damaged", why, **where)
    if entry is None:
        return Finding(rel, "unrecorded", "no manifest names this file (written before manifests existed?)", **where)
    try:
        sha, size = _digest(wh, path)
    except OSError as exc:
        return Finding(rel, "damaged", f"unreadable ({exc})", **where)
    if sha != entry["sha256"] or size != entry["size"]:
        return Finding(
            rel,
            "modified",
            f"sha256 {sha[:12]}… ({size} bytes) is not the {str(entry['sha256'])[:12]}… ({entry['size']} bytes) "
            f"run {entry['run_id']} recorded",
            **where,
        )
    return None


def verify_warehouse(wh: Warehouse, *, model: str | None = None, strict: bool = False) -> VerifyResult:
    """Check every result file of ``wh`` (of ``model`` only, if given) against the manifests and its fingerprint.

    Reads every result file once (the hash needs the bytes); writes nothing. ``strict``: files no manifest names
    are errors too (by default they are reported as ``unrecorded`` and pass).
    """
    newest, findings = read_manifests(wh, model)
    folder = f"model={model}" if model is not None else None
    checked = verified = 0
    seen: set[str] = set()
    tables = ("metrics", *unit_tables())
    for table in tables:
        root = wh._p("tables", table, folder) if folder else wh._p("tables", table)
        for path, _, _ in wh._walk(root):
            rel = wh.relative(path)
            if _unit_parts(rel) is None:  # _schema.parquet, files of an older layout
                continue
            seen.add(rel)
            checked += 1
            finding = _check_file(wh, path, newest.get(rel))
            if finding is None:
                verified += 1
            else:
                findings.append(finding)
    for rel, entry in newest.items():
        if rel not in seen and (_unit_parts(rel) or ("",))[0] in tables:  # a kind not installed here: not judged
            findings.append(
                Finding(
                    rel,
                    "missing",
                    f"recorded by run {entry['run_id']}, no longer in the warehouse",
                    entry.get("table"),
                    entry.get("model"),
                    entry.get("task"),
                    entry.get("fingerprint"),
                )
            )
    findings.sort(key=lambda f: (f.path, f.problem))
    return VerifyResult(wh.uri, checked, verified, tuple(findings), strict)


__all__ = ["ERRORS", "Finding", "VerifyResult", "read_manifests", "verify_warehouse"]
