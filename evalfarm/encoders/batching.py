"""How a torch encoder's texts become batches on its device, and its pooled vectors come back (issue 50).

An encoder hands :class:`Batcher` its texts, a ``tokenise`` function (texts -> token ids, no padding) and a
``forward`` function (padded tensors on the device -> one pooled ``(n, dim)`` tensor per output); the batcher does
everything between: the order, the batches, the padding, the copies, the out-of-memory retries.

On the CPU (the :class:`BatchPolicy` of a CPU device) the batches are the ones the encoders always made: the
call's texts sorted by token length, longest first (stable), ``batch_size`` texts a batch, each padded on the right
to its longest text, so the stored vectors stay those of earlier releases byte for byte.

On a GPU the same forward pass is fed so that the GPU, not the host, sets the pace:

- **a token budget, not a text count**: a batch holds as many length-sorted texts as keep ``texts x padded width``
  within ``batch_size x max_length`` tokens -- the memory of one full-length batch of ``batch_size``, which the
  placement's estimate assumes (:mod:`evalfarm.encoders.footprint`) -- so short texts go hundreds at a time;
- **widths rounded up to a multiple of** :data:`WIDTH_MULTIPLE`: the extra positions are padding, masked like any
  other, and the attention and matrix kernels see a few dozen shapes per model instead of one per batch;
- **tokenisation off the critical path**: the next slice of :data:`SLICE_TEXTS` texts is tokenised on a thread
  while the device runs the current one (the fast tokenizers release the GIL);
- **pinned host memory and no per-batch wait**: the padded ids are built in page-locked memory and copied without
  blocking; each batch's pooled outputs are stacked on the device and come back in one device-to-host copy per
  batch, into pinned memory, waited for only when the slice's rows are written out;
- **out of memory, the batch halves**: a CUDA out-of-memory error splits the batch in two and runs each half
  (recursively), and the budget of the rest of the model's texts halves with it; every split is recorded
  (:attr:`Batcher.notes`, the model's provenance). One text that does not fit alone raises :class:`DeviceOutOfMemory`,
  which fails that model only, with a message that names its length and what to change.

Why the GPU needs this (the hypothesis ``benchmarks/gpu_zoo.py`` measures; issue 50): on an H200 all-MiniLM-L6-v2
encoded 18.8k texts/s in float32 and 5.6k in float16 / bfloat16 with the count-based loop. A 6-layer, 384-wide
model's forward over 256 short texts is well under a millisecond of GPU work, so that loop was bound by the host
(tokenising each call before any forward, building the padded arrays row by row, a blocking copy in and one blocking
copy out per pooling per batch); the three-fold gap between the precisions points at work that only half precision
does per batch: the padded width of a length-sorted batch differs from one batch to the next, and half-precision
attention and matrix kernels choose (and may build) an execution plan per new shape, where float32 takes a fixed
kernel; plus the float32 copy of every half-precision hidden state made before pooling. Rounded widths bound the
shapes; the other items take the host off the critical path.
"""

from __future__ import annotations

import concurrent.futures
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

WIDTH_MULTIPLE = 16
"""On a GPU, padded widths are rounded up to a multiple of this (never past the model's ``max_length``)."""

SLICE_TEXTS = 4096
"""On a GPU, texts are tokenised this many at a time, the next slice on a thread while the current one runs; batches
are planned within a slice (sorted by token length there)."""

GPU_CHUNK_TEXTS = 16_384
"""How many texts the embed stage hands a GPU encoder per call (``chunk_texts``): several slices, so tokenising
overlaps the forward passes; a progress tick every few seconds even for a 7B model."""


class DeviceOutOfMemory(RuntimeError):
    """A single text does not fit on the device: no smaller batch exists. Fails that model (not retried: the same
    worker, or another of the same size, runs out the same way)."""

    retryable = False


@dataclass(frozen=True)
class Tokenised:
    """Token ids of some texts, unpadded (``types``: token type ids, for the models that take them)."""

    ids: list[list[int]]
    types: list[list[int]] | None = None


