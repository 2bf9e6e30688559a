"""What the warehouse's lower modules need of a warehouse: :class:`WarehouseLike`, a Protocol that
:class:`~evalfarm.warehouse.store.Warehouse` satisfies (mypy checks it wherever a ``Warehouse`` is passed).

The modules below ``store`` (manifests, rewrites, pins, history, the current split, the layout-1 reader, and the
outcomes recorded by the scheduler) take a warehouse without importing its class, which imports them: they name this
Protocol instead, so each call is checked and the members they use are listed in one place. Its members are grouped by
role (files, tables and snapshots, reads, writes); the underscored ones are the package's internal file primitives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa
    import pyarrow.fs as pafs

    from evalfarm.warehouse.tables import DeltaTables, Snapshot, StagedFile

AsOfArg: TypeAlias = "datetime | str | None"
"""A point in a warehouse's past as a caller names it: a run id, a time (a ``datetime`` or ISO 8601 text), or None
(the newest); :func:`evalfarm.warehouse.history.resolve_as_of` reads it."""


class UnitKey(Protocol):
    """A unit as the warehouse keys its completion: (model, task, fingerprint) (``evalfarm.plan.Unit``)."""

    @property
    def model(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def fingerprint(self) -> str: ...


class WarehouseLike(Protocol):
    """The members of :class:`~evalfarm.warehouse.store.Warehouse` that the lower warehouse modules use."""

    # -- where it is ------------------------------------------------------------------------------------------------
    fs: pafs.FileSystem
    base: str
    local: bool
    uri: str

    # -- files ------------------------------------------------------------------------------------------------------
    def _p(self, *parts: str) -> str: ...
    def _get(self, path: str) -> bytes: ...
    def _put(self, path: str, body: bytes, *, fsync: bool = True) -> None: ...
    def _walk(self, folder: str, *, files: bool = False) -> list[tuple[str, int, int | None]]: ...
    def _reader(self, read_only: bool) -> tuple[str, pafs.FileSystem | None, Callable[[str], str]]: ...
    def exists(self, path: str) -> bool: ...
    def relative(self, path: str) -> str: ...
    def open_input(self, path: str) -> pa.NativeFile: ...
    def read_table(self, path: str) -> pa.Table: ...
    def read_columns(self, path: str, columns: list[str]) -> pa.Table: ...
    def file_problem(self, path: str) -> str | None: ...

    # -- tables and snapshots ---------------------------------------------------------------------------------------
    @property
    def tables(self) -> DeltaTables: ...
    def layout(self) -> str: ...
    def schema_version(self) -> int | None: ...
    def declare_version(self, version: int = ...) -> None: ...
    def typed(self, table: str, rows: pa.Table | list[dict[str, Any]]) -> pa.Table: ...
    def snapshot(
        self, as_of: AsOfArg = None, *, tables: Iterable[str] | None = None, leave_out_damaged: bool = False
    ) -> dict[str, Snapshot]: ...

    # -- reads ------------------------------------------------------------------------------------------------------
    def connect(
        self,
        *,
        read_only: bool = True,
        memory_limit: str | None = None,
        as_of: AsOfArg = None,
        needs: Sequence[str] | None = None,
    ) -> duckdb.DuckDBPyConnection: ...
    def query(
        self,
        sql: str,
        *,
        timeout_s: float | None = None,
        memory_limit: str | None = None,
        as_of: AsOfArg = None,
        max_rows: int | None = None,
        max_bytes: int | None = None,
    ) -> pa.Table: ...

    # -- writes -----------------------------------------------------------------------------------------------------
    def take_pending(self) -> list[StagedFile]: ...
    def commit(
        self,
        files: Iterable[StagedFile],
        *,
        run_id: str | None = None,
        batch: int | None = None,
        operation: str = "write",
    ) -> None: ...
    def write_failure(
        self, run_id: str, model: str | None, task: str | None, stage: str, error: str, detail: str = ""
    ) -> StagedFile: ...
