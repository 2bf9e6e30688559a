"""``evalfarm data build heros --version 2``: HEROS-style minimal pairs (Chiang et al. 2023) rebuilt from GoEmotions
dev/test, each pair what its subset says; kept unchanged so that numbers computed on it stay reproducible (task
``heros-goemotions-v2``, catalog/diagnostics-v2.yaml). Version 3 (:mod:`evalfarm.taskdata.build_heros`) is the
default: this version's subsets are small (76 synonym pairs from 26 substitutions) and its negations miss curly
contractions, negative quantifiers and subject-less clauses (issue 53).

Version 1 (:mod:`evalfarm.taskdata.build_heros_v1`, still buildable) took a word's first WordNet synonym across all
its senses, whatever the sentence, and a random word of any valency: in an audited sample most of its synonym pairs
were no synonyms in context and half its random-word pairs were ungrammatical (docs/audits/). Version 2 chooses in
context (the policies of :mod:`evalfarm.taskdata.lexical`):

- Originals as in version 1 (dev + test, de-duplicated, seeded order; no ``?``, 4–40 tokens, a main verb that can be
  negated), the texts read with their CSV quoting undone (:func:`evalfarm.taskdata.textfiles.read_quoted_tsv`).
- A **word** qualifies when it is a verb (not a light verb: *be, have, do, get, make, take, go, come, give, let, keep,
  put, set*; no particle: "came up") or a plain adjective (tag ``JJ``) used predicatively ("I'm glad", not "a big
  deal": attributive adjectives form collocations a swap breaks); no part of a WordNet multi-word expression
  ("make sense", "come up") or of a hyphenated compound; and its lemma's dominant sense is not vetoed by Lesk.
- ``antonym``: a qualifying word with a direct WordNet antonym in that sense (read alone, the antonym means its own
  sense); the same word carries ``typo``, ``random-word`` and ``negation-antonym``. An adjective with a degree
  modifier before it ("so happy") is left out here: "so not happy" / "not so happy" would not negate it.
- ``synonym``: the antonym's word when its sense has a synonym, else another qualifying word that has one (the
  ``synonym_word`` column says which); inflected to the original's tag with LemmInflect; an article before a
  substitute made to agree.
- ``typo``: one edit of the word past its first letter (delete, replace by another letter, swap two adjacent
  different letters), seeded, redrawn until the result is no English word (:func:`lexical.is_real_word`).
- ``random-word``: a random lemma of the same part of speech, frequency band and (for verbs) valency, inflected
  alike (:func:`lexical.random_pool`); a verb slot whose complements the frames cannot tell (a clause, an infinitive,
  a relative clause's gap) is no antonym word.
- ``negation-main`` / ``negation-antonym``: as version 1.

An original is kept only when every subset can be made. Output: one row per original, columns ``id``, ``split``,
``comment_id``, ``word``, ``pos``, ``sense`` (the antonym word's WordNet synset), ``synonym_word``,
``synonym_sense``, ``original`` and the six subsets.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalfarm.taskdata import lexical
from evalfarm.taskdata.build import Builder, BuildError, BuildInput, register_builder
from evalfarm.taskdata.build_heros_v1 import (
    _CONTRACTED,
    _DO,
    GOEMOTIONS_INPUTS,
    MAX_TOKENS,
    MIN_TOKENS,
    SUBSETS,
    inflect,
    match_case,
    nlp,
    render,
    swap,
)
from evalfarm.taskdata.build_heros_v1 import resources as v1_resources

COLUMNS = ("id", "split", "comment_id", "original", *SUBSETS, "edits")
_WN_POS = {"VERB": "v", "ADJ": "a", "NOUN": "n"}
LIGHT_VERBS = frozenset({"be", "have", "do", "get", "make", "take", "go", "come", "give", "let", "keep", "put", "set"})
"""Support verbs whose sense is the construction's, not theirs ("take a look", "get mad")."""
NO_RANDOM = LIGHT_VERBS | frozenset(
    {
        "many",
        "much",
        "few",
        "several",
        "more",
        "most",
        "less",
        "least",
        "enough",
        "other",
        "such",
        "same",
        "own",
        "all",
    }
)
"""Never a random word: support verbs, and quantifying adjectives that a predicate slot cannot take ("feels many")."""
_PREDICATIVE = frozenset({"acomp", "xcomp", "oprd", "attr", "ROOT", "ccomp", "advcl"})
_UNFRAMED = frozenset({"dative", "acomp", "attr", "oprd", "prt", "agent", "csubj", "expl"})
"""A verb with one of these complements needs a frame the parse does not pin down: no substitute verb for it."""
_GAPPED = frozenset({"relcl", "acl", "amod", "pcomp", "csubj", "compound"})
"""A verb in one of these relations may have its object elsewhere (a relative clause's gap): no random verb."""
_TYPO_TRIES = 20
MAX_PER_SUBSTITUTION = 10
"""A substitution (``say>state``, ``love>hate``) fills at most this many pairs of a subset, so that a few frequent
words do not make a subset their own (uncapped, "say -> state" would be one synonym pair in six)."""


