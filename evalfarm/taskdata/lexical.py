"""Word choices in context for generated minimal pairs: a WordNet sense, its synonym and antonym, a random word that
keeps the sentence grammatical, a typo that is no real word, and the multi-word expressions to leave alone.

Policies (each measured on an audited sample: docs/evaluators.md, docs/audits/):

- **Sense**: the lemma's most frequent WordNet 3.0 sense of its part of speech (SemCor counts, ``cntlist.rev``),
  used only when it *dominates*: at least :data:`MIN_SENSE_COUNT` tagged occurrences and :data:`MIN_SENSE_SHARE` of
  all the lemma's tagged occurrences in that part of speech. A simplified Lesk overlap (Banerjee & Pedersen's
  signature: gloss, examples, lemma names of the sense and of its hypernyms / similar-tos, against the sentence's
  content lemmas) vetoes it when another sense overlaps the sentence more, by at least :data:`LESK_MARGIN` words.
- **Synonym / antonym**: a single-word lemma of that sense (a direct WordNet antonym of the lemma in that sense) whose
  own dominant sense is the same synset (the antonym's: its own synset), so that the substitute read alone means
  what the original means in the sentence; spelling variants (edit distance ≤ 2: colour / color) are no synonyms,
  nor a synonym under a tenth as frequent as the word (another register: "say" -> "state").
- **Random word**: a WordNet lemma of the same part of speech whose SemCor count in it is in the same frequency band
  ⌊log2(1 + count)⌋ and at least as large as in any other part of speech; a verb also shares a WordNet verb frame
  with the slot (a transitive slot takes a verb with a "----s something/somebody" frame, an intransitive one a verb
  with "Something / Somebody ----s"); an adjective in a predicative slot is none WordNet marks attributive-only.
- **Real words** (typos must not be one): a WordNet lemma or inflected form (morphy, any part of speech), a word
  LemmInflect knows, or a word of the EvalRank word pool's vocabulary (20k Wikipedia words and the basic list).
"""

from __future__ import annotations

import functools
import math
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

MIN_SENSE_COUNT = 3
"""A dominant sense has at least this many SemCor occurrences of the lemma."""
MIN_SENSE_SHARE = 0.6
"""... and at least this share of the lemma's SemCor occurrences in its part of speech."""
MIN_SYNONYM_RATIO = 0.1
"""A synonym at least this frequent (SemCor, its part of speech) relative to the word it replaces: a rare synonym
is another register ("say" -> "state", "news" -> "tidings", "enjoy" -> "bask")."""
LESK_MARGIN = 1
"""Lesk vetoes the dominant sense when another sense's overlap with the sentence exceeds its own by this much."""
TRANSITIVE_FRAMES = frozenset({8, 9, 10, 11})
"""WordNet verb frames "Somebody/Something ----s something/somebody"."""
INTRANSITIVE_FRAMES = frozenset({1, 2, 3, 4, 22})
"""WordNet verb frames "Something ----s", "Somebody ----s", "It is ----ing", "Something is ----ing PP",
"Somebody ----s PP"."""
TO_INFINITIVE_FRAMES = frozenset({28})
"""WordNet verb frame "Somebody ----s to INFINITIVE"."""
TO_INFINITIVE_OBJECT_FRAMES = frozenset({24})
"""WordNet verb frame "Somebody ----s somebody to INFINITIVE"."""
CLAUSE_FRAMES = frozenset({26})
"""WordNet verb frame "Somebody ----s that CLAUSE"."""
_WORD = re.compile(r"[a-z]+")


def wn() -> Any:
    from evalfarm.taskdata.wordnet import wordnet

    return wordnet()


def single(name: str) -> bool:
    """A one-word ASCII lemma (no multi-word expression, hyphen or digit)."""
    return name.isalpha() and name.isascii()


