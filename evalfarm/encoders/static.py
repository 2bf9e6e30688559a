"""The ``tokenlearn-static-model`` package (a Model2Vec-like static embedding, 64 dims) as an Encoder.

The package exposes only ``static_model.get_embeddings(texts)``, with its bundled model folder and a fixed
maximum of 512 tokens; its config normalises the output vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from evalfarm.catalog.specs import ModelSpec
from evalfarm.plugins import LoadContext, ModelKind, model_kinds


class StaticModelEncoder:
    level: Literal["sentence"] = "sentence"

    def __init__(self, *, batch_size: int = 1024) -> None:
        from static_model import get_embeddings

        self._embed = get_embeddings
        self.batch_size = batch_size
        self.dim = int(np.asarray(get_embeddings(["a"]), dtype=np.float32).shape[1])
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        return f"StaticModelEncoder(dim={self.dim})"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            block = [str(t) for t in texts[start : start + self.batch_size]]
            out[start : start + len(block)] = np.asarray(self._embed(block), dtype=np.float32)
        return out


# -- the model kind -------------------------------------------------------------------------------------------------
def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[StaticModelEncoder, dict[str, Any]]:
    """The installed package's bundled model (the source locates the package; its folder is its own)."""
    return StaticModelEncoder(batch_size=spec.batch_size), {}


KIND = ModelKind(
    name="static",
    description="The tokenlearn-static-model package: a Model2Vec-like static embedding (64 dims).",
    levels=("sentence",),
    load=load_model,
    libraries=("tokenlearn-static-model",),
    cost=0.25,
    small=True,
    fields=("source", "batch_size"),
)
model_kinds.register(KIND)