def resources() -> dict[str, str]:
    """Version 1's resources, a hash of WordNet's SemCor counts (``cntlist.rev``), which choose the senses, and
    one of the synonym review (:data:`REVIEW_FILE`)."""
    import hashlib

    from evalfarm.taskdata.wordnet import wordnet_dir

    out = v1_resources()
    out["wordnet_counts"] = hashlib.sha256((wordnet_dir() / "cntlist.rev").read_bytes()).hexdigest()[:12]
    out["review"] = hashlib.sha256(REVIEW_FILE.read_bytes()).hexdigest()[:12]
    return out


# -- which words qualify ---------------------------------------------------------------------------------------------
def predicative(tok: Any) -> bool:
    """An adjective that is a predicate ("I'm glad", "feels good"), not a noun's modifier."""
    if tok.dep_ == "conj":
        return predicative(tok.head)
    return tok.dep_ in _PREDICATIVE and tok.head.pos_ not in ("NOUN", "PROPN", "PRON", "NUM")


def qualifies(doc: Any, tok: Any) -> bool:
    """A single-word verb or predicative plain adjective that no expression or compound holds (module docstring)."""
    if tok.pos_ not in _WN_POS or not tok.is_alpha or not tok.lemma_.lower().isalpha():
        return False
    i = tok.i
    glued_after = not tok.whitespace_ and i + 1 < len(doc) and (doc[i + 1].is_alpha or doc[i + 1].text in "-/")
    glued_before = i > 0 and not doc[i - 1].whitespace_ and (doc[i - 1].is_alpha or doc[i - 1].text in "-/")
    if glued_after or glued_before:
        return False
    if tok.pos_ == "ADJ" and (tok.tag_ != "JJ" or not predicative(tok)):
        return False
    if tok.pos_ == "NOUN" and (
        tok.tag_ not in ("NN", "NNS") or tok.dep_ == "compound" or any(c.dep_ == "compound" for c in tok.children)
    ):
        return False
    if tok.pos_ == "VERB" and (
        tok.lemma_.lower() in LIGHT_VERBS
        or tok.dep_ in ("amod", "compound")
        or any(c.dep_ == "prt" for c in tok.children)
    ):
        return False
    if _next_to_mask(doc, i):
        return False
    words = [t.text for t in doc]
    lemmas = [t.lemma_.lower() for t in doc]
    return not lexical.in_mwe(words, lemmas, i)


def context_lemmas(doc: Any) -> set[str]:
    """The sentence's content lemmas (Lesk's context)."""
    return {t.lemma_.lower() for t in doc if t.is_alpha and not t.is_stop}


