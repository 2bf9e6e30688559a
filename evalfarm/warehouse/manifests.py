"""The ``manifests`` table: a row per data file of every other table (its sha256, size, and the units whose rows it
holds), written before the file is committed; read by ``evalfarm verify``, and by the quarantine to know which
units lost rows with a damaged file."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from evalfarm.warehouse.base import MANIFEST_TABLE, now
from evalfarm.warehouse.like import WarehouseLike
from evalfarm.warehouse.tables import StagedFile

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ManifestRow:
    """The newest manifest row of a data file: its hash and size, who wrote it, and the units whose rows it holds
    ((model, task, fingerprint, run_id); one for a unit's file, many for a compacted or migrated one)."""

    path: str
    sha256: str
    size: int
    run_id: str | None
    table: str | None
    units: tuple[tuple[str, str, str, str | None], ...]


def _units(row: dict[str, Any]) -> tuple[tuple[str, str, str, str | None], ...]:
    if row.get("units"):
        try:
            return tuple(tuple(u) for u in json.loads(row["units"]))
        except (ValueError, TypeError):
            return ()
    if row.get("model") and row.get("task") and row.get("fingerprint"):
        return ((row["model"], row["task"], row["fingerprint"], row.get("run_id")),)
    return ()


def read_manifests(wh: WarehouseLike) -> tuple[dict[str, ManifestRow], list[tuple[str, str]]]:
    """The newest manifest row of each recorded path (relative to the root), and (path, why) for each manifest file
    of the table that cannot be read."""
    newest: dict[str, tuple[Any, ManifestRow]] = {}
    bad: list[tuple[str, str]] = []
    for f in wh.tables.snapshot(MANIFEST_TABLE).files:
        try:
            rows = wh.read_table(f.path).to_pylist()
        except (pa.ArrowException, OSError, ValueError) as exc:
            bad.append((wh.relative(f.path), f"unreadable manifest ({exc})".splitlines()[0]))
            continue
        for row in rows:
            if not row.get("path"):
                continue
            key = (row.get("created_at") or _EPOCH, row.get("run_id") or "")
            old = newest.get(row["path"])
            if old is None or key >= old[0]:
                entry = ManifestRow(row["path"], row["sha256"], int(row["size"]), row.get("run_id"), row.get("table"),
                                    _units(row))  # fmt: skip
                newest[row["path"]] = (key, entry)
    return {p: e for p, (_, e) in newest.items()}, bad


def manifest_index(wh: WarehouseLike) -> dict[str, ManifestRow]:
    """The newest manifest row of each recorded path (unreadable manifest files left out)."""
    return read_manifests(wh)[0]


def manifest_rows(files: Iterable[StagedFile], run_id: str | None) -> list[dict[str, Any]]:
    """The :data:`MANIFEST_TABLE` rows of staged files: path, sha256, size, table and the unit a file holds."""
    at = now()
    return [
        {"run_id": f.run_id or run_id, "path": f.path, "sha256": f.sha256, "size": f.size, "table": f.table,
         "model": f.model, "task": f.task, "fingerprint": f.fingerprint, "created_at": at, "units": None,
         "rows": f.rows}
        for f in files
    ]  # fmt: skip


__all__ = ["ManifestRow", "manifest_index", "manifest_rows", "read_manifests"]