@functools.cache
def senses(lemma: str, pos: str) -> tuple[tuple[Any, int], ...]:
    """``(synset, SemCor count of lemma in it)`` for each sense of ``lemma`` as ``pos`` (``a`` includes satellites),
    in WordNet's order."""
    out = []
    for s in wn().synsets(lemma, pos=pos):
        out.append((s, sum(lem.count() for lem in s.lemmas() if lem.name().lower() == lemma)))
    return tuple(out)


@functools.cache
def dominant_sense(lemma: str, pos: str) -> Any | None:
    """The lemma's most frequent sense when it dominates (module docstring), else None."""
    got = senses(lemma, pos)
    if not got:
        return None
    best, count = max(got, key=lambda sc: sc[1])  # max keeps the first of equal counts: WordNet's order
    total = sum(c for _, c in got)
    if count < MIN_SENSE_COUNT or count < MIN_SENSE_SHARE * total:
        return None
    return best


def _tokens(text: str) -> set[str]:
    from spacy.lang.en.stop_words import STOP_WORDS

    return {w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS and len(w) > 2}


@functools.cache
def signature(synset: Any) -> frozenset[str]:
    """Simplified-Lesk signature of a sense: its gloss, examples and lemma names, and those of its hypernyms and
    similar-tos (Banerjee & Pedersen 2002's extended gloss overlap, one level)."""
    words: set[str] = set()
    for s in [synset, *synset.hypernyms(), *synset.similar_tos()]:
        words |= _tokens(s.definition())
        for ex in s.examples():
            words |= _tokens(ex)
        for lem in s.lemmas():
            words |= _tokens(lem.name().replace("_", " "))
    return frozenset(words)


def lesk_vetoes(lemma: str, pos: str, sense: Any, context: Iterable[str]) -> bool:
    """True when another sense of ``lemma`` overlaps the sentence's content lemmas ``context`` by at least
    :data:`LESK_MARGIN` more words than ``sense`` does."""
    ctx = set(context) - {lemma}
    own = len(signature(sense) & ctx)
    return any(len(signature(s) & ctx) >= own + LESK_MARGIN for s, _ in senses(lemma, pos) if s != sense)


def _edit_distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def _same_meaning_alone(name: str, pos: str, synset: Any) -> bool:
    """``name`` read alone means ``synset``: its own dominant sense is it."""
    return dominant_sense(name, pos) == synset


def lemma_frames(synset: Any, name: str) -> frozenset[int]:
    """The WordNet verb frames of lemma ``name`` in ``synset`` (the synset's and the lemma's own)."""
    for lem in synset.lemmas():
        if lem.name().lower() == name:
            return frozenset(lem.frame_ids()) | frozenset(synset.frame_ids())
    return frozenset(synset.frame_ids())


@functools.cache
def synonym_in_sense(lemma: str, pos: str, synset: Any, frames: frozenset[int] | None = None) -> str | None:
    """The first single-word lemma of ``synset`` other than ``lemma`` whose own dominant sense is ``synset``, that is
    no spelling variant of ``lemma`` and (a verb, when ``frames`` is given) has one of ``frames``; None where there
    is none."""
    for lem in synset.lemmas():
        name = lem.name().lower()
        if name == lemma or not single(name) or _edit_distance(name, lemma) <= 2:
            continue
        if frames is not None and not lemma_frames(synset, name) & frames:
            continue
        if lemma_count(name, pos) < MIN_SYNONYM_RATIO * lemma_count(lemma, pos):
            continue
        if _same_meaning_alone(name, pos, synset):
            return name
    return None


def lemma_count(lemma: str, pos: str) -> int:
    """The lemma's SemCor occurrences in ``pos``, over all its senses."""
    return sum(c for _, c in senses(lemma, pos))


@functools.cache
def antonym_in_sense(lemma: str, pos: str, synset: Any) -> str | None:
    """The first direct WordNet antonym of ``lemma`` in ``synset`` whose own dominant sense is the antonym's synset."""
    for lem in synset.lemmas():
        if lem.name().lower() != lemma:
            continue
        for ant in lem.antonyms():
            name = ant.name().lower()
            if single(name) and name != lemma and _same_meaning_alone(name, pos, ant.synset()):
                return name
    return None