def slot_frames(tok: Any) -> frozenset[int] | None:
    """The WordNet frames one of which a verb must have to fill ``tok``'s slot: with an object (or passive) a
    transitive frame, with a to-infinitive "----s to INFINITIVE" (with an object "----s somebody to INFINITIVE"),
    with a clause "----s that CLAUSE", with none an intransitive one; None where the parse cannot tell (a relative
    clause's gap, a wh-word, a dative, a predicative complement, a particle)."""
    if tok.dep_ in _GAPPED:
        return None
    kids = list(tok.children)
    deps = {c.dep_ for c in kids}
    if deps & _UNFRAMED or any(c.tag_ in ("WP", "WDT", "WRB") for c in kids):
        return None
    obj = bool(deps & {"dobj", "auxpass", "nsubjpass"})
    if "xcomp" in deps:
        x = next(c for c in kids if c.dep_ == "xcomp")
        if not any(g.dep_ == "aux" and g.lower_ == "to" for g in x.children):
            return None
        return lexical.TO_INFINITIVE_OBJECT_FRAMES if obj else lexical.TO_INFINITIVE_FRAMES
    if "ccomp" in deps:
        return None if obj else lexical.CLAUSE_FRAMES
    return lexical.TRANSITIVE_FRAMES if obj else lexical.INTRANSITIVE_FRAMES


def _next_to_mask(doc: Any, i: int) -> bool:
    """Whether token ``i`` is a masked name's placeholder or touches one ("[NAME] forbid", "thank [RELIGION]"): the
    mask hides the word an idiom needs, and "NAME" itself is no noun to replace."""
    return (i > 0 and doc[i - 1].text in "[]") or (i + 1 < len(doc) and doc[i + 1].text in "[]")


@dataclass(frozen=True)
class Word:
    """A qualifying word: its token, WordNet part of speech, lemma and the sense it has in the sentence."""

    tok: Any
    pos: str
    lemma: str
    sense: Any


def words_in_context(doc: Any) -> list[Word]:
    """The sentence's qualifying words whose lemma has a dominant sense Lesk does not veto."""
    out = []
    ctx = context_lemmas(doc)
    for tok in doc:
        if not qualifies(doc, tok):
            continue
        pos, lemma = _WN_POS[tok.pos_], tok.lemma_.lower()
        sense = lexical.dominant_sense(lemma, pos)
        if sense is None or lexical.lesk_vetoes(lemma, pos, sense, ctx):
            continue
        out.append(Word(tok, pos, lemma, sense))
    return out


# -- negation ----------------------------------------------------------------------------------------------------
_BE_CLITICS = frozenset({"'s", "\u2019s", "'re", "\u2019re", "'m", "\u2019m", "s"})
"""Contracted *be* (and *has*), with a straight or a curly apostrophe: spaCy tags the curly ones as verbs with
themselves as lemma, which version 1 gave *do*-support ("That\u2019s" -> "Thatdoes not \u2019")."""
FORMULAIC = frozenset({"thank"})
"""Roots of formulas that negation turns into nonsense ("thank you" -> "do not thank you")."""
NPI = frozenset({"either", "ever", "any", "anything", "anyone", "anybody", "anymore", "yet"})
"""Negative-polarity words: a negation they lean on cannot be removed, nor a verb that licenses them ("doubt ...
ever") replaced."""
_WH = frozenset({"WP", "WP$", "WRB", "WDT"})


def negate(doc: Any, verb: Any) -> dict[int, str] | None:
    """Edits negating ``verb`` (or removing its negation), None where no rule applies: version 1's rules (``not``
    after the first auxiliary, after *be*, or *do*-support; a ``not`` / ``n't`` removed), fixed where its audit
    found them wrong: a *get*-passive takes *do*-support ("got muted" -> "did not get muted"), ``not`` follows
    *rather* / *better* ("I'd rather not die"), contracted *be* with a curly apostrophe is *be*, and a formula's
    root (:data:`FORMULAIC`) is left alone."""
    if verb.lemma_.lower() in FORMULAIC or any(c.dep_ == "mark" for c in verb.children):
        return None  # a root with "if" / "because" is a subordinate clause the parser took for the main one
    neg = [c for c in verb.children if c.dep_ == "neg"]
    if neg:
        return _unnegate(doc, neg[0])
    aux = [c for c in verb.children if c.dep_ in ("aux", "auxpass") and c.i < verb.i]
    subject = [c.i for c in verb.children if c.dep_ in ("nsubj", "nsubjpass", "expl")]
    if aux and subject and subject[0] > aux[0].i:  # an inverted question without its "?" ("Can we ...")
        return None
    if aux:
        return _negate_auxiliary(doc, aux[0])
    if verb.pos_ == "AUX" or verb.lemma_.lower() == "be" or verb.lower_ in _BE_CLITICS:
        return {verb.i: verb.text + " not"}
    do = _DO.get(verb.tag_)
    if do is None or verb.pos_ != "VERB" or not lexical.senses(verb.lemma_.lower(), "v"):
        return None  # no verb ("Oof that's terrible": an interjection the tagger took for one)
    if verb.tag_ == "VB" and any(c.dep_ == "nsubj" for c in verb.children):
        return None  # an imperative with its addressee ("Someone tell me"): "do not" cannot follow it
    return {verb.i: f"{match_case(do, verb.text)} not {verb.lemma_.lower()}"}


