"""Atomic file and folder publication: the one way anything evalfarm writes appears on a local filesystem.

A file or folder is built under a hidden temporary name beside its destination, flushed, then renamed into place:
readers see either nothing, the old version, or the whole new one, never half of it. Temp names carry the writer's
pid and a host key (``.<name>.<random>.<pid>.<host>.tmp``), so a sweeper can tell a dead writer's debris from a live
writer's work (:func:`is_stale_temp`). Object stores have no rename: the warehouse writes their final key directly
(a completed PUT is atomic there).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

HOST_KEY = hashlib.sha1(platform.node().encode()).hexdigest()[:8]
STALE_TEMP_SECONDS = 24 * 3600  # a temp file of another host's writer this old is debris


def temp_name(dest: Path) -> Path:
    """A hidden temp name beside ``dest`` that says who writes it: ``.<name>.<rand>.<pid>.<host key>.tmp``."""
    return dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.{os.getpid()}.{HOST_KEY}.tmp")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def is_stale_temp(path: Path, *, now: float | None = None) -> bool:
    """True for a temp file whose writer cannot still be at work: this host's with a dead pid at once, anything
    else (another host's, an unparseable name) once it is :data:`STALE_TEMP_SECONDS` old."""
    name = path.name
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    parts = name[: -len(".tmp")].rsplit(".", 2)
    if len(parts) == 3 and parts[2] == HOST_KEY and parts[1].isdigit():
        return not pid_alive(int(parts[1]))
    now = time.time() if now is None else now
    return now - path.stat().st_mtime > STALE_TEMP_SECONDS


@contextmanager
def replacing(dest: Path, mode: str = "wb", *, encoding: str | None = None, fsync: bool = True) -> Iterator[IO]:
    """Write ``dest`` through a temp file: ``with replacing(p) as f: f.write(...)``. On success the file is
    fsynced and renamed over ``dest``; on any failure (the first error is the one raised) the temp file goes.
    ``fsync=False`` keeps the all-or-nothing rename but skips the flush to disk: for small files rewritten often
    whose loss in a crash costs nothing (a heartbeat, a cache)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(dest)
    try:
        with open(tmp, mode, encoding=encoding) as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, dest)
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # never mask the error that brought us here (a read-only or full disk)
            pass


def write_file(dest: Path, write: Callable[[Path], None]) -> Path:
    """Let ``write(tmp_path)`` produce the file (e.g. ``pyarrow.parquet.write_table``), then publish it atomically."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(dest)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
    return dest


def write_text(dest: Path, text: str, *, fsync: bool = True) -> Path:
    with replacing(dest, "w", encoding="utf-8", fsync=fsync) as f:
        f.write(text)
    return Path(dest)


def write_bytes(dest: Path, data: bytes, *, fsync: bool = True) -> Path:
    with replacing(dest, "wb", fsync=fsync) as f:
        f.write(data)
    return Path(dest)


def publish_dir(dest: Path, build: Callable[[Path], None], *, replace: bool = False) -> Path:
    """Build a folder with ``build(tmp_dir)`` and rename it to ``dest``. If another process published ``dest``
    first, theirs is kept (same content by construction) unless ``replace`` (then a stale ``dest`` is removed)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(dest)
    tmp.mkdir()
    try:
        build(tmp)
        if replace and dest.exists():
            shutil.rmtree(dest)
        try:
            os.replace(tmp, dest)
        except OSError:  # another process won the race
            if not dest.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
