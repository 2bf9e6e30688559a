"""Delta Lake under every warehouse table: staged Parquet files, batched commits, snapshots and their history.

Each warehouse table (``metrics``, ``runs``, a task kind's ``ranks``, …) is a Delta table at
``<root>/tables/<table>/``: Parquet data files plus a transaction log (``_delta_log/``) that says which files make up
each version. Why Delta Lake and not Apache Iceberg, measured: docs/design.md ("The warehouse: Delta Lake").

evalfarm writes the data files itself (:meth:`DeltaTables.stage`: serialised in memory, hashed, published atomically
under ``data/``) and commits them with delta-rs (:meth:`DeltaTables.commit`, ``create_write_transaction``): a file is
part of the table only once a commit names it, so a staged file that no commit names — a worker killed after
writing it, a run killed before its batch committed — is never read, and ``evalfarm warehouse vacuum`` deletes it.
Why not let delta-rs write the files: the sha256 of every file is known as it is written (``evalfarm verify``
checks it), and staging is the one write a worker makes: the driver commits many workers' files in one transaction.

Concurrency is Delta's own optimistic protocol: a commit is the creation of ``_delta_log/<version>.json``, which
succeeds for exactly one writer (an exclusive create on a local or NFS filesystem; a conditional PUT,
``If-None-Match: *``, on S3 and compatible stores). delta-rs retries a commit that lost the race against the new
version when the two do not conflict: concurrent appends never do, so many runs append to one table and no row
is lost or written twice.

Readers never list folders: a snapshot is the file list of one table version (:meth:`DeltaTables.snapshot`), read
from the log (its checkpoint and the commits after it). The tables use no deletion vectors and no column mapping
(the protocol stays at reader version 1): the Parquet files named by a version *are* that version, which is what
lets DuckDB read them directly, and any Delta reader (delta-rs, polars, Spark, DuckDB's ``delta`` extension) read
the same rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from evalfarm import atomic

LOG_DIR = "_delta_log"
DATA_DIR = "data"
COMMIT_RETRIES = 50
"""How often delta-rs retries a commit that lost the race for its version to another writer's (appends never
conflict, so each retry only rebases onto the newer version)."""
TABLE_CONFIGURATION = {
    # A checkpoint every 100 commits: a reader replays at most 99 small JSON commits after the last checkpoint.
    "delta.checkpointInterval": "100",
    # Log entries and removed files are kept until `evalfarm warehouse vacuum` expires them (the user's retention);
    # delta-rs' automatic log cleanup after a checkpoint would otherwise drop versions older than 30 days.
    "delta.enableExpiredLogCleanup": "false",
}
STATS_COLUMNS = ("model", "task", "run_id", "fingerprint")
"""Columns whose min and max go into each file's statistics in the log: what lets a Delta reader (delta-rs, polars)
skip files by model or run without opening them."""


class TableError(RuntimeError):
    """A Delta table that cannot be read or committed to: one line naming the table and why."""


class RewriteConflict(TableError):
    """A rewrite (compaction, the current rows' refresh, the quarantine's removal of rows) whose files another writer
    removed first: committing it would add their rows a second time. Nothing was committed; the rewrite is redone from
    the newest snapshot, or left to the next run."""


REMOVE_ATTEMPTS = 20
"""How often a commit that removes files is tried again when another writer's commit took its version: each try
reopens the newest version and checks that every file it removes is still there."""


@dataclass(frozen=True)
class StagedFile:
    """A data file written under a table but not yet committed: where (relative to the warehouse root), its bytes'
    sha256 and size, its rows, its Delta statistics, and the unit it belongs to (None for rows of many units)."""

    table: str
    path: str
    size: int
    sha256: str
    rows: int
    stats: str
    written_ms: int
    model: str | None = None
    task: str | None = None
    fingerprint: str | None = None
    run_id: str | None = None

    @property
    def in_table(self) -> str:
        """The path as the table's log names it: relative to the table's folder."""
        return self.path.split("/", 2)[2]


@dataclass(frozen=True)
class FileEntry:
    """A data file of a snapshot: its path inside the warehouse filesystem, size in bytes, modification time (ms)."""

    path: str
    size: int
    modified_ms: int


@dataclass(frozen=True)
class Snapshot:
    """One version of one table: ``version`` None when the table does not exist (yet, or at that time)."""

    table: str
    version: int | None
    files: tuple[FileEntry, ...] = field(default_factory=tuple)


def file_stats(table: pa.Table) -> str:
    """Delta's per-file statistics (``numRecords``, and min / max / null count of :data:`STATS_COLUMNS`) as JSON."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in STATS_COLUMNS:
        if name not in table.column_names or not pa.types.is_string(table.schema.field(name).type):
            continue
        col = table.column(name)
        nulls[name] = int(col.null_count)
        if col.null_count < len(col):
            mm = pc.min_max(col)
            mins[name], maxs[name] = mm["min"].as_py(), mm["max"].as_py()
    stats: dict[str, Any] = {"numRecords": table.num_rows}
    if nulls:
        stats.update(minValues=mins, maxValues=maxs, nullCount=nulls)
    return json.dumps(stats, separators=(",", ":"))


