"""English clause negation on a spaCy parse, for generated minimal pairs (HEROS-style ``negation-main`` and
``negation-antonym``, recipe version 3): negate a clause's finite verb, or remove its negation, and leave the
sentence alone (None) wherever the rule is unsure.

The rule, in order (each "None" is a sentence left alone):

- **The clause.** The verb must head a finite clause with its subject before it: a finite tag (``VBD``, ``VBZ``,
  ``VBP``, ``MD``) or a finite auxiliary, and an explicit subject (``nsubj``, ``nsubjpass``, ``expl``), or an
  imperative (a bare ``VB`` opening the sentence, no subject). A subject-less finite verb ("Yes, agreed.", "Perfectly
  said.", "Love this") is None: *do*-support there gives "Yes, did not agree". A verb with a subordinator ("if",
  "because"), a subject after its first auxiliary (an inverted question), a wh-word before it, or a clausal
  complement *before* it (a parenthetical main clause: "It's gone, I'm afraid" — the parser's root is "I'm afraid",
  the sentence's assertion is "It's gone") is None; so are formulas (:data:`FORMULAIC`: "thank you", "let's",
  "fuck that").
- **Existing negation.** A ``not`` / ``n't`` / ``nt`` (straight or curly apostrophe: spaCy does not always label a
  curly "n’t" as ``neg``, so negation is found by its text among the verb's children and right after its first
  auxiliary) is removed ("don’t" -> "do", "can't" -> "can", "won't" -> "will"), unless a negative-polarity word
  (:data:`NPI`: "either", "any", "ever", "yet") leans on it or the contraction has no positive form ("ain't").
  Any other negative word in the clause ("nothing", "never", "no", :data:`NEGATIVE_WORDS`) is None: adding a
  ``not`` gives "does not have nothing to do", and removing it is no single-word edit.
- **Polarity items.** A positive-polarity word in the clause (:data:`PPI`: "still", "too", "already", "pretty",
  "some", ...) is None: "I love it too" -> "I don't love it too" wants "either".
- **Placement.** ``not`` after the first auxiliary ("have not eaten"; after *rather* / *better*: "I'd rather not");
  a modal or auxiliary glued to a clitic is spelled out ("could've" -> "could not have", never "could not've"); a
  form of *be* as the main verb takes ``not`` after it ("That’s not", either apostrophe); any other verb takes
  *do*-support by its tag (``did not`` / ``does not`` / ``do not`` + lemma; a *get*-passive too: "did not get
  muted").
- **Case.** Inserted words follow the sentence's case: in an ALL-CAPS sentence "I DID NOT THINK", never "I DO not
  thought".

The edits are ``{token index: new text}`` (``""`` drops a token) for :func:`render`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NEGATORS = frozenset({"not", "n't", "n\u2019t", "nt"})
"""Negation tokens as spaCy splits them ("don't" -> "do" "n't"; "dont" -> "do" "nt"; "cannot" -> "can" "not")."""
NEGATIVE_WORDS = frozenset(
    {"no", "nothing", "nobody", "none", "never", "nowhere", "neither", "nor", "noone", "nope", "nah", "without"}
)
"""Negative words other than ``not``: a clause holding one is left alone."""
NPI = frozenset({"either", "ever", "any", "anything", "anyone", "anybody", "anymore", "anywhere", "yet", "at"})
"""Negative-polarity words ("at" for "at all"): the negation they lean on cannot be removed."""
PPI = frozenset(
    {
        "still",
        "too",
        "already",
        "pretty",
        "somewhat",
        "rather",
        "quite",
        "fairly",
        "some",
        "someone",
        "somebody",
        "something",
        "somewhere",
        "sometimes",
        "always",
        "so",
    }
)
"""Positive-polarity words and degree words whose reading changes under negation: a clause holding one is left
alone ("so happy" -> "not so happy" weakens rather than negates). "rather" is allowed right after the auxiliary
("I'd rather not")."""
BE_CLITICS = frozenset({"'s", "\u2019s", "'re", "\u2019re", "'m", "\u2019m"})
"""Contracted *be*, either apostrophe: spaCy tags the curly ones as verbs with themselves as lemma."""
SLANG_AUXILIARIES = frozenset({"imma", "ima", "finna", "tryna", "boutta"})
"""Fused subject-auxiliaries the tagger misreads ("imma set goals" -> "imma did not set goals"): left alone."""
FORMULAIC = frozenset({"thank", "let", "bless", "fuck", "damn", "screw", "mind", "please", "welcome", "lol"})
"""Roots of formulas that negation turns into nonsense ("thank you" -> "do not thank you", "let's go")."""
_DO = {"VBD": "did", "VBZ": "does", "VBP": "do", "VB": "do"}
_FINITE = frozenset({"VBD", "VBZ", "VBP", "MD"})
_SUBJECT = frozenset({"nsubj", "nsubjpass", "expl", "csubj"})
_WH = frozenset({"WP", "WP$", "WRB", "WDT"})
_POSITIVE = {"ca": "can", "wo": "will", "sha": "shall"}
"""The positive form of a contraction's host where it differs ("can't" -> "ca" "n't")."""
_CLITIC_FULL = {"'ve": "have", "\u2019ve": "have", "ve": "have"}
"""Clitics glued after an auxiliary that a ``not`` must not split ("could've" -> "could not have")."""