def _unnegate(doc: Any, n: Any) -> dict[int, str] | None:
    """Edits removing the negation ``n`` (``not``, ``n't``: "don't" -> "do", "can't" -> "can"), None where a
    negative-polarity word leans on it ("I don't know and you don't either" -> "I do know and you don't either") or
    the contraction has no positive form ("ain't")."""
    if any(t.lower_ in NPI for t in doc[n.i + 1 :]):
        return None
    if n.lower_ == "not":
        return {n.i: ""}
    if n.lower_ in ("n't", "nt", "n\u2019t") and n.i > 0:
        prev = doc[n.i - 1]
        if prev.lower_ == "ai":
            return None
        return {prev.i: match_case(_CONTRACTED.get(prev.lower_, prev.text), prev.text), n.i: ""}
    return None


def _negate_auxiliary(doc: Any, a: Any) -> dict[int, str] | None:
    """``not`` after the first auxiliary ``a``; *do*-support for a *get*-passive ("got muted" -> "did not get
    muted"; None for a non-finite one), after *rather* / *better* ("I'd rather not die")."""
    if a.lemma_.lower() == "get":
        do = _DO.get(a.tag_)
        return {a.i: f"{match_case(do, a.text)} not get"} if do else None
    after = doc[a.i + 1] if a.i + 1 < len(doc) else None
    if after is not None and after.lower_ in ("rather", "better"):
        return {after.i: after.text + " not"}
    return {a.i: a.text + " not"}


def negate_word(doc: Any, word: Any) -> dict[int, str] | None:
    """The chosen word negated in place: ``not`` before an adjective (or its ``not`` removed), a verb negated."""
    if word.pos_ == "ADJ":
        if word.i > 0 and doc[word.i - 1].lower_ == "not":
            return {word.i - 1: ""}
        return {word.i: "not " + word.text}
    return negate(doc, word)


def main_negation(doc: Any) -> dict[int, str] | None:
    """The negation of the sentence's main verb, None where it has none or opens with a wh-word before it (a
    question without its "?", an exclamative: "What a cute little accident you turned out to be")."""
    roots = [t for t in doc if t.dep_ == "ROOT"]
    if len(roots) != 1 or roots[0].pos_ not in ("VERB", "AUX"):
        return None
    if any(t.tag_ in _WH for t in doc[: roots[0].i]):
        return None
    return negate(doc, roots[0])


# -- the edits ---------------------------------------------------------------------------------------------------
def typo(word: str, rng: np.random.Generator, wordlist: frozenset[str]) -> str | None:
    """One seeded edit past the first letter that makes no English word (redrawn up to 20 times), None where none
    was found."""
    if len(word) < 3:
        return None
    for _ in range(_TYPO_TRIES):
        ops = ["replace", "delete"] + (["swap"] if len(word) > 2 else [])
        op = ops[int(rng.integers(len(ops)))]
        if op == "swap":
            spots = [i for i in range(1, len(word) - 1) if word[i] != word[i + 1]]
            if not spots:
                continue
            i = spots[int(rng.integers(len(spots)))]
            got = word[:i] + word[i + 1] + word[i] + word[i + 2 :]
        else:
            i = 1 + int(rng.integers(len(word) - 1))
            if op == "delete":
                got = word[:i] + word[i + 1 :]
            else:
                letters = [c for c in "abcdefghijklmnopqrstuvwxyz" if c != word[i].lower()]
                got = word[:i] + letters[int(rng.integers(len(letters)))] + word[i + 1 :]
        if got.lower() != word.lower() and not lexical.is_real_word(got, wordlist):
            return got
    return None


