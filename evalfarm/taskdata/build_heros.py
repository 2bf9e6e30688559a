"""``evalfarm data build heros`` (version 3, the default): HEROS-style minimal pairs (Chiang et al. 2023) at the
paper's size — up to 1,000 pairs per subset — from GoEmotions, each pair what its subset says.

Version 2 (:mod:`evalfarm.taskdata.build_heros_v2`, still buildable) kept only synonym and antonym pairs a reader had
accepted one by one: 76 synonym pairs from 26 substitutions, five of them half the subset. Version 3 replaces the
per-row review by a **reviewed lexicon of substitution types** and rules that check each use in its sentence:

- **Originals**: GoEmotions dev + test, then train where dev and test run short (train is read last, so every pair
  dev and test can give comes first; the ``split`` column says where each original is from: twelve zoo word models
  were trained on train's text). De-duplicated, seeded order; no ``?``, 4–40 tokens; the texts read with their CSV
  quoting undone. An original is written when it fills at least one subset's cell.
- **synonym / antonym**: a verb or adjective whose lemma and part of speech (spaCy) have an entry in
  :data:`LEXICON_FILE` (``heros_lexicon.tsv``): a substitute WordNet relates to it (a synonym shares a synset or is a
  similar-to adjective; an antonym is a direct WordNet antonym: :func:`lexicon_problems` checks every entry), the
  *slots* in which the reader judged the swap right, and the reason. A use qualifies when its slot in the sentence is
  one of the entry's (:func:`verb_slots`: with a direct object ``obj``, without one ``intr``, with a to-infinitive
  ``to``, a gerund ``ing``, a finite clause ``clause``, a preposition ``prep:X`` only where listed;
  :func:`adjective_slot`: ``pred`` — a predicate —, ``attr`` — a noun's modifier); no part of a WordNet multi-word
  expression, a hyphenated compound or a masked name's neighbourhood; no particle; for a verb no negative-polarity
  word it licenses. An antonym adjective is the predicate of a finite *be* with nothing of its own before it, so
  that its in-place negation reads. The substitute is inflected to the original's tag (LemmInflect), its case kept,
  an article before it made to agree by sound (:func:`article_for`: "an unhappy", "a useful", "an honest").
- **typo**: as version 2 (one edit past the first letter that makes no English word).
- **random-word**: as version 2's pools (same part of speech, frequency band, mostly that part of speech), but a
  verb only in a slot whose subcategorisation the parse pins down — a plain direct object or nothing
  (``obj`` / ``intr``: no clause, infinitive, preposition, particle or dative), the substitute verb's first sense
  having a WordNet frame of that kind; a noun only where the substitute is countable like the slot (its plural is a
  word of the EvalRank vocabulary: never "an information", "an admiration").
- **negation-main**: the main clause's finite verb negated, or its negation removed, by
  :func:`evalfarm.taskdata.negation.negate_clause`; a sentence is left alone where that rule is unsure, or where
  :func:`evalfarm.taskdata.negation.main_clause_doubtful` doubts the parse of its main clause (the audit's finds).
- **negation-antonym**: the antonym's word negated in place: an adjective gets ``not`` before it, or its copula's
  negation removed ("isn't dead" -> "is dead", never "isn't not dead"); a verb's clause is negated as above.
- **No single substitution** makes more than 2 % of a subset (:data:`MAX_SHARE` of ``n``): the key is
  ``lemma>substitute`` for synonym and antonym, the target's lemma for random-word and typo, the negated verb's
  lemma for the negations.

Output: one row per original, columns ``id``, ``split``, ``comment_id``, ``original``, the six subsets and
``edits`` (what each cell changed).
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evalfarm.taskdata import lexical
from evalfarm.taskdata.build import Builder, BuildError, BuildInput, register_builder
from evalfarm.taskdata.build_heros_v1 import GOEMOTIONS_INPUTS, MAX_TOKENS, MIN_TOKENS, SUBSETS, inflect, match_case
from evalfarm.taskdata.build_heros_v1 import nlp as nlp
from evalfarm.taskdata.build_heros_v1 import resources as v1_resources
from evalfarm.taskdata.build_heros_v2 import (
    NO_RANDOM,
    _next_to_mask,
    read_goemotions,
    read_wordlist,
    typo,
    typo_target,
)
from evalfarm.taskdata.negation import (
    NEGATIVE_WORDS,
    NEGATORS,
    NPI,
    PPI,
    cased,
    main_clause_doubtful,
    negate_clause,
    own_negator,
    render,
)

if TYPE_CHECKING:
    from spacy.tokens import Doc, Token

COLUMNS = ("id", "split", "comment_id", "original", *SUBSETS, "edits")
LEXICON_FILE = Path(__file__).with_name("heros_lexicon.tsv")
"""The reviewed substitution types: ``subset``, ``pos`` (v / a), ``lemma``, ``substitute``, ``slots`` (comma-
separated), ``reason`` (why the swap is right in those slots)."""
MAX_SHARE = 0.02
"""No key (a substitution, a target lemma, a negated verb) fills more than this share of a subset's ``n`` pairs."""
SPLITS = ("dev", "test", "train")
"""GoEmotions splits in the order their originals are used: train only where dev and test run short."""
VERB_SLOTS = frozenset({"obj", "intr", "to", "ing", "clause"})
ADJECTIVE_SLOTS = frozenset({"pred", "attr", "person"})
_SUBJECT = frozenset({"nsubj", "nsubjpass", "expl"})
_UNPINNED = frozenset({"dative", "acomp", "attr", "oprd", "prt", "agent", "csubj", "advcl", "npadvmod"})
"""Complements that make a verb's slot one the lexicon's slot names do not describe."""
_GAPPED = frozenset({"relcl", "acl", "amod", "pcomp", "csubj", "compound", "conj"})
"""A verb in one of these relations may have its object elsewhere (a relative clause's gap)."""
COPULAS = frozenset({"be", "seem", "look", "sound", "feel", "appear", "become", "remain", "stay"})
"""Verbs whose adjective complement is a ``pred`` slot; "get big" (grow) and "having fewer" are not."""
_WOULD = frozenset({"would", "'d", "\u2019d"})
FLOATING = frozenset({"all", "both", "each"})
"""Floating quantifiers: "They are all good" negates as "not all good", not "all not good"."""
PERSONAL = frozenset({"i", "you", "we", "he", "she", "they", "u", "ya", "y'all", "y’all"})
"""Subjects a ``person`` slot takes: glad, sure, aware are said of people ("which is sad" -> "which is glad")."""
_AN_EXCEPTIONS_A = ("uni", "use", "usu", "usa", "ute", "eu", "one", "once", "ubiq", "ukr", "uran", "euro")
_AN_EXCEPTIONS_AN = ("hon", "hour", "heir")