DROPPED_I = frozenset(
    {"wonder", "hope", "guess", "think", "wish", "suppose", "bet", "reckon", "agree", "disagree", "love", "hate",
     "like", "need", "want", "feel", "mean", "know", "believe", "imagine", "miss", "appreciate", "doubt", "forbid"}
)  # fmt: skip
"""Verbs that open a sentence with "I" dropped ("Wonder if …", "Hope he …", "Guess I'm …"): not imperatives, so a
main clause opening with one is left alone (:func:`main_clause_doubtful`)."""
NEGATIVE_ADVERBS = frozenset({"barely", "hardly", "scarcely", "seldom", "rarely"})
"""Adverbs that are negative already: "not barely" is no negation of "barely"."""
INTERJECTIONS = frozenset({"dude", "bro", "lol", "lmao", "omg", "wow", "yeah", "yes", "damn", "man", "ugh"})
"""Words the tagger takes for a sentence-opening verb ("Dude the speed …" -> "Do not dude the speed …")."""


def main_clause_doubtful(doc: Any, root: Any) -> bool:
    """Extra doubts for the *main* clause only (``negation-main``), from the version-3 audit: a sentence-opening
    verb of thinking or hoping with "I" dropped (:data:`DROPPED_I`), an interjection the tagger took for a verb
    (:data:`INTERJECTIONS`), a "verb" with a determiner (a plural noun: "A billion more saves"), a negative adverb
    in the clause (:data:`NEGATIVE_ADVERBS`), *do* as a pro-verb with nothing after it ("Mine do honestly"), and
    a masked name before the verb ("[NAME] forbid": God forbid)."""
    kids = list(root.children)
    subject = any(c.dep_ in _SUBJECT for c in kids)
    first = next((t for t in doc if not t.is_punct), None)
    opening = first is not None and first.i == root.i
    if opening and not subject and (root.lemma_.lower() in DROPPED_I or root.lower_ in INTERJECTIONS):
        return True
    if any(c.dep_ == "det" for c in kids) or any(t.lower_ in NEGATIVE_ADVERBS for t in _clause(root)):
        return True
    if root.lemma_.lower() == "do" and not any(c.dep_ in ("dobj", "xcomp", "ccomp", "acomp", "attr") for c in kids):
        return True
    return root.i > 0 and doc[root.i - 1].text == "]"


def is_negator(tok: Any) -> bool:
    return tok.lower_ in NEGATORS


def all_caps(doc: Any) -> bool:
    """Whether the sentence is written in capitals: most of its cased words of 2+ letters are upper case."""
    cased = [t.text for t in doc if t.is_alpha and len(t.text) > 1 and t.text.lower() != t.text.upper()]
    return bool(cased) and sum(w.isupper() for w in cased) > len(cased) / 2


def cased(doc: Any, text: str, like: str | None = None) -> str:
    """``text`` in the sentence's case: upper case in an ALL-CAPS sentence, else capitalised like ``like``."""
    if all_caps(doc):
        return text.upper()
    if like is not None and like[:1].isupper() and not like.isupper():
        return text[:1].upper() + text[1:]
    if like is not None and like.isupper() and len(like) > 1:
        return text.upper()
    return text


