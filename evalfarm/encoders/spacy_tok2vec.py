"""spaCy ``tok2vec`` as a sentence encoder: the mean of ``doc.tensor`` (the contextual CNN token vectors).

Only the ``tok2vec`` pipe runs (every other pipe is excluded at load); an empty text gets a zero vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np


class SpacyTok2Vec:
    level: Literal["sentence"] = "sentence"

    def __init__(self, name_or_path: str | Path, *, batch_size: int = 64) -> None:
        import spacy

        meta = spacy.util.get_model_meta(name_or_path) if Path(str(name_or_path)).is_dir() else None
        pipes = list((meta or {}).get("pipeline", [])) or None
        if pipes is None:  # an installed package name: load, then drop the other pipes
            self.nlp = spacy.load(name_or_path)
            for p in [p for p in self.nlp.pipe_names if p != "tok2vec"]:
                self.nlp.remove_pipe(p)
        else:
            self.nlp = spacy.load(name_or_path, exclude=[p for p in pipes if p != "tok2vec"])
        if "tok2vec" not in self.nlp.pipe_names:
            raise ValueError(
                f"{name_or_path}: the spaCy pipeline has no 'tok2vec' component (pipes: {self.nlp.pipe_names})"
            )
        self.batch_size = batch_size
        self.dim = int(self.nlp("a").tensor.shape[1])
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        return f"SpacyTok2Vec({self.nlp.meta.get('name')!r}, dim={self.dim})"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, doc in enumerate(self.nlp.pipe(texts, batch_size=self.batch_size)):
            if len(doc):
                out[i] = np.asarray(doc.tensor, dtype=np.float32).mean(axis=0)
        return out
