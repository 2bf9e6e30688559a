"""Hugging Face ``transformers`` encoder (``AutoModel`` + ``AutoTokenizer``) with an explicit pooling.

Pooling over the token states (padding masked out):

- ``cls``: the first token's last-layer state.
- ``mean``: mean of last-layer states.
- ``max``: element-wise max of last-layer states.
- ``first-last-avg``: mean over tokens of ``(hidden_states[1] + hidden_states[-1]) / 2``, i.e. the first
  transformer layer's output and the last layer's (``hidden_states[0]`` is the embedding layer). This is the
  convention of BERT-whitening (Su et al. 2021) and SimCSE's ``avg_first_last``.

Texts are sorted by token length so each batch pads little, and rows come back in input order. Models that differ
only in pooling run one forward pass for all of them (:meth:`HFTransformersEncoder.encode_poolings`; the embed stage
uses it for a catalog's pooling siblings, ``evalfarm.plan.share_forward_passes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from evalfarm.catalog.specs import ModelSpec
from evalfarm.encoders._torch import effective_dtype, pick_device, torch_dtype
from evalfarm.plugins import LoadContext, ModelKind, model_kinds

Pooling = Literal["cls", "mean", "max", "first-last-avg"]


class HFTransformersEncoder:
    """A sentence encoder over any ``AutoModel`` checkpoint (local folder or hub id)."""

    level: Literal["sentence"] = "sentence"

    def __init__(
        self,
        ref: str,
        *,
        pooling: Pooling,
        revision: str | None = None,
        max_length: int = 128,
        batch_size: int = 64,
        dtype: str = "float32",
        trust_remote_code: bool = False,
        device: str | None = None,
    ) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        if pooling not in ("cls", "mean", "max", "first-last-avg"):
            raise ValueError(f"unknown pooling {pooling!r} (cls, mean, max, first-last-avg)")
        self.device = device or pick_device()
        self.dtype = effective_dtype(dtype, self.device)
        self.pooling = pooling
        self.max_length = max_length
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(ref, revision=revision, trust_remote_code=trust_remote_code)
        self.model = AutoModel.from_pretrained(
            ref, revision=revision, trust_remote_code=trust_remote_code, dtype=torch_dtype(dtype, self.device)
        )
        self.model.eval().to(self.device)
        self.dim = int(self.model.config.hidden_size)
        self._torch = torch
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        return f"HFTransformersEncoder({self.model.name_or_path!r}, pooling={self.pooling!r}, device={self.device})"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode_poolings(texts, (self.pooling,))[self.pooling]

    def encode_poolings(self, texts: Sequence[str], poolings: Sequence[Pooling]) -> dict[str, np.ndarray]:
        """One forward pass over ``texts``, pooled every way in ``poolings``: ``{pooling: (n, dim) float32}``. Each
        array equals what an encoder of that pooling returns for the same call (same batches, same token states)."""
        torch = self._torch
        for p in poolings:
            if p not in ("cls", "mean", "max", "first-last-avg"):
                raise ValueError(f"unknown pooling {p!r} (cls, mean, max, first-last-avg)")
        outs: dict[str, np.ndarray] = {p: np.zeros((len(texts), self.dim), dtype=np.float32) for p in poolings}
        if not len(texts):
            return outs
        enc = self.tokenizer(list(texts), truncation=True, max_length=self.max_length, padding=False)
        ids = enc["input_ids"]
        types = enc.get("token_type_ids")
        order = np.argsort([-len(x) for x in ids], kind="stable")
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        want_hidden = "first-last-avg" in poolings
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                width = max(1, len(ids[idx[0]]))
                # right padding, whatever the tokenizer's padding_side: position 0 is always the first token
                input_ids = np.full((len(idx), width), pad_id, dtype=np.int64)
                mask = np.zeros((len(idx), width), dtype=np.int64)
                for j, i in enumerate(idx):
                    input_ids[j, : len(ids[i])] = ids[i]
                    mask[j, : len(ids[i])] = 1
                batch = {"input_ids": input_ids, "attention_mask": mask}
                if types is not None:
                    tt = np.zeros_like(input_ids)
                    for j, i in enumerate(idx):
                        tt[j, : len(types[i])] = types[i]
                    batch["token_type_ids"] = tt
                tensors = {k: torch.from_numpy(v).to(self.device) for k, v in batch.items()}
                res = self.model(**tensors, output_hidden_states=want_hidden)
                for name, out in outs.items():
                    out[idx] = self._pool(res, tensors["attention_mask"], name).float().cpu().numpy()
        return outs

    def _pool(self, res, mask, pooling: str):  # -> torch.Tensor
        torch = self._torch
        if pooling == "cls":
            return res.last_hidden_state[:, 0].float()
        m = mask.unsqueeze(-1).to(torch.float32)
        if pooling == "first-last-avg":
            states = (res.hidden_states[1].float() + res.hidden_states[-1].float()) / 2.0
        else:
            states = res.last_hidden_state.float()
        if pooling == "max":
            return states.masked_fill(m == 0, torch.finfo(torch.float32).min).max(dim=1).values
        return (states * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


# -- the model kind -------------------------------------------------------------------------------------------------
def check_spec(spec: ModelSpec) -> None:
    """A transformers model chooses its pooling (a derived one may inherit its base's)."""
    if spec.pooling is None and spec.base is None:
        raise ValueError(f"model {spec.id!r}: transformers needs 'pooling' (cls, mean, max, first-last-avg)")


def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[HFTransformersEncoder, dict[str, Any]]:
    """A checkpoint folder or hub id through ``AutoModel``, pooled as the spec says."""
    assert spec.pooling is not None
    enc = HFTransformersEncoder(
        str(ctx.location),
        pooling=spec.pooling,
        revision=spec.revision if ctx.is_hub else None,
        max_length=spec.max_length,
        batch_size=spec.batch_size,
        dtype=spec.dtype,
        trust_remote_code=spec.trust_remote_code,
    )
    return enc, {"pooling": spec.pooling, "device": enc.device, "dtype": enc.dtype, "max_length": spec.max_length}


KIND = ModelKind(
    name="transformers",
    description="A Hugging Face transformers checkpoint (AutoModel + AutoTokenizer) with an explicit pooling "
    "(cls, mean, max, first-last-avg).",
    levels=("sentence",),
    load=load_model,
    check=check_spec,
    libraries=("torch", "transformers", "tokenizers"),
    cost=10.0,
    gpu=True,
    fields=("source", "revision", "pooling", "max_length", "batch_size", "dtype", "trust_remote_code"),
)
model_kinds.register(KIND)