def random_word(w: Word, avoid: set[str], rng: np.random.Generator) -> str | None:
    """A random lemma for ``w``'s slot (same part of speech, band, valency), inflected to its tag; None where none."""
    deps = {c.dep_ for c in w.tok.children}
    if (w.pos == "a" and deps & {"ccomp", "xcomp", "prep"}) or (w.pos == "v" and "prep" in deps):
        return None  # a complement chosen by the word ("surprised he survived", "agree with", "wait for")
    if w.pos == "v" and any(t.lower_ in NPI for t in w.tok.subtree):
        return None  # "I doubt she would ever" -> "I acknowledge she would ever"
    if w.tok.dep_ == "appos" or (w.tok.i > 0 and w.tok.doc[w.tok.i - 1].lower_ == "you" and w.tok.tag_ == "NNS"):
        return None  # "you guys" -> "you knees"
    frames = slot_frames(w.tok) if w.pos == "v" else None
    if w.pos == "v" and frames is None:
        return None
    if w.pos == "v" and w.tok.dep_ == "ROOT" and not deps & {"nsubj", "nsubjpass", "expl"} and w.tok.tag_ != "VB":
        return None  # a dropped subject ("Really sucks that ..."): the clause the verb takes is the verb's own
    if w.pos == "n" and w.tok.tag_ == "NN" and not any(c.dep_ in ("det", "poss") for c in w.tok.children):
        return None  # a bare singular noun may be a mass noun ("I need help"): a count noun there is no English
    level = lexical.band(lexical.pos_counts(w.pos).get(w.lemma, 0))
    pool = [
        n
        for n in lexical.random_pool(w.pos, level, frames)
        if n not in avoid and n not in NO_RANDOM and all(lexical._edit_distance(n, a) > 2 for a in avoid)
    ]
    for k in rng.permutation(len(pool))[:10] if pool else []:
        form = inflect(pool[int(k)], w.tok.tag_)
        if form is not None:
            return form
    return None


def form_of(name: str, tok: Any) -> str | None:
    """``name`` inflected to ``tok``'s tag and cased like it; None where LemmInflect has no such form, or a plural
    slot's substitute has no plural of its own (a mass noun: "injuries" -> "hurt")."""
    form = inflect(name, tok.tag_)
    if form is None or (tok.tag_ == "NNS" and form == name and tok.text.lower() != tok.lemma_.lower()):
        return None
    return match_case(form, tok.text)


def _frames(w: Word) -> frozenset[int] | None:
    """The frames a substitute verb needs in ``w``'s slot (:func:`slot_frames`); every frame for other words."""
    return slot_frames(w.tok) if w.pos == "v" else None


def antonym_of(w: Word) -> str | None:
    """``w``'s antonym in its sense, a verb's with a frame its slot needs; None where there is none."""
    if w.pos not in ("v", "a"):
        return None
    ant = lexical.antonym_in_sense(w.lemma, w.pos, w.sense)
    if ant is None or w.pos == "a":
        return ant
    frames = _frames(w)
    if frames is None:
        return None
    ant_synset = next(a.synset() for lem in w.sense.lemmas() for a in lem.antonyms() if a.name().lower() == ant)
    return ant if lexical.lemma_frames(ant_synset, ant) & frames else None


