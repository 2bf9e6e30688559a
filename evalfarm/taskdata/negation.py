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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spacy.tokens import Doc, Token

NEGATORS = frozenset({"not", "n't", "n\u2019t", "nt"})
"""Negation tokens as spaCy splits them ("don't" -> "do" "n't"; "dont" -> "do" "nt"; "cannot" -> "can" "not")."""
NEGATIVE_WORDS = frozenset(
    {"no", "nothing", "nobody", "none", "never", "nowhere", "neither", "nor", "noone", "nope", "nah", "without"}
)
"""Negative words other than ``not``: a clause holding one is left alone."""
NPI = frozenset({"either", "ever", "any", "anything", "anyone", "anybody", "anymore", "anywhere", "yet", "at"})
"""Negative-polarity words ("at" for "at all"): the negation they lean on cannot be removed."""
NPI_UNDER_NOT = frozenset({"necessarily", "much", "whatsoever", "remotely", "even", "until", "till", "always"})
"""More words that lean on a ``not`` before them (the version-3 audit's draws: "I don't necessarily hate them"
-> "I do necessarily hate them" is no English): a main clause whose negation they follow is left alone
(:func:`main_clause_doubtful`). Kept apart from :data:`NPI`, which the other subsets' rules read too."""
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


NEGATIVE_ADVERBS = frozenset({"barely", "hardly", "scarcely", "seldom", "rarely"})
"""Adverbs that are negative already: "not barely" is no negation of "barely"."""
FORMULA_PREDICATES = frozenset({"welcome", "sorry"})
"""Predicates of formulas whose negation insults or says nothing ("You're welcome", "I'm sorry but …")."""
HEDGES = frozenset({"bet", "guess", "hope", "reckon", "suppose", "wonder", "wish"})
"""Verbs of a speaker's hedge or wish whose negation with "I" is no English or says no opposite ("I do not bet you
could", "I do not hope they'll …"): left alone (the version-3 audit's draw 2)."""
INTERJECTIONS = frozenset({"dude", "bro", "lol", "lmao", "omg", "wow", "yeah", "yes", "damn", "man", "ugh"})
"""Words the tagger takes for a sentence-opening verb ("Dude the speed …" -> "Do not dude the speed …")."""


SCOPE_ADVERBS = frozenset(
    {"probably", "definitely", "certainly", "surely", "possibly", "maybe", "perhaps", "clearly", "obviously",
     "apparently", "evidently", "undoubtedly", "honestly", "frankly", "seriously", "literally", "sincerely",
     "personally", "genuinely", "totally", "absolutely", "just", "even", "only", "also", "almost", "nearly"}
)  # fmt: skip
"""Speaker and focus adverbs whose scope a ``not`` inserted beside them gets wrong ("She is not probably cheating",
"I was not just scrolling" = not merely, "I sincerely do not hope"): a main clause holding one is left alone (the
version-3 audit's draws)."""
FLOATING_QUANTIFIERS = frozenset({"both", "all", "each"})
"""A floating quantifier stranded before the negation ("You and I both do not know"): left alone."""
LIKE_VERBS = frozenset({"look", "sound", "seem", "feel"})
"""Verbs of appearance before "like" + clause ("a whistle looks like LP gonna …": apparently), left alone."""
_FRONTED = frozenset({"csubj", "advcl", "dep", "npadvmod"})