def resources() -> dict[str, str]:
    """Version 1's resources, a hash of WordNet's SemCor counts (the random word's bands) and one of the lexicon."""
    import hashlib

    from evalfarm.taskdata.wordnet import wordnet_dir

    out = v1_resources()
    out["wordnet_counts"] = hashlib.sha256((wordnet_dir() / "cntlist.rev").read_bytes()).hexdigest()[:12]
    out["lexicon"] = hashlib.sha256(LEXICON_FILE.read_bytes()).hexdigest()[:12]
    return out


# -- the lexicon -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """One reviewed substitution type."""

    subset: str
    pos: str
    lemma: str
    substitute: str
    slots: frozenset[str]
    reason: str

    @property
    def key(self) -> str:
        return f"{self.lemma}>{self.substitute}"


@functools.cache
def read_lexicon(path: Path = LEXICON_FILE) -> tuple[Entry, ...]:
    """The lexicon's entries; a malformed row (wrong column count, unknown subset, part of speech or slot, no
    reason) is an error naming ``file:line``."""
    from evalfarm.taskdata.textfiles import malformed, read_lines

    out = []
    for lineno, line in enumerate(read_lines(path)[1:], 2):
        f = line.split("\t")
        if len(f) != 6 or f[0] not in ("synonym", "antonym") or f[1] not in ("v", "a") or not f[5].strip():
            raise malformed(path, lineno, "expected subset, pos (v|a), lemma, substitute, slots, reason", line)
        slots = frozenset(s.strip() for s in f[4].split(","))
        known = VERB_SLOTS if f[1] == "v" else ADJECTIVE_SLOTS
        if not slots or any(s not in known and not (f[1] == "v" and s.startswith("prep:")) for s in slots):
            raise malformed(path, lineno, f"slots must be among {', '.join(sorted(known))} (verbs: prep:X too)", line)
        out.append(Entry(f[0], f[1], f[2], f[3], slots, f[5]))
    return tuple(out)


