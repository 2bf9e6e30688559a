"""``sentence-transformers`` encoder: the model's own module pipeline, raw outputs.

No extra normalisation is requested (``normalize_embeddings=False``): the rank stage normalises. A model whose
pipeline itself ends in a ``Normalize`` module (all-MiniLM-L6-v2 does) still returns unit vectors, because that
module is part of the model. ``max_length`` from the spec becomes ``max_seq_length`` so all kinds truncate alike.

Prompts (``prompts:``) go through the library's own argument: ``encode(texts, prompt=...)`` for a literal,
``encode(texts, prompt_name=...)`` for the model's own (its ``config_sentence_transformers.json``), so a model whose
pooling leaves the prompt's tokens out (``include_prompt: false``) pools as its authors do. A model without
``prompts:`` is encoded as before, with no prompt argument (the library then applies the model's
``default_prompt_name`` when its config sets one: recorded in the provenance as ``default_prompt``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from evalfarm.catalog.prompts import Prompt
from evalfarm.catalog.specs import ModelSpec
from evalfarm.encoders._torch import effective_dtype, pick_device, torch_dtype
from evalfarm.encoders.batching import GPU_CHUNK_TEXTS, Batcher, BatchPolicy, Tokenised
from evalfarm.encoders.protocol import ModelLoadError
from evalfarm.plugins import LoadContext, ModelKind, model_kinds


class SentenceTransformerEncoder:
    level: Literal["sentence"] = "sentence"

    def __init__(
        self,
        ref: str,
        *,
        revision: str | None = None,
        max_length: int = 128,
        batch_size: int = 64,
        dtype: str = "float32",
        trust_remote_code: bool = False,
        device: str | None = None,
    ) -> None:
        from sentence_transformers import SentenceTransformer

        self.device = device or pick_device()
        self.dtype = effective_dtype(dtype, self.device)
        self.batch_size = batch_size
        self.model = SentenceTransformer(
            ref,
            device=self.device,
            trust_remote_code=trust_remote_code,
            revision=revision,
            model_kwargs={"dtype": torch_dtype(dtype, self.device)},
        )
        self.model.max_seq_length = max_length
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        dim = get_dim()
        if dim is None:
            dim = int(self.model.encode(["a"], convert_to_numpy=True).shape[1])
        self.dim = int(dim)
        self.normalized = any(type(m).__name__ == "Normalize" for m in self.model)
        # on a GPU, evalfarm's batches (token budget, pinned copies: evalfarm.encoders.batching); on the CPU the
        # model's own encode(), whose vectors earlier releases stored
        self.batcher: Batcher | None = None
        self.chunk_texts: int | None = None
        if self.device.startswith("cuda"):
            policy = BatchPolicy.for_device(self.device, batch_size=batch_size, max_length=max_length)
            pad = getattr(self.model.tokenizer, "pad_token_id", None)
            self.batcher = Batcher(policy, self.device, pad if pad is not None else 0)
            self.chunk_texts = GPU_CHUNK_TEXTS
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        return f"SentenceTransformerEncoder(dim={self.dim}, device={self.device})"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, {})

    def encode_prompted(self, texts: Sequence[str], prompt: Prompt) -> np.ndarray:
        """``texts`` under ``prompt``: the model's own by name, a literal, or none (``prompt=""``: not even the
        model's default prompt)."""
        if prompt.name is not None:
            self.prompt_text(prompt.name)  # an unknown name: an error naming the model's prompts
            return self._encode(texts, {"prompt_name": prompt.name})
        return self._encode(texts, {"prompt": prompt.text})

    def prompt_text(self, name: str) -> str:
        """The model's own prompt ``name`` (``SentenceTransformer.prompts``)."""
        from evalfarm.encoders.prompts import named_prompt

        prompts = {k: v for k, v in (self.model.prompts or {}).items() if isinstance(v, str)}
        return named_prompt(prompts, name, model=self.spec_id or "sentence-transformers model")

    def _encode(self, texts: Sequence[str], how: dict[str, Any]) -> np.ndarray:
        if not len(texts):
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.batcher is not None:
            return self.batcher.run(texts, self._tokenise, self._forward, {"": self.dim})[""]
        emb = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=False,
            show_progress_bar=False,
            **how,
        )
        return np.asarray(emb, dtype=np.float32)

    def _tokenise(self, texts: list[str]) -> Tokenised:
        """The model's own tokenisation (its Transformer module's: stripping, lower-casing, truncation), unpadded."""
        features = self.model.tokenize(texts)
        mask = features["attention_mask"].numpy().astype(bool)  # whichever side the tokenizer padded
        cuts = np.cumsum(mask.sum(axis=1))[:-1]
        ids = [r.tolist() for r in np.split(features["input_ids"].numpy()[mask], cuts)]
        types = features.get("token_type_ids")
        return Tokenised(ids, None if types is None else [r.tolist() for r in np.split(types.numpy()[mask], cuts)])

    def _forward(self, tensors: dict[str, Any]) -> dict[str, Any]:
        return {"": self.model(dict(tensors))["sentence_embedding"]}


# -- the model kind -------------------------------------------------------------------------------------------------
def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[SentenceTransformerEncoder, dict[str, Any]]:
    """A sentence-transformers model folder or hub id, with the model's own pooling."""
    if spec.option("pooling") is not None:  # a derived model switched from a transformers base that pools
        raise ModelLoadError(
            f"model {spec.id!r}: sentence-transformers models pool by their own config; "
            "use kind 'transformers' to choose a pooling"
        )
    enc = SentenceTransformerEncoder(
        str(ctx.location),
        revision=spec.revision if ctx.is_hub else None,
        max_length=spec.max_length,
        batch_size=spec.batch_size,
        dtype=spec.dtype,
        trust_remote_code=spec.trust_remote_code,
    )
    prov = {
        "device": enc.device,
        "dtype": enc.dtype,
        "max_length": spec.max_length,
        "normalized_by_model": enc.normalized,
    }
    default = getattr(enc.model, "default_prompt_name", None)
    if default is not None and spec.prompts is None:  # the library applies it to every text: say so
        prov["default_prompt"] = {"name": default, "text": (enc.model.prompts or {}).get(default)}
    return enc, prov


KIND = ModelKind(
    name="sentence-transformers",
    description="A sentence-transformers model (its own module pipeline: pooling and normalisation as published).",
    levels=("sentence",),
    load=load_model,
    libraries=("torch", "transformers", "sentence-transformers"),
    cost=10.0,
    gpu=True,
    checkpoint="hf",
    fields=("source", "revision", "max_length", "batch_size", "dtype", "trust_remote_code", "prompts", "dim"),
)
model_kinds.register(KIND)
