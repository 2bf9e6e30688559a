"""``evalfarm data build defsent``: (definition, word) pairs from WordNet glosses, DefSent-style (Tsukagoshi et al.
2021).

The recipe: the EvalRank word pool's vocabulary (its pairs file, ``basic_vocab`` and ``wiki_vocab``: 22,207
words), lower-cased, alphabetic; a word qualifies when its first WordNet sense (``synsets(word)[0]`` among nouns,
verbs and adjectives, satellites counted as adjectives) lists the word itself as a lemma and its gloss does not
contain the word as a whole token (a gloss that names its word would make the retrieval a string match); one word
per synset (the first alphabetically), so no two words share a gloss. A seeded
sample of ``n`` qualifying words (default 3,000), written in alphabetical order: ``word``, ``pos`` (n / v / a),
``synset`` and ``definition``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from evalfarm.taskdata.build import Builder, BuildError, BuildInput, register_builder

COLUMNS = ("word", "pos", "synset", "definition")
_POS = {"n": "n", "v": "v", "a": "a", "s": "a"}


def resources() -> dict[str, str]:
    from evalfarm.taskdata.wordnet import wordnet_identity

    return {"wordnet": wordnet_identity()}


def vocabulary(inputs: Mapping[str, Path]) -> list[str]:
    """The EvalRank word pool's distinct lower-cased alphabetic words, sorted."""
    words: set[str] = set()
    for role in ("pairs", "background_basic", "background_wiki"):
        for line in inputs[role].read_text(encoding="utf-8").splitlines():
            words.update(w.lower() for w in line.split("\t") if w.strip())
    return sorted(w for w in words if w.isalpha() and w.isascii())


def first_sense(word: str) -> tuple[str, str, str] | None:
    """(pos, synset name, gloss) of ``word``'s first noun / verb / adjective sense, None where it does not qualify."""
    from evalfarm.taskdata.wordnet import wordnet

    synsets = [s for s in wordnet().synsets(word) if s.pos() in _POS]
    if not synsets:
        return None
    s = synsets[0]
    if word not in {lem.name().lower() for lem in s.lemmas()}:
        return None
    gloss = " ".join(s.definition().split())
    if not gloss or word in re.findall(r"[a-z]+", gloss.lower()):
        return None
    return _POS[s.pos()], s.name(), gloss


def make(inputs: Mapping[str, Path], params: Mapping[str, Any]) -> str:
    n, seed = int(params["n"]), int(params["seed"])
    pairs: dict[str, tuple[str, str, str]] = {}
    synsets: set[str] = set()
    for w in vocabulary(inputs):  # one word per synset (the first alphabetically): no two words share a gloss
        got = first_sense(w)
        if got is not None and got[1] not in synsets:
            synsets.add(got[1])
            pairs[w] = got
    if len(pairs) < n:
        raise BuildError(f"data build defsent: {len(pairs)} words qualify, {n} asked")
    words = sorted(pairs)
    picked = sorted(words[int(i)] for i in np.random.default_rng(seed).choice(len(words), size=n, replace=False))
    rows = ["\t".join(COLUMNS)] + ["\t".join([w, *pairs[w]]) for w in picked]
    return "\n".join(rows) + "\n"


BUILDER = register_builder(
    Builder(
        name="defsent",
        version="1",
        description="WordNet 3.0 first-sense glosses of a seeded sample of EvalRank pool words (DefSent-style "
        "definition -> word retrieval)",
        make=make,
        defaults={"n": 3000, "seed": 0},
        inputs={
            "pairs": BuildInput(
                "evalrank/word_evalrank/pos_pair_5514.txt",
                "f3dce0865c50c075a81cbe022322048421ba68581855caaf019c00acf2de8016",
            ),
            "background_basic": BuildInput(
                "evalrank/word_evalrank/basic_vocab.txt",
                "b30c502822749d56d0f3fad0151a6b711d584fa8eac944d1473fed413a7c0844",
            ),
            "background_wiki": BuildInput(
                "evalrank/word_evalrank/wiki_vocab.txt",
                "ab2c76b26cc8ca09f352d4bb70fa4b34b2e8a3a7a520a2506d664bbc75203c75",
            ),
        },
        resources=resources,
    )
)