def lexicon_problems(entries: tuple[Entry, ...]) -> list[str]:
    """Entries WordNet does not back: a synonym sharing no synset with its word (for adjectives, nor a similar-to
    link), an antonym no direct antonym of it in that part of speech, a duplicate."""
    out = []
    seen = set()
    wn = lexical.wn()
    for e in entries:
        if (e.subset, e.pos, e.lemma, e.substitute) in seen:
            out.append(f"{e.subset} {e.lemma}>{e.substitute}: listed twice")
        seen.add((e.subset, e.pos, e.lemma, e.substitute))
        mine = wn.synsets(e.lemma, pos=e.pos)
        if e.subset == "antonym":
            ants = {a.name().lower() for s in mine for lem in s.lemmas() if lem.name().lower() == e.lemma
                    for a in lem.antonyms()}  # fmt: skip
            if e.substitute not in ants:
                out.append(f"antonym {e.lemma}>{e.substitute}: no direct WordNet antonym")
            continue
        theirs = set(wn.synsets(e.substitute, pos=e.pos))
        similar = {t for s in mine for t in s.similar_tos()} if e.pos == "a" else set()
        if not (set(mine) | similar) & theirs:
            out.append(f"synonym {e.lemma}>{e.substitute}: shares no WordNet synset")
    return out


@functools.cache
def _by_word() -> dict[tuple[str, str, str], tuple[Entry, ...]]:
    out: dict[tuple[str, str, str], list[Entry]] = defaultdict(list)
    for e in read_lexicon():
        out[(e.subset, e.pos, e.lemma)].append(e)
    return {k: tuple(v) for k, v in out.items()}


# -- slots -------------------------------------------------------------------------------------------------------
def verb_slots(tok: Any) -> frozenset[str] | None:
    """The slot a verb fills (``obj``, ``intr``, ``to``, ``ing``, ``clause``) and its prepositions (``prep:with``);
    None where the parse does not pin it down (a relative clause's gap, a particle, a dative, a wh-complement, a
    predicate complement, an object beside a clause)."""
    if tok.dep_ in _GAPPED:
        return None
    kids = list(tok.children)
    deps = {c.dep_ for c in kids}
    if deps & _UNPINNED or any(c.tag_ in ("WP", "WDT", "WRB") for c in kids):
        return None
    out = {f"prep:{c.lower_}" for c in kids if c.dep_ == "prep"}
    obj = bool(deps & {"dobj", "auxpass", "nsubjpass"})
    if "xcomp" in deps:
        x = next(c for c in kids if c.dep_ == "xcomp")
        if obj:
            return None
        if any(g.dep_ == "aux" and g.lower_ == "to" for g in x.children):
            return frozenset(out | {"to"})
        return frozenset(out | {"ing"}) if x.tag_ == "VBG" else None
    if "ccomp" in deps:
        return None if obj else frozenset(out | {"clause"})
    return frozenset(out | {"obj" if obj else "intr"})


