"""The option shared by the model kinds that pool a network's token states into one sentence vector.

``transformers``, ``onnx`` and ``bert-flow`` each declare ``pooling`` through :class:`PooledOptions` (or a subclass of
it with their other options); each kind checks which poolings it supports. A kind that does not declare it
(``sentence-transformers``: the model's own pooling) refuses an entry that sets it.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from evalfarm.catalog.specs import KindOptions

Pooling = Literal["cls", "mean", "max", "first-last-avg", "last-2-avg", "last-token"]


class PooledOptions(KindOptions):
    """``pooling``: how token states become a sentence vector (the kind says which it supports)."""

    pooling: Pooling | None = Field(
        default=None,
        description="cls / mean / max over the token states; first-last-avg / last-2-avg (transformers) average "
        "two layers' mean-pooled states; last-token: the state of each text's last real token (decoder "
        "embedders: e5-mistral, gte-Qwen2, Qwen3-Embedding), whichever side the batch is padded on",
    )


def last_token_positions(mask: Any) -> Any:
    """The position of each row's last real token in an attention ``mask`` (batch, seq) of 0 / 1, whichever side
    the row is padded on: right padding puts it at ``length - 1``, left padding at the last column. Read from each
    row's mask (its last column holding a 1); the cards' ``last_token_pool`` tells the batch's padding side from
    whether every row's last column is real, and the two agree on any batch padded on one side. A numpy array or a
    torch tensor; a row without a real token gets the last column (:func:`last_token_states` zeroes it)."""
    width = mask.shape[1]
    if isinstance(mask, np.ndarray):
        return width - 1 - np.flip(mask, axis=1).argmax(axis=1)
    import torch

    return width - 1 - torch.flip(mask, dims=[1]).argmax(dim=1)


def last_token_states(states: Any, mask: Any) -> Any:
    """``states`` (batch, seq, dim) at each row's last real token (:func:`last_token_positions`); a row whose mask
    holds no token is zero (never a padding state)."""
    pos = last_token_positions(mask)
    if isinstance(states, np.ndarray):
        out = states[np.arange(states.shape[0]), pos]
        return out * mask.any(axis=1)[:, None]
    import torch

    rows = torch.arange(states.shape[0], device=states.device)
    return states[rows, pos] * mask.any(dim=1).unsqueeze(-1).to(states.dtype)
