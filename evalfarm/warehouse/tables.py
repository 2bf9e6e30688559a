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
import re
import stat
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from evalfarm.warehouse.base import open_folder_inside, safe_open, walk_inside, write_inside

if TYPE_CHECKING:  # deltalake itself is imported where a table is first opened (not by every reader of this module)
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

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


MAX_LOG_ENTRY_BYTES = 64 * 2**20
"""The largest commit (``_delta_log/<version>.json``) a reader parses; a larger one makes its table damaged, and is
never read. A reader holds about four times an entry's size while parsing it (a 300 MB entry cost 1.1 GB); the
largest evalfarm writes, a compaction of 250,000 small files, is about 60 MB."""
MAX_CHECKPOINT_BYTES = 512 * 2**20
"""The largest checkpoint file (``_delta_log/<version>.checkpoint*.parquet``) a reader opens: a few hundred bytes of
Parquet per data file, so a table of millions of files (evalfarm compacts them: thousands at most)."""
MAX_SMALL_LOG_FILE_BYTES = 2**20
"""The largest other file of a log (``_last_checkpoint``: a line of JSON)."""
MAX_PATH_CHARS = 4096
"""The longest data file path a log entry may name (evalfarm's are under 100 characters)."""


class TableError(RuntimeError):
    """A Delta table that cannot be read or committed to: one line naming the table and why."""


class RewriteConflict(TableError):
    """A rewrite (compaction, the current rows' refresh, the quarantine's removal of rows) whose files another writer
    removed first: committing it would add their rows a second time. Nothing was committed; the rewrite is redone from
    the newest snapshot, or left to the next run."""


REMOVE_ATTEMPTS = 20
"""How often a commit that removes files is tried again when another writer's commit took its version: each try
reopens the newest version and checks that every file it removes is still there."""


class DamagedTable(TableError):
    """A table whose log cannot be trusted, with the entry that says so: a path that is not a data file inside the
    table (absolute, a URL, a ``..`` after percent-decoding, a hidden name), a link or anything but a folder on the
    way to its files or its log, a log file past its size limit or not a regular file, a feature evalfarm's tables
    never use (deletion vectors, a reader protocol above 1). Nothing the table names is then opened, moved or
    deleted: readers leave it out of the views (with a warning naming it), writers and maintenance refuse it."""

    def __init__(self, table: str, entry: str, why: str) -> None:
        self.table, self.entry, self.why = table, entry, why
        super().__init__(f"table {table!r} is damaged: {entry}: {why}")

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries (Ray workers) intact
        return (DamagedTable, (self.table, self.entry, self.why))


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_COMMIT = re.compile(r"\d{20}\.json")
_LOG_DAMAGE_MARKS = (
    "Kernel error",
    "Json error",
    "Parquet error",
    "Arrow error",
    "Schema error",
    "checkpoint",
    "Unsupported",
)
"""What delta-rs says of a log it cannot parse (as opposed to one it cannot reach: a store's error, a version gone)."""


def log_path_problem(path: str) -> str | None:
    """Why ``path``, a data file's path as a Delta log entry spells it (relative to its table, URI-encoded), cannot
    name a file inside the table, else None: it must be relative, with no scheme (``file:``, ``s3:``), no empty,
    ``.`` or ``..`` segment and no hidden name (``.`` or ``_`` first: the log's own folder, temp files) after
    percent-decoding, and no NUL or backslash. The one check of every path a log names (add, remove, checkpoint):
    :func:`data_file_path` applies it."""
    if not isinstance(path, str) or not path:
        return "an empty path"
    if len(path) > MAX_PATH_CHARS:
        return f"a path of {len(path):,} characters (at most {MAX_PATH_CHARS:,})"
    try:
        decoded = urllib.parse.unquote(path, errors="strict")
    except UnicodeDecodeError:
        return "a path whose percent-encoding is not UTF-8"
    for text, how in ((path, ""), (decoded, " after percent-decoding")):
        if _SCHEME.match(text):
            return f"a URL (a path with a scheme{how}), not a path inside the table"
        if text.startswith("/"):
            return f"an absolute path{how}, not a path inside the table"
        if "\\" in text or any(ord(c) < 32 for c in text):
            return f"a path with a backslash or a control character{how}"
        for part in text.split("/"):
            if part in ("", ".", ".."):
                return f"a path with a {part or 'empty'!r} segment{how}"
            if part[0] in "._":
                return f"a path through the hidden name {part!r}{how} (the log's folder, a temp file)"
    return None