def adjective_slot(tok: Any) -> str | None:
    """``pred`` for the complement of a copular verb (:data:`COPULAS`: "I'm glad", "seems odd"), ``attr`` for a
    noun's modifier ("a terrible idea"), None otherwise: a vocative ("Hey beautiful!"), a bare exclamation, a small
    clause ("makes me happy"), whose swaps the reader found unreliable."""
    if tok.dep_ == "conj" and tok.head.pos_ == "ADJ":
        return adjective_slot(tok.head)
    if tok.dep_ == "acomp" and tok.head.lemma_.lower() in COPULAS and tok.head.i < tok.i:
        return "pred"
    if tok.dep_ == "amod" and tok.head.pos_ == "NOUN" and tok.head.i > tok.i:
        return "attr"
    return None


def word_ok(doc: Any, tok: Any) -> bool:
    """A single alphabetic verb or adjective that no expression, compound, particle or masked name holds."""
    if tok.pos_ not in ("VERB", "ADJ") or not tok.is_alpha or not tok.lemma_.lower().isalpha():
        return False
    if tok.pos_ == "ADJ" and tok.tag_ not in ("JJ", "JJR", "JJS"):
        return False
    i = tok.i
    glued_after = not tok.whitespace_ and i + 1 < len(doc) and (doc[i + 1].is_alpha or doc[i + 1].text in "-/'\u2019")
    glued_before = i > 0 and not doc[i - 1].whitespace_ and (doc[i - 1].is_alpha or doc[i - 1].text in "-/")
    if glued_after or glued_before or _next_to_mask(doc, i):
        return False
    if tok.pos_ == "VERB" and (tok.dep_ in ("amod", "compound") or any(c.dep_ == "prt" for c in tok.children)):
        return False
    return not lexical.in_mwe([t.text for t in doc], [t.lemma_.lower() for t in doc], i)


def entry_fits(e: Entry, tok: Any) -> bool:
    """Whether ``tok``'s slot in its sentence is one the entry allows."""
    if e.pos == "a":
        slot = adjective_slot(tok)
        if slot is None or slot not in e.slots:
            return False
        if "person" in e.slots and not _personal_subject(tok):
            return False
        return not any(c.dep_ == "prep" and f"prep:{c.lower_}" not in e.slots for c in tok.children)
    slots = verb_slots(tok)
    if slots is None or any(t.lower_ in NPI for t in tok.subtree):
        return False
    if any(c.dep_ == "aux" and c.lower_ in _WOULD for c in tok.children):
        return False  # "I'd like a coffee" is wanting, "I'd love to" an offer: no antonym or synonym reads
    kinds = slots & VERB_SLOTS
    preps = slots - VERB_SLOTS
    return bool(kinds & e.slots) and preps <= e.slots


def _personal_subject(tok: Any) -> bool:
    """A predicate adjective whose copula's subject is a personal pronoun ("I'm glad", "you're sure")."""
    subject = [c for c in tok.head.children if c.dep_ in ("nsubj", "nsubjpass")]
    return bool(subject) and subject[0].lower_ in PERSONAL


def antonym_slot(doc: Any, tok: Any) -> bool:
    """An adjective whose antonym and in-place negation both read: the predicate of a finite *be* with nothing of
    its own before it ("is sad" / "is not sad"), no ``not`` right before it, no positive-polarity word in the
    clause ("is still alive" -> "is still not alive")."""
    head = tok.head
    if tok.dep_ != "acomp" or head.lemma_.lower() != "be" or head.tag_ not in ("VBZ", "VBP", "VBD"):
        return False
    if any(c.i < tok.i for c in tok.children) or (tok.i > 0 and doc[tok.i - 1].lower_ in ("not", "never")):
        return False
    return not any(t.lower_ in PPI for t in head.subtree)


# -- the edits ---------------------------------------------------------------------------------------------------
def article_for(word: str) -> str:
    """``a`` or ``an`` before ``word`` by its sound: "an unhappy", "a useful", "an honest", "a one"."""
    w = word.lower()
    if w.startswith(_AN_EXCEPTIONS_AN):
        return "an"
    if w.startswith(_AN_EXCEPTIONS_A):
        return "a"
    return "an" if w[:1] in "aeiou" else "a"


