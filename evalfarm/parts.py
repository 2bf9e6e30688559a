"""The tail shared (issue 50): the parts of one model's embedding pass, claimed one at a time by the worker that
runs the model and by idle workers that join it.

A model embeds its missing texts in parts (``evalfarm.execute.EMBED_SHARD_TEXTS`` texts each, each stored as its own
shard). At the end of a run one large model can hold the last worker busy for minutes while the others idle. With a
:class:`PartBook` (a Ray actor on a cluster) the worker that runs the model (its *owner*) registers the pass's parts
and claims them one by one; the scheduler sends an idle worker to *help* when :func:`worth_sharing` says so, and the
helper loads the model once and claims parts from the same book until none is left. Each part is embedded by whoever
claims it, with the same code, on the same texts, so the stored vectors, and every metric, are those of one worker
(on workers of one kind of device: a part's vectors are the device's).

The cost model (:func:`worth_sharing`): with ``w`` workers on a pass and ``u`` parts unclaimed, each taking ``t``
seconds (the mean of the pass's finished parts), the pass has about ``u x t / w`` seconds left; a helper first spends
``L`` seconds loading the model (the owner's measured load). It is sent when ``u x t / w > L + t``: it will have
finished at least one part before the others would have finished them all. No helper joins before a part has
finished (``t`` unknown).

Faults: a helper that dies gives its running parts back (the executor calls :meth:`PartBook.release`), and the owner,
which waits for the helpers' parts before it reports the model embedded, claims them; a helper part still running
after :data:`RECLAIM_AFTER_PARTS` times a part's time (and at least :data:`RECLAIM_MIN_SECONDS`) is taken back too
(its late shard, if any, holds the same vectors). An owner that dies closes its passes: helpers find nothing more to
claim, and the retried model starts a pass of its own over what is still missing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

RECLAIM_AFTER_PARTS = 5.0
RECLAIM_MIN_SECONDS = 60.0


def worth_sharing(unclaimed: int, part_seconds: float | None, load_seconds: float, workers: int) -> bool:
    """Send one more worker to a pass? (see the module docstring: ``u x t / w > L + t``)."""
    if part_seconds is None or unclaimed < 1 or workers < 1:
        return False
    return unclaimed * part_seconds / workers > load_seconds + part_seconds


@dataclass
class PassState:
    """One open pass as the scheduler sees it (:meth:`PartBook.snapshot`)."""

    pass_id: str
    model: str
    owner: str
    total: int
    unclaimed: int
    running: int
    done: int
    workers: int  # the owner and the helpers that joined
    part_seconds: float | None
    load_seconds: float


@dataclass
class _Pass:
    model: str
    owner: str
    parts: list[Any]
    load_seconds: float
    unclaimed: list[int] = field(default_factory=list)
    running: dict[int, tuple[str, float]] = field(default_factory=dict)  # part -> (worker, claimed at)
    done: dict[int, str] = field(default_factory=dict)  # part -> worker
    seconds: list[float] = field(default_factory=list)
    helpers: set[str] = field(default_factory=set)
    closed: bool = False


class PartClaims(Protocol):
    """What the embed stage needs of a book (a :class:`PartBook` in this process, or a client of one elsewhere)."""

    def open(self, pass_id: str, model: str, parts: list[Any], owner: str, load_seconds: float) -> None: ...

    def join(self, pass_id: str, worker: str) -> bool: ...

    def claim(self, pass_id: str, worker: str) -> tuple[int, Any] | None: ...

    def done(self, pass_id: str, part: int, worker: str, seconds: float) -> None: ...

    def status(self, pass_id: str) -> tuple[int, int, list[int]]: ...

    def close(self, pass_id: str) -> dict[str, int]: ...

    def release(self, worker: str) -> None: ...


class PartBook:
    """The parts of every open pass (thread-safe; one per run, a Ray actor on a cluster)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._passes: dict[str, _Pass] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def open(self, pass_id: str, model: str, parts: list[Any], owner: str, load_seconds: float) -> None:
        """Register a pass's parts (in order: claimed first to last)."""
        with self._lock:
            self._passes[pass_id] = _Pass(model, owner, list(parts), float(load_seconds), list(range(len(parts))))

    def join(self, pass_id: str, worker: str) -> bool:
        """A helper arrives (after loading the model): False when the pass is closed or has nothing left."""
        with self._lock:
            p = self._passes.get(pass_id)
            if p is None or p.closed or not p.unclaimed:
                return False
            p.helpers.add(worker)
            return True

    def claim(self, pass_id: str, worker: str) -> tuple[int, Any] | None:
        """The next unclaimed part (its index and payload), or None: nothing left, or the pass is closed. A helper
        part running past its time is taken back first (see the module docstring)."""
        with self._lock:
            p = self._passes.get(pass_id)
            if p is None or p.closed:
                return None
            self._reclaim_overdue(p)
            if not p.unclaimed:
                return None
            k = p.unclaimed.pop(0)
            p.running[k] = (worker, self._clock())
            return k, p.parts[k]

    def _reclaim_overdue(self, p: _Pass) -> None:
        if not p.seconds:
            return
        limit = max(RECLAIM_MIN_SECONDS, RECLAIM_AFTER_PARTS * sum(p.seconds) / len(p.seconds))
        now = self._clock()
        for k, (w, since) in list(p.running.items()):
            if w != p.owner and now - since > limit:
                del p.running[k]
                p.unclaimed.insert(0, k)

    def done(self, pass_id: str, part: int, worker: str, seconds: float) -> None:
        """A part is stored (a late duplicate of a reclaimed part is counted once)."""
        with self._lock:
            p = self._passes.get(pass_id)
            if p is None:
                return
            p.running.pop(part, None)
            if part in p.unclaimed:  # taken back, then finished after all: nobody needs to do it again
                p.unclaimed.remove(part)
            if part not in p.done:
                p.done[part] = worker
                p.seconds.append(float(seconds))

    def status(self, pass_id: str) -> tuple[int, int, list[int]]:
        """(unclaimed, running, the parts done so far) of a pass (what its owner waits on)."""
        with self._lock:
            p = self._passes.get(pass_id)
            if p is None:
                return 0, 0, []
            self._reclaim_overdue(p)
            return len(p.unclaimed), len(p.running), sorted(p.done)

    def release(self, worker: str) -> None:
        """A worker is lost: the parts it was running go back to be claimed, and the passes it owned close."""
        with self._lock:
            for p in self._passes.values():
                for k, (w, _) in list(p.running.items()):
                    if w == worker:
                        del p.running[k]
                        p.unclaimed.insert(0, k)
                if p.owner == worker:
                    p.closed = True

    def close(self, pass_id: str) -> dict[str, int]:
        """End a pass: {worker: parts it embedded} (the owner's provenance of who did what)."""
        with self._lock:
            p = self._passes.pop(pass_id, None)
        if p is None:
            return {}
        out: dict[str, int] = {}
        for w in p.done.values():
            out[w] = out.get(w, 0) + 1
        return out

    def snapshot(self) -> list[PassState]:
        """Every open pass, for the scheduler's sharing decision."""
        with self._lock:
            return [
                PassState(
                    pid,
                    p.model,
                    p.owner,
                    len(p.parts),
                    len(p.unclaimed),
                    len(p.running),
                    len(p.done),
                    1 + len(p.helpers),
                    sum(p.seconds) / len(p.seconds) if p.seconds else None,
                    p.load_seconds,
                )  # fmt: skip
                for pid, p in self._passes.items()
                if not p.closed
            ]
