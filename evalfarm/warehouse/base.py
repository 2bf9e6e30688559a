"""What every module of the warehouse shares: its clock, run ids, the errors a reader or writer meets, table names.

Kept apart so the modules that build on the Delta layer (manifests, rewrites, pins, the layout-1 reader) and the
:class:`~evalfarm.warehouse.store.Warehouse` that uses them import downward only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

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
        if exc.errno == errno.ELOOP:  # the final component is a symlink
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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def relative_parts(rel: str) -> list[str]:
    """``rel``'s names, when it is a plain relative path (no empty, ``.`` or ``..`` name, no NUL); else
    ``PermissionError``."""
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise PermissionError(f"{rel!r} is not a plain relative path inside the warehouse")
    return parts


def open_folder_inside(root: str, rel: str, *, create: bool = False) -> int:
    """A descriptor of the folder ``root/rel``, reached one name at a time from ``root`` without following a link
    (``O_NOFOLLOW | O_DIRECTORY`` on each, relative to the one before): whatever the folders are renamed or replaced
    with meanwhile, the descriptor is a folder inside ``root``. ``create``: make the missing folders on the way.
    ``PermissionError`` naming the first name that is a link or not a folder. ``rel`` "" is ``root`` itself (the
    folder the user named: made when missing with ``create``, and reached as named)."""
    if create:
        os.makedirs(root, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    done = root.rstrip("/")
    try:
        for part in relative_parts(rel) if rel else []:
            done = f"{done}/{part}"
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):  # another writer made it meanwhile
                    os.mkdir(part, 0o777, dir_fd=fd)  # as mkdir(1): the umask decides
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise PermissionError(f"{done} is a link or not a folder: not followed") from exc
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _regular_in(folder_fd: int, name: str, shown: str) -> os.stat_result:
    st = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        raise PermissionError(f"{shown} is not a regular file (a link, a FIFO, a device or a folder): left alone")
    return st


def move_inside(root: str, src: str, dest: str, *, note: bytes | None = None) -> None:
    """Rename ``root/src`` to ``root/dest`` (both relative to ``root``), proving both inside ``root``: each folder on
    either way is opened without following a link (:func:`open_folder_inside`; ``dest``'s are created), the source
    must be a regular file (not followed: a link is not moved, its target even less), and the rename is made
    between the two folders' descriptors. ``note``: written beside the destination as ``<dest>.why.txt`` (a new
    file, never through a link). ``FileNotFoundError`` when the source is gone; ``PermissionError`` when a link or
    anything but a folder is on the way, or the source is not a regular file."""
    src_parts, dest_parts = relative_parts(src), relative_parts(dest)
    src_fd = open_folder_inside(root, "/".join(src_parts[:-1]))
    try:
        _regular_in(src_fd, src_parts[-1], f"{root}/{src}")
        dest_fd = open_folder_inside(root, "/".join(dest_parts[:-1]), create=True)
        try:
            os.rename(src_parts[-1], dest_parts[-1], src_dir_fd=src_fd, dst_dir_fd=dest_fd)
            if note is not None:
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
                fd = os.open(dest_parts[-1] + ".why.txt", flags, 0o644, dir_fd=dest_fd)
                with os.fdopen(fd, "wb") as out:
                    out.write(note)
        finally:
            os.close(dest_fd)
    finally:
        os.close(src_fd)


def remove_inside(root: str, rel: str) -> None:
    """Delete the regular file ``root/rel`` (relative to ``root``), proving it inside: its folder reached without
    following a link (:func:`open_folder_inside`), the file itself a regular file, unlinked through the folder's
    descriptor. ``FileNotFoundError`` when it is gone; ``PermissionError`` for a link or anything but a file."""
    parts = relative_parts(rel)
    fd = open_folder_inside(root, "/".join(parts[:-1]))
    try:
        _regular_in(fd, parts[-1], f"{root}/{rel}")
        os.unlink(parts[-1], dir_fd=fd)
    finally:
        os.close(fd)


def write_inside(root: str, rel: str, write: Callable[[BinaryIO], object], *, fsync: bool = True) -> None:
    """Publish ``root/rel`` atomically, proving it inside ``root``: its folder reached (and made) without following
    a link (:func:`open_folder_inside`), ``write(file)`` filling a new hidden temp file there (``O_EXCL |
    O_NOFOLLOW``, named as :func:`evalfarm.atomic.temp_name` names it, so a killed writer's is swept), then renamed
    over ``rel`` through the folder's descriptor. A folder replaced by a link (``tables/metrics/data -> /home/you``)
    gets nothing written through it: ``PermissionError`` naming it."""
    from evalfarm import atomic

    parts = relative_parts(rel)
    fd = open_folder_inside(root, "/".join(parts[:-1]), create=True)
    tmp = atomic.temp_name(Path(parts[-1])).name
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        out = os.open(tmp, flags, 0o666, dir_fd=fd)  # as open(): the umask decides
        try:
            with os.fdopen(out, "wb") as f:
                write(f)
                if fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.rename(tmp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)
        finally:
            with contextlib.suppress(OSError):  # renamed: gone already; else never mask the first error
                os.unlink(tmp, dir_fd=fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class WalkEntry:
    """What :func:`walk_inside` met: a path relative to the folder walked, its kind (``file``, ``link``, ``fifo``,
    ``device``, ``socket``, ``other``), size and modification time (ns) as ``lstat`` gives them."""

    path: str
    kind: str
    size: int
    mtime_ns: int


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "socket" if stat.S_ISSOCK(mode) else "other"


def walk_inside(root: str, rel: str, *, skip: Callable[[str], bool] = lambda name: False) -> list[WalkEntry]:
    """Every entry under the folder ``root/rel`` but folders (which are walked), never following a link: each folder
    is opened through its parent's descriptor (:func:`open_folder_inside`'s way), and a link, FIFO or device is
    listed as what it is, not opened. ``skip(name)``: names (of files and folders) to leave out. [] when the folder
    does not exist; ``PermissionError`` when a link or a file stands where a folder of ``rel`` should be. An entry that
    is gone between the listing and its ``lstat`` is left out: a Delta writer beside us stages each commit as
    ``NNN.json#k`` and renames it, and a reader's walk of the log must not fail on that (it did, in CI)."""
    try:
        top = open_folder_inside(root, rel)
    except FileNotFoundError:
        return []
    out: list[WalkEntry] = []
    stack: list[tuple[int, str]] = [(top, "")]
    while stack:
        fd, prefix = stack.pop()
        try:
            with os.scandir(fd) as entries:
                listed = list(entries)
            for e in listed:
                if skip(e.name):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:  # gone since it was listed: a writer's staged file renamed into place
                    continue
                path = f"{prefix}{e.name}"
                if stat.S_ISDIR(st.st_mode):
                    try:
                        stack.append((os.open(e.name, _DIR_FLAGS, dir_fd=fd), f"{path}/"))
                    except FileNotFoundError:
                        continue
                    except OSError:  # replaced by a link (or a file) since it was listed: that is what it is now
                        out.append(WalkEntry(path, "link", 0, 0))
                else:
                    out.append(WalkEntry(path, _kind(st.st_mode), st.st_size, st.st_mtime_ns))
        finally:
            os.close(fd)
    return sorted(out, key=lambda w: w.path)


__all__ = [
    "MANIFEST_TABLE",
    "LegacyWarehouse",
    "WalkEntry",
    "WarehouseWriteError",
    "move_inside",
    "new_run_id",
    "now",
    "open_folder_inside",
    "relative_parts",
    "remove_inside",
    "safe_open",
    "walk_inside",
    "write_inside",
]