def swap(doc: Any, tok: Any, new: str) -> dict[int, str]:
    """Edits putting ``new`` in ``tok``'s place, an article right before it made to agree by sound."""
    edits = {tok.i: new}
    if tok.i > 0 and doc[tok.i - 1].lower_ in ("a", "an"):
        art = doc[tok.i - 1]
        edits[art.i] = match_case(article_for(new), art.text)
    return edits


def form_of(name: str, tok: Any) -> str | None:
    """``name`` inflected to ``tok``'s tag and cased like it; None where LemmInflect has no such form."""
    form = inflect(name, tok.tag_)
    if form is None or (tok.tag_ in ("JJR", "JJS") and form == name):
        return None
    return match_case(form, tok.text)


@dataclass(frozen=True)
class Edit:
    """One subset's pair: the text, what was changed, and the key the 2 % cap counts."""

    text: str
    note: str
    key: str


def lexicon_edit(doc: Any, tok: Any, subset: str, allowed: Callable[[str, str], bool]) -> tuple[Edit, Entry] | None:
    """The first lexicon entry of ``subset`` whose slot fits ``tok`` and that ``allowed`` accepts, as an edit."""
    pos = "v" if tok.pos_ == "VERB" else "a"
    for e in _by_word().get((subset, pos, tok.lemma_.lower()), ()):
        if not entry_fits(e, tok) or (subset == "antonym" and pos == "a" and not antonym_slot(doc, tok)):
            continue
        if not allowed(subset, e.key):
            continue
        form = form_of(e.substitute, tok)
        if form is None:
            continue
        return Edit(render(doc, swap(doc, tok, form)), f"{e.key} ({e.slots and ','.join(sorted(e.slots))})", e.key), e
    return None


def negate_in_place(doc: Any, tok: Any) -> dict[int, str] | None:
    """The antonym's word negated in place: an adjective gets ``not`` before it, or its copula's negation removed
    ("isn't dead" -> "is dead"); a verb's clause negated (:func:`negate_clause`)."""
    if tok.pos_ != "ADJ":
        return negate_clause(doc, tok)
    neg = own_negator(doc, tok.head)
    if neg is not None:
        return negate_clause(doc, tok.head)
    words = {t.lower_ for t in tok.head.subtree}
    if words & (PPI | NEGATIVE_WORDS | FLOATING) or any(t.lower_ in NEGATORS for t in tok.head.subtree):
        return None  # "is still alive", "Nor are they common", "They are all good" -> "all not good"
    return {tok.i: f"{cased(doc, 'not')} {tok.text}"}


@functools.cache
def _only_frames(verb: str, frames: frozenset[int]) -> bool:
    """A verb whose first sense has a frame of ``frames`` and none of the other kind (transitive vs intransitive):
    "reply" has both, and "I reply you" is no English."""
    first = lexical.wn().synsets(verb, pos="v")[0]
    have = lexical.lemma_frames(first, verb)
    other = lexical.INTRANSITIVE_FRAMES if frames == lexical.TRANSITIVE_FRAMES else lexical.TRANSITIVE_FRAMES
    return bool(have & frames) and not have & other


@functools.cache
def _countable(noun: str, wordlist: frozenset[str]) -> bool:
    """A count noun: its plural is a different word of the EvalRank vocabulary ("informations" is none)."""
    plural = inflect(noun, "NNS")
    return plural is not None and plural != noun and plural in wordlist


