"""``evalfarm data build defsent``: (definition, word) pairs from WordNet glosses, DefSent-style (Tsukagoshi et al.
2021).

The recipe: the EvalRank word pool's vocabulary (its pairs file, ``basic_vocab`` and ``wiki_vocab``: 22,207
words), lower-cased, alphabetic; a word qualifies when its first WordNet sense (``synsets(word)[0]`` among nouns,
verbs and adjectives, satellites counted as adjectives) lists the word itself as a lemma and its gloss does not
contain the word as a whole token (a gloss that names its word would make the retrieval a string match); one word
per synset (the first alphabetically), so no two words share a gloss. A seeded
sample of ``n`` qualifying words (default 3,000), written in alphabetical order: ``word``, ``pos`` (n / v / a),
``synset`` and ``definition``.

Version 2 keeps version 1's words and reads each definition from the raw gloss of WordNet's data file
(:func:`clean_gloss`): NLTK's ``definition()`` deletes the quoted examples but keeps what sat between and after them,
so some of version 1's definitions end in example residue ("having or showing distrust; ; - B.N.Cardozo; - Thomas
Jefferson", "put together ...; ; ; He manufactured a popular cereal\"") and a quoted phrase inside a definition
lost its words ("(especially in the phrase )"). Version 1 stays buildable (``--version 1``) for numbers computed on it.

Version 3 (the default, issue 53) keeps version 2's rows less every definition that names its word in *another
form* (:func:`names_its_word`): version 2 checked the exact word only, so "scan" kept "the act of scanning",
"nightly" kept "...night", "tunisian" kept "Tunisia". A definition's token names the word when one is an inflection
of the other (WordNet's morphy, LemmInflect), a derivation of it (WordNet's derivationally related forms and
pertainyms of any of the word's senses, with their inflections), or when they share a stem (NLTK's Snowball or
Porter stemmer; or a common prefix of at least five letters covering the shorter word but for its last letter:
"office" / "official"). Such rows are removed, not rewritten (a rewritten gloss would no longer be WordNet's).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from evalfarm.taskdata.build import Builder, BuildError, BuildInput, register_builder

DEFSENT_COLUMNS = ("word", "pos", "synset", "definition")
_POS = {"n": "n", "v": "v", "a": "a", "s": "a"}


def resources() -> dict[str, str]:
    from evalfarm.taskdata.wordnet import wordnet_identity

    return {"wordnet": wordnet_identity()}


def leak_check_resources() -> dict[str, str]:
    """What version 3's leak check reads besides WordNet: NLTK (its stemmers) and LemmInflect."""
    import lemminflect
    import nltk

    return {"nltk": nltk.__version__, "lemminflect": getattr(lemminflect, "__version__", "?")}


def vocabulary(inputs: Mapping[str, Path]) -> list[str]:
    """The EvalRank word pool's distinct lower-cased alphabetic words, sorted."""
    words: set[str] = set()
    for role in ("pairs", "background_basic", "background_wiki"):
        for line in inputs[role].read_text(encoding="utf-8").splitlines():
            words.update(w.lower() for w in line.split("\t") if w.strip())
    return sorted(w for w in words if w.isalpha() and w.isascii())


def nltk_definition(synset: Any) -> str:
    """Version 1's definition: NLTK's ``definition()``, quoted examples deleted and what surrounded them kept."""
    return str(synset.definition())


_QUOTED = re.compile(r'("[^"]*")')


def clean_gloss(raw: str) -> str:
    """The definition of a raw WordNet gloss (``definition; "example" - Author; ...``): everything before its first
    example. An example is a quoted string outside parentheses (a quoted phrase inside them is part of the
    definition: "(especially in the phrase \"make strides\")"); a ``;``-separated part holding an unbalanced quote is
    an example whose quotes WordNet left broken and ends the definition (in the first part, the stray quote is
    dropped: 'a local branch where postal services are available"'); trailing ``;``, ``:`` and ``,`` go, and a
    trailing "e.g." / "i.e." / "as in" that introduced the example."""
    text = ""
    for part in _QUOTED.split(raw):
        if len(part) >= 2 and part[0] == part[-1] == '"':
            text += part if text.count("(") > text.count(")") else "\x00"
        else:
            text += part
    kept: list[str] = []
    for i, seg in enumerate(text.split("\x00", 1)[0].split(";")):
        if seg.count('"') % 2:
            if i == 0:
                kept.append(seg.replace('"', ""))
            break
        kept.append(seg)
    out = " ".join("; ".join(s.strip() for s in kept if s.strip()).split()).rstrip(";:, ")
    return _LEAD_IN.sub("", out).rstrip(";:, ")


_LEAD_IN = re.compile(r"(?:[;,:]\s*|\s+|^)(?:e\.g\.|i\.e\.|as in)$")
"""What introduced the example just cut ("keep in a certain state, position, or activity; e.g.")."""


