"""A toy model kind with options of its own, in one module: ``hashing-ngrams``.

Each text's character n-grams (padded with a space) are hashed (CRC-32) into buckets and counted, as ``hashing-bow``
does, but the entry chooses ``n`` (1-5, default 3) and ``buckets`` (8-4096, default 64). The kind declares them in
:class:`NgramOptions`: a catalog writes them as keys of the model entry, evalfarm validates them with this model
(a bad value is an error naming the model and the option), and leaves an option at its default out of the spec hash.
Nothing of it lives in evalfarm: it is found through its entry point.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from evalfarm.catalog.specs import KindOptions, ModelSpec, kind_options
from evalfarm.plugins import LoadContext, ModelKind


class NgramOptions(KindOptions):
    """The kind's own options."""

    n: int = Field(default=3, ge=1, le=5, description="characters per n-gram")
    buckets: int = Field(default=64, ge=8, le=4096, description="hash buckets: the embedding's dimension")


class HashingNgrams:
    """Counts of hashed character n-grams in ``buckets`` buckets."""

    level: Literal["sentence"] = "sentence"

    def __init__(self, *, n: int = 3, buckets: int = 64) -> None:
        self.n, self.dim = n, buckets
        self.spec_id = ""
        self.provenance: dict[str, Any] = {}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            padded = f" {text} "
            for j in range(max(1, len(padded) - self.n + 1)):
                out[i, zlib.crc32(padded[j : j + self.n].encode("utf-8")) % self.dim] += 1.0
        return out


def _load(spec: ModelSpec, ctx: LoadContext) -> tuple[HashingNgrams, dict[str, Any]]:
    opts = kind_options(spec, NgramOptions)
    return HashingNgrams(n=opts.n, buckets=opts.buckets), {"ngram": opts.n, "buckets": opts.buckets}


HASHING_NGRAMS = ModelKind(
    name="hashing-ngrams",
    description="Hashed character n-gram counts; the entry chooses n and the number of buckets (a toy plug-in kind "
    "with options of its own).",
    levels=("sentence",),
    load=_load,
    libraries=("numpy",),
    cost=0.01,
    small=True,
    needs_source=False,
    options=NgramOptions,
)
