"""Leases: concurrent runs on one warehouse split the work and never compute a unit twice.

A run claims a unit (by fingerprint) before it computes it, and a model's embed stage (by text store) before it
embeds; a second run that finds a claim of a live run waits for that run's result instead of computing it again.
Layout, under the warehouse root and outside ``tables/`` (no view reads it)::

    <root>/leases/runs/<run_id>.json        a run's heartbeat: {run_id, host, pid, seq, beat, started, ...},
                                             rewritten every HEARTBEAT_SECONDS while the run lives, with what the
                                             run publishes (its progress: units, texts, workers, ETA; read from
                                             another shell or machine by ``evalfarm status``: :func:`heartbeats`)
    <root>/leases/unit/<fingerprint>.json   a claimed unit: {key, run_id, host, pid, claimed_at}
    <root>/leases/embed/<hash>.json         a claimed embed stage (hash of model id and text-store key)

**Atomic create.** On a local or NFS file system a claim is ``open(O_CREAT | O_EXCL)``: exactly one creator wins.
Object stores have no exclusive create through pyarrow.fs, so there a lease is a prefix holding one claim object
per run (``<lease>/<run_id>.json``) and claiming is create-then-verify: list the prefix (a live claim of another
run: held), write our claim, list again; alone: ours, otherwise withdraw ours and report the lease held (two
runs that raced both withdraw and try again on their next poll). This relies on read-after-write and
list-after-write consistency, which S3 and GCS give.

**Liveness.** A claim lives as long as its run's heartbeat does. A claim is dead when its run is on this host and
its process is gone (immediately), when its run's heartbeat file is missing (the run ended without releasing
it), or when the heartbeat's sequence number has not changed for :data:`LEASE_TIMEOUT` seconds *of the
observer's own clock* — no clock agreement between hosts is needed, but a new run waits a full timeout before
it takes over the claims of a run that crashed on another host. A dead claim is taken over: locally under a
short takeover guard (``<lease>.takeover``, O_EXCL) that re-reads the lease and removes it only if it is still
the dead claim that was judged (so a fresh claim is never removed); on an object store by deleting the dead
run's claim object, whose key names that run. A run presumed dead that is in fact alive (its heartbeat stalled
for the whole timeout) may then compute a unit that another run computes too: results are named by fingerprint
and written atomically, so even then the warehouse holds the unit once.

Timeouts come from ``EVALFARM_LEASE_TIMEOUT`` (seconds, default 30); the heartbeat runs six times per timeout.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from evalfarm.atomic import pid_alive
from evalfarm.warehouse import Warehouse, WarehouseWriteError, now
from evalfarm.warehouse.base import open_folder_inside, remove_inside

LEASE_TIMEOUT = float(os.environ.get("EVALFARM_LEASE_TIMEOUT", "30"))
HEARTBEAT_SECONDS = LEASE_TIMEOUT / 6
HOST = platform.node()


def _said_already(exc: OSError) -> bool:
    """An error that already names its path and cause: a :class:`WarehouseWriteError`, or the refusal of a link on
    the way (``warehouse.base`` raises a ``PermissionError`` without an errno naming it)."""
    return isinstance(exc, WarehouseWriteError) or (isinstance(exc, PermissionError) and exc.errno is None)


def unit_key(fingerprint: str) -> str:
    return f"unit/{fingerprint}"


def embed_key(model: str, store: str) -> str:
    return f"embed/{hashlib.sha256(f'{model}|{store}'.encode()).hexdigest()[:24]}"


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: a run, on a host, in a process."""

    run_id: str
    host: str = ""
    pid: int = 0

    @classmethod
    def of(cls, info: dict[str, Any]) -> Holder:
        return cls(str(info.get("run_id", "?")), str(info.get("host", "")), int(info.get("pid") or 0))