def _clause(verb: Any) -> list[Any]:
    """The verb's clause: its subtree less any embedded clause (a complement, adverbial, relative clause)."""
    out = []
    stop = {"ccomp", "advcl", "relcl", "acl", "xcomp", "parataxis", "conj"}

    def walk(tok: Any) -> None:
        out.append(tok)
        for c in tok.children:
            if c.dep_ not in stop:
                walk(c)

    walk(verb)
    return sorted(out, key=lambda t: t.i)


def own_negator(doc: Any, verb: Any) -> Any | None:
    """The verb's own ``not`` / ``n't``, found by its text where English puts it: right after the clause's first
    auxiliary, or right after the verb itself when it is *be* or an auxiliary ("isn't", "can’t", "cannot"). A
    ``not`` elsewhere ("I forgot not everyone ...") negates something else."""
    aux = [c for c in verb.children if c.dep_ in ("aux", "auxpass") and c.i < verb.i]
    hosts = [aux[0]] if aux else []
    if verb.lemma_.lower() == "be" or verb.lower_ in BE_CLITICS or verb.pos_ == "AUX":
        hosts.append(verb)
    for host in hosts:
        if host.i + 1 < len(doc) and is_negator(doc[host.i + 1]):
            return doc[host.i + 1]
    return None


def finite_clause(doc: Any, verb: Any) -> bool:
    """The verb heads a finite clause with its subject before it, or is a sentence-opening imperative; no
    subordinator, no inverted question, no wh-word or clausal complement before it."""
    if verb.pos_ not in ("VERB", "AUX") or verb.lemma_.lower() in FORMULAIC:
        return False
    kids = list(verb.children)
    if any(c.dep_ == "mark" for c in kids) or any(c.dep_ in ("ccomp", "parataxis") and c.i < verb.i for c in kids):
        return False
    if any(t.tag_ in _WH for t in doc[: verb.i]):
        return False
    aux = [c for c in kids if c.dep_ in ("aux", "auxpass") and c.i < verb.i]
    subject = [c for c in kids if c.dep_ in _SUBJECT]
    if aux and subject and subject[0].i > aux[0].i:
        return False  # an inverted question without its "?" ("Can we ...")
    if subject and subject[0].i > verb.i:
        return False
    finite = verb.tag_ in _FINITE or any(a.tag_ in _FINITE for a in aux)
    if subject:
        return finite
    first = next((t for t in doc if not t.is_punct and t.lower_ not in ("please", "just", "so", "and", "but")), None)
    return verb.tag_ == "VB" and not aux and first is not None and first.i == verb.i  # an imperative opening it


def negate_clause(doc: Any, verb: Any) -> dict[int, str] | None:
    """Edits negating ``verb``'s finite clause, or removing its negation; None where the rule is unsure (module
    docstring)."""
    if not finite_clause(doc, verb):
        return None
    if any(t.lower_ in SLANG_AUXILIARIES for t in doc):
        return None
    clause = _clause(verb)
    words = {t.lower_ for t in clause}
    neg = own_negator(doc, verb)
    if neg is not None:
        return _unnegate(doc, neg, clause)
    if words & NEGATIVE_WORDS or any(is_negator(t) for t in clause):
        return None
    aux = [c for c in verb.children if c.dep_ in ("aux", "auxpass") and c.i < verb.i]
    if _has_ppi(doc, clause, aux):
        return None
    if aux:
        return _after_auxiliary(doc, aux[0])
    if verb.lemma_.lower() == "be" or verb.lower_ in BE_CLITICS or (verb.pos_ == "AUX" and verb.tag_ in _FINITE):
        return _after_auxiliary(doc, verb)
    got = do_support(verb)
    if got is None or verb.pos_ != "VERB":
        return None
    do, lemma = got
    return {verb.i: f"{cased(doc, do, verb.text)} {cased(doc, 'not')} {cased(doc, lemma)}"}


