"""Task data files: found in the data directory (``EVALFARM_DATA``) or downloaded into a cache, always checksummed.

Users without a local copy get the real thing: each file is fetched from the task's public source URL, checked
against its sha256 and moved into place atomically, so a cut download never looks complete.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from evalfarm.cache import ChecksumMismatch, UnsafeLocation, cache_dir, confined, sha256_file, store_copy
from evalfarm.cache import download as fetch
from evalfarm.catalog.specs import TaskSpec, canonical_json


class TaskDataError(RuntimeError):
    """A task data file that is missing, corrupt or unreadable; the message names the file."""


class DataUnreachable(TaskDataError):
    """No data folder is set and a task's file cannot be downloaded (offline, a host that does not answer): no unit
    of the run could read its data, so the run stops before it starts, saying where it looked for a data folder."""


_UNREACHABLE: dict[str, str] = {}
"""Hosts a download could not reach in this process -> why: the next file from them fails at once (each try costs
DOWNLOAD_RETRIES attempts; offline, a run of three tasks spent ~28 s before failing every unit)."""


def data_uri() -> str | None:
    """``EVALFARM_DATA`` when it is an object-store URI (``s3://bucket/data``, ``gs://…``), else None: nodes with
    no shared disk copy each task file from there into their own cache (checksummed) on first use."""
    env = os.environ.get("EVALFARM_DATA", "")
    return env.rstrip("/") if "://" in env else None


def data_dir() -> Path | None:
    """The evaluation data directory, or None when ``EVALFARM_DATA`` is unset (download mode) or an object-store
    URI (:func:`data_uri`)."""
    env = os.environ.get("EVALFARM_DATA")
    if not env or data_uri() is not None:
        return None
    path = Path(env).expanduser()
    if not path.is_dir():
        raise TaskDataError(
            f"EVALFARM_DATA={env!r} is not a directory; point it at the evaluation data "
            "(e.g. ../shared/data) or unset it to download each task's files into the cache"
        )
    return path


_VERIFIED: dict[tuple[str, int, int], str] = {}


def _verified_sha(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _VERIFIED:
        _VERIFIED[key] = sha256_file(path)
    return _VERIFIED[key]


VerifiedFile = tuple[str, int, int, str]
"""(path, size, mtime in ns, sha256) of a task file whose checksum was verified."""


def verify_task_files(tasks: list[TaskSpec]) -> tuple[VerifiedFile, ...]:
    """Verify (or download) every file of ``tasks`` once, on the driver, before any unit is scheduled; returns the
    good ones for :func:`trust_verified` in the workers, so no worker hashes a file again per model or attempt.
    A missing or mismatching file is left out (its units fail in the worker, with the error, and are not retried)."""
    out = []
    for task in tasks:
        for role in sorted(task.files):
            try:
                path = task_file(task, role)
            except DataUnreachable:  # no data folder and no network: nothing of the run could read its data
                raise
            except TaskDataError:
                continue
            st = path.stat()
            key = (str(path), st.st_size, st.st_mtime_ns)
            if key in _VERIFIED:
                out.append((*key, _VERIFIED[key]))
    return tuple(out)


def trust_verified(files: tuple[VerifiedFile, ...] | list[VerifiedFile]) -> None:
    """Accept checksums the driver verified this run: a file with the same path, size and mtime is not rehashed
    (:func:`task_file` still compares the checksum with the catalog's)."""
    for path, size, mtime_ns, sha in files:
        _VERIFIED.setdefault((path, size, mtime_ns), sha)


def download(url: str, dest: Path, sha256: str) -> Path:
    """Fetch ``url`` to ``dest`` (atomic, verified against ``sha256`` before it lands). A host that could not be
    reached is not tried again by this process (:class:`DataUnreachable`, at once)."""
    from urllib.parse import urlsplit

    host = urlsplit(url).netloc
    if host in _UNREACHABLE:
        raise DataUnreachable(_unreachable(url, _UNREACHABLE[host]))
    try:
        fetch(url, dest, sha256)
    except ChecksumMismatch as exc:
        raise TaskDataError(f"{exc}; not used") from exc
    except UnsafeLocation as exc:
        raise TaskDataError(f"not downloaded: {exc}") from None
    except OSError as exc:  # URLError is an OSError; so are requests' connection errors
        _UNREACHABLE[host] = f"{type(exc).__name__}: {exc}"
        raise DataUnreachable(_unreachable(url, _UNREACHABLE[host])) from exc
    return dest


def _unreachable(url: str, why: str) -> str:
    from evalfarm.config import where_looked

    return (
        f"could not download {url} ({why}). No data folder is set ({where_looked('data')}), so each task's files "
        "download from their sources. Point evalfarm at a local copy of the evaluation data: `evalfarm config set "
        "--user data=DIR` (every folder), `evalfarm config set data=DIR` (this folder and below), EVALFARM_DATA=DIR, "
        "or data=DIR in the Python API; or check the network"
    )


def _confined(task: TaskSpec, role: str, base: Path) -> Path:
    """The file of ``role`` under ``base``, refused (nothing read, nothing echoed) where it resolves outside it."""
    try:
        return confined(base, task.files[role], what=f"file {role!r}")
    except UnsafeLocation as exc:
        raise TaskDataError(f"task {task.id!r}: {exc}") from None


def task_file(task: TaskSpec, role: str) -> Path:
    """Local path of one task data file, verified against the catalog checksum (downloading if needed).

    The path stays inside its base, the data folder or ``<cache>/tasks/<id>/<version>``, once symlinks are
    resolved: a catalog cannot make evalfarm read or write anywhere else (checked again after a download)."""
    expected = task.sha256[role]
    base = data_dir()
    uri = data_uri()
    if uri is not None:
        path = _from_store(task, role, uri, expected)
    elif base is not None:
        path = _confined(task, role, base)
        if not path.is_file():
            raise TaskDataError(f"task {task.id!r}: file {path} is missing (EVALFARM_DATA={base})")
    else:
        try:  # id and version are slugs when validated; a spec built with model_copy is not
            base = confined(cache_dir() / "tasks", f"{task.id}/{task.version}", what="task id/version")
        except UnsafeLocation as exc:
            raise TaskDataError(f"task {task.id!r}: {exc}") from None
        path = _confined(task, role, base)
        if not path.is_file():
            url = task.urls.get(role)
            if not url:
                raise TaskDataError(f"task {task.id!r}: no local data (EVALFARM_DATA unset) and no URL for {role!r}")
            download(url, path, expected)
            path = _confined(task, role, base)
    got = _verified_sha(path)
    if got != expected:
        raise TaskDataError(
            f"task {task.id!r}: {path} has sha256 {got[:16]}…, the catalog expects "
            f"{expected[:16]}… (corrupt or a different version of the file)"
        )
    return path


_OMIT_AT_DEFAULT: dict[str, object] = {"pairs_from": None}
"""Task fields added after tasks were first scored: left out of the checksum at their default, so every existing
unit keeps its fingerprint."""


def _from_store(task: TaskSpec, role: str, uri: str, expected: str) -> Path:
    """The file of ``role`` copied from the object-store data folder ``uri`` into
    ``<cache>/data/<hash of uri>/``, checked against ``expected`` before it lands; a copy already there is used."""
    base = confined(cache_dir() / "data", hashlib.sha256(uri.encode()).hexdigest()[:16], what="data folder")
    path = _confined(task, role, base)
    if not path.is_file():
        try:
            store_copy(f"{uri}/{task.files[role]}", path, expected)
        except ChecksumMismatch as exc:
            raise TaskDataError(f"task {task.id!r}: {exc}; not used") from exc
        except OSError as exc:
            raise TaskDataError(f"task {task.id!r}: could not copy {task.files[role]} from {uri}: {exc}") from exc
    return path


def task_checksum(task: TaskSpec) -> str:
    """One fingerprint for a task's content: its version, every file's checksum and every kind-specific field that
    changes the numbers (band edges, sample sizes, seeds, ...). Paths, URLs, licence and descriptions do not count."""
    payload = task.model_dump(mode="json", exclude={"files", "urls", "licence", "source", "description"})
    payload = {k: v for k, v in payload.items() if not (k in _OMIT_AT_DEFAULT and v == _OMIT_AT_DEFAULT[k])}
    if type(task).former_kinds:  # a renamed kind: its first name, as every unit scored under it was fingerprinted
        payload["kind"] = type(task).former_kinds[0]
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()[:16]
