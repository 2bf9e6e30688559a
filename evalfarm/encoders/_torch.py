"""Device and dtype choices shared by the torch-backed encoders."""

from __future__ import annotations

from typing import Any


def pick_device() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def torch_dtype(name: str, device: str) -> Any:
    """The torch dtype for a spec's ``dtype``: half precisions only on CUDA; on CPU always float32.

    CPU bfloat16/float16 matmuls are slow on most CPUs and change the numbers, so a spec asking for them runs
    in float32 on CPU; :func:`effective_dtype` records what actually ran.
    """
    import torch

    return getattr(torch, effective_dtype(name, device))


def effective_dtype(name: str, device: str) -> str:
    return name if device.startswith("cuda") else "float32"
