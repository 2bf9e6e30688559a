"""Device and dtype choices shared by the torch-backed encoders."""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from typing import Any

CPU_HALF_ENV = "EVALFARM_CPU_HALF"
"""Set to 1 to run a spec's float16 / bfloat16 on the CPU as asked (slow on most CPUs): how the half-precision path
and its tolerance against float32 are checked on a machine without a GPU. Unset, the CPU runs float32."""

HALF_PRECISION_TOLERANCE = {"sts_spearman": 0.005, "evalrank_mrr": 0.01}
"""How far a float16 / bfloat16 model's metrics may lie from the same model's float32 ones (absolute): STS-B test
Spearman and the EvalRank sentence MRR (cos). On an H200, all-MiniLM-L6-v2 was 1e-5 / 3e-5 and 0.0011 / 0.0004 off
(benchmarks/README.md); tests/test_batching.py checks bfloat16 on the CPU, benchmarks/gpu_check.py on a GPU."""

_DEVICE: contextvars.ContextVar[str | None] = contextvars.ContextVar("evalfarm_encoder_device", default=None)


@contextlib.contextmanager
def encoder_device(device: str | None) -> Iterator[None]:
    """Encoders loaded inside the block run on ``device`` (a run's ``--device``) instead of the default: a run
    with ``--device cpu`` on a GPU machine embeds on the CPU too. None leaves the default (:func:`pick_device`)."""
    token = _DEVICE.set(device)
    try:
        yield
    finally:
        _DEVICE.reset(token)


def pick_device() -> str:
    """The run's ``--device`` when one was given (:func:`encoder_device`), else ``cuda`` when torch sees a GPU, else
    ``cpu``."""
    chosen = _DEVICE.get()
    if chosen is not None:
        return chosen
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def torch_dtype(name: str, device: str) -> Any:
    """The torch dtype for a spec's ``dtype``: half precisions on CUDA; on the CPU float32 (unless
    :data:`CPU_HALF_ENV` says otherwise).

    CPU bfloat16/float16 matmuls are slow on most CPUs and change the numbers, so a spec asking for them runs
    in float32 on CPU; :func:`effective_dtype` records what actually ran.
    """
    import torch

    return getattr(torch, effective_dtype(name, device))


def effective_dtype(name: str, device: str) -> str:
    if device.startswith("cuda") or os.environ.get(CPU_HALF_ENV, "").strip() in ("1", "true", "yes"):
        return name
    return "float32"
