"""Reader pins: a reader that holds a snapshot for long records it under ``<root>/_readers/`` (until it is done, or
:data:`PIN_SECONDS` pass), and ``evalfarm warehouse vacuum`` keeps that snapshot's files."""

from __future__ import annotations

import json
import os
import platform
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from evalfarm.warehouse.like import AsOfArg, WarehouseLike

READERS_DIR = "_readers"
PIN_SECONDS = 6 * 3600
"""How long a reader's pin lasts unless it is released first (a reader killed mid-read leaves it to expire)."""


@contextmanager
def pinned(
    wh: WarehouseLike, as_of: AsOfArg = None, *, label: str = "", tables: Iterable[str] | None = None
) -> Iterator[dict[str, int | None]]:
    """Record the versions a reader reads (``as_of``: see :meth:`Warehouse.snapshot`; None: the newest) of every
    table, or of ``tables`` (those it reads), under ``<root>/_readers/`` while the block runs, so ``vacuum`` keeps
    their files. A warehouse this process cannot write is read without a pin (it cannot be vacuumed by this reader's
    user either). Yields the versions."""
    snaps = wh.snapshot(as_of, tables=tables)
    versions = {t: s.version for t, s in snaps.items()}
    path = wh._p(READERS_DIR, f"{uuid.uuid4().hex}.json")
    body = {"versions": versions, "label": label or (str(as_of) if as_of is not None else "newest"),
            "host": platform.node(), "pid": os.getpid(), "created": time.time(),
            "expires": time.time() + PIN_SECONDS}  # fmt: skip
    written = False
    try:
        wh._put(path, json.dumps(body).encode())
        written = True
    except OSError:
        pass
    try:
        yield versions
    finally:
        if written:
            _remove(wh, path)


def _remove(wh: WarehouseLike, path: str) -> None:
    """Remove a pin: on a local disk only a regular file reached without a link (``_readers`` replaced by a link to
    someone's folder loses nothing of theirs)."""
    from evalfarm.warehouse.base import remove_inside

    try:
        if wh.local:
            remove_inside(wh.base, wh.relative(path))
        else:
            wh.fs.delete_file(path)
    except OSError:
        pass


def _pin_files(wh: WarehouseLike) -> list[str]:
    """The pins' files: on a local disk the regular files of ``_readers/`` itself, not followed if it is a link."""
    import pyarrow.fs as pafs

    if wh.local:
        from evalfarm.warehouse.base import walk_inside

        try:
            entries = walk_inside(wh.base, READERS_DIR)
        except OSError:
            return []
        return [wh._p(READERS_DIR, e.path) for e in entries if e.kind == "file" and "/" not in e.path]
    sel = pafs.FileSelector(wh._p(READERS_DIR), recursive=False, allow_not_found=True)
    return [i.path for i in wh.fs.get_file_info(sel) if i.type == pafs.FileType.File]


def live_pins(wh: WarehouseLike, *, now_s: float | None = None) -> dict[str, set[int]]:
    """Table -> the versions unexpired pins hold (expired pins are removed on the way)."""
    t = time.time() if now_s is None else now_s
    out: dict[str, set[int]] = {}
    for path in _pin_files(wh):
        if not path.endswith(".json"):
            continue
        try:
            body = json.loads(wh._get(path))
            expires = float(body["expires"])
            versions = dict(body["versions"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if expires < t:
            _remove(wh, path)
            continue
        for table, v in versions.items():
            if v is not None:
                out.setdefault(table, set()).add(int(v))
    return out


__all__ = ["PIN_SECONDS", "READERS_DIR", "live_pins", "pinned"]