class Leases:
    """The leases of one run on one warehouse; ``start`` before claiming, ``stop`` at the end (releases all).

    ``claim(key)`` returns None when the lease is now this run's (or already was), else the live :class:`Holder`.
    ``clock`` is the monotonic clock liveness is judged by (tests pass a fake one and call ``beat`` themselves).
    """

    def __init__(
        self,
        warehouse: Warehouse,
        run_id: str,
        *,
        timeout: float = LEASE_TIMEOUT,
        heartbeat: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        publish: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.wh = warehouse
        self.publish = publish  # what each beat carries besides liveness (called from the heartbeat's thread)
        self.started = now().isoformat()
        self.run_id = run_id
        self.timeout = timeout
        self.heartbeat = heartbeat if heartbeat is not None else timeout / 6
        self.clock = clock
        self.held: set[str] = set()
        self.me = {"run_id": run_id, "host": HOST, "pid": os.getpid()}
        self._seq = 0
        self._seen: dict[str, tuple[Any, float]] = {}  # run id -> (heartbeat seq, when this observer first saw it)
        self._beats: dict[str, tuple[float, dict[str, Any] | None]] = {}  # run id -> (read at, heartbeat), briefly
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- paths and raw I/O ------------------------------------------------------------------------------------
    def _path(self, key: str) -> str:
        return self.wh._p("leases", key + (".json" if self.wh.local else ""))

    def _beat_path(self, run_id: str) -> str:
        return self.wh._p("leases", "runs", f"{run_id}.json")

    def _read(self, path: str) -> bytes | None:
        try:
            if self.wh.local:  # a regular file inside the warehouse only: a planted link is refused, not read
                with self.wh.open_input(path) as fh:
                    return fh.read()
            with self.wh.fs.open_input_stream(path) as fh:
                return fh.read()
        except (FileNotFoundError, IsADirectoryError):
            return None
        except OSError:  # pyarrow reports a missing object as a plain OSError on some stores
            if self.wh.local or self.wh.fs.get_file_info(path).type != pafs.FileType.NotFound:
                raise
            return None

    def _put(self, path: str, body: bytes) -> None:
        """Write (replace) a whole small file: temp + rename locally, one PUT on an object store."""
        try:
            if self.wh.local:  # no fsync: a heartbeat is rewritten every few seconds, a lost one costs nothing
                self.wh._put(path, body, fsync=False)  # through no link (warehouse.base.write_inside)
                return
            try:
                with self.wh.fs.open_output_stream(path) as out:
                    out.write(body)
            except FileNotFoundError:  # a store with real folders (object stores have none: no extra request)
                self.wh.fs.create_dir(path.rpartition("/")[0], recursive=True)
                with self.wh.fs.open_output_stream(path) as out:
                    out.write(body)
        except OSError as exc:
            if _said_already(exc):
                raise
            raise WarehouseWriteError(path, exc) from exc

    def _delete(self, path: str) -> None:
        """Remove a lease file; locally only a regular file reached through no link (a planted link: PermissionError
        naming it, its target untouched)."""
        with contextlib.suppress(FileNotFoundError):
            if self.wh.local:
                remove_inside(self.wh.base, self.wh.relative(path))
            else:
                self.wh.fs.delete_file(path)

    def _create_exclusive(self, path: str, body: bytes) -> bool:
        """O_CREAT | O_EXCL: True when this call created ``path``. A reader may meet it empty for an instant (see
        ``_info``)."""
        folder, _, name = self.wh.relative(path).rpartition("/")
        try:  # its folder reached without following a link (a `leases/unit` planted as a link gets nothing)
            dir_fd = open_folder_inside(self.wh.base, folder, create=True)
        except OSError as exc:
            if _said_already(exc):
                raise
            raise WarehouseWriteError(path, exc) from exc
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        except FileExistsError:  # O_EXCL: a link standing there exists too, and is never followed
            return False
        except OSError as exc:
            raise WarehouseWriteError(path, exc) from exc
        finally:
            os.close(dir_fd)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        return True

    def _body(self, key: str) -> bytes:
        return json.dumps({"key": key, **self.me, "claimed_at": now().isoformat()}).encode()

    # -- heartbeat --------------------------------------------------------------------------------------------
    def start(self) -> Leases:
        """Write the first heartbeat (before any claim: a claim without a heartbeat reads as dead) and keep it up."""
        self.beat()
        self._thread = threading.Thread(target=self._beat_loop, name=f"evalfarm-leases-{self.run_id}", daemon=True)
        self._thread.start()
        return self

    def beat(self) -> None:
        self._seq += 1
        extra: dict[str, Any] = {}
        if self.publish is not None:
            try:
                extra = dict(self.publish())
            except Exception as exc:  # what the run publishes is a report: never a reason to miss a beat
                extra = {"publish_error": f"{type(exc).__name__}: {exc}"}
        body = {**extra, **self.me, "seq": self._seq, "beat": now().isoformat(), "started": self.started}
        self._put(self._beat_path(self.run_id), json.dumps(body, default=str).encode())

    def _beat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                self.beat()
            except OSError:  # the warehouse went away or read-only: other runs will take over after the timeout
                pass

    def release_all(self) -> None:
        """Release every lease this run holds; the heartbeat goes on (the run still records its end)."""
        for key in list(self.held):
            with contextlib.suppress(OSError):
                self.release(key)

    def stop(self) -> None:
        """Release every lease this run holds and remove its heartbeat (best effort: a read-only or lost warehouse
        keeps them, and other runs take them over once the heartbeat is seen to stop). Twice is once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.release_all()
        with contextlib.suppress(OSError):
            self._delete(self._beat_path(self.run_id))

    # -- liveness ---------------------------------------------------------------------------------------------
    def _heartbeat_of(self, run_id: str) -> dict[str, Any] | None:
        t = self.clock()
        cached = self._beats.get(run_id)
        if cached is not None and t - cached[0] < min(1.0, self.heartbeat / 2):
            return cached[1]
        raw = self._read(self._beat_path(run_id))
        try:
            beat = json.loads(raw) if raw else None
        except ValueError:  # being replaced on a store without atomic rename: count it as a beat
            beat = {"seq": ("unreadable", t)}
        self._beats[run_id] = (t, beat)
        return beat

    def alive(self, holder: Holder) -> bool:
        """Is the run behind a claim still alive (see the module docstring)?"""
        if holder.run_id == self.run_id:
            return True
        if holder.host == HOST and holder.pid and not pid_alive(holder.pid):
            return False
        beat = self._heartbeat_of(holder.run_id)
        if beat is None:
            return False
        t = self.clock()
        seen = self._seen.get(holder.run_id)
        if seen is None or seen[0] != beat.get("seq"):
            self._seen[holder.run_id] = (beat.get("seq"), t)
            return True
        return t - seen[1] < self.timeout

    # -- claims -----------------------------------------------------------------------------------------------
    def claim(self, key: str) -> Holder | None:
        """Take the lease ``key``: None when it is this run's now, else the live run holding it."""
        with self._lock:
            if key in self.held:
                return None
            got = self._claim_local(key) if self.wh.local else self._claim_store(key)
            if got is None:
                self.held.add(key)
            return got

    def holder(self, key: str) -> Holder | None:
        """The live run holding ``key`` (this run included), or None when it is free or its holder is dead."""
        if key in self.held:
            return Holder.of(self.me)
        if self.wh.local:
            info = self._info(self._path(key))
            if info is None:
                return None
            if info[0] is None:  # being written by its creator
                return Holder("?")
            return info[0] if self.alive(info[0]) else None
        live = [h for _, h in self._claims(self._path(key)) if self.alive(h)]
        return live[0] if live else None

    def release(self, key: str) -> None:
        """Give ``key`` up (only our own claim is ever removed)."""
        with self._lock:
            self.held.discard(key)
            path = self._path(key)
            if self.wh.local:
                info = self._info(path)
                if info is not None and info[0] is not None and info[0].run_id == self.run_id:
                    self._delete(path)
            else:
                self._delete(f"{path}/{self.run_id}.json")

    # local: one file per lease, O_EXCL
    def _info(self, path: str) -> tuple[Holder | None, bytes] | None:
        """(holder, raw bytes) of a lease file; holder None while its creator is still writing it (or died doing
        so: then the file's age decides); None when there is no lease."""
        raw = self._read(path)
        if raw is None:
            return None
        try:
            return Holder.of(json.loads(raw)), raw
        except ValueError:
            return None if self._age(path) > self.timeout and self._drop_if_same(path, raw) else (None, raw)

    def _age(self, path: str) -> float:
        try:
            return time.time() - os.lstat(path).st_mtime
        except FileNotFoundError:
            return 0.0

    def _claim_local(self, key: str) -> Holder | None:
        path = self._path(key)
        holder: Holder | None = None
        for _ in range(4):
            if self._create_exclusive(path, self._body(key)):
                return None
            info = self._info(path)
            if info is None:  # released meanwhile: try again
                continue
            holder, raw = info
            if holder is None:  # its creator is writing it right now
                return Holder("?")
            if holder.run_id == self.run_id:
                return None
            if self.alive(holder):
                return holder
            if not self._drop_if_same(path, raw):  # another run is taking it over: let it
                return holder
        return holder or Holder("?")

    def _drop_if_same(self, path: str, raw: bytes) -> bool:
        """Remove the lease at ``path`` if it still holds ``raw`` (the dead claim we judged), under the takeover
        guard; True when it is gone. Everyone who removes another run's lease does it here, so a fresh claim that
        replaced the dead one in between is never removed."""
        guard = path + ".takeover"
        if not self._create_exclusive(guard, json.dumps(self.me).encode()):
            if self._age(guard) > self.timeout:  # a taker died inside the guard (it holds it for milliseconds)
                self._delete(guard)
            return False
        try:
            if self._read(path) == raw:
                self._delete(path)
            return True
        finally:
            self._delete(guard)

    # object stores: one claim object per run under the lease's prefix, create-then-verify
    def _claims(self, prefix: str) -> list[tuple[str, Holder]]:
        sel = pafs.FileSelector(prefix, recursive=False, allow_not_found=True)
        out = []
        for info in self.wh.fs.get_file_info(sel):
            if not info.base_name.endswith(".json") or info.type != pafs.FileType.File:
                continue
            raw = self._read(info.path)
            if raw is None:
                continue
            try:
                out.append((info.path, Holder.of(json.loads(raw))))
            except ValueError:  # a claim half-written by a store without atomic PUT: name-only holder
                out.append((info.path, Holder(info.base_name[: -len(".json")])))
        return sorted(out, key=lambda c: c[0])

    def _claim_store(self, key: str) -> Holder | None:
        prefix = self._path(key)
        others = [(p, h) for p, h in self._claims(prefix) if h.run_id != self.run_id]
        live = [h for _, h in others if self.alive(h)]
        if live:
            return live[0]
        for p, _ in others:  # dead runs' claims: each key names its run, so no live claim can be removed here
            self._delete(p)
        mine = f"{prefix}/{self.run_id}.json"
        self._put(mine, self._body(key))
        rivals = [h for _, h in self._claims(prefix) if h.run_id != self.run_id]
        if rivals:  # someone wrote between our two listings: both withdraw, the next poll decides
            self._delete(mine)
            return rivals[0]
        return None


def heartbeats(warehouse: Warehouse) -> dict[str, dict[str, Any]]:
    """Every run heartbeat in the warehouse (run id -> its last body, ``age_s``: seconds since it was written by
    this machine's clock, None where the store does not say): the runs that are live, or died without removing
    theirs. What ``evalfarm status`` reads from another shell or machine; read-only."""
    folder = warehouse._p("leases", "runs")
    out: dict[str, dict[str, Any]] = {}
    try:
        infos = warehouse.fs.get_file_info(pafs.FileSelector(folder, recursive=False, allow_not_found=True))
    except OSError:
        return out
    for info in infos:
        if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
            continue
        try:
            if warehouse.local:  # a regular file inside the warehouse: a heartbeat planted as a link is not read
                with warehouse.open_input(info.path) as fh:
                    body = json.loads(fh.read())
            else:
                with warehouse.fs.open_input_stream(info.path) as fh:
                    body = json.loads(fh.read())
        except (OSError, ValueError):  # being replaced right now, removed at the run's end, or a link: left out
            continue
        if not isinstance(body, dict):
            continue
        mtime = info.mtime.timestamp() if info.mtime is not None else None
        body["age_s"] = None if mtime is None else max(0.0, time.time() - mtime)
        out[str(body.get("run_id") or info.base_name[: -len(".json")])] = body
    return out


def is_live(beat: dict[str, Any], timeout: float = LEASE_TIMEOUT) -> bool:
    """A heartbeat read once is live when its run's process is alive (on this host) or the file is younger than
    the lease timeout (another host: by its modification time, this machine's clock against the store's)."""
    if beat.get("host") == HOST and beat.get("pid"):
        return pid_alive(int(beat["pid"]))
    age = beat.get("age_s")
    return age is not None and age < timeout
