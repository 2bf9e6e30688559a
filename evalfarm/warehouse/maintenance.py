"""Keeping a warehouse small and fast: compaction, retention (vacuum), reader pins, and row removal.

- **Compaction** (:func:`compact`; ``evalfarm warehouse compact``, and at the end of a run past
  :data:`COMPACT_AT` small files): a table's small files (each unit's rows arrive in a file of its own) are merged
  into files of up to ``target_bytes``, sorted by model and task, in one commit that removes the small ones
  (``dataChange: false``: the same rows, so it never conflicts with a run appending meanwhile). Files per table
  then grow with runs and compactions, not with units.
- **Retention** (:func:`vacuum`; ``evalfarm warehouse vacuum --keep 90d``): snapshots older than the retention
  expire — their log entries are removed (no ``--as-of`` to them) and so are the data files only they needed, and
  staged files no commit names (a killed worker's). Never the files of a snapshot a reader has pinned
  (:func:`pinned`), and never within :data:`MIN_KEEP`: a run's staged files wait at most a batch interval for
  their commit, a plain query at most its timeout.
- **Pins** (:func:`pinned`): a reader that holds an older snapshot for long (``sql --as-of``, ``diff``, the report)
  records it under ``<root>/_readers/`` until it is done (or :data:`PIN_SECONDS` pass); ``vacuum`` keeps it.
- **Removing units' rows** (:func:`drop_units`): what the quarantine does to a unit that lost a file: its metrics
  rows go (the files holding them rewritten without them), so the next run recomputes it.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from evalfarm.warehouse import current
from evalfarm.warehouse.base import WarehouseWriteError, relative_parts, remove_inside, walk_inside
from evalfarm.warehouse.current import drop_units
from evalfarm.warehouse.pins import PIN_SECONDS, READERS_DIR, live_pins, pinned
from evalfarm.warehouse.rewrite import rewrite
from evalfarm.warehouse.schemas import table_schemas
from evalfarm.warehouse.store import Warehouse
from evalfarm.warehouse.tables import LOG_DIR, DamagedTable, FileEntry, RewriteConflict, TableError

log = logging.getLogger(__name__)

MIN_KEEP = timedelta(hours=1)
"""The shortest retention ``vacuum`` accepts: staged files wait at most a batch interval for their commit, and a
query's snapshot is read within its timeout; an hour leaves both far behind."""
TARGET_BYTES = 64 * 1024 * 1024
"""A compacted file's size at most (before compression's variance): large enough that a 1,000-model table is a
handful of files, small enough that a reader filtering one model reads little."""
COMPACT_AT = 32
"""Small files in a table that make a run compact it, after a batch commit or at its end (``evalfarm warehouse
compact`` any time)."""
REFRESH_SHARE = 0.25
"""During a run, the metrics table's current rows are refreshed once its pending files (committed since the last
refresh) hold more than this share of the current files' bytes."""
END_SHARE = 0.01
"""At the end of a run, the current rows are refreshed once the pending files hold more than this share of the
current files' bytes, or number :data:`COMPACT_AT` or more: a nightly refreshes them, a run of a few units leaves its
rows pending (each reader's window then covers their keys only). Measured at 10,000 models × 30 nights
(``bench_warehouse.py``, 2026-12-07): a night's 2-3 % of new rows left pending made every board 0.26 s slower (1.16 s
against 0.90 s, 1.7× its floor against 1.4×), and the refresh that folds them in took 27 s once, beside a nightly
of hours; 5 % had left them pending. One model submitted to a 1,000-model warehouse is 0.1 %: it stays pending."""


# -- compaction ---------------------------------------------------------------------------------------------------
@dataclass
class Compacted:
    """What :func:`compact` did to one table: files before and after, and the files it merged."""

    table: str
    files_before: int
    files_after: int
    merged: int


def _bins(files: Sequence[FileEntry], target: int) -> list[list[FileEntry]]:
    """Consecutive groups of ``files`` of up to ``target`` bytes (a file alone over it stays as it is)."""
    bins: list[list[FileEntry]] = []
    current: list[FileEntry] = []
    size = 0
    for f in files:
        if current and size + f.size > target:
            bins.append(current)
            current, size = [], 0
        current.append(f)
        size += f.size
    if current:
        bins.append(current)
    return [b for b in bins if len(b) > 1]


