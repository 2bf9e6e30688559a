"""Hugging Face ``transformers`` encoder (``AutoModel`` + ``AutoTokenizer``) with an explicit pooling.

Pooling over the token states (padding masked out):

- ``cls``: the first token's last-layer state.
- ``mean``: mean of last-layer states.
- ``max``: element-wise max of last-layer states.
- ``first-last-avg``: mean over tokens of ``(hidden_states[1] + hidden_states[-1]) / 2``, i.e. the first
  transformer layer's output and the last layer's (``hidden_states[0]`` is the embedding layer). This is the
  convention of BERT-whitening (Su et al. 2021) and SimCSE's ``avg_first_last``.
- ``last-2-avg``: mean over tokens of ``(hidden_states[-2] + hidden_states[-1]) / 2`` (BERT-whitening's and the
  EvalRank paper's ``last2avg``).
- ``last-token``: the last real token's last-layer state (decoder embedders: e5-mistral, gte-Qwen2,
  Qwen3-Embedding, whose cards' ``last_token_pool`` reads it), found from the attention mask whichever side a row is
  padded on (:func:`evalfarm.encoders.pooled.last_token_positions`).

Padding: right by default (position 0 is every row's first token); ``padding_side: left`` pads on the left, as the
decoder embedders' cards do (``AutoTokenizer.from_pretrained(..., padding_side='left')``). ``eos: true`` ends every
text with the tokenizer's end-of-sequence token, as e5-mistral's and gte-Qwen2's cards append it (``add_eos_token``)
and Qwen3-Embedding's reference code its ``<|endoftext|>``: a text the tokenizer already ends with it keeps one; a
text at ``max_length`` drops its last token for it. Prompts (``prompts:``) are prepended to the text before it is
tokenized (:mod:`evalfarm.encoders.prompts`); a named one is read from the checkpoint's
``config_sentence_transformers.json``.

``layer`` picks the hidden state that ``cls`` / ``mean`` / ``max`` / ``last-token`` pool (``hidden_states[layer]``:
0 is the embedding layer, 1..L the layers' outputs, negative counts from the end; unset is the last layer). A pooling
*key* names both: ``mean`` or ``mean@3`` (:func:`pooling_key`).

Texts are sorted by token length so each batch pads little, and rows come back in input order. Models that differ
only in pooling and layer run one forward pass for all of them (:meth:`HFTransformersEncoder.encode_poolings`; the
embed stage uses it for a catalog's pooling siblings, ``evalfarm.plan.share_forward_passes``).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from evalfarm.catalog.specs import ModelSpec, kind_options
from evalfarm.encoders._torch import effective_dtype, pick_device, torch_dtype
from evalfarm.encoders.batching import GPU_CHUNK_TEXTS, Batcher, BatchPolicy, Tokenised
from evalfarm.encoders.pooled import PooledOptions, Pooling, last_token_states
from evalfarm.plugins import LoadContext, ModelKind, model_kinds

POOLINGS: tuple[str, ...] = ("cls", "mean", "max", "first-last-avg", "last-2-avg", "last-token")
_LAYERED = ("cls", "mean", "max", "last-token")
"""Poolings over one hidden state, which ``layer`` may choose; the two averages name their own layers."""


def pooling_key(pooling: str, layer: int | None = None) -> str:
    """``pooling`` or ``pooling@layer``: what :meth:`HFTransformersEncoder.encode_poolings` takes and returns."""
    return pooling if layer is None else f"{pooling}@{layer}"


def parse_pooling_key(key: str) -> tuple[str, int | None]:
    """The inverse of :func:`pooling_key`, checked: an unknown pooling or a layer on an average is an error."""
    pooling, _, layer = key.partition("@")
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {pooling!r} ({', '.join(POOLINGS)})")
    if not layer:
        return pooling, None
    if pooling not in _LAYERED:
        raise ValueError(f"pooling {pooling!r} names its own layers; 'layer' applies to {', '.join(_LAYERED)}")
    try:
        return pooling, int(layer)
    except ValueError:
        raise ValueError(f"pooling key {key!r}: the layer after '@' must be an integer") from None


def with_eos(ids: Sequence[Sequence[int]], eos: int, max_length: int) -> list[list[int]]:
    """Each id list ending with ``eos``: kept as it is when it does, else cut to ``max_length - 1`` and ``eos``
    appended (the card's ``tokenize``: truncate, then add the end-of-text token)."""
    return [list(x) if x and x[-1] == eos else [*list(x)[: max_length - 1], eos] for x in ids]


class HFTransformersEncoder:
    """A sentence encoder over any ``AutoModel`` checkpoint (local folder or hub id)."""

    level: Literal["sentence"] = "sentence"

    def __init__(
        self,
        ref: str,
        *,
        pooling: Pooling,
        layer: int | None = None,
        revision: str | None = None,
        max_length: int = 128,
        batch_size: int = 64,
        dtype: str = "float32",
        trust_remote_code: bool = False,
        device: str | None = None,
        padding_side: Literal["left", "right"] = "right",
        eos: bool = False,
    ) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.padding_side = padding_side
        self.eos = eos
        self.ref, self.revision = ref, revision
        self._prompts: dict[str, str] | None = None
        self.pooling_key = pooling_key(pooling, layer)
        parse_pooling_key(self.pooling_key)
        self.device = device or pick_device()
        self.dtype = effective_dtype(dtype, self.device)
        self.pooling = pooling
        self.layer = layer
        self.max_length = max_length
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(ref, revision=revision, trust_remote_code=trust_remote_code)
        if eos and self.tokenizer.eos_token_id is None:
            raise ValueError("eos: true, but the tokenizer has no end-of-sequence token")
        self.model = AutoModel.from_pretrained(
            ref, revision=revision, trust_remote_code=trust_remote_code, dtype=torch_dtype(dtype, self.device)
        )
        self.model.eval().to(self.device)
        self.dim = int(self.model.config.hidden_size)
        self.n_layers = int(self.model.config.num_hidden_layers)
        if layer is not None and not -self.n_layers - 1 <= layer <= self.n_layers:
            raise ValueError(f"layer {layer} is out of range: the model has hidden states 0..{self.n_layers}")
        self._torch = torch
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.batcher = Batcher(BatchPolicy.for_device(self.device, batch_size=batch_size, max_length=max_length),
                               self.device, pad_id, padding_side=padding_side)  # fmt: skip
        self.chunk_texts = GPU_CHUNK_TEXTS if self.batcher.on_gpu else None  # texts per call from the embed stage
        # a decoder keeps every layer's keys and values for a next token by default: an embedding has none
        takes = "use_cache" in inspect.signature(self.model.forward).parameters
        self._no_cache = {"use_cache": False} if takes and getattr(self.model.config, "use_cache", False) else {}
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        name = self.model.name_or_path
        return f"HFTransformersEncoder({name!r}, pooling={self.pooling_key!r}, device={self.device})"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode_poolings(texts, (self.pooling_key,))[self.pooling_key]

    def prompt_text(self, name: str) -> str:
        """The checkpoint's own prompt ``name`` (its ``config_sentence_transformers.json``)."""
        from evalfarm.encoders.prompts import model_prompts, named_prompt

        if self._prompts is None:
            self._prompts = model_prompts(self.ref, revision=self.revision)
        return named_prompt(self._prompts, name, model=self.spec_id or self.ref)

    def encode_poolings(self, texts: Sequence[str], poolings: Sequence[str]) -> dict[str, np.ndarray]:
        """One forward pass over ``texts``, pooled every way in ``poolings`` (pooling keys: ``mean``, ``cls@3``):
        ``{key: (n, dim) float32}``. Each array equals what an encoder of that pooling and layer returns for the same
        call (same batches, same token states)."""
        parsed = {p: parse_pooling_key(p) for p in poolings}
        want_hidden = any(p in ("first-last-avg", "last-2-avg") or layer is not None for p, layer in parsed.values())

        def forward(tensors: dict[str, Any]) -> dict[str, Any]:
            res = self.model(**tensors, output_hidden_states=want_hidden, **self._no_cache)
            return {name: self._pool(res, tensors["attention_mask"], *parsed[name]) for name in poolings}

        # right padding unless the spec says left (the batcher's padding_side), whatever the tokenizer's
        return self.batcher.run(texts, self._tokenise, forward, dict.fromkeys(poolings, self.dim))

    def _tokenise(self, texts: list[str]) -> Tokenised:
        enc = self.tokenizer(texts, truncation=True, max_length=self.max_length, padding=False)
        ids, types = enc["input_ids"], enc.get("token_type_ids")
        if self.eos:  # token types (an encoder's) are all 0 for one segment: the model's default
            ids, types = with_eos(ids, int(self.tokenizer.eos_token_id), self.max_length), None
        return Tokenised(ids, types)

    def _pool(self, res, mask, pooling: str, layer: int | None):  # -> torch.Tensor
        torch = self._torch
        if pooling == "first-last-avg":
            states = (res.hidden_states[1].float() + res.hidden_states[-1].float()) / 2.0
        elif pooling == "last-2-avg":
            states = (res.hidden_states[-2].float() + res.hidden_states[-1].float()) / 2.0
        elif layer is not None:
            states = res.hidden_states[layer].float()
        else:
            states = res.last_hidden_state.float()
        if pooling == "cls":
            return states[:, 0]
        if pooling == "last-token":
            return last_token_states(states, mask)
        m = mask.unsqueeze(-1).to(torch.float32)
        if pooling == "max":
            return states.masked_fill(m == 0, torch.finfo(torch.float32).min).max(dim=1).values
        return (states * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


# -- the model kind -------------------------------------------------------------------------------------------------
class TransformersOptions(PooledOptions):
    """A transformers model's own options (top-level keys of its catalog entry): ``pooling`` and ``layer``."""

    layer: int | None = Field(
        default=None,
        strict=True,
        description="the hidden state that cls / mean / max pool (0 = the embedding layer, 1..L = the layers' "
        "outputs, negative counts from the end); unset: the last layer. The paper's layer-choice family: models that "
        "differ only in pooling and layer share one forward pass",
    )
    padding_side: Literal["left", "right"] | None = Field(
        default=None,
        description="the side a batch is padded on: right (unset: position 0 is every text's first token) or left, "
        "as decoder embedders' cards pad (last-token pooling reads the mask either way)",
    )
    eos: bool = Field(
        default=False,
        description="end every text with the tokenizer's end-of-sequence token, where the card appends one "
        "(e5-mistral, gte-Qwen2: add_eos_token; Qwen3-Embedding: <|endoftext|>) for last-token pooling to read",
    )


def check_spec(spec: ModelSpec) -> None:
    """A transformers model chooses its pooling (a derived one may inherit its base's); ``layer`` only with a
    pooling over one hidden state."""
    opts = kind_options(spec, TransformersOptions)
    if opts.pooling is None and spec.base is None:
        raise ValueError(f"model {spec.id!r}: transformers needs 'pooling' ({', '.join(POOLINGS)})")
    if opts.layer is not None and opts.pooling is not None and opts.pooling not in _LAYERED:
        raise ValueError(
            f"model {spec.id!r}: pooling {opts.pooling!r} names its own layers; 'layer' applies to "
            f"{', '.join(_LAYERED)}"
        )
    if opts.padding_side == "left" and opts.pooling == "cls":
        raise ValueError(
            f"model {spec.id!r}: cls pooling reads position 0, which left padding fills with padding for all but "
            "the longest text; pad right (drop padding_side) or pool otherwise"
        )


def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[HFTransformersEncoder, dict[str, Any]]:
    """A checkpoint folder or hub id through ``AutoModel``, pooled as the spec says."""
    opts = kind_options(spec, TransformersOptions)
    assert opts.pooling is not None
    enc = HFTransformersEncoder(
        str(ctx.location),
        pooling=opts.pooling,
        layer=opts.layer,
        revision=spec.revision if ctx.is_hub else None,
        max_length=spec.max_length,
        batch_size=spec.batch_size,
        dtype=spec.dtype,
        trust_remote_code=spec.trust_remote_code,
        padding_side=opts.padding_side or "right",
        eos=opts.eos,
    )
    prov: dict[str, Any] = {"pooling": opts.pooling}
    if opts.layer is not None:
        prov["layer"] = opts.layer
    if opts.padding_side is not None:
        prov["padding_side"] = opts.padding_side
    if opts.eos:
        prov["eos"] = enc.tokenizer.eos_token
    return enc, {**prov, "device": enc.device, "dtype": enc.dtype, "max_length": spec.max_length}


def forward_key(spec: ModelSpec) -> dict[str, Any]:
    """What a model's forward pass depends on (checkpoint, with its tokenizer; revision, truncation, batching, dtype,
    remote code): models with equal keys differ only in pooling and layer, so one pass embeds them all
    (:meth:`HFTransformersEncoder.encode_poolings`)."""
    assert spec.source is not None
    fields = {"revision", "max_length", "batch_size", "dtype", "trust_remote_code"}
    # "tokenizer": the null the key held while 'tokenizer' was a ModelSpec field (it is onnx's option now): the key
    # keeps its old form, so forward-pass groups keyed before stay the same (tests/test_spec_hash_golden.py)
    dump = spec.model_dump(mode="json", include=fields)
    key = {"source": spec.source.model_dump(mode="json"), "tokenizer": None, **dump}
    opts = kind_options(spec, TransformersOptions)
    # what else changes the tokens a pass runs over, each only when set (the keys of models without them hold)
    extra = {"padding_side": opts.padding_side, "eos": opts.eos or None, "prompts": spec.model_dump(
        mode="json", include={"prompts"}).get("prompts")}  # fmt: skip
    return {**key, **{k: v for k, v in extra.items() if v is not None}}


KIND = ModelKind(
    name="transformers",
    description="A Hugging Face transformers checkpoint (AutoModel + AutoTokenizer) with an explicit pooling "
    "(cls, mean, max, first-last-avg, last-2-avg, last-token) and, for cls / mean / max / last-token, a layer "
    "choice; left padding and an end-of-sequence token where a decoder embedder's card asks for them.",
    levels=("sentence",),
    load=load_model,
    check=check_spec,
    libraries=("torch", "transformers", "tokenizers"),
    cost=10.0,
    gpu=True,
    checkpoint="hf",
    fields=("source", "revision", "max_length", "batch_size", "dtype", "trust_remote_code", "prompts", "dim"),
    options=TransformersOptions,
    forward_key=forward_key,
)
model_kinds.register(KIND)
