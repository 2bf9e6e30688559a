"""Unpack a model archive (``.zip``, ``.tar[.gz|.bz2|.xz]``, ``.tgz``) without trusting it.

A catalog names the archive and its sha256, so its bytes are the catalog author's. The standard library's own guard
(tarfile's ``filter="data"``) is not enough on every Python the project supports: on 3.11.7 the technique of
CVE-2025-4517 (directories with long names, single-letter symlinks to them, so that ``os.path.realpath`` gives up
past ``PATH_MAX`` and judges the rest lexically, then a member written through the chain) writes anywhere. So every
member is checked here, by its name and type alone, before a byte is written:

- names: relative paths as a catalog's task files are (:func:`evalfarm.cache.check_relative`: no absolute path,
  drive, ``..``, ``~`` or NUL), at most :data:`MAX_NAME` characters and :data:`MAX_COMPONENT` a component, each
  named once;
- types: regular files and folders are written; a symlink or hard link whose target, resolved inside the archive's
  own names, is a regular file member is written as a copy of that file (never as a link: nothing on disk can lead
  out); any other link, a device, a FIFO, is refused;
- limits (:class:`ArchiveLimits`): the total unpacked size, its ratio to the archive's size and the member count,
  checked on each member's header before its data is read, and on the bytes actually written; the first one passed
  stops the unpacking (a 1 KB archive that would unpack to 1 GB stops at its first header) with an error naming the
  archive, the limit and the setting that raises it. A zip's member count is its central directory's, checked
  before the first member is written.

Files are created with ``O_EXCL | O_NOFOLLOW`` in a fresh folder whose every entry this module made, and are never
executable; the caller publishes the folder only when all of it is written (:func:`evalfarm.atomic.publish_dir`).
"""

from __future__ import annotations

import functools
import os
import posixpath
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from evalfarm.cache import UnsafeLocation, check_relative
from evalfarm.config import (
    DEFAULT_ARCHIVE_MAX_MEMBERS,
    DEFAULT_ARCHIVE_MAX_RATIO,
    DEFAULT_ARCHIVE_MAX_SIZE,
    ENV_VARS,
    check_value,
    parse_size,
)
from evalfarm.encoders.protocol import ModelLoadError

MAX_NAME = 1024
"""The longest member name accepted (characters): a model folder's paths are short; long ones are an attack's."""
MAX_COMPONENT = 255
"""The longest name of one folder or file in a member's path (the usual file-system limit)."""
MAX_LINK_HOPS = 16
"""How many links a link member may go through to its file (a loop stops here)."""
CHUNK = 1 << 20


class ArchiveError(ModelLoadError):
    """An archive refused: an unsafe member, or a limit passed. The message names the archive and what to change."""


@dataclass(frozen=True)
class ArchiveLimits:
    """What one archive may unpack to: ``max_bytes`` in all, ``max_ratio`` times its own size, ``max_members``
    members (0: no limit). From ``EVALFARM_ARCHIVE_MAX_SIZE`` / ``_RATIO`` / ``_MEMBERS`` (the config file's
    ``archive_max_*``, exported by the CLI and the API), else the defaults."""

    max_bytes: int = parse_size(DEFAULT_ARCHIVE_MAX_SIZE)
    max_ratio: float = DEFAULT_ARCHIVE_MAX_RATIO
    max_members: int = DEFAULT_ARCHIVE_MAX_MEMBERS

    @classmethod
    def from_env(cls) -> ArchiveLimits:
        values: dict[str, str] = {}
        for key in ("archive_max_size", "archive_max_ratio", "archive_max_members"):
            raw = os.environ.get(ENV_VARS[key], "").strip()
            if raw:
                if why := check_value(key, raw):
                    raise ModelLoadError(f"{ENV_VARS[key]}: {why}")
                values[key] = raw
        return cls(
            max_bytes=parse_size(values["archive_max_size"]) if "archive_max_size" in values else cls.max_bytes,
            max_ratio=float(values.get("archive_max_ratio", cls.max_ratio)),
            max_members=int(values.get("archive_max_members", cls.max_members)),
        )


@dataclass
class _Member:
    name: str  # normalised: no "./", no trailing "/"
    kind: str  # "file", "dir", "link" (symlink or hard link: written as a copy of its file)
    size: int  # declared bytes (files)
    target: str | None  # a link's target, normalised inside the archive's names
    open: Callable[[], IO[bytes]] | None  # a file's bytes