def synonym_of(w: Word) -> str | None:
    """``w``'s synonym in its sense for a verb or an adjective, a verb's with a frame its slot needs, no preposition
    the verb chose ("reply to", "happen to") and a subject; None where there is none."""
    if w.pos == "n" or w.tok.dep_ == "intj":
        return None  # nouns: 8 of 26 audited noun swaps were wrong ("weakest of the bunch" -> "clump")
    if w.pos == "v" and (
        any(c.dep_ == "prep" for c in w.tok.children)
        or (w.tok.dep_ == "ROOT" and not any(c.dep_ in ("nsubj", "nsubjpass", "expl") for c in w.tok.children))
    ):
        return None  # a preposition the verb chose ("reply to"); a bare root ("Help, I'm scared")
    if w.pos == "v":
        frames = _frames(w)
        return None if frames is None else lexical.synonym_in_sense(w.lemma, w.pos, w.sense, frames)
    return lexical.synonym_in_sense(w.lemma, w.pos, w.sense)


def antonym_slot(doc: Any, tok: Any) -> bool:
    """An adjective whose antonym and whose in-place negation read right: the predicate of a finite *be* ("is sad" /
    "is not sad"; "feels not good", "gets not personal", "I'd be not careful" do not), with nothing of its own before
    it (a modifier: "so not happy", "crazy not cold"; a determiner: "the same" -> "the other") and no ``not`` to
    remove ("not hot at all" -> "hot at all")."""
    head = tok.head
    if head.lemma_.lower() != "be" or head.tag_ not in ("VBZ", "VBP", "VBD") or tok.dep_ == "conj":
        return False  # a finite be: "I'd be not careful" does not read
    if tok.i > 0 and doc[tok.i - 1].lower_ == "not":
        return False
    return not any(c.i < tok.i for c in tok.children)


def _antonym_pairs(doc: Any, w: Word) -> tuple[str, str, str] | None:
    """``(antonym, antonym pair, negation-antonym pair)`` on ``w``, None when either pair cannot be made (an
    adjective with a degree modifier before it is left out: "so not happy" / "not so happy" would not negate it)."""
    ant = antonym_of(w)
    if ant is None:
        return None
    if w.pos == "a" and not antonym_slot(doc, w.tok):
        return None
    form = form_of(ant, w.tok)
    word_neg = negate_word(doc, w.tok)
    if form is None or word_neg is None:
        return None
    return ant, render(doc, swap(doc, w.tok, form)), render(doc, word_neg)


def _synonym_pair(doc: Any, w: Word) -> tuple[str, str] | None:
    syn = synonym_of(w)
    form = form_of(syn, w.tok) if syn else None
    return (syn, render(doc, swap(doc, w.tok, form))) if syn and form else None


def _random_pair(doc: Any, w: Word, rng: np.random.Generator) -> str | None:
    avoid = {w.lemma}
    for other in (
        lexical.synonym_in_sense(w.lemma, w.pos, w.sense),
        lexical.antonym_in_sense(w.lemma, w.pos, w.sense),
    ):
        if other:
            avoid.add(other)
    form = random_word(w, avoid, rng)
    return render(doc, swap(doc, w.tok, match_case(form, w.tok.text))) if form else None


@dataclass(frozen=True)
class Edit:
    """One subset's pair: the text, what was changed (``word -> substitute (sense)``) and the substitution's key
    (``lemma>substitute``, what the per-substitution cap counts)."""

    text: str
    note: str
    key: str = ""


def _first(words: list[Word], prefer: Word | None, rng: np.random.Generator) -> list[Word]:
    """``words`` in a seeded order, ``prefer`` first when it is among them."""
    order = [words[int(k)] for k in rng.permutation(len(words))] if words else []
    if prefer is not None and prefer in order:
        order.remove(prefer)
        order.insert(0, prefer)
    return order


def _everything(subset: str, key: str) -> bool:
    return True