def storage_options(uri: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """delta-rs' options for a warehouse URI: an S3-compatible endpoint from ``AWS_ENDPOINT_URL(_S3)`` (plain HTTP
    allowed when the endpoint says so), as evalfarm's pyarrow filesystem uses it. Credentials come from the usual
    environment variables, which delta-rs reads itself. Nothing for a local path."""
    env = os.environ if environ is None else environ
    if not uri.startswith("s3://"):
        return {}
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(uri).query)
    endpoint = None
    if "endpoint_override" in query:
        scheme = query.get("scheme", ["https"])[0]
        endpoint = f"{scheme}://{query['endpoint_override'][0]}"
    else:
        endpoint = next((env[v] for v in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") if env.get(v)), None)
    options: dict[str, str] = {}
    if endpoint:
        options["aws_endpoint"] = endpoint
        if endpoint.startswith("http://"):
            options["aws_allow_http"] = "true"
    return options


def _delta() -> Any:
    import deltalake

    return deltalake


class DeltaTables:
    """The Delta tables of one warehouse: ``base`` is the root inside ``fs`` (a local path, or ``bucket/prefix``),
    ``scheme`` the URI scheme of a remote root (``s3``), ``options`` delta-rs' storage options."""

    def __init__(self, fs: pafs.FileSystem, base: str, *, scheme: str | None, options: dict[str, str]) -> None:
        self.fs, self.base, self.scheme, self.options = fs, base, scheme, options
        self.local = scheme is None
        self._schemas: dict[str, pa.Schema] = {}  # tables known to exist, with their Delta schema as Arrow

    # -- names ------------------------------------------------------------------------------------------------
    def folder(self, table: str) -> str:
        """The table's folder inside the filesystem."""
        return f"{self.base}/tables/{table}"

    def uri(self, table: str) -> str:
        """The table's location as delta-rs opens it."""
        return self.folder(table) if self.local else f"{self.scheme}://{self.folder(table)}"

    def exists(self, table: str) -> bool:
        """Whether the table has a log (its first commit is its creation)."""
        log = f"{self.folder(table)}/{LOG_DIR}"
        if self.local:
            return os.path.isdir(log) and any(n.endswith(".json") for n in os.listdir(log))
        sel = pafs.FileSelector(log, recursive=False, allow_not_found=True)
        return any(i.path.endswith(".json") for i in self.fs.get_file_info(sel))

    # -- tables -----------------------------------------------------------------------------------------------
    def open(self, table: str, version: int | None = None) -> Any:
        """The table (delta-rs ``DeltaTable``) at ``version`` (None: the latest); ``TableError`` when it cannot be
        read (no such table, a damaged log, a version vacuumed away)."""
        self._check_log(table)
        try:
            return _delta().DeltaTable(self.uri(table), version=version, storage_options=self.options or None)
        except Exception as exc:
            what = f"version {version} of " if version is not None else ""
            raise TableError(f"cannot read {what}table {table!r} at {self.uri(table)}: {_first_line(exc)}") from exc

    def _check_log(self, table: str) -> None:
        """Refuse a log with anything but regular files (a symlink out of the warehouse, a FIFO that would hang the
        reader): a local warehouse is another user's writable folder as much as ours."""
        if not self.local:
            return
        log = f"{self.folder(table)}/{LOG_DIR}"
        try:
            entries = list(os.scandir(log))
        except FileNotFoundError:
            return
        for e in entries:
            mode = e.stat(follow_symlinks=False).st_mode
            if not (stat.S_ISREG(mode) or (stat.S_ISDIR(mode) and e.name.startswith("_"))):
                raise TableError(f"table {table!r}: {e.path} is not a regular file; the log is refused")

    def ensure(self, table: str, schema: pa.Schema) -> None:
        """Create the table with ``schema`` when it does not exist, else add the columns ``schema`` has and the
        table lacks (a newer evalfarm added them). Two writers creating one table at once: the second's create is
        a no-op (``mode="ignore"``)."""
        if table in self._schemas and set(schema.names) <= set(self._schemas[table].names):
            return  # checked by this process already (a table is never dropped by evalfarm)
        dl = _delta()
        if not self.exists(table):
            from deltalake.transaction import create_table_with_add_actions

            if self.local:
                Path(self.folder(table)).mkdir(parents=True, exist_ok=True)
            try:
                create_table_with_add_actions(
                    self.uri(table), dl.Schema.from_arrow(schema), [], mode="ignore",
                    configuration=TABLE_CONFIGURATION, storage_options=self.options or None,
                )  # fmt: skip
            except Exception as exc:  # two writers created it at once: the other's commit won, and that is fine
                if not self.exists(table):
                    raise TableError(
                        f"cannot create table {table!r} at {self.uri(table)}: {_first_line(exc)}"
                    ) from exc
        dt = self.open(table)
        have = _arrow_schema(dt)
        missing = [f for f in schema if f.name not in have.names]
        if missing:
            try:
                dt.alter.add_columns([dl.Field.from_arrow(f) for f in missing])
            except Exception as exc:  # another writer added them first: fine when they are there now
                dt = self.open(table)
                have = _arrow_schema(dt)
                if any(f.name not in have.names for f in missing):
                    raise TableError(f"cannot add columns to table {table!r}: {_first_line(exc)}") from exc
            have = _arrow_schema(self.open(table))
        self._schemas[table] = have

    def schema(self, table: str) -> pa.Schema:
        """The table's schema as its log states it (Arrow)."""
        if table not in self._schemas:
            self._schemas[table] = _arrow_schema(self.open(table))
        return self._schemas[table]

    # -- writes -----------------------------------------------------------------------------------------------
    def stage(
        self,
        table: str,
        rows: pa.Table,
        *,
        run_id: str | None = None,
        folder: str | None = None,
        unit: tuple[str, str, str] | None = None,
        row_group_size: int | None = None,
    ) -> StagedFile:
        """Write ``rows`` as one Parquet file under the table's ``data/<folder or run_id>/`` and return what a
        commit needs. Published atomically (a temp name and a rename on a local disk; one PUT on an object store):
        the file is whole or absent. ``unit``: (model, task, fingerprint) when all rows are one unit's."""
        sink = pa.BufferOutputStream()
        pq.write_table(rows, sink, row_group_size=row_group_size)
        body = sink.getvalue().to_pybytes()
        sub = folder or run_id or "unbatched"
        rel = f"tables/{table}/{DATA_DIR}/{sub}/{uuid.uuid4().hex}.parquet"
        path = f"{self.base}/{rel}"
        if self.local:
            atomic.write_bytes(Path(path), body)
        else:
            with self.fs.open_output_stream(path) as out:
                out.write(body)
        model, task, fingerprint = unit if unit is not None else (None, None, None)
        return StagedFile(
            table, rel, len(body), hashlib.sha256(body).hexdigest(), rows.num_rows, file_stats(rows),
            int(time.time() * 1000), model, task, fingerprint, run_id,
        )  # fmt: skip

    def commit(
        self,
        table: str,
        files: Sequence[StagedFile],
        *,
        removes: Sequence[FileEntry] = (),
        metadata: Mapping[str, Any] | None = None,
        data_change: bool = True,
    ) -> None:
        """Commit ``files`` (and the removal of ``removes``, entries of a snapshot of this table) as one transaction.
        ``data_change=False`` marks a rewrite of the same rows (compaction), which concurrent appends never conflict
        with. ``metadata`` goes into the commit's info (run id, batch, …).

        A commit that removes files is exclusive (:meth:`_commit_removing`): delta-rs rebases an append-mode
        transaction onto newer versions without checking its removals, so two compactions of the same files both
        landed and every row of them was there twice (measured with delta-rs 1.6.6)."""
        from deltalake import CommitProperties
        from deltalake.transaction import AddAction, RemoveAction

        now_ms = int(time.time() * 1000)
        actions: list[Any] = [
            AddAction(_quote(f.in_table), f.size, {}, f.written_ms, data_change, f.stats) for f in files
        ]
        prefix = self.folder(table) + "/"
        actions += [
            RemoveAction(_quote(e.path.removeprefix(prefix)), data_change, now_ms, size=e.size) for e in removes
        ]
        if not actions:
            return
        info = {k: v for k, v in (metadata or {}).items() if v is not None}
        if removes:
            self._commit_removing(table, actions, {e.path for e in removes}, info)
            return
        props = CommitProperties(custom_metadata=info, max_commit_retries=COMMIT_RETRIES)
        last: Exception | None = None
        for attempt in range(3):  # a transient store error; the commit's id tells whether it landed meanwhile
            try:
                dt = self.open(table)
                dt.create_write_transaction(actions, "append", dt.schema(), commit_properties=props)
                return
            except Exception as exc:
                last = exc
                if self._landed(table, (metadata or {}).get("evalfarm.commit")):
                    return
                time.sleep(0.2 * 2**attempt)
        raise TableError(f"cannot commit to table {table!r}: {_first_line(last)}") from last

    def _commit_removing(self, table: str, actions: list[Any], removed: set[str], info: dict[str, Any]) -> None:
        """Commit ``actions``, which remove the files ``removed`` (paths inside the filesystem), on the newest version
        only if every one of them is still part of it, and without delta-rs' rebase onto a version committed
        meanwhile (``max_commit_retries=0``): a lost race reopens the newest version and checks again.
        :class:`RewriteConflict` when another writer removed one of the files first."""
        from deltalake import CommitProperties

        props = CommitProperties(custom_metadata=info, max_commit_retries=0)
        last: Exception | None = None
        for attempt in range(REMOVE_ATTEMPTS):
            if info.get("evalfarm.commit") and self._landed(table, info["evalfarm.commit"]):
                return  # a try whose answer was lost had landed
            dt = self.open(table)
            have = {f.path for f in self._files(table, dt)}
            gone = removed - have
            if gone:
                raise RewriteConflict(
                    f"table {table!r}: {len(gone)} of the files this rewrite replaces were removed by another writer "
                    f"meanwhile (e.g. {sorted(gone)[0]}); nothing was committed"
                )
            try:
                dt.create_write_transaction(actions, "append", dt.schema(), commit_properties=props)
                return
            except Exception as exc:  # the version was taken (CommitFailedError), or a store's error: try again
                last = exc
                time.sleep(min(1.0, 0.02 * 2**attempt))
        raise TableError(f"cannot commit to table {table!r}: {_first_line(last)}") from last

    def _landed(self, table: str, commit_id: Any) -> bool:
        """Whether the commit with ``commit_id`` in its info is among the newest (a commit that failed on the way
        back from the store may have been written: committing it again would add its rows twice)."""
        if not commit_id:
            return False
        try:
            return any(e.get("evalfarm.commit") == commit_id for e in self.open(table).history(50))
        except Exception:
            return False

    # -- reads ------------------------------------------------------------------------------------------------
    def last_checkpoint(self, table: str) -> int:
        """The version of the table's newest checkpoint (``_delta_log/_last_checkpoint``), -1 when it has none."""
        path = f"{self.folder(table)}/{LOG_DIR}/_last_checkpoint"
        try:
            if self.local:
                body = Path(path).read_bytes()
            else:
                with self.fs.open_input_stream(path) as fh:
                    body = bytes(fh.read())
            return int(json.loads(body)["version"])
        except (OSError, ValueError, KeyError, TypeError):
            return -1

    def version(self, table: str) -> int:
        return int(self.open(table).version())

    def snapshot(self, table: str, version: int | None = None, *, as_of: datetime | None = None) -> Snapshot:
        """The files of ``table`` at ``version`` (None: the latest), or as it was at time ``as_of``: an empty
        snapshot (version None) when the table did not exist then."""
        try:
            dt = self.open(table, version)
        except TableError as exc:
            if type(exc.__cause__).__name__ != "TableNotFoundError":
                raise
            self._schemas.pop(table, None)
            return Snapshot(table, None)
        if as_of is not None:
            created = self._created_ms(dt)
            if created is not None and as_of.timestamp() * 1000 < created:
                return Snapshot(table, None)
            try:
                dt.load_as_version(as_of)
            except Exception as exc:
                raise TableError(f"table {table!r} as of {as_of.isoformat()}: {_first_line(exc)}") from exc
        return Snapshot(table, int(dt.version()), self._files(table, dt))

    def _files(self, table: str, dt: Any) -> tuple[FileEntry, ...]:
        """The data files of the loaded version of ``dt`` (a ``DeltaTable`` of ``table``), sorted by path."""
        # through the Arrow stream interface, not pa.table(): that first asks whether it is a pandas DataFrame,
        # which imports pandas (0.9-1.3 s of every reading process's first snapshot, measured)
        adds = pa.RecordBatchReader.from_stream(dt.get_add_actions(flatten=True)).read_all()
        times = adds.column("modification_time")
        if pa.types.is_timestamp(times.type):  # as epoch ms: no datetime objects (the first costs a tz database load)
            times = pc.cast(pc.cast(times, pa.timestamp("ms")), pa.int64())
        folder = self.folder(table)
        files = tuple(
            FileEntry(_absolute(folder, path), int(size), int(ms or 0))
            for path, size, ms in zip(adds.column("path").to_pylist(), adds.column("size_bytes").to_pylist(),
                                      times.to_pylist(), strict=True)
        )  # fmt: skip
        return tuple(sorted(files, key=lambda f: f.path))

    @staticmethod
    def _created_ms(dt: Any) -> int | None:
        try:
            return int(dt.metadata().created_time)
        except Exception:
            return None

    def history(self, table: str, limit: int | None = None) -> list[dict[str, Any]]:
        """The table's commits, newest first (delta-rs' commit infos: version, timestamp in ms, operation, and the
        ``evalfarm.*`` keys evalfarm put there)."""
        if not self.exists(table):
            return []
        return list(self.open(table).history(limit))


def _arrow_schema(dt: Any) -> pa.Schema:
    return pa.schema(dt.schema().to_arrow())


def _quote(path: str) -> str:
    """A path as the Delta log spells it (URI-encoded; evalfarm's own names need no encoding, migrated ones may)."""
    return urllib.parse.quote(path, safe="/")


def _absolute(folder: str, path: str) -> str:
    """An add action's path (relative to the table, URI-encoded; or an absolute URI) as a filesystem path."""
    if "://" in path:
        return urllib.parse.unquote(path.split("://", 1)[1])
    return f"{folder}/{urllib.parse.unquote(path)}"


def _first_line(exc: BaseException | None) -> str:
    text = str(exc or "").strip()
    return text.splitlines()[0] if text else type(exc).__name__


def group_by_table(files: Iterable[StagedFile]) -> dict[str, list[StagedFile]]:
    out: dict[str, list[StagedFile]] = {}
    for f in files:
        out.setdefault(f.table, []).append(f)
    return out


__all__ = [
    "COMMIT_RETRIES",
    "DATA_DIR",
    "LOG_DIR",
    "REMOVE_ATTEMPTS",
    "DeltaTables",
    "FileEntry",
    "RewriteConflict",
    "Snapshot",
    "StagedFile",
    "TableError",
    "file_stats",
    "group_by_table",
    "storage_options",
]
