"""What every module of the warehouse shares: its clock, run ids, the errors a reader or writer meets, table names.

Kept apart so the modules that build on the Delta layer (manifests, rewrites, pins, the layout-1 reader) and the
:class:`~evalfarm.warehouse.store.Warehouse` that uses them import downward only.
"""

from __future__ import annotations

import os
import stat
import uuid
from datetime import UTC, datetime
from typing import Any

MANIFEST_TABLE = "manifests"
"""The table of data files' content hashes (committed with every batch; ``evalfarm verify`` reads it)."""


def now() -> datetime:
    return datetime.now(UTC)


def new_run_id() -> str:
    """Sortable and unique across concurrent runs: UTC time plus random suffix."""
    return now().strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


class WarehouseWriteError(OSError):
    """A warehouse file could not be written (a read-only mount, a full disk, no permission).

    One line that names the path and the reason; the first ``OSError`` is the one reported (cleaning up the temp file
    on a read-only disk fails too, and must not replace it).
    """

    def __init__(self, path: str | os.PathLike[str], cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), os.fspath(path))
        self.path = os.fspath(path)
        self.cause = cause

    def __str__(self) -> str:
        why = os.strerror(self.errno) if self.errno else (self.strerror or str(self.cause))
        return f"cannot write {self.path}: {why}; evalfarm needs a writable warehouse with free space"

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries (Ray workers) intact
        return (WarehouseWriteError, (self.path, self.cause))


class LegacyWarehouse(RuntimeError):
    """A warehouse in layout 1 (one Parquet file per unit, no table format): readable, not writable, until migrated."""

    retryable = False

    def __init__(self, uri: str, *, migrating: bool = False) -> None:
        if migrating:
            super().__init__(
                f"warehouse {uri} is half-way through a migration to the Delta layout (it was interrupted): run "
                f"`evalfarm warehouse migrate {uri}` again to finish it"
            )
            return
        super().__init__(
            f"warehouse {uri} was written by an earlier evalfarm (layout 1: one Parquet file per unit, no history); "
            f"SQL still reads it, but runs write the Delta layout: convert it in place with `evalfarm warehouse "
            f"migrate {uri}` (or into a new folder: `evalfarm warehouse migrate {uri} NEW`)"
        )


def safe_open(path: str, root: str) -> int:
    """A read-only file descriptor of ``path``, which must be a regular file inside ``root`` (resolved: no link
    leads out of it). Opened with ``O_NOFOLLOW`` (a final symlink is refused) and ``O_NONBLOCK`` (a FIFO is opened
    without waiting for a writer, then refused by its type), so a file planted in a shared warehouse can neither
    redirect a read elsewhere nor hang it."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
        raise PermissionError(f"{path} leads outside the warehouse {root}")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the final component is a symlink
            raise PermissionError(f"{path} is a symbolic link; warehouse readers open regular files only") from exc
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise PermissionError(f"{path} is not a regular file; warehouse readers open regular files only")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


__all__ = ["MANIFEST_TABLE", "LegacyWarehouse", "WarehouseWriteError", "new_run_id", "now", "safe_open"]
