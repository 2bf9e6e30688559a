"""Static word vectors distilled from a transformer's contextual token states over a corpus.

The "distilled static embeddings" recipe (Bommasani et al. 2020; Gupta & Jaggi 2021): run the encoder over a
corpus, take each word occurrence's hidden state at one layer (its ``first`` word piece's, or the ``mean`` of its
pieces'), and average the occurrences of each word type. Words seen fewer than ``min_count`` times are left out.
``evalfarm zoo build`` runs it for the recipes of algorithm ``minilm-ctx`` and stores the result like any trained
model (``model.npy`` + ``vocab.txt``); this module holds only the computation. torch and transformers are imported
when it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

__all__ = ["WINDOW_WORDS", "contextual_word_vectors"]

WINDOW_WORDS = 64
"""Long sentences are cut into windows of this many words, so (almost) every word fits the encoder's 128 pieces."""


def _windows(sentences: Sequence[Sequence[str]]) -> list[list[str]]:
    return [list(s[i : i + WINDOW_WORDS]) for s in sentences for i in range(0, len(s), WINDOW_WORDS)]


def contextual_word_vectors(
    folder: Path,
    sentences: Sequence[Sequence[str]],
    *,
    layer: int,
    pool: str,
    min_count: int = 5,
    batch_size: int = 64,
    max_length: int = 128,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[str], np.ndarray]:
    """Words seen ``min_count`` times or more (most frequent first) and their mean contextual vectors at ``layer``
    (0: the embedding layer's output; ``n``: the n-th transformer layer)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)  # never asks (issue 40)
    model = AutoModel.from_pretrained(str(folder), trust_remote_code=False).eval()
    n_layers = int(model.config.num_hidden_layers)
    if not 0 <= layer <= n_layers:
        raise ValueError(f"layer {layer}: the model has layers 0..{n_layers}")
    if pool not in ("first", "mean"):
        raise ValueError(f"pool {pool!r}: first or mean")
    index: dict[str, int] = {}
    sums: list[np.ndarray] = []
    counts: list[int] = []
    windows = _windows(sentences)
    with torch.inference_mode():
        for start in range(0, len(windows), batch_size):
            batch = windows[start : start + batch_size]
            enc = tok(batch, is_split_into_words=True, truncation=True, max_length=max_length, padding=True,
                      return_tensors="pt")  # fmt: skip
            states = model(**enc, output_hidden_states=True).hidden_states[layer].float().numpy()
            for b, words in enumerate(batch):
                _accumulate(words, enc.word_ids(b), states[b], pool, index, sums, counts)
            if progress:
                progress(len(batch))
    order = sorted((w for w in index if counts[index[w]] >= min_count), key=lambda w: (-counts[index[w]], w))
    if not order:
        raise ValueError(f"no word occurs {min_count} times in the corpus")
    matrix = np.stack([sums[index[w]] / counts[index[w]] for w in order]).astype(np.float32)
    return order, matrix


def _accumulate(
    words: list[str],
    word_ids: list[int | None],
    states: np.ndarray,
    pool: str,
    index: dict[str, int],
    sums: list[np.ndarray],
    counts: list[int],
) -> None:
    """Add each word occurrence's pooled piece states to its type's sum (words cut by truncation are skipped)."""
    pieces: dict[int, list[int]] = {}
    for t, wid in enumerate(word_ids):
        if wid is not None:
            pieces.setdefault(wid, []).append(t)
    for wid, ts in pieces.items():
        vec = states[ts[0]] if pool == "first" else states[ts].mean(axis=0)
        i = index.setdefault(words[wid], len(index))
        if i == len(sums):
            sums.append(np.zeros(states.shape[1], dtype=np.float64))
            counts.append(0)
        sums[i] += vec
        counts[i] += 1