def random_word(doc: Any, tok: Any, avoid: set[str], rng: np.random.Generator, wordlist: frozenset[str]) -> str | None:
    """A random lemma for ``tok``'s slot: a verb in a plain ``obj`` / ``intr`` slot with a frame of that kind, a
    predicate adjective, or a countable noun after a determiner; inflected to its tag; None where none fits."""
    pos = {"VERB": "v", "ADJ": "a", "NOUN": "n"}.get(tok.pos_)
    if pos is None:
        return None
    deps = {c.dep_ for c in tok.children}
    frames = None
    if pos == "v":
        slots = verb_slots(tok)
        if slots is None or slots - {"obj", "intr"} or any(t.lower_ in NPI for t in tok.subtree):
            return None
        if tok.dep_ == "ROOT" and not deps & _SUBJECT:
            return None  # a dropped subject: the clause the verb takes is its own
        frames = lexical.TRANSITIVE_FRAMES if "obj" in slots else lexical.INTRANSITIVE_FRAMES
    elif pos == "a" and (adjective_slot(tok) != "pred" or deps & {"ccomp", "xcomp", "prep"}):
        return None
    elif pos == "n" and (
        tok.tag_ not in ("NN", "NNS")
        or tok.dep_ in ("appos", "compound", "npadvmod")
        or not any(c.dep_ in ("det", "poss") for c in tok.children)
        or any(c.dep_ == "compound" for c in tok.children)
    ):
        return None
    lemma = tok.lemma_.lower()
    level = lexical.band(lexical.pos_counts(pos).get(lemma, 0))
    pool = [
        n
        for n in lexical.random_pool(pos, level, frames)
        if n not in avoid
        and n not in NO_RANDOM
        and all(lexical._edit_distance(n, a) > 2 for a in avoid)
        and not nlp().vocab[n].like_num
        and (frames is None or _only_frames(n, frames))
    ]
    for k in rng.permutation(len(pool))[:20] if pool else []:
        name = pool[int(k)]
        if pos == "n" and not _countable(name, wordlist):
            continue
        form = inflect(name, tok.tag_)
        if form is not None and form.isalpha():
            return match_case(form, tok.text)
    return None


# -- one sentence ------------------------------------------------------------------------------------------------
def _everything(subset: str, key: str) -> bool:
    return True


def _order(items: list[Any], prefer: Any, rng: np.random.Generator) -> list[Any]:
    order = [items[int(k)] for k in rng.permutation(len(items))] if items else []
    if prefer is not None and prefer in order:
        order.remove(prefer)
        order.insert(0, prefer)
    return order


def minimal_pairs(
    doc: Any, rng: np.random.Generator, wordlist: frozenset[str], allowed: Callable[[str, str], bool] = _everything
) -> dict[str, Edit] | None:
    """Each subset's pair for one parsed sentence where it can be made right (module docstring) and ``allowed``
    accepts its key; None when the sentence is no original."""
    if "?" in doc.text or not MIN_TOKENS <= len(doc) <= MAX_TOKENS:
        return None
    out: dict[str, Edit] = {}
    _main_negation(doc, allowed, out)
    words = [t for t in doc if word_ok(doc, t)]
    anchor = _antonym_pairs(doc, words, rng, allowed, out)
    for tok in _order(words, anchor, rng):
        got = lexicon_edit(doc, tok, "synonym", allowed)
        if got is not None:
            out["synonym"] = got[0]
            anchor = anchor or tok
            break
    _random_pair(doc, anchor, rng, wordlist, allowed, out)
    typos = [t for t in doc if typo_target(doc, t)]
    for tok in _order(typos, anchor, rng):
        lemma = tok.lemma_.lower()
        bad = typo(tok.text, rng, wordlist) if allowed("typo", lemma) else None
        if bad is not None:
            out["typo"] = Edit(render(doc, {tok.i: bad}), f"{tok.text} -> {bad}", lemma)
            break
    original = doc.text.strip()
    return {name: e for name, e in out.items() if e.text != original}


def _main_negation(doc: Any, allowed: Callable[[str, str], bool], out: dict[str, Edit]) -> None:
    """``negation-main`` into ``out`` where the sentence has one root and :func:`negate_clause` is sure."""
    root = next((t for t in doc if t.dep_ == "ROOT"), None)
    if root is None or sum(t.dep_ == "ROOT" for t in doc) != 1 or main_clause_doubtful(doc, root):
        return
    neg = negate_clause(doc, root)
    key = f"{root.lemma_.lower()}:{'-' if own_negator(doc, root) is not None else '+'}"
    if neg is not None and allowed("negation-main", key):
        out["negation-main"] = Edit(render(doc, neg), f"{root.text}: negated", key)