def minimal_pairs(
    doc: Any, rng: np.random.Generator, wordlist: frozenset[str], allowed: Callable[[str, str], bool] = _everything
) -> dict[str, Edit] | None:
    """Each subset's pair for one parsed sentence where it can be made right (module docstring) and ``allowed``
    accepts its substitution; None when the sentence is no original."""
    if "?" in doc.text or not MIN_TOKENS <= len(doc) <= MAX_TOKENS:
        return None
    root_neg = main_negation(doc)
    if root_neg is None:
        return None
    root = next(t for t in doc if t.dep_ == "ROOT")
    out = {"negation-main": Edit(render(doc, root_neg), f"{root.text}: negated")}
    words = words_in_context(doc)
    anchor: Word | None = None
    for w in _first(words, None, rng):
        got = _antonym_pairs(doc, w)
        if got is not None and allowed("antonym", f"{w.lemma}>{got[0]}"):
            key = f"{w.lemma}>{got[0]}"
            out["antonym"] = Edit(got[1], f"{key} ({w.sense.name()})", key)
            out["negation-antonym"] = Edit(got[2], f"{w.tok.text}: negated", key)
            anchor = w
            break
    for w in _first(words, anchor, rng):
        syn = _synonym_pair(doc, w)
        if syn is not None and allowed("synonym", f"{w.lemma}>{syn[0]}"):
            out["synonym"] = Edit(syn[1], f"{w.lemma}>{syn[0]} ({w.sense.name()})", f"{w.lemma}>{syn[0]}")
            anchor = anchor or w
            break
    for w in _first(words, anchor, rng):
        pair = _random_pair(doc, w, rng)
        if pair is not None:
            out["random-word"] = Edit(pair, f"{w.tok.text}: random {w.pos}")
            break
    targets = [t for t in doc if typo_target(doc, t)]
    prefer = anchor.tok if anchor is not None and typo_target(doc, anchor.tok) else None
    order = [targets[int(k)] for k in rng.permutation(len(targets))] if targets else []
    if prefer is not None:
        order = [prefer, *(t for t in order if t is not prefer)]
    for t in order:
        bad = typo(t.text, rng, wordlist)
        if bad is not None:
            out["typo"] = Edit(render(doc, {t.i: bad}), f"{t.text} -> {bad}")
            break
    original = doc.text.strip()
    return {name: e for name, e in out.items() if e.text != original}


def typo_target(doc: Any, tok: Any) -> bool:
    """A word a typo can go in: an alphabetic noun, verb, adjective or adverb of 4+ letters, not a name, not in
    capitals, not glued to its neighbours."""
    if tok.pos_ not in ("NOUN", "VERB", "ADJ", "ADV") or not tok.is_alpha or len(tok.text) < 4 or tok.text.isupper():
        return False
    i = tok.i
    glued_after = not tok.whitespace_ and i + 1 < len(doc) and not doc[i + 1].is_punct
    glued_before = i > 0 and not doc[i - 1].whitespace_ and not doc[i - 1].is_punct
    return not (glued_after or glued_before)


# -- the recipe --------------------------------------------------------------------------------------------------
def read_goemotions(path: Path) -> list[tuple[str, str]]:
    """(text, comment id) rows of a GoEmotions split (``text<TAB>labels<TAB>id``, CSV-quoted), the text unquoted and
    its whitespace normalised."""
    from evalfarm.taskdata.textfiles import normalize_space, read_quoted_tsv

    return [(normalize_space(f[0]), f[2]) for _, f in read_quoted_tsv(path, 3) if f[0].strip()]


def read_wordlist(*paths: Path) -> frozenset[str]:
    """The lower-cased alphabetic words of the EvalRank word pool's vocabulary files (one word per line)."""
    from evalfarm.taskdata.textfiles import read_lines

    return frozenset(w.lower() for p in paths for line in read_lines(p) for w in line.split() if w.isalpha())


REVIEW_FILE = Path(__file__).with_name("heros_review.tsv")
"""Every synonym pair the rules make, judged by a reader (``comment_id``, ``subset``, ``substitution``, ``verdict``,
``reason``): the rules alone leave about a third of synonym swaps wrong in context (docs/audits/README.md), so a
synonym pair is kept only where its verdict is ``ok``; a pair not in the file is left out (unreviewed)."""
REVIEWED = frozenset({"synonym", "antonym"})