@functools.cache
def raw_glosses() -> dict[tuple[str, int], str]:
    """``(data file, offset) -> raw gloss`` of WordNet's noun, verb and adjective data files."""
    from evalfarm.taskdata.wordnet import wordnet_dir

    out = {}
    for name in ("noun", "verb", "adj"):
        with open(wordnet_dir() / f"data.{name}", encoding="utf-8") as f:
            for line in f:
                if not line.startswith("  ") and "|" in line:
                    out[(name, int(line.split(" ", 1)[0]))] = line.split("|", 1)[1].strip()
    return out


def cleaned_definition(synset: Any) -> str:
    """Version 2's definition: :func:`clean_gloss` of the synset's raw gloss."""
    name = {"n": "noun", "v": "verb", "a": "adj", "s": "adj"}[synset.pos()]
    return clean_gloss(raw_glosses()[(name, synset.offset())])


def first_sense(word: str, definition: Callable[[Any], str] = cleaned_definition) -> tuple[str, str, str] | None:
    """(pos, synset name, gloss) of ``word``'s first noun / verb / adjective sense, None where it does not qualify."""
    from evalfarm.taskdata.wordnet import wordnet

    synsets = [s for s in wordnet().synsets(word) if s.pos() in _POS]
    if not synsets:
        return None
    s = synsets[0]
    if word not in {lem.name().lower() for lem in s.lemmas()}:
        return None
    gloss = " ".join(definition(s).split())
    if not gloss or word in re.findall(r"[a-z]+", gloss.lower()):
        return None
    return _POS[s.pos()], s.name(), gloss


def make(inputs: Mapping[str, Path], params: Mapping[str, Any]) -> str:
    """Version 2: version 1's words (the same qualification and seeded sample, so the two versions differ only in
    their definitions), each with its cleaned definition; a word whose cleaned definition names it (a quoted phrase
    NLTK had deleted: "behalf" in "(usually expressed as \"on behalf of\" ...)") is left out."""
    from evalfarm.taskdata.wordnet import wordnet

    rows = make_v1(inputs, params).splitlines()
    out = [rows[0]]
    for row in rows[1:]:
        word, pos, synset, _ = row.split("\t")
        gloss = " ".join(cleaned_definition(wordnet().synset(synset)).split())
        if gloss and word not in re.findall(r"[a-z]+", gloss.lower()):
            out.append("\t".join([word, pos, synset, gloss]))
    return "\n".join(out) + "\n"


LEAK_KINDS = ("inflection", "derivation", "stem")
"""How a definition's token can name its word (:func:`names_its_word`), in the order they are tried."""
MIN_SHARED_PREFIX = 5


@functools.cache
def _stemmers() -> tuple[Any, Any]:
    from nltk.stem import PorterStemmer
    from nltk.stem.snowball import SnowballStemmer

    return SnowballStemmer("english"), PorterStemmer()


@functools.cache
def base_forms(token: str) -> frozenset[str]:
    """``token`` and its lemmas: WordNet's morphy in every part of speech and LemmInflect's lemmas."""
    from lemminflect import getAllLemmas

    from evalfarm.taskdata.wordnet import wordnet

    out = {token}
    for pos in ("n", "v", "a", "r"):
        got = wordnet().morphy(token, pos)
        if got:
            out.add(got.lower())
    for lemmas in getAllLemmas(token).values():
        out.update(lem.lower() for lem in lemmas)
    return frozenset(out)


@functools.cache
def inflections(word: str) -> frozenset[str]:
    """``word``, its base forms and every inflection LemmInflect knows of them."""
    from lemminflect import getAllInflections

    out = set(base_forms(word))
    for base in list(out):
        for forms in getAllInflections(base).values():
            out.update(f.lower() for f in forms)
    return frozenset(out)


@functools.cache
def derivations(word: str) -> frozenset[str]:
    """WordNet's derivationally related forms and pertainyms of ``word`` in any of its senses (single words), and
    their inflections: "scan" -> "scanning", "scanner"; "nightly" -> "night"."""
    from evalfarm.taskdata.wordnet import wordnet

    related: set[str] = set()
    for base in base_forms(word):
        for synset in wordnet().synsets(base):
            for lem in synset.lemmas():
                if lem.name().lower() != base:
                    continue
                for other in [*lem.derivationally_related_forms(), *lem.pertainyms()]:
                    name = other.name().lower()
                    if name.isalpha():
                        related.add(name)
    out: set[str] = set()
    for name in related:
        out |= inflections(name)
    return frozenset(out)