def _antonym_pairs(
    doc: Any, words: list[Any], rng: np.random.Generator, allowed: Callable[[str, str], bool], out: dict[str, Edit]
) -> Any | None:
    """``antonym`` and ``negation-antonym`` on the first word (seeded order) that has both; that word, or None."""
    for tok in _order(words, None, rng):
        got = lexicon_edit(doc, tok, "antonym", allowed)
        if got is None:
            continue
        neg = negate_in_place(doc, tok)
        if neg is None or not allowed("negation-antonym", got[1].key):
            continue
        out["antonym"] = got[0]
        out["negation-antonym"] = Edit(render(doc, neg), f"{tok.text}: negated in place", got[1].key)
        return tok
    return None


def _random_pair(
    doc: Any,
    anchor: Any | None,
    rng: np.random.Generator,
    wordlist: frozenset[str],
    allowed: Callable[[str, str], bool],
    out: dict[str, Edit],
) -> None:
    """``random-word`` into ``out``: the first target (the anchor first) a random word fits."""
    targets = [t for t in doc if t.pos_ in ("VERB", "ADJ", "NOUN") and word_or_noun_ok(doc, t)]
    for tok in _order(targets, anchor, rng):
        lemma = tok.lemma_.lower()
        if not allowed("random-word", lemma):
            continue
        avoid = {lemma, *(e.substitute for es in _by_word().values() for e in es if e.lemma == lemma)}
        form = random_word(doc, tok, avoid, rng, wordlist)
        if form is not None:
            if random_slot_doubtful(doc, tok, form):
                return  # no random-word pair for this sentence (the same draws as before: no other subset changes)
            out["random-word"] = Edit(render(doc, swap(doc, tok, form)), f"{tok.text} -> {form}", lemma)
            return


DEGREE = frozenset({"so", "very", "too", "quite", "pretty", "really", "more", "most", "less"})
"""Degree adverbs: a participle they modify is an adjective ("so touching"), no verb slot."""
MASS_DETERMINERS = frozenset({"all", "much", "enough", "less", "little", "more", "most"})
"""Determiners of a mass use of a singular noun ("all eternity"): a count noun cannot take its place."""


def random_slot_doubtful(doc: Doc, tok: Token, form: str) -> bool:
    """A random word's slot the version-3 audit's second pass found wrong where the parse looked plain: a verb
    before a comma (a parenthetical or discourse marker: "I believe," -> "I stop,", "I mean," -> "I look,"), a
    verb of a comparative clause ("than I thought" -> "than I became"), a noun with a complement clause ("the
    fact that", "makes no sense that"), a singular noun in a mass use (:data:`MASS_DETERMINERS`: "all eternity"
    -> "all integer"), and a verb form in an adjective's slot ("so touching" -> "so responding": a participle
    after a degree adverb, or an adjective's substitute ending in -ing / -ed). Checked
    after the draw, so a sentence it refuses gets no random-word pair and every other subset's draws stay the
    same."""
    nxt = doc[tok.i + 1] if tok.i + 1 < len(doc) else None
    if tok.pos_ == "VERB":
        if tok.dep_ == "acomp" or any(c.dep_ == "advmod" and c.lower_ in DEGREE for c in tok.children):
            return True  # a participle used as an adjective ("so touching")
        if nxt is not None and nxt.text in (",", "…", "...") and not any(c.dep_ == "dobj" for c in tok.children):
            return True
        return any(c.dep_ == "mark" and c.lower_ in ("than", "as") for c in tok.children)
    if tok.pos_ == "NOUN":
        if (nxt is not None and nxt.lower_ == "that") or any(c.dep_ in ("acl", "ccomp") for c in tok.children):
            return True
        return tok.tag_ == "NN" and any(c.dep_ == "det" and c.lower_ in MASS_DETERMINERS for c in tok.children)
    return tok.pos_ == "ADJ" and form.lower().endswith(("ing", "ed"))


