"""Placement by memory on a GPU cluster (issue 50): each model's GPU share, the models no GPU can hold, and the
worker actors a run keeps -- small models side by side on one GPU, a large one on a GPU of its own.

**A model's need** is :func:`evalfarm.encoders.footprint.estimate` of the model that loads (its weights in its
dtype, the activations of a full batch at its ``max_length``, a CUDA context), or the ``gpu_memory_gib`` its catalog
entry declares. Kinds that run on the CPU (word vectors, bags of words; ``ModelKind.gpu`` false) need no GPU.

**A share** is a Ray fractional GPU: the need over the GPU's memory, rounded up to the grid ``1 / slots``. A GPU
holds at most ``slots`` workers: :data:`MAX_SLOTS`, no more than it has CPUs (each worker tokenises on a CPU of its
own) and no more than it has room for a scoring job each (:data:`SCORE_NEED_BYTES`: the rank kernel's 1 GiB score
blocks, the vectors, a context). A model whose need is not known takes a whole GPU, as every model did before.
Ray keeps the shares of one GPU within it; each worker also caps its own allocator at its share
(``torch.cuda.set_per_process_memory_fraction``) and gives back its cached memory after each model, so a model that
needs more than estimated runs out of memory in its own worker (the batcher then halves its batch:
:mod:`evalfarm.encoders.batching`) instead of in its neighbours'.

**Refused** before anything loads: a model whose need exceeds the largest GPU of the cluster fails at once, with
the number, and the rest of the run goes on.

**The pool** (:class:`GpuPool`): the run starts workers for the queue's first GPU models, packed first-fit
(largest share first) into the cluster's GPUs, and fills what is left with the smallest share (scoring jobs and
CPU models run on any worker). As the queue moves, a model that no worker is large enough for gets a worker of its
share when the GPUs have room, or when stopping idle workers makes room; otherwise it waits for busy ones.

The GPUs' memory: ``EVALFARM_GPU_MEMORY_GIB`` when set (a declaration, and how the tests give a CPU machine's
declared GPUs a size), else probed once per GPU node (``torch.cuda`` there). When it cannot be told, every worker
takes a whole GPU, as before.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalfarm.encoders.footprint import GIB, Footprint, estimate

if TYPE_CHECKING:
    from evalfarm.catalog.specs import ModelSpec
    from evalfarm.plan import ModelPlan

GPU_MEMORY_ENV = "EVALFARM_GPU_MEMORY_GIB"
MAX_SLOTS = 8
"""At most this many workers share one GPU."""
SCORE_NEED_BYTES = int(2.5 * GIB)
"""What a worker needs on its GPU to score (the rank kernel's 1 GiB blocks, the pool's vectors, a context)."""
_EPS = 1e-9


@dataclass(frozen=True)
class Need:
    """One model's GPU need: its ``fraction`` of a GPU (0: it runs on the CPU) and the footprint behind it."""

    model: str
    fraction: float
    footprint: Footprint | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gpu_fraction": round(self.fraction, 4)}
        if self.footprint is not None:
            out["estimate"] = self.footprint.to_json()
        return out


def declared_gpu_bytes() -> int | None:
    """``EVALFARM_GPU_MEMORY_GIB`` in bytes (None when unset); a value that is not a positive number is an error."""
    raw = os.environ.get(GPU_MEMORY_ENV, "").strip()
    if not raw:
        return None
    try:
        gib = float(raw)
    except ValueError:
        gib = -1.0
    if not gib > 0 or math.isinf(gib):
        raise ValueError(f"{GPU_MEMORY_ENV}={raw!r}: give the memory of one GPU in GiB (e.g. 80)")
    return int(gib * GIB)