def main_clause_doubtful(doc: Doc, root: Token) -> bool:
    """Extra doubts for the *main* clause only (``negation-main``), from the version-3 audit's draws and passes:

    - no subject before a sentence-opening verb: an imperative, which in these comments is mostly a formula
      ("Excuse me", "Come on", "Trust me", "Talk about …", "Make sure …": 7 of 17 wrong in the audit's draw 2), or
      "I" dropped ("Wonder if …", "Hope he …");
    - a subject the parse got wrong: an interjection (:data:`INTERJECTIONS`: "lol don't get …", "Thanks, …
      appreciate that"), a lower-case "name" ("> set suggested."), a clausal subject ("So shocking a couple …
      isn't going to …"), two sentences glued by a "." ("Before.revolution can happen"), two subjects, an
      auxiliary before its pronoun subject (a question without its "?": "wear did you ear"); a "verb" with a
      determiner (a plural noun: "A billion more saves"), a word no dictionary has as a verb ("omgad that
      monster!"), a word glued to the verb ("gotta"), two finite verbs in a row ("takes makes"), *do*-support on
      no plain verb ("they do poorly making");
    - a hedge with "I" (:data:`HEDGES`: "I do not bet you could"), a formula's predicate
      (:data:`FORMULA_PREDICATES`: "You're welcome", "I'm sorry but …"), *do* as a pro-verb or light verb ("Mine
      do honestly"), a masked name before the verb ("[NAME] forbid": God forbid), a verb of appearance before
      "like" (:data:`LIKE_VERBS`: "looks like" = apparently), a verb whose past is its plain form with no
      auxiliary ("I read the title": "do" or "did"?), a non-finite first auxiliary ("My ETL been trying"),
      "would like" (an offer: "I'd like to add …");
    - a negative adverb in the clause (:data:`NEGATIVE_ADVERBS`), a speaker or focus adverb
      (:data:`SCOPE_ADVERBS`), a floating quantifier (:data:`FLOATING_QUANTIFIERS`), a word that leans on the
      negation to be removed (:data:`NPI_UNDER_NOT`: "can't believe … even remotely", "didn't know … until"),
      or an "or" it licensed ("I don't know you or your story"); a negative-polarity word that something else
      licenses (a superlative's "ever": "the best … cod has ever seen");
    - a second negation anywhere in the sentence (``not``, ``never``, ``nothing``, "DON'T" … besides the root's
      own): adding one reads as a double negation ("I do not hope he didn't …", "is not trying not to laugh"),
      removing one leaves the other's contrast ("… but other flavours did not");
    - a main predicate the parse missed: a word fronted before the subject that is no adverbial clause with its
      subordinator ("Glad I took …", "Funny you say that", "Imagine being … you believe", "sitting here wishing
      my cat would come"), a fronted object ("Terrible shade of lipstick she's wearing"), or a clause after the
      verb with no subject of its own ("I feel safe around you is a nice one")."""
    subjects = [c for c in root.children if c.dep_ in _SUBJECT]
    checks = (_subject_doubtful, _verb_doubtful, _scope_doubtful, _predicate_missed)
    return any(check(doc, root, subjects) for check in checks)


def _subject_doubtful(doc: Doc, root: Token, subjects: list[Token]) -> bool:
    """No subject before an opening verb (an imperative, "I" dropped), or a subject the parse got wrong."""
    first = next((t for t in doc if not t.is_punct), None)
    if first is not None and first.i == root.i and not subjects:
        return True  # an imperative (mostly a formula here: "Excuse me", "Come on", "Trust me"), or "I" dropped
    if any(s.dep_ == "csubj" or "." in s.text.strip(".") for s in subjects):
        return True  # a clausal subject ("So shocking a couple … isn't going to"), two sentences glued by a "."
    if any(s.lower_ in INTERJECTIONS or s.lower_ in ("thanks", "thx") or (s.pos_ == "PROPN" and s.text.islower())
           for s in subjects):  # fmt: skip
        return True  # "lol don't get …", "> set suggested." (a lower-case "name": the tagger guessing)
    return len(subjects) > 1 or any(_inverted(doc, t) for t in doc)  # a question without its "?" inside


def _verb_doubtful(doc: Doc, root: Token, subjects: list[Token]) -> bool:
    """A "verb" that is none, or one whose negation is no English or says no opposite."""
    kids = list(root.children)
    lemma = root.lemma_.lower()
    if lemma in HEDGES and any(s.lower_ == "i" for s in subjects):
        return True  # "I do not bet you could", "I do not hope"
    if lemma in ("like", "love") and any(c.dep_ == "aux" and c.lower_ in ("would", "'d", "\u2019d") for c in kids):
        return True  # "I'd like to add …": an offer or a politeness formula, not a liking
    nxt = doc[root.i + 1] if root.i + 1 < len(doc) else None
    if nxt is not None and ((not root.whitespace_ and nxt.is_alpha) or nxt.tag_ in ("VBZ", "VBD", "VBP")):
        return True  # a word glued to the verb ("gotta"), two finite verbs in a row ("takes makes")
    if nxt is not None and lemma in LIKE_VERBS and nxt.lower_ == "like":
        return True  # "a whistle looks like LP gonna …": apparently
    aux = [c for c in kids if c.dep_ == "aux" and c.i < root.i]
    if aux and aux[0].lemma_.lower() == "do" and root.tag_ != "VB":
        return True  # "they do poorly making": do-support on no plain verb
    if lemma == "do" and not any(c.dep_ == "dobj" for c in kids):
        return True  # do as a pro-verb ("Mine do honestly") or a light verb ("do poorly")
    if any(c.dep_ == "acomp" and c.lower_ in FORMULA_PREDICATES for c in kids):
        return True  # "You're welcome", "I'm sorry but …"
    if aux and aux[0].lower_ in ("been", "being"):
        return True  # no finite auxiliary before it ("My ETL been trying"): "been not trying" is no English
    if not aux and _tense_ambiguous(root):
        return True  # "They put …", "I read the title": past or present? do-support would have to guess
    if any(c.dep_ == "xcomp" and c.pos_ == "NOUN" for c in kids):
        return True  # a "complement" that is a noun: a verb the tagger misread ("takes makes a lot more sense")
    if any(c.dep_ == "det" for c in kids) or (root.i > 0 and doc[root.i - 1].text == "]"):
        return True  # a plural noun ("A billion more saves"), a masked name before it ("[NAME] forbid")
    return root.pos_ == "VERB" and root.lemma_.isalpha() and not _a_verb(lemma)  # "omgad that monster!"