def _merged(wh: Warehouse, table: str, files: Sequence[FileEntry]) -> pa.Table:
    """The rows of ``files`` as one table of ``table``'s schema, sorted by model and task where it has them."""
    parts = [wh.typed(table, wh.read_table(f.path)) for f in files]
    t = pa.concat_tables(parts)
    keys = [(c, "ascending") for c in ("model", "task", "run_id") if c in t.column_names]
    return t.sort_by(keys) if keys else t


def _groups(wh: Warehouse, table: str, files: Sequence[FileEntry]) -> dict[str, list[FileEntry]]:
    """``files`` of ``table`` in the groups compaction merges within, by the folder a merged file goes to: the
    metrics table's pending files (``compact``) and superseded ones (``superseded``) apart, its current files never
    (:func:`~evalfarm.warehouse.current.refresh_current` rewrites those); any other table's files in one group."""
    if table != current.TABLE:
        return {"compact": list(files)}
    folder = wh.tables.folder(table)
    out: dict[str, list[FileEntry]] = {"compact": [], current.SUPERSEDED: []}
    for f in files:
        kind = current.kind_of(folder, f.path)
        if kind != current.CURRENT:
            out["compact" if kind == "pending" else kind].append(f)
    return out


def small_files(wh: Warehouse, table: str, target_bytes: int = TARGET_BYTES) -> list[FileEntry]:
    """The files of ``table``'s newest snapshot that compaction would merge: those under half the target size (the
    metrics table's current files aside)."""
    files = wh.tables.snapshot(table).files
    return [f for group in _groups(wh, table, files).values() for f in group if f.size < target_bytes // 2]


def compact(
    wh: Warehouse,
    *,
    tables: Iterable[str] | None = None,
    target_bytes: int = TARGET_BYTES,
    min_files: int = 2,
    run_id: str | None = None,
) -> list[Compacted]:
    """Merge each table's small files (:func:`small_files`) into files of up to ``target_bytes``; a table with fewer
    than ``min_files`` small files is left as it is. One commit per table changed; a table another writer compacted
    meanwhile is left to it (:class:`~evalfarm.warehouse.tables.RewriteConflict`)."""
    out = []
    for table in tables if tables is not None else table_schemas():
        if not wh.tables.exists(table):
            continue
        before = wh.tables.snapshot(table).files
        bins: list[list[FileEntry]] = []
        folders: list[str] = []
        for folder, group in _groups(wh, table, before).items():
            small = sorted((f for f in group if f.size < target_bytes // 2), key=lambda f: f.path)
            if len(small) >= min_files:
                got = _bins(small, target_bytes)
                bins += got
                folders += [folder] * len(got)
        if not bins:
            continue
        removes = [f for b in bins for f in b]
        merged = [_merged(wh, table, b) for b in bins]
        try:
            rewrite(wh, table, merged, removes, operation="compact", data_change=False, run_id=run_id,
                    folders=folders)  # fmt: skip
        except RewriteConflict as exc:
            log.info("%s was compacted by another writer meanwhile (%s)", table, exc)
            continue
        out.append(Compacted(table, len(before), len(before) - len(removes) + len(bins), len(removes)))
    return out


def compact_warehouse(
    wh: Warehouse, *, tables: Iterable[str] | None = None, min_files: int = 2, run_id: str | None = None
) -> list[Compacted]:
    """``evalfarm warehouse compact``: the metrics table's current rows refreshed when anything is pending (when it is
    among ``tables``), then each table's small files merged (:func:`compact`)."""
    names = list(tables) if tables is not None else list(table_schemas())
    out: list[Compacted] = []
    if current.TABLE in names:
        got = refresh_if_due(wh, threshold=1, share=0.0, run_id=run_id)
        out += [got] if got is not None else []
    return out + compact(wh, tables=names, min_files=min_files, run_id=run_id)


def compact_if_needed(
    wh: Warehouse, *, threshold: int = COMPACT_AT, run_id: str | None = None, refresh_share: float = END_SHARE
) -> list[Compacted]:
    """The end of a run: the metrics table's current rows refreshed when what is pending is worth it
    (:func:`refresh_if_due`: ``threshold`` files, or ``refresh_share`` of the current bytes), then the tables with
    at least ``threshold`` small files compacted."""
    return _maintain(wh, threshold, refresh_share, run_id, list(table_schemas()))


def compact_during_run(
    wh: Warehouse,
    *,
    threshold: int = COMPACT_AT,
    refresh_share: float = REFRESH_SHARE,
    run_id: str | None = None,
    tables: Iterable[str] | None = None,
) -> list[Compacted]:
    """What a run does after a batch commit, so that no table holds thousands of small files mid-run (every reader
    during the run, ``evalfarm status`` included, opens each one): the tables (of ``tables``, default every one)
    with at least ``threshold`` small files compacted, and the metrics table's current rows refreshed once its
    pending files hold more than ``refresh_share`` of the current files' bytes (a refresh rewrites every current
    row: until then the readers' window runs over the pending rows' keys only, and the pending files are merged
    like any table's)."""
    names = list(tables) if tables is not None else list(table_schemas())
    return _maintain(wh, threshold, refresh_share, run_id, names, files_alone=False)


def refresh_if_due(
    wh: Warehouse, *, threshold: int, share: float, run_id: str | None = None, files_alone: bool = True
) -> Compacted | None:
    """Refresh the metrics table's current rows (:func:`~evalfarm.warehouse.current.refresh_current`) when its
    pending files hold more than ``share`` of the current files' bytes, or (``files_alone``) number ``threshold``
    or more."""
    if not wh.tables.exists(current.TABLE):
        return None
    files = current.split_files(wh.tables.snapshot(current.TABLE), wh.tables.folder(current.TABLE))
    pending, now = sum(f.size for f in files.pending), sum(f.size for f in files.current)
    due = files.pending and (pending > share * now or (files_alone and len(files.pending) >= threshold))
    got = current.refresh_current(wh, run_id=run_id) if due else None
    if got is None:
        return None
    total = len(files.current) + len(files.superseded) + len(files.pending)
    return Compacted(current.TABLE, total, len(wh.tables.snapshot(current.TABLE).files), got.files_read)


def _maintain(
    wh: Warehouse,
    threshold: int,
    share: float,
    run_id: str | None,
    names: list[str],
    *,
    files_alone: bool = True,
) -> list[Compacted]:
    names = [t for t in names if wh.tables.exists(t)]
    refreshed = (
        refresh_if_due(wh, threshold=threshold, share=share, run_id=run_id, files_alone=files_alone)
        if current.TABLE in names
        else None
    )
    due = [t for t in names if len(small_files(wh, t)) >= threshold]
    return ([refreshed] if refreshed is not None else []) + (compact(wh, tables=due, run_id=run_id) if due else [])


class BackgroundCompaction:
    """:func:`compact_during_run` after a run's batch commits, in a thread of its own (a compaction or a refresh of
    the current rows must not stall the driver's loop): :meth:`poke` starts one unless one is running (a batch that
    lands meanwhile is seen by the next), :meth:`close` waits for it. Reads and writes through a warehouse object
    of its own. Its errors are logged, never raised: compaction is a speed-up, a run never fails over it."""

    def __init__(self, root: str | os.PathLike[str], run_id: str | None = None, **options: Any) -> None:
        self.root, self.run_id, self.options = root, run_id, options
        self._thread: threading.Thread | None = None
        self.done: list[Compacted] = []

    def poke(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._work, name="evalfarm-compaction", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        try:
            got = compact_during_run(Warehouse(self.root), run_id=self.run_id, **self.options)
        except Exception as exc:  # a speed-up: the end of the run compacts again
            log.warning("compaction during the run failed (%s: %s); the run goes on", type(exc).__name__, exc)
            return
        self.done += got
        if got:
            log.info("compacted %s", ", ".join(f"{c.table} ({c.files_before} -> {c.files_after} files)" for c in got))

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None


# -- retention ----------------------------------------------------------------------------------------------------
def parse_duration(text: str) -> timedelta:
    """``90d``, ``12h``, ``30m``, ``2w`` (or a plain number of days) as a duration."""
    raw = text.strip().lower()
    units = {"w": "weeks", "d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
    try:
        if raw and raw[-1] in units:
            return timedelta(**{units[raw[-1]]: float(raw[:-1])})
        return timedelta(days=float(raw))
    except ValueError:
        raise ValueError(f"{text!r} is not a duration: use e.g. 90d, 12h, 2w") from None


@dataclass
class Vacuumed:
    """What :func:`vacuum` removed (or would remove, ``dry_run``) from one table (``files``: paths relative to the
    table's folder); ``refused``: why the table was left as it was (a link, FIFO or device in it, a damaged log)."""

    table: str
    files: list[str] = field(default_factory=list)
    versions_before: int | None = None
    oldest_version_after: int | None = None
    pinned: list[int] = field(default_factory=list)
    refused: str | None = None


def vacuum(wh: Warehouse, *, keep: timedelta, dry_run: bool = False, now: float | None = None) -> list[Vacuumed]:
    """Expire snapshots older than ``keep``: delete the data files no version within ``keep`` (or pinned) needs
    and files no commit names that are older than ``keep``, then the log entries before the newest checkpoint older
    than ``keep``. ``dry_run``: say what would go, change nothing. ``now``: the time to count ``keep`` back from
    (epoch seconds; default: now).

    The deletions are computed here, never by delta-rs (whose full vacuum lists a table following links and deletes
    what it finds under them): the files to keep come from the log (every path validated, :meth:`DeltaTables.
    added_between`), the candidates from a walk of the table that follows no link (:func:`walk_inside`; on an object
    store, the keys under the table's own prefix), and each deletion proves its file a regular file inside the
    table (:func:`remove_inside`). A table holding a link, a FIFO or a device, or whose log is damaged, is refused
    (``Vacuumed.refused`` says why) and left exactly as it was; the other tables are vacuumed."""
    if keep < MIN_KEEP:
        raise ValueError(
            f"--keep {keep} is shorter than {MIN_KEEP}: a run's staged files and a query's snapshot must outlive "
            "a vacuum that runs beside them"
        )
    pins = live_pins(wh)
    hours = max(1, math.ceil(keep.total_seconds() / 3600))
    cutoff_ms = int(((time.time() if now is None else now) - keep.total_seconds()) * 1000)
    out = []
    for table in table_schemas():
        if not wh.tables.exists(table):
            continue
        result = Vacuumed(table, pinned=sorted(pins.get(table, set())))
        out.append(result)
        try:
            result.versions_before, doomed = _doomed(wh, table, cutoff_ms, result.pinned)
        except (TableError, PermissionError) as exc:  # DamagedTable, a link or FIFO in the table: left as it is
            result.refused = str(exc)
            continue
        result.files = [wh.relative(p).split("/", 2)[2] for p in doomed]
        if dry_run:
            continue
        for path in doomed:
            _delete(wh, path)
        try:
            result.oldest_version_after = _expire_log(wh, table, hours)
        except Exception as exc:
            raise WarehouseWriteError(wh.tables.folder(table), OSError(5, f"vacuum of {table}: {exc}")) from exc
    return out


def _doomed(wh: Warehouse, table: str, cutoff_ms: int, pinned: list[int]) -> tuple[int, list[str]]:
    """(the table's version, the files a vacuum deletes): every data file under the table that no version since
    ``cutoff_ms`` (the one current then, and each after it) nor a ``pinned`` one names, last modified before the
    cutoff. ``PermissionError`` naming the first link, FIFO or device in the table; ``DamagedTable`` for a bad log."""
    newest = wh.tables.snapshot(table)
    version = int(newest.version or 0)
    history = sorted((int(h["version"]), int(h.get("timestamp") or 0)) for h in wh.tables.history(table))
    at_cutoff = max((v for v, ms in history if ms <= cutoff_ms), default=history[0][0] if history else version)
    keep = {f.path for f in wh.tables.snapshot(table, at_cutoff).files} if at_cutoff < version else set()
    keep |= {f.path for f in newest.files} | wh.tables.added_between(table, at_cutoff + 1, version)
    wh.tables.added_between(table, wh.tables.last_checkpoint(table) + 1, at_cutoff)  # each path checked all the same
    for v in pinned:
        try:
            keep |= {f.path for f in wh.tables.snapshot(table, v).files}
        except TableError as exc:
            if isinstance(exc, DamagedTable):
                raise
            continue  # a pin of a version already gone: nothing of it to keep
    doomed = []
    for path, kind, mtime_ms in _table_files(wh, table):
        if kind != "file":
            raise PermissionError(
                f"{wh.relative(path)} is a {kind}: vacuum follows no link and refuses a table holding links, "
                "FIFOs or devices (remove it, then vacuum again)"
            )
        hidden = any(part[:1] in "._" for part in wh.relative(path).split("/")[3:])
        if path not in keep and mtime_ms < cutoff_ms and not hidden:
            doomed.append(path)
    return version, sorted(doomed)


def _table_files(wh: Warehouse, table: str) -> list[tuple[str, str, int]]:
    """(path, kind, mtime in ms) of everything under the table's folder but its log: on a local disk by a walk that
    follows no link (:func:`walk_inside`: links, FIFOs and devices listed as what they are); on an object store
    the keys under the table's own prefix only."""
    folder = wh.tables.folder(table)
    if wh.local:
        entries = walk_inside(wh.base, wh.relative(folder), skip=lambda name: name == LOG_DIR)
        return [(f"{folder}/{e.path}", e.kind, e.mtime_ns // 1_000_000) for e in entries]
    out = []
    for info in wh.fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True)):
        rel = info.path[len(folder) + 1 :] if info.path.startswith(folder + "/") else None
        if info.type != pafs.FileType.File or rel is None or rel.split("/")[0] == LOG_DIR:
            continue
        relative_parts(rel)  # a key with a "." or ".." name: an object store would resolve it elsewhere
        out.append((info.path, "file", int(info.mtime_ns or 0) // 1_000_000))
    return out


def _delete(wh: Warehouse, path: str) -> None:
    """Delete one data file of a table: on a local disk only a regular file reached without a link
    (:func:`remove_inside`); on an object store only a key under the warehouse's prefix. Gone already: fine."""
    rel = wh.relative(path)
    relative_parts(rel)
    try:
        if wh.local:
            remove_inside(wh.base, rel)
        else:
            wh.fs.delete_file(path)
    except FileNotFoundError:
        pass
    except PermissionError as exc:  # replaced by a link since the walk: left alone
        log.warning("vacuum left %s alone: %s", rel, exc)


def _expire_log(wh: Warehouse, table: str, hours: int) -> int | None:
    """Drop the log entries older than ``hours`` (before the newest checkpoint older than that, so every version
    left can still be read); returns the oldest version still readable."""
    dt = wh.tables.open(table)
    dt.alter.set_table_properties({"delta.logRetentionDuration": f"interval {hours} hours"}, raise_if_not_exists=False)
    dt = wh.tables.open(table)
    dt.create_checkpoint()
    dt.cleanup_metadata()
    history = wh.tables.history(table)
    return min((int(h["version"]) for h in history), default=None)


__all__ = [
    "COMPACT_AT",
    "END_SHARE",
    "MIN_KEEP",
    "PIN_SECONDS",
    "REFRESH_SHARE",
    "READERS_DIR",
    "TARGET_BYTES",
    "BackgroundCompaction",
    "Compacted",
    "Vacuumed",
    "compact",
    "compact_during_run",
    "compact_warehouse",
    "compact_if_needed",
    "refresh_if_due",
    "drop_units",
    "live_pins",
    "parse_duration",
    "pinned",
    "rewrite",
    "small_files",
    "vacuum",
]
