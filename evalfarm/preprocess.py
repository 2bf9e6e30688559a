"""Preprocessing protocols: what every scorer does to stored embeddings before it compares them.

One place, so every evaluator that claims the paper's protocol (EvalRank now; word similarity, STS and the
downstream tasks later) gets the same vectors. The defaults mirror the EvalRank toolkit
(BinWang28/EvalRank-Embedding-Evaluation, ``src/w_model.py`` at 9754e9d); the protocol table of docs/evaluators.md
("The protocol, exactly as the paper's toolkit") points at the lines:

- **word** (``src/w_model.py``; ``src/run_word_evaluation.py`` sets ``config.centralization = True``): the
  vocabulary's keys are lower-cased as the file is read, the first occurrence of a key wins, looked-up words are
  lower-cased; every vector is centred on the mean of the whole (lower-cased) vocabulary, then L2-normalised for
  ``cos``; an out-of-vocabulary word gets ``word_emb_avg``, the mean of those centred, normalised vectors, used as
  is (not renormalised: its norm is small, so a pair of two OOV words scores ≈ ‖m‖², near the bottom). ``l2``
  uses the centred vectors unnormalised, and the OOV word the mean of the centred vectors (≈ 0).
- **sentence** (``src/s_evaluation.py``: ``embedder_all(..., centralization=True)``): centred on the mean of the
  pool's items, then L2-normalised for ``cos``; a text with no vector (a bag of words with no known word) is the
  zero vector before centring, as the toolkit's bag of words makes it (``src/models/sent_emb/_bow.py``), so it
  ends up at -mean, normalised: every such text is one vector.

Variants, each explicit and part of a unit's fingerprint: the OOV policy (``mean`` as above, ``zero``, ``skip``:
pairs with an OOV word are dropped and OOV words leave the background) and ``center=False`` (no centring; the OOV
word is then the mean of the normalised raw vectors for ``cos``, the raw vocabulary mean for ``l2``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from evalfarm.vocab import VocabStats, vocab_statistics

Level = Literal["word", "sentence"]
OovPolicy = Literal["mean", "skip", "zero"]
OOV_POLICIES: tuple[OovPolicy, ...] = ("mean", "skip", "zero")

PROTOCOL_VERSION = "2"
"""Bump when a protocol's vectors change for the same inputs (it enters every scorer's fingerprint)."""

PROTOCOLS: dict[str, str] = {
    "evalrank-word": "lower-cased keys (first wins) -> centre on the vocabulary mean -> L2-normalise (cos); "
    "OOV = mean of the normalised vectors, not renormalised",
    "evalrank-sentence": "centre on the mean of the pool's items -> L2-normalise (cos)",
    "raw": "the stored vectors as the model produced them (cos: L2-normalised)",
}


def _unit_rows(block: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(block, axis=1, keepdims=True)
    return np.divide(block, norms, out=np.zeros_like(block), where=norms > 0)


def vocab_stats(matrix: np.ndarray, rows: np.ndarray | None = None) -> VocabStats:
    """:class:`VocabStats` of ``matrix[rows]`` (the one implementation is :func:`evalfarm.vocab.vocab_statistics`,
    which the vector cache also keeps with a cached matrix), refusing non-finite results (NaN / inf anywhere in the
    vocabulary)."""
    stats = vocab_statistics(matrix, rows)
    for name in ("mean", "mean_unit_centred", "mean_unit"):
        if not np.isfinite(getattr(stats, name)).all():
            raise ValueError(f"vocabulary statistic {name!r} is not finite: the vectors hold NaN or inf")
    return stats


@dataclass(frozen=True)
class Protocol:
    """A named preprocessing protocol with its variants; ``key()`` enters every unit fingerprint that uses it."""

    name: Literal["evalrank-word", "evalrank-sentence", "raw"]
    center: bool = True
    oov: OovPolicy = "mean"

    def __post_init__(self) -> None:
        if self.name not in PROTOCOLS:
            raise ValueError(f"unknown preprocessing protocol {self.name!r} (known: {', '.join(PROTOCOLS)})")
        if self.oov not in OOV_POLICIES:
            raise ValueError(f"unknown OOV policy {self.oov!r} (choose from {', '.join(OOV_POLICIES)})")

    @classmethod
    def for_level(cls, level: Level, *, center: bool = True, oov: OovPolicy = "mean") -> Protocol:
        """EvalRank's protocol for a pool level (the default of every scorer that claims the paper's numbers)."""
        return cls("evalrank-word" if level == "word" else "evalrank-sentence", center=center, oov=oov)

    def key(self) -> dict[str, Any]:
        return {"protocol": self.name, "center": self.center, "oov": self.oov, "version": PROTOCOL_VERSION}

    @property
    def label(self) -> str:
        """Short name for a metric's ``variant``: the protocol name plus any non-default choice."""
        parts: list[str] = [self.name]
        if not self.center and self.name != "raw":
            parts.append("no-center")
        if self.oov != "mean":
            parts.append(f"oov-{self.oov}")
        return "/".join(parts)


@dataclass
class Prepared:
    """Vectors ready for a similarity, and which items may take part (``skip`` drops OOV items)."""

    vectors: np.ndarray  # float32 (n_items, dim)
    usable: np.ndarray  # bool (n_items,)
    oov: np.ndarray  # bool (n_items,): items the model does not cover


def prepare(
    emb: np.ndarray,
    oov: np.ndarray,
    protocol: Protocol,
    *,
    similarity: Literal["cos", "l2"],
    vocab: VocabStats | None = None,
    l2_normalized: bool = False,
) -> Prepared:
    """Apply ``protocol`` to raw stored vectors ``emb`` (OOV rows: any value, replaced here).

    Word protocol: needs ``vocab`` (the model's :class:`VocabStats`). Sentence protocol: centres on the mean of the
    usable items. ``raw``: no centring, OOV rows zero. ``cos`` L2-normalises (zero rows stay zero); ``l2`` does not,
    unless ``l2_normalized``. Works in float64, returns float32.
    """
    oov = np.asarray(oov, dtype=bool)
    x = np.asarray(emb, dtype=np.float64).copy()
    normalise = similarity == "cos" or l2_normalized
    usable = ~oov if protocol.oov == "skip" else np.ones(len(x), dtype=bool)
    if protocol.name == "evalrank-word":
        if vocab is None:
            raise ValueError("the word protocol needs the model's vocabulary statistics (VocabStats)")
        if protocol.center:
            x -= vocab.mean
            fill = vocab.mean_unit_centred if normalise else np.zeros_like(vocab.mean)
        else:
            fill = vocab.mean_unit if normalise else vocab.mean
        if normalise:
            x = _unit_rows(x)
        x[oov] = 0.0 if protocol.oov == "zero" else fill
    else:
        # A text the model has no vector for (a bag of words with no known word) is the zero vector, as the
        # toolkit's bag of words makes it (``_bow.py``: ``np.zeros(dim) + 1e-9``); centring then moves it to -mean,
        # one shared direction (under ``mean``; ``zero`` keeps it at the origin, ``skip`` drops it).
        x[oov] = 0.0
        if protocol.name == "evalrank-sentence" and protocol.center and usable.any():
            x -= x[usable].mean(axis=0)
            if protocol.oov == "zero":
                x[oov] = 0.0
        if normalise:
            x = _unit_rows(x)
    return Prepared(vectors=x.astype(np.float32), usable=usable, oov=oov)