@dataclass
class BatchPolicy:
    """How texts are grouped: ``batch_size`` texts a batch, or, with ``token_budget``, as many texts as keep
    ``texts x padded width`` within it; widths rounded up to ``width_multiple``, never past ``max_length``."""

    batch_size: int
    max_length: int
    token_budget: int | None = None
    width_multiple: int = 1
    slice_texts: int | None = None  # None: the whole call is one slice (the CPU's batches)
    overlap: bool = False  # tokenise the next slice on a thread while the current one runs

    @classmethod
    def for_device(cls, device: str, *, batch_size: int, max_length: int) -> BatchPolicy:
        """The CPU's count-based batches (the vectors of earlier releases); on a GPU the token budget of one
        full-length batch, rounded widths and sliced tokenisation."""
        if not device.startswith("cuda"):
            return cls(batch_size=batch_size, max_length=max_length)
        return cls(
            batch_size=batch_size,
            max_length=max_length,
            token_budget=batch_size * max_length,
            width_multiple=WIDTH_MULTIPLE,
            slice_texts=SLICE_TEXTS,
            overlap=True,
        )

    def width(self, longest: int) -> int:
        """The padded width of a batch whose longest text has ``longest`` tokens."""
        w = max(1, longest)
        if self.width_multiple > 1:
            w = min(_round_up(w, self.width_multiple), max(w, self.max_length))
        return w

    def halve(self) -> None:
        """After an out-of-memory error: half the tokens (or texts) a batch, at least one text."""
        if self.token_budget is not None:
            self.token_budget = max(1, self.token_budget // 2)
        else:
            self.batch_size = max(1, self.batch_size // 2)


def _round_up(n: int, multiple: int) -> int:
    return int(math.ceil(n / multiple) * multiple)


def plan_batches(lengths: Sequence[int], policy: BatchPolicy) -> list[np.ndarray]:
    """Row indices of each batch: longest first (a stable sort, so equal lengths keep their order), cut by the
    policy (``batch_size`` texts, or texts x padded width within the token budget)."""
    order = np.argsort([-n for n in lengths], kind="stable")
    if policy.token_budget is None:
        return [order[i : i + policy.batch_size] for i in range(0, len(order), policy.batch_size)]
    batches: list[np.ndarray] = []
    start = 0
    while start < len(order):
        width = policy.width(lengths[order[start]])  # the longest of the batch: sorted, so its first
        take = max(1, policy.token_budget // width)
        batches.append(order[start : start + take])
        start += take
    return batches


def pad_batch(
    tok: Tokenised, idx: np.ndarray, width: int, pad_id: int, *, pin: bool = False, left: bool = False
) -> dict[str, np.ndarray]:
    """Right-padded (``left``: left-padded) ``input_ids`` / ``attention_mask`` (and ``token_type_ids``) of the rows
    ``idx``, int64, built without a Python loop over tokens (one concatenation and one scatter)."""
    rows = [tok.ids[i][:width] for i in idx]
    lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    if left:  # each row's tokens in its last len positions
        mask = np.arange(width)[None, :] >= (width - lens)[:, None]
    else:
        mask = np.arange(width)[None, :] < lens[:, None]
    flat = np.fromiter((t for r in rows for t in r), dtype=np.int64, count=int(lens.sum()))
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    input_ids[mask] = flat  # row-major: each row's tokens land in its first len positions
    out = {"input_ids": input_ids, "attention_mask": mask.astype(np.int64)}
    if tok.types is not None:
        types = [tok.types[i][:width] for i in idx]
        tt = np.zeros_like(input_ids)
        tt[mask] = np.fromiter((t for r in types for t in r), dtype=np.int64, count=int(lens.sum()))
        out["token_type_ids"] = tt
    return out


def is_out_of_memory(exc: BaseException) -> bool:
    """A device allocation failure (``torch.OutOfMemoryError``, CUDA's or another backend's)."""
    import torch

    return isinstance(exc, torch.OutOfMemoryError)


@dataclass
class _Pending:
    """One batch's pooled rows on their way back: the rows, the pinned host copy, its completion event."""

    idx: np.ndarray
    host: Any  # torch.Tensor (outputs, n, dim), filled by a non-blocking copy
    event: Any  # torch.cuda.Event, or None on the CPU


@dataclass
class Batcher:
    """Runs a model's forward pass over texts in the policy's batches (see the module docstring). One per loaded
    encoder: a halved budget stays halved for the rest of the model's texts."""

    policy: BatchPolicy
    device: str
    pad_id: int = 0
    padding_side: str = "right"  # "left": a decoder spec's padding_side; last-token pooling reads the mask
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    def run(
        self,
        texts: Sequence[str],
        tokenise: Callable[[list[str]], Tokenised],
        forward: Callable[[dict[str, Any]], dict[str, Any]],
        dims: dict[str, int],
    ) -> dict[str, np.ndarray]:
        """``{output: (len(texts), dim) float32}`` in the order of ``texts``. ``forward`` gets the padded tensors on
        the device and returns one ``(n, dim)`` tensor per name of ``dims``, in that order."""
        import torch

        names = list(dims)
        outs = {n: np.zeros((len(texts), dims[n]), dtype=np.float32) for n in names}
        if not len(texts):
            return outs
        with torch.inference_mode():
            for lo, tok in self._slices(texts, tokenise):
                pending: list[_Pending] = []
                lengths = [len(x) for x in tok.ids]
                for idx in plan_batches(lengths, self.policy):
                    pending += self._run_batch(tok, idx, lengths, forward, names)
                for p in pending:  # the slice's copies: wait once, then write its rows out
                    if p.event is not None:
                        p.event.synchronize()
                    got = p.host.numpy()
                    for j, n in enumerate(names):
                        outs[n][lo + p.idx] = got[j]
        return outs

    def _slices(
        self, texts: Sequence[str], tokenise: Callable[[list[str]], Tokenised]
    ) -> Iterator[tuple[int, Tokenised]]:
        """(offset, tokens) of each slice; with ``overlap`` (a GPU's policy) the next slice is tokenised on a thread
        meanwhile."""
        step = self.policy.slice_texts or len(texts)
        bounds = [(lo, min(lo + step, len(texts))) for lo in range(0, len(texts), step)]
        if len(bounds) == 1 or not self.policy.overlap:
            for lo, hi in bounds:
                yield lo, tokenise(list(texts[lo:hi]))
            return
        with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalfarm-tokenise") as pool:
            ahead = pool.submit(tokenise, list(texts[bounds[0][0] : bounds[0][1]]))
            for k, (lo, _) in enumerate(bounds):
                tok = ahead.result()
                if k + 1 < len(bounds):
                    nlo, nhi = bounds[k + 1]
                    ahead = pool.submit(tokenise, list(texts[nlo:nhi]))
                yield lo, tok

    def _run_batch(
        self,
        tok: Tokenised,
        idx: np.ndarray,
        lengths: list[int],
        forward: Callable[[dict[str, Any]], dict[str, Any]],
        names: list[str],
    ) -> list[_Pending]:
        """One batch; on out-of-memory its two halves (each may halve again), the budget halved for what follows."""
        width = self.policy.width(max(lengths[i] for i in idx))
        try:
            return [self._forward(tok, idx, width, forward, names)]
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
        self._after_oom()
        if len(idx) == 1:
            raise DeviceOutOfMemory(
                f"one text of {lengths[idx[0]]} tokens (padded to {width}) does not fit in the device's memory "
                f"({self.device}) even alone: lower max_length, choose a half-precision dtype, or give the model a "
                "larger share of a GPU (gpu_memory_gib in its catalog entry)"
            )
        splits = self.notes.setdefault("oom_splits", [])
        if len(splits) < 50:  # the first ones: enough to see what happened
            splits.append({"texts": int(len(idx)), "width": int(width)})
        self.notes["oom_split_count"] = int(self.notes.get("oom_split_count", 0)) + 1
        self.policy.halve()
        self.notes["batch_after_oom"] = (
            {"token_budget": self.policy.token_budget}
            if self.policy.token_budget is not None
            else {"batch_size": self.policy.batch_size}
        )
        half = len(idx) // 2
        return [
            *self._run_batch(tok, idx[:half], lengths, forward, names),
            *self._run_batch(tok, idx[half:], lengths, forward, names),
        ]

    def _after_oom(self) -> None:
        import torch

        if self.on_gpu and torch.cuda.is_available():
            torch.cuda.empty_cache()  # give back what the failed batch held before the halves ask again

    def _forward(
        self,
        tok: Tokenised,
        idx: np.ndarray,
        width: int,
        forward: Callable[[dict[str, Any]], dict[str, Any]],
        names: list[str],
    ) -> _Pending:
        import torch

        arrays = pad_batch(tok, idx, width, self.pad_id, left=self.padding_side == "left")
        if self.on_gpu:
            pinned = {k: torch.from_numpy(v).pin_memory() for k, v in arrays.items()}
            tensors = {k: v.to(self.device, non_blocking=True) for k, v in pinned.items()}
        else:
            tensors = {k: torch.from_numpy(v).to(self.device) for k, v in arrays.items()}
        got = forward(tensors)
        stacked = torch.stack([got[n].to(torch.float32) for n in names])  # one copy back for every output
        if not self.on_gpu:
            return _Pending(idx, stacked.cpu(), None)
        host = torch.empty(stacked.shape, dtype=torch.float32, pin_memory=True)
        host.copy_(stacked, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return _Pending(idx, host, event)