def slots_per_gpu(gpu_bytes: int, cpus_per_gpu: float) -> int:
    """How many workers one GPU holds (see the module docstring): at least 1."""
    return max(1, min(MAX_SLOTS, int(cpus_per_gpu + _EPS), gpu_bytes // SCORE_NEED_BYTES))


def gpu_fraction(need_bytes: int | None, gpu_bytes: int, slots: int) -> float:
    """The share of a GPU a need takes: need / memory, rounded up to the grid 1/slots (a whole GPU when the need
    is unknown, and for a need above one GPU: refused elsewhere)."""
    if need_bytes is None or need_bytes >= gpu_bytes:
        return 1.0
    return min(1.0, math.ceil(need_bytes / gpu_bytes * slots - _EPS) / slots) or 1.0 / slots


def _loading_spec(plan: ModelPlan) -> tuple[ModelSpec, ModelSpec]:
    """(the spec whose weights load, the spec the run asked for): a derived model loads its nearest base with a
    source, with the derived entry's own settings over it."""
    chain = plan.lineage
    source = next((s for s in chain if s.source is not None), chain[0])
    return source, chain[0]


def _setting(name: str, own: ModelSpec, source: ModelSpec) -> Any:
    return getattr(own, name) if name in own.model_fields_set or own is source else getattr(source, name)


def _all_hidden(spec: ModelSpec) -> bool:
    return spec.option("pooling") in ("first-last-avg", "last-2-avg") or spec.option("layer") is not None


def model_location(spec: ModelSpec, base_dir: Path | None) -> Path | None:
    """The local folder of a model's weights, found without downloading or unpacking anything: a ``path`` or
    ``package`` source (through the same checks as loading), a hub id already in the Hugging Face cache; else None."""
    src = spec.source
    if src is None:
        return None
    if src.type == "hf":
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(src.ref, revision=spec.revision, local_files_only=True))
        except Exception:  # not cached here (or no hub library): unknown, never a download
            return None
    if src.type not in ("path", "package") or any(
        str(x or "").endswith((".zip", ".tar", ".tar.gz", ".tgz", ".tar.xz")) for x in (src.ref, src.path)
    ):
        return None
    from evalfarm.encoders.sources import resolve_source

    try:
        loc = resolve_source(src, base_dir=base_dir)
    except Exception:  # the load reports it, with its own message
        return None
    return loc if isinstance(loc, Path) and loc.is_dir() else None


def model_need(plan: ModelPlan, gpu_bytes: int, slots: int, *, base_dir: Path | None, gpu_kind: bool) -> Need:
    """One plan's need on GPUs of ``gpu_bytes`` (see the module docstring)."""
    if not gpu_kind:
        return Need(plan.model, 0.0)
    source, own = _loading_spec(plan)
    declared = own.gpu_memory_gib if own.gpu_memory_gib is not None else source.gpu_memory_gib
    hidden = _all_hidden(own) or any(_all_hidden(s.spec) for s in plan.siblings)
    fp = estimate(
        None if declared is not None else model_location(source, base_dir),
        dtype=_setting("dtype", own, source),
        batch_size=_setting("batch_size", own, source),
        max_length=_setting("max_length", own, source),
        all_hidden=hidden,
        declared_gib=declared,
    )
    return Need(plan.model, gpu_fraction(fp.total_bytes, gpu_bytes, slots), fp)


def refusal(need: Need, largest_gpu_bytes: int) -> str | None:
    """Why no GPU of the cluster can hold the model (None: one can)."""
    fp = need.footprint
    if fp is None or fp.total_bytes is None or fp.total_bytes <= largest_gpu_bytes:
        return None
    return (
        f"model {need.model!r} needs {fp.describe()} of GPU memory; the largest GPU of this cluster has "
        f"{largest_gpu_bytes / GIB:.1f} GiB. Lower its batch_size or max_length, choose dtype bfloat16 or float16, "
        "or declare gpu_memory_gib in its catalog entry if the estimate is wrong"
    )


def pack(fractions: Iterable[float], gpus: int) -> list[int | None]:
    """First-fit of shares into ``gpus`` GPUs (capacity 1 each), in the order given: each share's GPU, None for the
    ones that do not fit (what the run starts with: the queue's first models)."""
    room = [1.0] * gpus
    out: list[int | None] = []
    for f in fractions:
        gpu = next((g for g in range(gpus) if room[g] + _EPS >= f), None)
        if gpu is not None:
            room[gpu] -= f
        out.append(gpu)
    return out


@dataclass
class GpuPool:
    """The GPU workers of a packed run, as shares (see the module docstring).

    ``gpus``: the cluster's GPUs (``(node, GPU id)`` as Ray names them); ``shares``: worker -> its fraction of a
    GPU, for every worker started; ``placed``: worker -> the GPU Ray gave it, once it is ready (a worker still being
    placed is assumed to go where first-fit would put it, as Ray does)."""

    gpus: list[tuple[str, str]]
    slots: int
    shares: dict[str, float] = field(default_factory=dict)
    placed: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def smallest(self) -> float:
        return 1.0 / self.slots

    def room(self) -> dict[tuple[str, str], float]:
        """Each GPU's unallocated share: 1 less its placed workers, less the workers being placed (first-fit)."""
        room = dict.fromkeys(self.gpus, 1.0)
        for w, g in self.placed.items():
            if g in room and w in self.shares:
                room[g] -= self.shares[w]
        for w, f in self.shares.items():
            if w not in self.placed or self.placed[w] not in room:
                first = next((g for g, r in room.items() if r + _EPS >= f), None)
                if first is not None:
                    room[first] -= f
        return room

    def initial(self, queued: list[float]) -> list[float]:
        """The shares to start with for the queue's GPU needs (in queue order): those that pack into the GPUs,
        then the smallest share in what is left (scoring and CPU models run on any worker)."""
        placed = pack(queued, len(self.gpus))
        out = [f for f, g in zip(queued, placed, strict=True) if g is not None]
        left = pack(out, len(self.gpus))
        room = [1.0] * len(self.gpus)
        for f, g in zip(out, left, strict=True):
            if g is not None:
                room[g] -= f
        out += [self.smallest] * sum(int(r / self.smallest + _EPS) for r in room)
        return out or [1.0]

    def decide(self, queued: list[float], idle: Mapping[str, float]) -> tuple[list[float], list[str]]:
        """(shares to start, idle workers to stop) for the queued GPU needs (queue order) and the idle workers
        (name -> share). Each need, in order, takes the smallest idle worker that fits it; else a new worker of its
        share on a GPU with room; else one on a GPU where stopping idle workers that no need took makes room; else a
        busy (or starting) worker that fits it, once that one is done. A need that none of these serves waits, and
        so do the ones after it: a large model is not overtaken by the small ones behind it."""
        spare = dict(sorted(idle.items(), key=lambda kv: kv[1]))
        busy = sorted(s for w, s in self.shares.items() if w not in idle)
        room = self.room()
        start: list[float] = []
        stop: list[str] = []
        for f in queued:
            fit = next((w for w, s in spare.items() if s + _EPS >= f), None)
            if fit is not None:
                del spare[fit]
                continue
            gpu = next((g for g, r in room.items() if r + _EPS >= f), None)
            if gpu is not None:
                start.append(f)
                room[gpu] -= f
                continue
            freed = {g: room[g] + sum(s for w, s in spare.items() if self.placed.get(w) == g) for g in room}
            gpu = next((g for g, r in freed.items() if r + _EPS >= f), None)
            if gpu is None:
                later = next((i for i, s in enumerate(busy) if s + _EPS >= f), None)
                if later is None:
                    break
                busy.pop(later)
                continue
            for w, s in list(spare.items()):
                if room[gpu] + _EPS >= f:
                    break
                if self.placed.get(w) == gpu:
                    del spare[w]
                    stop.append(w)
                    room[gpu] += s
            start.append(f)
            room[gpu] -= f
        return start, stop

    def forget(self, worker: str) -> None:
        self.shares.pop(worker, None)
        self.placed.pop(worker, None)


def gpu_keys(nodes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The cluster's GPUs as ``(node id, GPU id)`` from ``ray.nodes()`` (ids 0..n-1 of each live GPU node)."""
    out = []
    for n in nodes:
        count = int(float((n.get("Resources") or {}).get("GPU", 0.0)))
        if n.get("Alive") and count:
            out += [(str(n.get("NodeID", "")), str(i)) for i in range(count)]
    return out


def _gpu_memory() -> int | None:
    """The memory of this process's first visible GPU (a probe task's body), None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(0).total_memory)


def probe_gpu_bytes(nodes: list[dict[str, Any]], timeout: float = 60.0) -> list[int] | None:
    """Each live GPU node's GPU memory, probed by a tiny task there (a hundredth of a GPU); None when any node
    cannot tell (no CUDA where Ray declares GPUs, a busy cluster that does not run the probe within ``timeout``)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(_gpu_memory)
    refs = [
        probe.options(
            num_cpus=0, num_gpus=0.01, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote()
        for n in nodes
        if n.get("Alive") and float((n.get("Resources") or {}).get("GPU", 0.0)) >= 1
    ]
    try:
        got = ray.get(refs, timeout=timeout)
    except Exception:  # GetTimeoutError, a node lost meanwhile: no placement by memory, as before
        return None
    sizes = [int(g) for g in got if g is not None]
    return sizes if got and len(sizes) == len(got) else None


@dataclass
class Packing:
    """A run's placement by memory on a Ray cluster with GPUs (see the module docstring): the models' needs, the
    refused ones, the pool of shares, and which workers are ready and busy (the executor reports both)."""

    pool: GpuPool
    needs: dict[str, Need]
    refused: dict[str, str]
    cpus_per_gpu: float
    gpu_bytes: int
    ready: set[str] = field(default_factory=set)
    busy: dict[str, str] = field(default_factory=dict)  # worker -> the model it runs

    @classmethod
    def plan(
        cls,
        plans: list[ModelPlan],
        *,
        gpu_kind: Callable[[str], bool],
        base_dir: Path | None,
        cluster: Mapping[str, float],
        nodes: list[dict[str, Any]],
    ) -> Packing | None:
        """The packing of ``plans`` on this cluster; None when placement by memory does not apply (no GPU, or the
        GPUs' memory cannot be told: every worker then takes a whole GPU, as before)."""
        keys = gpu_keys(nodes)
        if not keys:
            return None
        declared = declared_gpu_bytes()
        sizes: list[int] | None = [declared] if declared is not None else probe_gpu_bytes(nodes)
        if not sizes:
            return None
        smallest, largest = min(sizes), max(sizes)
        cpus_per_gpu = float(cluster.get("CPU", 1.0)) / len(keys)
        slots = slots_per_gpu(smallest, cpus_per_gpu)
        needs = {p.model: model_need(p, smallest, slots, base_dir=base_dir, gpu_kind=gpu_kind(p.model)) for p in plans}
        refused = {m: why for m, n in needs.items() if (why := refusal(n, largest)) is not None}
        return cls(GpuPool(keys, slots), needs, refused, cpus_per_gpu, smallest)

    def cpus(self, share: float) -> float:
        """A worker's CPUs: its share of its GPU's (floored to a hundredth, so the shares of one node fit)."""
        return max(0.01, math.floor(share * self.cpus_per_gpu * 100) / 100)

    def queued(self, plans: list[ModelPlan]) -> list[float]:
        """The GPU shares of ``plans`` (queue order) that wait for a worker: not refused, not running now."""
        running = set(self.busy.values())
        out = []
        for p in plans:
            need = self.needs.get(p.model)
            if need is not None and need.fraction > 0 and p.model not in self.refused and p.model not in running:
                out.append(need.fraction)
        return out

    def initial(self, plans: list[ModelPlan]) -> list[float]:
        """The shares the run starts with: the queue's first GPU models packed, the rest of the GPUs in the
        smallest share (``plans`` in the scheduler's order: largest cost first)."""
        return self.pool.initial(self.queued(sorted(plans, key=lambda p: -p.cost)))

    def reshape(self, plans: list[ModelPlan]) -> tuple[list[float], list[str]]:
        """(shares to start, idle workers to stop) for the models still to embed (:meth:`GpuPool.decide`)."""
        idle = {w: self.pool.shares[w] for w in self.ready if w not in self.busy and w in self.pool.shares}
        return self.pool.decide(self.queued(plans), idle)

    def suits(self, worker: str, model: str) -> bool:
        """May ``worker`` embed ``model``? A model that wants a GPU needs a share at least its own."""
        need = self.needs.get(model)
        if need is None or need.fraction == 0:
            return True
        return self.pool.shares.get(worker, 0.0) + _EPS >= need.fraction

    def record(self, worker: str, model: str) -> dict[str, Any]:
        """The placement of a model on a worker, for the model's provenance."""
        out: dict[str, Any] = {"worker": worker, "worker_gpu_share": round(self.pool.shares.get(worker, 0.0), 4)}
        if worker in self.pool.placed:
            out["gpu"] = self.pool.placed[worker][1]
        need = self.needs.get(model)
        if need is not None:
            out.update(need.to_json())
        out["gpu_memory_gib"] = round(self.gpu_bytes / GIB, 1)
        return out
