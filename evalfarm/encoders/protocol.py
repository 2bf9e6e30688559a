"""The one contract every model satisfies: ``encode(texts) -> float32 array``.

Anything with this shape can be evaluated. Word-level encoders add ``lookup`` so the embed stage can record
out-of-vocabulary words instead of hiding them, and ``vocab_mean`` so the rank stage can apply the OOV and
centering policies of the EvalRank protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Encoder(Protocol):
    """A loaded model. ``encode`` returns an ``(len(texts), dim)`` float32 array, row i for ``texts[i]``."""

    level: Literal["word", "sentence"]
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


@runtime_checkable
class WordEncoder(Encoder, Protocol):
    """A word-vector model. ``lookup`` returns vectors and a boolean OOV mask (OOV rows are zero)."""

    def lookup(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]: ...

    def vocab_mean(self) -> np.ndarray:
        """Mean vector over the model's whole vocabulary (float32, shape ``(dim,)``)."""
        ...

    def vocab_size(self) -> int: ...


class ModelLoadError(RuntimeError):
    """A model that cannot be loaded; the message names the model id and says what to do."""


class NotSupportedYet(ModelLoadError):
    """A model family that the catalog names but this project cannot run yet."""