@functools.cache
def mwe_names() -> frozenset[str]:
    """Every multi-word WordNet lemma (``come_up``, ``make_sense``, ``big_deal``), lower-cased."""
    return frozenset(n.lower() for n in wn().all_lemma_names() if "_" in n)


def in_mwe(words: list[str], lemmas: list[str], i: int, max_len: int = 4) -> bool:
    """Whether token ``i`` is part of a WordNet multi-word expression in the sentence: some span of 2..``max_len``
    tokens around it, as written or as lemmas, is a multi-word lemma of WordNet."""
    names = mwe_names()
    n = len(words)
    for size in range(2, max_len + 1):
        for start in range(max(0, i - size + 1), min(i, n - size) + 1):
            for seq in (words, lemmas):
                if "_".join(seq[start : start + size]).lower() in names:
                    return True
            mixed = [lemmas[start], *words[start + 1 : start + size]]  # "came up" -> "come_up"
            if "_".join(mixed).lower() in names:
                return True
    return False


@functools.cache
def pos_counts(pos: str) -> dict[str, int]:
    """SemCor count per single-word lemma of ``pos`` (summed over its senses; ``cntlist.rev``'s ss_type 2 for
    verbs, 3 and 5 for adjectives and satellites, 1 for nouns, 4 for adverbs)."""
    from evalfarm.taskdata.wordnet import wordnet_dir

    types = {"n": {"1"}, "v": {"2"}, "a": {"3", "5"}, "r": {"4"}}[pos]
    counts: dict[str, int] = defaultdict(int)
    with open(wordnet_dir() / "cntlist.rev", encoding="utf-8") as f:
        for line in f:
            key, _, count = line.split()
            name, _, rest = key.partition("%")
            if rest.split(":", 1)[0] in types:
                counts[name.lower()] += int(count)
    return dict(counts)


def band(count: int) -> int:
    return int(math.log2(1 + count))


@functools.cache
def attributive_only() -> frozenset[str]:
    """Adjectives every sense of which WordNet marks ``(a)``: attributive only ("former", "erstwhile")."""
    marks: dict[str, set[str | None]] = defaultdict(set)
    for s in wn().all_synsets(pos="a"):
        for lem in s.lemmas():
            marks[lem.name().lower()].add(lem.syntactic_marker())
    return frozenset(n for n, m in marks.items() if m == {"(a)"})


@functools.cache
def random_pool(pos: str, level: int, frames: frozenset[int] | None) -> tuple[str, ...]:
    """Single-word lemmas of ``pos`` in frequency band ``level`` that are mostly that part of speech (their SemCor
    count in it at least that in any other), attested (count ≥ 1); verbs with a frame of ``frames`` in their first
    sense; adjectives not attributive-only. Sorted."""
    own = pos_counts(pos)
    others = [pos_counts(p) for p in ("n", "v", "a", "r") if p != pos]
    out = []
    for name, count in own.items():
        if count < 1 or band(count) != level or not single(name):
            continue
        if any(o.get(name, 0) > count for o in others):
            continue
        synsets = wn().synsets(name, pos=pos)
        if not synsets:
            continue
        if pos == "v" and frames is not None and not lemma_frames(synsets[0], name) & frames:
            continue
        if pos == "a" and name in attributive_only():
            continue
        out.append(name)
    return tuple(sorted(out))


def is_real_word(word: str, wordlist: frozenset[str]) -> bool:
    """Whether ``word`` is an English word: in ``wordlist``, a WordNet lemma or inflected form (morphy, any part of
    speech), or a form LemmInflect knows."""
    from lemminflect import getAllLemmas

    w = word.lower()
    if w in wordlist:
        return True
    if any(wn().morphy(w, p) for p in ("n", "v", "a", "r")):
        return True
    return bool(getAllLemmas(w))