def unpack(archive: Path, dest: Path, limits: ArchiveLimits | None = None) -> None:
    """Unpack ``archive`` into the empty folder ``dest`` under :class:`ArchiveLimits` (default: the settings');
    :class:`ArchiveError` on the first unsafe member or limit passed (``dest`` then holds a part: the caller
    removes it)."""
    limits = limits or ArchiveLimits.from_env()
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                _Budget(archive, limits).members_at_most(len(zf.infolist()))  # the central directory, read first
                _write(archive, dest, _zip_members(archive, zf), limits)
        else:
            with tarfile.open(archive) as tf:
                _write(archive, dest, _tar_members(archive, tf), limits)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:  # EOFError: a truncated compressed stream
        raise ModelLoadError(f"{archive}: cannot unpack archive: {exc}") from exc


def _name(archive: Path, raw: str) -> str:
    """A member's name normalised (``./a//b/`` -> ``a/b``), or :class:`ArchiveError` when it is unsafe."""
    if len(raw) > MAX_NAME:
        raise ArchiveError(f"{archive}: a member name of {len(raw)} characters (at most {MAX_NAME}): refused")
    try:
        check_relative(raw, what="archive member")
    except UnsafeLocation as exc:
        raise ArchiveError(f"{archive}: {exc}; refused") from None
    if "\\" in raw:
        raise ArchiveError(f"{archive}: archive member {raw!r} holds a backslash; refused")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if any(len(p.encode("utf-8", "surrogateescape")) > MAX_COMPONENT for p in parts):
        raise ArchiveError(f"{archive}: archive member {raw[:80]!r}… has a name part over {MAX_COMPONENT} bytes")
    return "/".join(parts)


def _link_target(archive: Path, name: str, raw: str, *, hard: bool) -> str:
    """A link's target as a member name: a hard link's is one already; a symlink's is relative to its folder."""
    if not raw or raw.startswith("/") or "\0" in raw:
        raise ArchiveError(f"{archive}: link {name!r} points at {raw!r}, outside the archive; refused")
    joined = raw if hard else posixpath.join(posixpath.dirname(name), raw)
    norm = posixpath.normpath(joined)
    if norm == ".." or norm.startswith("../") or norm.startswith("/"):
        raise ArchiveError(f"{archive}: link {name!r} points at {raw!r}, outside the archive; refused")
    return _name(archive, norm)


def _tar_members(archive: Path, tf: tarfile.TarFile) -> Iterator[_Member]:
    for info in tf:  # headers are read one at a time: a limit stops before the next one is decompressed
        name = _name(archive, info.name)
        if info.isreg():
            yield _Member(name, "file", info.size, None, functools.partial(_extracted, tf, info))
        elif info.isdir():
            yield _Member(name, "dir", 0, None, None)
        elif info.issym() or info.islnk():
            yield _Member(name, "link", 0, _link_target(archive, name, info.linkname, hard=info.islnk()), None)
        else:
            what = {tarfile.CHRTYPE: "character device", tarfile.BLKTYPE: "block device", tarfile.FIFOTYPE: "FIFO"}
            kind = what.get(info.type, f"member of tar type {info.type!r}")
            raise ArchiveError(f"{archive}: {name!r} is a {kind}; only files and folders are unpacked")


def _extracted(tf: tarfile.TarFile, info: tarfile.TarInfo) -> IO[bytes]:
    f = tf.extractfile(info)
    assert f is not None  # a regular file always has a reader
    return f


def _zip_members(archive: Path, zf: zipfile.ZipFile) -> Iterator[_Member]:
    for info in zf.infolist():
        name = _name(archive, info.filename)
        mode = info.external_attr >> 16
        if info.is_dir():
            yield _Member(name, "dir", 0, None, None)
        elif stat.S_ISLNK(mode):  # a Unix symlink: its data is the target
            with zf.open(info) as f:  # a few bytes, never the whole entry (which could be a bomb)
                target = f.read(MAX_NAME + 1).decode("utf-8", "surrogateescape")
            yield _Member(name, "link", 0, _link_target(archive, name, target, hard=False), None)
        elif stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # no type bits (DOS, most writers): a file
            raise ArchiveError(f"{archive}: {name!r} is not a regular file (mode {oct(mode)}); refused")
        else:
            yield _Member(name, "file", info.file_size, None, functools.partial(zf.open, info))


