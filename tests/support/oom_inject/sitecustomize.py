"""Test-only: CUDA's out-of-memory error for the models whose config.json asks for it.

tests/test_placement.py puts this folder first on the ``PYTHONPATH`` of the Ray it starts, so every worker imports
it at start-up (and the test installs it in its own process for the one-worker run). A transformers model whose
config.json has ``evalfarm_test_oom_above: N`` raises ``torch.OutOfMemoryError`` for any batch of more than N
padded tokens, as a GPU of that size would: the batcher's halving (evalfarm/encoders/batching.py) is tested on
real workers without a GPU, and nothing of it lives in evalfarm.
"""

from __future__ import annotations


def _limited(model, tokens: int):  # -> torch.nn.Module
    import torch

    class Limited(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model
            self.config = model.config

        def forward(self, **kw):
            n = int(kw["input_ids"].numel())
            if n > tokens:
                raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate the activations of {n} tokens")
            return self.inner(**kw)

    return Limited()


def patched_init(init):  # -> the encoder's __init__, with the limit applied after loading
    def patched(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        limit = getattr(self.model.config, "evalfarm_test_oom_above", None)
        if limit:
            self.model = _limited(self.model, int(limit))

    patched._oom_injected = True
    return patched


def install() -> None:
    import sys

    if not any("default_worker" in a for a in sys.argv):  # only Ray's workers, not its agents (they start slower)
        return
    try:
        from evalfarm.encoders import hf_transformers
    except Exception:  # not an evalfarm process (one of Ray's own)
        return
    cls = hf_transformers.HFTransformersEncoder
    if not getattr(cls.__init__, "_oom_injected", False):
        cls.__init__ = patched_init(cls.__init__)


install()