def read_review(path: Path = REVIEW_FILE) -> dict[tuple[str, str, str], str]:
    """``(comment_id, subset, substitution) -> verdict`` of the review file; a malformed row names ``file:line``."""
    from evalfarm.taskdata.textfiles import malformed, read_lines

    out: dict[tuple[str, str, str], str] = {}
    lines = read_lines(path)
    for lineno, line in enumerate(lines[1:], 2):
        fields = line.split("\t")
        if len(fields) != 5 or fields[3] not in ("ok", "wrong"):
            raise malformed(path, lineno, "expected comment_id, subset, substitution, ok|wrong, reason", line)
        out[(fields[0], fields[1], fields[2])] = fields[3]
    return out


def make(inputs: Mapping[str, Path], params: Mapping[str, Any]) -> str:
    """The recipe's rows (see the module docstring), reviewed synonyms only."""
    return make_rows(inputs, params, read_review())


def make_rows(
    inputs: Mapping[str, Path], params: Mapping[str, Any], review: Mapping[tuple[str, str, str], str] | None
) -> str:
    """Originals in seeded order, each subset's cell filled until the subset has ``n`` pairs, a row written when it
    fills at least one cell; a pair of a :data:`REVIEWED` subset kept only where ``review`` says ``ok`` (None: every
    pair, the candidates a review reads: benchmarks/heros_audit_sample.py --candidates)."""
    n, seed = int(params["n"]), int(params["seed"])
    wordlist = read_wordlist(inputs["wordlist_wiki"], inputs["wordlist_basic"])
    seen: dict[str, tuple[str, str]] = {}
    for split in ("dev", "test"):
        for text, cid in read_goemotions(inputs[split]):
            seen.setdefault(text, (split, cid))
    texts = list(seen)
    order = np.random.default_rng(seed).permutation(len(texts))
    rows = ["\t".join(COLUMNS)]
    filled = dict.fromkeys(SUBSETS, 0)
    uses: dict[tuple[str, str], int] = defaultdict(int)
    batch = 256
    for start in range(0, len(order), batch):
        chunk = [texts[int(i)] for i in order[start : start + batch]]
        for j, doc in enumerate(nlp().pipe(chunk, batch_size=batch)):
            index = int(order[start + j])
            split, cid = seen[texts[index]]

            def allowed(subset: str, key: str, cid: str = cid) -> bool:
                if filled[subset] >= n or uses[(subset, key)] >= MAX_PER_SUBSTITUTION:
                    return False
                return review is None or subset not in REVIEWED or review.get((cid, subset, key)) == "ok"

            got = minimal_pairs(doc, np.random.default_rng([seed, index]), wordlist, allowed)
            keep = {name: e for name, e in (got or {}).items() if filled[name] < n}
            if not keep:
                continue
            for name, e in keep.items():
                filled[name] += 1
                if e.key:
                    uses[(name, e.key)] += 1
            cells = [str(len(rows) - 1), split, cid, doc.text.strip()]
            cells += [keep[name].text if name in keep else "" for name in SUBSETS]
            cells.append("; ".join(f"{name}: {keep[name].note}" for name in SUBSETS if name in keep))
            rows.append("\t".join(cells))
            if all(v >= n for v in filled.values()):
                return "\n".join(rows) + "\n"
    if len(rows) == 1:
        raise BuildError("data build heros: no GoEmotions dev/test sentence qualifies")
    return "\n".join(rows) + "\n"


BUILDER = register_builder(
    Builder(
        name="heros",
        version="2",
        description="HEROS-style minimal pairs chosen in context (WordNet dominant sense + Lesk, LemmInflect, "
        "valency-matched random words, non-word typos) from GoEmotions dev/test",
        make=make,
        defaults={"n": 1000, "seed": 0},
        inputs={
            **GOEMOTIONS_INPUTS,
            "wordlist_wiki": BuildInput(
                "evalrank/word_evalrank/wiki_vocab.txt",
                "ab2c76b26cc8ca09f352d4bb70fa4b34b2e8a3a7a520a2506d664bbc75203c75",
            ),
            "wordlist_basic": BuildInput(
                "evalrank/word_evalrank/basic_vocab.txt",
                "b30c502822749d56d0f3fad0151a6b711d584fa8eac944d1473fed413a7c0844",
            ),
        },
        resources=resources,
    )
)