class _Budget:
    """The limits as the archive is unpacked: members so far, bytes so far (declared, then written)."""

    def __init__(self, archive: Path, limits: ArchiveLimits) -> None:
        self.archive = archive
        self.limits = limits
        self.members = 0
        self.bytes = 0
        self.cap = limits.max_bytes or None
        if limits.max_ratio:
            by_ratio = int(limits.max_ratio * max(archive.stat().st_size, 1))
            self.cap = by_ratio if self.cap is None else min(self.cap, by_ratio)

    def member(self) -> None:
        self.members += 1
        self.members_at_most(self.members)

    def members_at_most(self, count: int) -> None:
        """Refuse an archive of more than ``max_members`` members: a zip's count is its central directory's, known
        before anything is written; a tar's grows header by header (the count stops it at the first too many)."""
        if self.limits.max_members and count > self.limits.max_members:
            raise ArchiveError(
                f"{self.archive}: holds more than {self.limits.max_members} members (the archive limit; raise it "
                f"with {ENV_VARS['archive_max_members']} or archive_max_members in .evalfarm.toml); refused"
            )

    def take(self, n: int) -> None:
        self.bytes += n
        if self.cap is not None and self.bytes > self.cap:
            size = self.archive.stat().st_size
            if self.limits.max_bytes and self.cap == self.limits.max_bytes:
                why = (
                    f"more than {self.limits.max_bytes} bytes in all (the archive limit; raise it with "
                    f"{ENV_VARS['archive_max_size']} or archive_max_size in .evalfarm.toml)"
                )
            else:
                why = (
                    f"more than {self.limits.max_ratio:g} times its own {size} bytes (the archive ratio limit; raise "
                    f"it with {ENV_VARS['archive_max_ratio']} or archive_max_ratio in .evalfarm.toml)"
                )
            raise ArchiveError(f"{self.archive}: would unpack to {why}; refused, nothing kept")


def _write(archive: Path, dest: Path, members: Iterator[_Member], limits: ArchiveLimits) -> None:
    """Create every member under ``dest`` (see the module docstring); links last, as copies of their files."""
    budget = _Budget(archive, limits)
    kinds: dict[str, str] = {}
    links: list[_Member] = []
    files: dict[str, _Member] = {}
    for m in members:
        budget.member()
        if not m.name:  # the archive's own root ("./")
            continue
        if m.name in kinds and not (m.kind == "dir" and kinds[m.name] == "dir"):
            raise ArchiveError(f"{archive}: {m.name!r} appears twice; refused")
        _claim_parents(archive, m.name, kinds)
        kinds[m.name] = m.kind
        if m.kind == "dir":
            _mkdir(dest, m.name)
        elif m.kind == "file":
            budget.take(m.size)  # the header's size, before a byte is decompressed
            _copy(archive, dest, m, budget)
            files[m.name] = m
        else:
            links.append(m)
    for link in links:
        target = _resolve(archive, link, kinds, {m.name: m for m in links})
        budget.take(files[target].size)
        _copy(archive, dest, _Member(link.name, "file", files[target].size, None, files[target].open), budget)


def _claim_parents(archive: Path, name: str, kinds: dict[str, str]) -> None:
    """Every folder above ``name`` is a folder (implicitly, or a folder member), never a file or a link."""
    parts = name.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        parent = "/".join(parts[:i])
        kind = kinds.setdefault(parent, "dir")
        if kind != "dir":
            raise ArchiveError(f"{archive}: {name!r} lies under {parent!r}, which is a {kind}, not a folder; refused")


def _resolve(archive: Path, link: _Member, kinds: dict[str, str], links: dict[str, _Member]) -> str:
    """The regular file member a link leads to (through other links, at most :data:`MAX_LINK_HOPS`)."""
    target = link.target
    for _ in range(MAX_LINK_HOPS):
        kind = kinds.get(target or "")
        if kind == "file":
            return str(target)
        if kind == "link":
            target = links[str(target)].target
            continue
        what = "a folder" if kind == "dir" else "no member of the archive"
        raise ArchiveError(f"{archive}: link {link.name!r} leads to {what} ({target!r}); only links to files are kept")
    raise ArchiveError(f"{archive}: link {link.name!r} goes through more than {MAX_LINK_HOPS} links; refused")


def _mkdir(dest: Path, name: str) -> Path:
    """``dest/name`` and the folders above it, each created here as a real folder (never through a link)."""
    path = dest
    for part in name.split("/"):
        path = path / part
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                raise
    return path


def _copy(archive: Path, dest: Path, m: _Member, budget: _Budget) -> None:
    """Write a file member's bytes to a new file (``O_EXCL | O_NOFOLLOW``, mode 0644), counting what is written."""
    folder, _, base = m.name.rpartition("/")
    parent = _mkdir(dest, folder) if folder else dest
    assert m.open is not None
    fd = os.open(parent / base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    written = 0
    with os.fdopen(fd, "wb") as out, m.open() as src:
        while block := src.read(CHUNK):
            written += len(block)
            if written > m.size:  # a zip entry whose data outgrows its header (tar reads exactly its size)
                raise ArchiveError(
                    f"{archive}: {m.name!r} holds more than the {m.size} bytes its header says; refused"
                )
            out.write(block)
    if written != m.size:
        raise ArchiveError(f"{archive}: {m.name!r} holds {written} bytes, its header says {m.size}; refused")


__all__ = ["ArchiveError", "ArchiveLimits", "unpack"]