def shares_stem(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` share a stem: the same Snowball or Porter stem, or a common prefix of at least
    :data:`MIN_SHARED_PREFIX` letters that covers the shorter word but for its last letter ("office" / "official",
    "tunisia" / "tunisian")."""
    snowball, porter = _stemmers()
    if snowball.stem(a) == snowball.stem(b) or porter.stem(a) == porter.stem(b):
        return True
    prefix = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        prefix += 1
    return prefix >= max(MIN_SHARED_PREFIX, min(len(a), len(b)) - 1)


def names_its_word(word: str, definition: str) -> tuple[str, str] | None:
    """``(kind, token)`` where ``definition`` names ``word`` through another form (:data:`LEAK_KINDS`: an
    inflection either way, a WordNet derivation, a shared stem), None where no token does."""
    tokens = re.findall(r"[a-z]+", definition.lower())
    forms = inflections(word)
    for token in tokens:
        if token == word or base_forms(token) & forms or inflections(token) & {word}:
            return "inflection", token
    derived = derivations(word)
    for token in tokens:
        if token in derived or base_forms(token) & derived or word in derivations(token):
            return "derivation", token
    for token in tokens:
        if len(token) > 2 and shares_stem(token, word):
            return "stem", token
    return None


def leak_summary(rows: list[list[str]], examples: int = 3) -> str:
    """What version 3 removes from version 2's rows (``word, pos, synset, definition``), as the docs state it: the
    count of each kind of leak and its first ``examples`` words (alphabetical) with the token that names them.
    Generated: tests/test_diagnostics_data.py compares docs/evaluators.md with it."""
    found: dict[str, list[tuple[str, str]]] = {kind: [] for kind in LEAK_KINDS}
    for word, _, _, definition in rows:
        got = names_its_word(word, definition)
        if got is not None:
            found[got[0]].append((word, got[1]))
    total = sum(len(v) for v in found.values())
    parts = []
    for kind in LEAK_KINDS:
        shown = ", ".join(f"*{w}* ({t})" for w, t in found[kind][:examples])
        parts.append(f"{len(found[kind])} by {kind} ({shown}, …)")
    return (
        f"{total:,} of version 2's {len(rows):,} definitions name their word in another form — "
        + "; ".join(parts)
        + f" — and are removed: version 3 has {len(rows) - total:,} definitions."
    )


def make_v3(inputs: Mapping[str, Path], params: Mapping[str, Any]) -> str:
    """Version 3: version 2's rows less each definition that names its word in any form (:func:`names_its_word`)."""
    rows = make(inputs, params).splitlines()
    out = [rows[0]]
    for row in rows[1:]:
        word, _, _, definition = row.split("\t")
        if names_its_word(word, definition) is None:
            out.append(row)
    return "\n".join(out) + "\n"


def make_v1(inputs: Mapping[str, Path], params: Mapping[str, Any]) -> str:
    """Version 1: NLTK's definitions, residue and all."""
    return make_with(inputs, params, nltk_definition)


def make_with(inputs: Mapping[str, Path], params: Mapping[str, Any], definition: Callable[[Any], str]) -> str:
    n, seed = int(params["n"]), int(params["seed"])
    pairs: dict[str, tuple[str, str, str]] = {}
    synsets: set[str] = set()
    for w in vocabulary(inputs):  # one word per synset (the first alphabetically): no two words share a gloss
        got = first_sense(w, definition)
        if got is not None and got[1] not in synsets:
            synsets.add(got[1])
            pairs[w] = got
    if len(pairs) < n:
        raise BuildError(f"data build defsent: {len(pairs)} words qualify, {n} asked")
    words = sorted(pairs)
    picked = sorted(words[int(i)] for i in np.random.default_rng(seed).choice(len(words), size=n, replace=False))
    rows = ["\t".join(DEFSENT_COLUMNS)] + ["\t".join([w, *pairs[w]]) for w in picked]
    return "\n".join(rows) + "\n"


INPUTS = {
    "pairs": BuildInput(
        "evalrank/word_evalrank/pos_pair_5514.txt", "f3dce0865c50c075a81cbe022322048421ba68581855caaf019c00acf2de8016"
    ),
    "background_basic": BuildInput(
        "evalrank/word_evalrank/basic_vocab.txt", "b30c502822749d56d0f3fad0151a6b711d584fa8eac944d1473fed413a7c0844"
    ),
    "background_wiki": BuildInput(
        "evalrank/word_evalrank/wiki_vocab.txt", "ab2c76b26cc8ca09f352d4bb70fa4b34b2e8a3a7a520a2506d664bbc75203c75"
    ),
}
"""The EvalRank word pool both versions sample from (verified by sha256)."""


BUILDER_V3 = register_builder(
    Builder(
        name="defsent",
        version="3",
        description="WordNet 3.0 first-sense glosses (examples removed; none naming its word in any inflection, "
        "derivation or shared stem) of a seeded sample of EvalRank pool words (DefSent-style definition -> word "
        "retrieval)",
        make=make_v3,
        defaults={"n": 3000, "seed": 0},
        inputs=INPUTS,
        resources=lambda: {**resources(), **leak_check_resources()},
    )
)

BUILDER = register_builder(
    Builder(
        name="defsent",
        version="2",
        description="WordNet 3.0 first-sense glosses (examples and their residue removed) of a seeded sample of "
        "EvalRank pool words (DefSent-style definition -> word retrieval)",
        make=make,
        defaults={"n": 3000, "seed": 0},
        inputs=INPUTS,
        resources=resources,
    )
)

BUILDER_V1 = register_builder(
    Builder(
        name="defsent",
        version="1",
        description="WordNet 3.0 first-sense glosses of a seeded sample of EvalRank pool words (DefSent-style "
        "definition -> word retrieval)",
        make=make_v1,
        defaults={"n": 3000, "seed": 0},
        inputs=INPUTS,
        resources=resources,
    )
)