def do_support(verb: Any) -> tuple[str, str] | None:
    """``(do form, lemma)`` for a verb without an auxiliary, read from the word itself (LemmInflect) rather than
    the tagger, which misreads capitals ("I THOUGHT" tagged as a present: "I DO not thought"): a past form takes
    *did*, a third-person present *does*, a plain form *do* (or the tag's choice)."""
    from lemminflect import getInflection, getLemma

    word = verb.lower_
    lemmas = getLemma(word, upos="VERB")
    if not lemmas or not lemmas[0].isalpha():
        return None
    lemma = lemmas[0].lower()
    if word != lemma and word in getInflection(lemma, tag="VBD"):
        return "did", lemma
    if word != lemma and word in getInflection(lemma, tag="VBZ"):
        return "does", lemma
    if word == lemma and verb.tag_ in ("VBP", "VB"):
        return "do", lemma
    return None


def _has_ppi(doc: Any, clause: list[Any], aux: list[Any]) -> bool:
    """A positive-polarity word in the clause (:data:`PPI`, "as well"), but "rather" / "better" right after the
    auxiliary."""
    for t in clause:
        if t.lower_ == "well" and t.i > 0 and doc[t.i - 1].lower_ == "as":
            return True
        if t.lower_ not in PPI:
            continue
        if t.lower_ in ("rather", "better") and aux and t.i == aux[0].i + 1:
            continue  # "I'd rather die" -> "I'd rather not die"
        return True
    return False


def _unnegate(doc: Any, neg: Any, clause: list[Any]) -> dict[int, str] | None:
    """Edits removing the negation ``neg`` ("don’t" -> "do", "can't" -> "can"); None where a negative-polarity
    word leans on it, another negative word is in the clause, or the contraction has no positive form."""
    if any(t.lower_ in NPI for t in doc[neg.i + 1 :]):
        return None
    if neg.i + 1 < len(doc) and doc[neg.i + 1].lower_ in ("only", "just", "even"):
        return None  # "not only ... but", "not just", "not even": a focus construction, not the clause's negation
    if any(t.lower_ in NEGATIVE_WORDS or (is_negator(t) and t.i != neg.i) for t in clause):
        return None  # "isn't not", "don't never"
    if neg.lower_ == "not":
        return {neg.i: ""}
    prev = doc[neg.i - 1] if neg.i > 0 else None
    if prev is None or prev.lower_ == "ai" or prev.whitespace_:
        return None
    return {prev.i: cased(doc, _POSITIVE.get(prev.lower_, prev.lower_), prev.text), neg.i: ""}


def _after_auxiliary(doc: Any, a: Any) -> dict[int, str] | None:
    """``not`` after the auxiliary (or *be*) ``a``; a *get*-passive takes *do*-support; after *rather* / *better*
    ("I'd rather not die"); a clitic glued to ``a`` is spelled out ("could've" -> "could not have")."""
    not_ = cased(doc, "not")
    if a.lemma_.lower() == "get":
        do = _DO.get(a.tag_)
        return {a.i: f"{cased(doc, do, a.text)} {not_} {cased(doc, 'get')}"} if do else None
    after = doc[a.i + 1] if a.i + 1 < len(doc) else None
    if after is not None and after.lower_ in ("rather", "better"):
        return {after.i: f"{after.text} {not_}"}
    if after is not None and not a.whitespace_ and after.lower_ in _CLITIC_FULL:
        return {a.i: f"{a.text} {not_}", after.i: " " + cased(doc, _CLITIC_FULL[after.lower_])}
    if after is not None and not a.whitespace_ and after.is_alpha:
        return None  # "gotta", "wanna": a word glued to the auxiliary
    return {a.i: f"{a.text} {not_}"}


def render(doc: Any, edits: Mapping[int, str]) -> str:
    """The sentence with token ``i``'s text replaced by ``edits[i]``; an empty edit drops the token (its space
    stays where the token before it had none: "do" + "n't " -> "do "); an edit opening with a space keeps it
    ("could" + " have")."""
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
    return "".join(out).replace("  ", " ").strip()


__all__ = [
    "NEGATIVE_WORDS",
    "NPI",
    "PPI",
    "all_caps",
    "cased",
    "finite_clause",
    "main_clause_doubtful",
    "negate_clause",
    "render",
]