def word_or_noun_ok(doc: Any, tok: Any) -> bool:
    """:func:`word_ok` for verbs and adjectives; for a noun, the same without the verb rules."""
    if tok.pos_ != "NOUN":
        return word_ok(doc, tok)
    i = tok.i
    if not tok.is_alpha or _next_to_mask(doc, i):
        return False
    glued = (not tok.whitespace_ and i + 1 < len(doc) and not doc[i + 1].is_punct) or (
        i > 0 and not doc[i - 1].whitespace_ and not doc[i - 1].is_punct
    )
    return not glued and not lexical.in_mwe([t.text for t in doc], [t.lemma_.lower() for t in doc], i)


# -- the recipe --------------------------------------------------------------------------------------------------
def originals(inputs: Mapping[str, Path], seed: int) -> list[tuple[str, str, str]]:
    """``(text, split, comment id)`` of every distinct GoEmotions sentence: dev and test in one seeded order, then
    train in another (train only where dev and test run short)."""
    seen: dict[str, tuple[str, str]] = {}
    for split in SPLITS:
        for text, cid in read_goemotions(inputs[split]):
            seen.setdefault(text, (split, cid))
    out = []
    for group in (("dev", "test"), ("train",)):
        texts = [t for t, (s, _) in seen.items() if s in group]
        order = np.random.default_rng([seed, len(group)]).permutation(len(texts))
        out += [(texts[int(i)], *seen[texts[int(i)]]) for i in order]
    return out


def make(inputs: Mapping[str, Path], params: Mapping[str, Any]) -> str:
    """Originals in seeded order, each subset's cell filled until the subset has ``n`` pairs (no key over
    :data:`MAX_SHARE` of ``n``), a row written when it fills at least one cell."""
    n, seed = int(params["n"]), int(params["seed"])
    cap = max(1, math.floor(MAX_SHARE * n))
    wordlist = read_wordlist(inputs["wordlist_wiki"], inputs["wordlist_basic"])
    texts = originals(inputs, seed)
    rows = ["\t".join(COLUMNS)]
    filled = dict.fromkeys(SUBSETS, 0)
    uses: dict[tuple[str, str], int] = defaultdict(int)

    def allowed(subset: str, key: str) -> bool:
        return filled[subset] < n and uses[(subset, key)] < cap

    batch = 256
    for start in range(0, len(texts), batch):
        chunk = texts[start : start + batch]
        for j, doc in enumerate(nlp().pipe([t for t, _, _ in chunk], batch_size=batch)):
            _, split, cid = chunk[j]
            got = minimal_pairs(doc, np.random.default_rng([seed, start + j]), wordlist, allowed)
            if not got:
                continue
            for name, e in got.items():
                filled[name] += 1
                uses[(name, e.key)] += 1
            cells = [str(len(rows) - 1), split, cid, doc.text.strip()]
            cells += [got[name].text if name in got else "" for name in SUBSETS]
            cells.append("; ".join(f"{name}: {got[name].note}" for name in SUBSETS if name in got))
            rows.append("\t".join(cells))
            if all(v >= n for v in filled.values()):
                return "\n".join(rows) + "\n"
    if len(rows) == 1:
        raise BuildError("data build heros: no GoEmotions sentence qualifies")
    return "\n".join(rows) + "\n"


GOEMOTIONS_TRAIN = BuildInput(
    "heros/goemotions_fallback/train.tsv", "1c254a142be5c00e80d819b9ae1bbd36d94b2eeb8f4b1271846508d57e57d9c5"
)
"""GoEmotions' train split: originals where dev and test run short."""

BUILDER = register_builder(
    Builder(
        name="heros",
        version="3",
        description="HEROS-style minimal pairs at the paper's size (up to 1,000 a subset, no substitution over 2 %) "
        "from GoEmotions: a reviewed lexicon of synonym / antonym types checked per slot, clause negation that "
        "leaves unsure sentences alone, valency- and countability-matched random words, non-word typos",
        make=make,
        defaults={"n": 1000, "seed": 0},
        inputs={
            **GOEMOTIONS_INPUTS,
            "train": GOEMOTIONS_TRAIN,
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
