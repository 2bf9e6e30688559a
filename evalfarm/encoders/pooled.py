"""The option shared by the model kinds that pool a network's token states into one sentence vector.

``transformers``, ``onnx`` and ``bert-flow`` each declare ``pooling`` through :class:`PooledOptions` (or a subclass of
it with their other options); each kind checks which poolings it supports. A kind that does not declare it
(``sentence-transformers``: the model's own pooling) refuses an entry that sets it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from evalfarm.catalog.specs import KindOptions

Pooling = Literal["cls", "mean", "max", "first-last-avg", "last-2-avg"]


class PooledOptions(KindOptions):
    """``pooling``: how token states become a sentence vector (the kind says which it supports)."""

    pooling: Pooling | None = Field(
        default=None,
        description="cls / mean / max over the token states; first-last-avg / last-2-avg (transformers) average "
        "two layers' mean-pooled states",
    )
