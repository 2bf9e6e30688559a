"""The torch device a run scores on: checked once, before any unit starts, with an error that says what exists.

``--device cuda`` on a machine without a GPU used to fail every unit, one by one, each retried (issue #13.7). A
device that is missing now fails the run before scheduling (the driver checks when its workers run on this machine),
and where only a remote worker can tell, the worker's check raises :class:`DeviceUnavailable`, which is never
retried: another attempt on the same node cannot grow a GPU.
"""

from __future__ import annotations

from functools import cache


class DeviceUnavailable(RuntimeError):
    """The requested torch device does not exist here (no GPU, no such index, torch built without it)."""

    retryable = False


@cache
def check_device(device: str | None) -> str | None:
    """``device`` as torch names it (``cpu``, ``cuda:0``, ...) if it can be used here, else DeviceUnavailable;
    ValueError for a name torch does not know. None (the default: cuda when present, else cpu) is always usable
    and returned as is, without importing torch: a run of word vectors never loads torch (issue #14)."""
    if device is None:
        return None
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"--device {device!r} is not a torch device (use cpu, cuda, cuda:1, mps): {exc}") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            why = "torch was built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise DeviceUnavailable(
                f"--device {device}: {why} on this machine (torch {torch.__version__}); leave --device out to "
                "score on the CPU here, or run where a GPU is"
            )
        if dev.index is not None and dev.index >= n:
            raise DeviceUnavailable(f"--device {device}: this machine has {n} CUDA GPU(s): cuda:0 to cuda:{n - 1}")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise DeviceUnavailable(f"--device {device}: Apple's MPS backend is not available on this machine")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise DeviceUnavailable(f"--device {device}: evalfarm scores on cpu, cuda or mps, not {dev.type}")
    return str(dev)