def _scope_doubtful(doc: Doc, root: Token, subjects: list[Token]) -> bool:
    """A word whose reading the negation's scope changes, or a second negation in the sentence."""
    clause = _clause(root)
    if {t.lower_ for t in clause} & (NEGATIVE_ADVERBS | SCOPE_ADVERBS):
        return True
    if any(t.lower_ in FLOATING_QUANTIFIERS and t.dep_ not in ("det", "predet") for t in clause):
        return True  # "both" / "all" after the subject (not "all the time")
    own = own_negator(doc, root)
    if own is not None and any(t.lower_ in NPI_UNDER_NOT for t in doc[own.i + 1 :]):
        return True
    if own is None and any(t.lower_ in NPI for t in clause):
        return True  # "the best … cod has ever seen": something else (a superlative, a question) licenses "ever"
    if own is not None and any(t.lower_ in ("or", "nor") for t in clause):
        return True  # "I don't know you or your story" -> "I do know you or your story": the "or" it licensed
    return any(_negative(t) and (own is None or t.i != own.i) for t in doc)


def _predicate_missed(doc: Doc, root: Token, subjects: list[Token]) -> bool:
    """The sentence's main predicate is not the parse's root: a word fronted before the subject that is no
    adverbial clause with its subordinator ("Glad I took …"), or a finite clause after the verb with no subject
    of its own ("I feel safe around you is a nice one")."""
    before = subjects[0].i if subjects else root.i
    if any(c.dep_ == "dobj" and c.i < before for c in root.children):
        return True  # a fronted object: a noun phrase with a reduced relative ("Terrible shade of lipstick she's …")
    for c in root.children:
        if c.i < before and c.dep_ in _FRONTED and c.pos_ in ("ADJ", "VERB", "AUX", "PROPN"):
            if not (c.dep_ == "advcl" and any(g.dep_ == "mark" for g in c.children)):
                return True
        finite = c.tag_ in _FINITE or any(g.dep_ in ("aux", "auxpass") and g.tag_ in _FINITE for g in c.children)
        if c.i > root.i and c.dep_ in ("ccomp", "conj") and c.pos_ in ("VERB", "AUX") and finite:
            if not any(g.dep_ in _SUBJECT for g in c.children):
                return True  # "Girl I went to school with was killed": the main predicate came after
    return False


def _negative(tok: Token) -> bool:
    """A negation or negative word, in any case or spelling the tokenizer leaves whole ("DON'T", "can’t")."""
    low = tok.lower_
    return is_negator(tok) or low in NEGATIVE_WORDS or low in ("'t", "\u2019t") or low.endswith(("n't", "n\u2019t"))


def _tense_ambiguous(verb: Token) -> bool:
    """A verb whose plain form is its past too ("put", "read", "set", "cut"), without an auxiliary to tell which:
    *do*-support must pick "do" or "did" by the tagger's guess, which the audit found wrong ("I read the title, and
    I thought …" -> "I do not read")."""
    from lemminflect import getInflection, getLemma

    word = verb.lower_
    lemmas = getLemma(word, upos="VERB")
    return bool(lemmas) and lemmas[0].lower() == word and word in getInflection(word, tag="VBD")


def _inverted(doc: Doc, aux: Token) -> bool:
    """An auxiliary right before its clause's pronoun subject ("did you"): a question's word order."""
    if aux.pos_ != "AUX" or aux.i + 1 >= len(doc):
        return False
    nxt = doc[aux.i + 1]
    return nxt.pos_ == "PRON" and nxt.dep_ in _SUBJECT and nxt.head.i in (aux.i, aux.head.i)


def _a_verb(lemma: str) -> bool:
    """WordNet has ``lemma`` as a verb (the dictionary the recipe's other word checks read)."""
    from evalfarm.taskdata import lexical

    return bool(lexical.wn().synsets(lemma, pos="v"))


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
    "SCOPE_ADVERBS",
    "all_caps",
    "cased",
    "finite_clause",
    "main_clause_doubtful",
    "negate_clause",
    "render",
]