def _action_problem(action: object) -> str | None:
    """Why one line of a commit is not a Delta action evalfarm can replay, else None: one object with one key, an
    add or a remove with a path, an add with a size that is a whole number >= 0."""
    if not isinstance(action, dict) or len(action) != 1:
        return "not one Delta action (an object with one key)"
    kind, body = next(iter(action.items()))
    if kind in ("add", "remove") and not (isinstance(body, dict) and isinstance(body.get("path"), str)):
        return f"a {kind} action without a path"
    size = body.get("size") if kind == "add" else 0
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return f"an add action of size {size!r}"
    return None


def data_file_path(table: str, folder: str, path: str, *, what: str = "add") -> str:
    """The data file a log entry's ``path`` names, inside the table's ``folder``, once :func:`log_path_problem`
    finds nothing wrong with it; :class:`DamagedTable` naming the entry otherwise. ``what``: the action (``add``,
    ``remove``) for the message."""
    why = log_path_problem(path)
    if why is not None:
        raise DamagedTable(table, f"{what} {path[:200]!r}", why)
    return f"{folder}/{urllib.parse.unquote(path)}"


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
    def open(self, table: str, version: int | None = None) -> DeltaTable:
        """The table (delta-rs ``DeltaTable``) at ``version`` (None: the latest); ``TableError`` when it cannot be
        read (no such table, a damaged log, a version vacuumed away)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        self._check_log(table)
        try:
            return DeltaTable(self.uri(table), version=version, storage_options=self.options or None)
        except Exception as exc:
            what = f"version {version} of " if version is not None else ""
            text = _first_line(exc)
            if version is None and not isinstance(exc, TableNotFoundError):  # (a version gone is no damage)
                broken = self._broken_entry(table)
                if broken is not None:
                    raise DamagedTable(table, *broken) from exc
                if any(mark in text for mark in _LOG_DAMAGE_MARKS):
                    raise DamagedTable(table, LOG_DIR, f"delta-rs cannot parse it: {text}") from exc
            raise TableError(f"cannot read {what}table {table!r} at {self.uri(table)}: {text}") from exc

    def _broken_entry(self, table: str) -> tuple[str, str] | None:
        """(entry, why) of the first commit of ``table``'s log that is not JSON lines of actions, each an object
        (a truncated or garbled entry), or None: what names the entry when delta-rs' own error does not. Read only
        once delta-rs failed; each entry is within :data:`MAX_LOG_ENTRY_BYTES` (:meth:`_check_log`)."""
        log = f"{self.folder(table)}/{LOG_DIR}"
        if self.local:
            try:
                names = sorted(n for n in os.listdir(log) if _COMMIT.fullmatch(n))
            except OSError:
                return None
        else:
            sel = pafs.FileSelector(log, recursive=False, allow_not_found=True)
            names = sorted(i.base_name for i in self.fs.get_file_info(sel) if _COMMIT.fullmatch(i.base_name))
        for name in names:
            try:
                self._commit(table, f"{LOG_DIR}/{name}")
            except DamagedTable as exc:
                return exc.entry, exc.why
        return None

    def _check_log(self, table: str) -> None:
        """Refuse a log that a reader must not parse (:class:`DamagedTable`, naming the file): anything in it but
        regular files (a symlink out of the warehouse, a FIFO that would hang the reader), the table's folder or its
        log reached through a link, or a file past its size limit (:data:`MAX_LOG_ENTRY_BYTES`,
        :data:`MAX_CHECKPOINT_BYTES`) — checked before delta-rs reads a byte of it. A local warehouse is another
        user's writable folder as much as ours; an object store's keys are checked for their sizes."""
        log = f"{self.folder(table)}/{LOG_DIR}"
        if not self.local:
            sel = pafs.FileSelector(log, recursive=True, allow_not_found=True)
            for info in self.fs.get_file_info(sel):
                if info.type == pafs.FileType.File:
                    self._check_log_size(table, info.path[len(log) + 1 :], int(info.size or 0))
            return
        for rel in ("tables", f"tables/{table}", f"tables/{table}/{LOG_DIR}"):
            try:
                mode = os.lstat(f"{self.base}/{rel}").st_mode
            except FileNotFoundError:
                return
            if not stat.S_ISDIR(mode):
                raise DamagedTable(table, rel, "a link or not a folder: the log is refused, not followed")
        try:
            entries = walk_inside(self.base, f"tables/{table}/{LOG_DIR}")
        except PermissionError as exc:  # replaced by a link since it was checked
            raise DamagedTable(table, LOG_DIR, str(exc)) from exc
        for e in entries:
            if e.kind != "file":
                raise DamagedTable(table, f"{LOG_DIR}/{e.path}", "not a regular file; the log is refused")
            self._check_log_size(table, e.path, e.size)

    @staticmethod
    def _check_log_size(table: str, name: str, size: int) -> None:
        base = name.rsplit("/", 1)[-1]
        if base.endswith(".json") and base[:1].isdigit():
            limit = MAX_LOG_ENTRY_BYTES
        elif ".checkpoint" in base and base.endswith(".parquet"):
            limit = MAX_CHECKPOINT_BYTES
        elif base == "_last_checkpoint":
            limit = MAX_SMALL_LOG_FILE_BYTES
        else:
            return  # not read by a reader (a writer's temp file, a crc)
        if size > limit:
            raise DamagedTable(
                table, f"{LOG_DIR}/{name}", f"{size:,} bytes, past the {limit:,} a log file may hold; not parsed"
            )

    def ensure(self, table: str, schema: pa.Schema) -> None:
        """Create the table with ``schema`` when it does not exist, else add the columns ``schema`` has and the
        table lacks (a newer evalfarm added them). Two writers creating one table at once: the second's create is
        a no-op (``mode="ignore"``)."""
        if table in self._schemas and set(schema.names) <= set(self._schemas[table].names):
            return  # checked by this process already (a table is never dropped by evalfarm)
        import deltalake as dl

        if not self.exists(table):
            from deltalake.transaction import create_table_with_add_actions

            if self.local:  # made inside the root through no link: delta-rs then writes the new log there
                os.close(open_folder_inside(self.base, f"tables/{table}/{LOG_DIR}", create=True))
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
        if self.local:  # no link followed on the way: a table's folder replaced by one gets nothing written through it
            write_inside(self.base, rel, lambda f: f.write(body))
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
        actions: list[AddAction | RemoveAction] = [
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

    def _commit_removing(
        self, table: str, actions: list[AddAction | RemoveAction], removed: set[str], info: dict[str, object]
    ) -> None:
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

    def _landed(self, table: str, commit_id: object) -> bool:
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
        from deltalake.exceptions import TableNotFoundError

        try:
            dt = self.open(table, version)
        except TableError as exc:
            if not isinstance(exc.__cause__, TableNotFoundError):
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

    def _files(self, table: str, dt: DeltaTable) -> tuple[FileEntry, ...]:
        """The data files of the loaded version of ``dt`` (a ``DeltaTable`` of ``table``), validated
        (:meth:`data_files`), sorted by path."""
        self._check_protocol(table, dt)
        # through the Arrow stream interface, not pa.table(): that first asks whether it is a pandas DataFrame,
        # which imports pandas (0.9-1.3 s of every reading process's first snapshot, measured)
        adds = pa.RecordBatchReader.from_stream(dt.get_add_actions(flatten=True)).read_all()
        times = adds.column("modification_time")
        if pa.types.is_timestamp(times.type):  # as epoch ms: no datetime objects (the first costs a tz database load)
            times = pc.cast(pc.cast(times, pa.timestamp("ms")), pa.int64())
        return self.data_files(table, adds.column("path").to_pylist(), adds.column("size_bytes").to_pylist(),
                               times.to_pylist())  # fmt: skip

    def data_files(
        self, table: str, paths: Sequence[str], sizes: Sequence[int | None], times_ms: Sequence[int | None]
    ) -> tuple[FileEntry, ...]:
        """The snapshot's files, each log path validated before any use (the one home of that check, for readers,
        the start-of-run scan, the quarantine and maintenance alike): :func:`data_file_path` (relative, no scheme,
        no ``.``/``..`` after percent-decoding), named once, and on a local disk every folder between the warehouse
        root and the file a real folder, not a link (:meth:`_check_route`). :class:`DamagedTable` naming the first
        entry that fails. A file that is missing, or is a link, a FIFO or a device where the entry says a file is, is
        not the table's damage but the file's: readers leave it out (:func:`~evalfarm.warehouse.base.safe_open`
        opens regular files only), the scan removes it from the table, and nothing follows it."""
        folder = self.folder(table)
        folders: set[str] = set()
        files: dict[str, FileEntry] = {}
        for path, size, ms in zip(paths, sizes, times_ms, strict=True):
            full = data_file_path(table, folder, path)
            if size is None or int(size) < 0:
                raise DamagedTable(table, f"add {path[:200]!r}", f"a size of {size!r}")
            if full in files:  # added again without a remove (a retried commit that had landed): one file
                if files[full].size != int(size):
                    raise DamagedTable(table, f"add {path[:200]!r}", "added twice with two different sizes")
                continue
            if self.local:
                self._check_route(table, full, folders)
            files[full] = FileEntry(full, int(size), int(ms or 0))
        return tuple(sorted(files.values(), key=lambda f: f.path))

    def _check_route(self, table: str, path: str, checked: set[str]) -> None:
        """Every folder from the warehouse root down to ``path``'s is a real folder (``lstat``: a link is not
        followed), or :class:`DamagedTable` naming the first that is not; a folder that does not exist is fine (the
        file is then missing). ``checked``: folders already found real (one ``lstat`` per folder a snapshot)."""
        rel = path[len(self.base) + 1 :].split("/")[:-1]
        for i in range(1, len(rel) + 1):
            folder = "/".join(rel[:i])
            if folder in checked:
                continue
            try:
                mode = os.lstat(f"{self.base}/{folder}").st_mode
            except (FileNotFoundError, NotADirectoryError):
                return
            if not stat.S_ISDIR(mode):
                why = "a link or not a folder on the way to the table's files: not followed"
                raise DamagedTable(table, folder, why)
            checked.add(folder)

    @staticmethod
    def _check_protocol(table: str, dt: DeltaTable) -> None:
        """Reader protocol 1 only: evalfarm's tables use no deletion vectors and no column mapping, so the Parquet
        files a version names are its rows (what DuckDB reads). A log that raises it (deletion vectors, whose paths
        would point anywhere) is refused, not half-read."""
        p = dt.protocol()
        if int(p.min_reader_version) > 1 or p.reader_features:
            features = ", ".join(p.reader_features or []) or "none named"
            raise DamagedTable(
                table, "protocol", f"reader version {p.min_reader_version} (features: {features}); evalfarm's tables "
                "are reader version 1 (no deletion vectors, no column mapping)",
            )  # fmt: skip

    def added_between(self, table: str, first: int, last: int) -> set[str]:
        """The data files (full paths) the commits ``first`` to ``last`` of ``table`` add, each add's and remove's
        path validated (:func:`data_file_path`) as a snapshot's are: what ``vacuum`` keeps besides the files of the
        version before ``first``. Read by evalfarm, not delta-rs, each commit within :data:`MAX_LOG_ENTRY_BYTES`;
        :class:`DamagedTable` naming a bad entry, a commit that is gone, or one that does not parse."""
        folder = self.folder(table)
        out: set[str] = set()
        for version in range(first, last + 1):
            for action in self._commit(table, f"{LOG_DIR}/{version:020d}.json"):
                kind, body = next(iter(action.items()))
                if kind in ("add", "remove"):
                    path = data_file_path(table, folder, body["path"], what=kind)
                    if kind == "add":
                        out.add(path)
        return out

    def _commit(self, table: str, name: str) -> list[dict[str, Any]]:
        """The actions of the commit ``_delta_log/<version>.json`` (``name``), read within its size limit."""
        path = f"{self.folder(table)}/{name}"
        try:
            if self.local:
                with open(safe_open(path, self.base), "rb", closefd=True) as fh:
                    body = fh.read(MAX_LOG_ENTRY_BYTES + 1)
            else:
                with self.fs.open_input_stream(path) as fh:
                    body = bytes(fh.read(MAX_LOG_ENTRY_BYTES + 1))
        except FileNotFoundError as exc:
            raise DamagedTable(table, name, "gone: the versions after it cannot be replayed") from exc
        except OSError as exc:
            raise DamagedTable(table, name, f"unreadable: {exc}") from exc
        if len(body) > MAX_LOG_ENTRY_BYTES:
            raise DamagedTable(table, name, f"past the {MAX_LOG_ENTRY_BYTES:,} bytes a log entry may hold")
        actions = []
        for n, line in enumerate(body.splitlines(), 1):
            if not line.strip():
                continue
            try:
                action = json.loads(line)
            except ValueError as exc:
                raise DamagedTable(table, name, f"line {n} is not JSON ({exc}): truncated or garbled") from exc
            if why := _action_problem(action):
                raise DamagedTable(table, name, f"line {n}: {why}")
            actions.append(action)
        return actions

    @staticmethod
    def _created_ms(dt: DeltaTable) -> int | None:
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


def _arrow_schema(dt: DeltaTable) -> pa.Schema:
    return pa.schema(dt.schema().to_arrow())


def _quote(path: str) -> str:
    """A path as the Delta log spells it (URI-encoded; evalfarm's own names need no encoding, migrated ones may)."""
    return urllib.parse.quote(path, safe="/")


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
    "MAX_CHECKPOINT_BYTES",
    "MAX_LOG_ENTRY_BYTES",
    "DamagedTable",
    "DeltaTables",
    "FileEntry",
    "RewriteConflict",
    "Snapshot",
    "StagedFile",
    "TableError",
    "file_stats",
    "data_file_path",
    "group_by_table",
    "log_path_problem",
    "storage_options",
]
