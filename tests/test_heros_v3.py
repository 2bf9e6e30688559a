"""HEROS-style pairs, recipe version 3 (issue 53): every generation bug the issue lists gets a sentence on which the
version-2 rules go wrong (asserted here, so each test fails on the old generator) and version 3 is right or leaves
the sentence alone; the reviewed lexicon is backed by WordNet; no substitution over 2 % of a subset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # spaCy's parser, WordNet, LemmInflect


def _doc(text: str):
    from evalfarm.taskdata.build_heros import nlp

    return nlp()(text)


def _root(doc):
    return next(t for t in doc if t.dep_ == "ROOT")


def _v2_main(text: str) -> str | None:
    from evalfarm.taskdata import build_heros_v2 as v2

    doc = _doc(text)
    edits = v2.main_negation(doc)
    return v2.render(doc, edits) if edits is not None else None


def _v3_main(text: str) -> str | None:
    from evalfarm.taskdata.negation import negate_clause, render

    doc = _doc(text)
    edits = negate_clause(doc, _root(doc))
    return render(doc, edits) if edits is not None else None


@pytest.mark.parametrize(
    ("sentence", "version_2", "version_3"),
    [
        # curly-apostrophe contractions: spaCy does not always label "n’t" as a negation
        ("It wasn\u2019t that bad.", "It was notn\u2019t that bad.", "It was that bad."),
        ("You really shouldn\u2019t.", "You really should notn\u2019t.", "You really should."),
        # a clitic glued to the auxiliary
        ("I could've done it better.", "I could not've done it better.", "I could not have done it better."),
        ("She could\u2019ve told me.", "She could not\u2019ve told me.", "She could not have told me."),
        # ALL-CAPS: the inserted words in capitals, the lemma from the word (the tagger misreads capitals)
        ("I THOUGHT IT WAS FUNNY", "I DO not thought IT WAS FUNNY", "I DID NOT THINK IT WAS FUNNY"),
        # a parenthetical main clause after the assertion: left alone
        ("It's over, I'm afraid.", "It's over, I'm not afraid.", None),
        # a negative quantifier: no second negation
        ("That has nothing to do with it.", "That does not have nothing to do with it.", None),
        # a subject-less clause: no do-support
        ("Yes, agreed.", "Yes, did not agree.", None),
        ("Perfectly said.", "Perfectly did not say.", None),
        # positive-polarity items: left alone
        ("I love it too.", "I do not love it too.", None),
        ("I still love you.", "I still do not love you.", None),
        ("I already did that.", "I already did not do that.", None),
        ("That's pretty good.", "That's not pretty good.", None),
    ],
)
def test_each_negation_bug_of_version_2_is_gone(sentence, version_2, version_3):
    assert _v2_main(sentence) == version_2  # the old generator's bug, reproduced
    assert _v3_main(sentence) == version_3


@pytest.mark.parametrize(
    ("sentence", "negated"),
    [
        ("I did not like the movie.", "I did like the movie."),
        ("I don\u2019t like it at all.", None),  # "at all" leans on the negation
        ("I don't like it.", "I do like it."),
        ("She is happy with it.", "She is not happy with it."),
        ("He went home early today.", "He did not go home early today."),
        ("They have eaten the cake.", "They have not eaten the cake."),
        ("I can\u2019t tell who you\u2019re referring to.", "I can tell who you\u2019re referring to."),
        ("That\u2019s a terrible amount of bp", "That\u2019s not a terrible amount of bp"),
        ("I'd rather die than drive a Volvo!", "I'd rather not die than drive a Volvo!"),
        ("Leave him alone.", "Do not leave him alone."),
        ("I forgot not everyone has accused me of", None),  # a "not" elsewhere in the clause
        ("Can we forget that this happened", None),  # an inverted question without its "?"
        ("Alright imma set small goals for myself", None),  # a fused subject-auxiliary
    ],
)
def test_the_main_clause_is_negated_where_the_rule_is_sure(sentence, negated):
    assert _v3_main(sentence) == negated


@pytest.mark.parametrize(
    ("sentence", "word", "version_2", "version_3"),
    [
        ("He isn't dead.", "dead", "He isn't not dead.", "He is dead."),
        ("It isn\u2019t true.", "true", "It isn\u2019t not true.", "It is true."),
        ("Yes, agreed.", "agreed", "Yes, did not agree.", None),
    ],
)
def test_negation_antonym_removes_an_existing_negation_instead_of_doubling_it(sentence, word, version_2, version_3):
    from evalfarm.taskdata import build_heros_v2 as v2
    from evalfarm.taskdata.build_heros import negate_in_place
    from evalfarm.taskdata.negation import render

    doc = _doc(sentence)
    tok = next(t for t in doc if t.text == word)
    old = v2.negate_word(doc, tok)
    assert (v2.render(doc, old) if old else None) == version_2
    new = negate_in_place(doc, tok)
    assert (render(doc, new) if new else None) == version_3


def _wordlist(data_dir: Path) -> frozenset[str]:
    from evalfarm.taskdata.build_heros import read_wordlist

    words = data_dir / "evalrank" / "word_evalrank"
    return read_wordlist(words / "wiki_vocab.txt", words / "basic_vocab.txt")


def test_a_random_noun_after_a_or_an_is_countable(data_dir):
    """Version 2 put mass nouns after an article ("an information", "an admiration"); version 3 takes a noun only
    when its plural is a word of the EvalRank vocabulary."""
    from evalfarm.taskdata import build_heros_v2 as v2
    from evalfarm.taskdata import lexical
    from evalfarm.taskdata.build_heros import _countable, random_word

    wordlist = _wordlist(data_dir)
    assert not _countable("information", wordlist) and not _countable("admiration", wordlist)
    assert _countable("question", wordlist)
    doc = _doc("He wrote a letter to me.")
    tok = doc[3]
    old = v2.Word(tok, "n", "letter", lexical.dominant_sense("letter", "n"))
    before = [v2.random_word(old, {"letter"}, np.random.default_rng(k)) for k in range(30)]
    assert any(w and not _countable(w, wordlist) for w in before)  # version 2: "a money", "a growth"
    after = [random_word(doc, tok, {"letter"}, np.random.default_rng(k), wordlist) for k in range(30)]
    assert any(after) and all(_countable(w, wordlist) for w in after if w)


def test_the_article_agrees_with_the_substitute_by_sound():
    from evalfarm.taskdata.build_heros import article_for

    assert [article_for(w) for w in ("unhappy", "useful", "honest", "one", "awful", "terrible", "hour")] == [
        "an",
        "a",
        "an",
        "a",
        "an",
        "a",
        "an",
    ]


def test_a_random_verb_keeps_the_slot_subcategorisation(data_dir):
    """No random verb in a clause or infinitive slot ("I enact he doesn't", "Texas resumes to win"); in an object
    slot only a verb whose first sense is transitive and not intransitive ("I reply you")."""
    from evalfarm.taskdata.build_heros import _only_frames, random_word, verb_slots
    from evalfarm.taskdata.lexical import INTRANSITIVE_FRAMES, TRANSITIVE_FRAMES

    wordlist = _wordlist(data_dir)
    doc = _doc("I think he doesn't care.")
    assert verb_slots(doc[1]) == frozenset({"clause"})
    assert all(random_word(doc, doc[1], {"think"}, np.random.default_rng(k), wordlist) is None for k in range(5))
    doc = _doc("Texas wants to win.")
    assert random_word(doc, doc[1], {"want"}, np.random.default_rng(0), wordlist) is None
    doc = _doc("I bought the car.")
    got = [random_word(doc, doc[1], {"buy"}, np.random.default_rng(k), wordlist) for k in range(10)]
    assert any(got)
    assert not _only_frames("reply", TRANSITIVE_FRAMES) and not _only_frames("reply", INTRANSITIVE_FRAMES)


def test_the_lexicon_is_backed_by_wordnet_and_well_formed(tmp_path):
    from evalfarm.taskdata.build_heros import LEXICON_FILE, lexicon_problems, read_lexicon
    from evalfarm.taskdata.textfiles import TaskDataError

    entries = read_lexicon(LEXICON_FILE)
    assert len({e.key for e in entries if e.subset == "synonym"}) >= 80
    assert len({e.key for e in entries if e.subset == "antonym"}) >= 80
    assert lexicon_problems(entries) == []
    assert all(len(e.reason) > 15 for e in entries)
    bad = tmp_path / "lex.tsv"
    bad.write_text("subset\tpos\tlemma\tsubstitute\tslots\treason\nsynonym\tv\tbuy\tpurchase\tobject\tx\n")
    with pytest.raises(TaskDataError, match=r"lex\.tsv:2"):
        read_lexicon(bad)
    wrong = tmp_path / "wrong.tsv"
    wrong.write_text("subset\tpos\tlemma\tsubstitute\tslots\treason\nantonym\tv\tbuy\tpurchase\tobj\tnot one\n")
    assert lexicon_problems(read_lexicon(wrong)) == ["antonym buy>purchase: no direct WordNet antonym"]


@pytest.mark.parametrize(
    ("sentence", "word", "subset", "pair"),
    [
        ("I think this is what inspired him.", "think", "synonym", "I believe this is what inspired him."),
        ("I think about it a lot.", "think", "synonym", None),  # a preposition the entry does not list
        ("Hey beautiful, how are you.", "beautiful", "synonym", None),  # a vocative, no predicate
        ("Yeah that is sad.", "sad", "antonym", None),  # "glad" is said of people only
        ("I'm sad that you left.", "sad", "antonym", "I'm glad that you left."),
        ("This is an easy game.", "easy", "antonym", None),  # attributive: the antonym entries are predicates
        ("The game is easy.", "easy", "antonym", "The game is difficult."),
        ("It is a huge problem.", "huge", "synonym", None),  # no entry: WordNet does not link huge and enormous
    ],
)
def test_a_lexicon_substitution_is_made_only_in_the_slots_its_entry_allows(sentence, word, subset, pair):
    from evalfarm.taskdata.build_heros import lexicon_edit

    doc = _doc(sentence)
    tok = next(t for t in doc if t.text == word)
    got = lexicon_edit(doc, tok, subset, lambda s, k: True)
    assert (got[0].text if got else None) == pair


@pytest.mark.parametrize(
    ("sentence", "negated"),
    [
        ("Wonder what [NAME] [NAME] thinks about all this", None),  # "I" dropped: no imperative
        ("Hope he gets rich from this!", None),
        ("Guess I\u2019m heading back to the kitchen :)", None),
        ("Dude the speed which the cop came running is amazing", None),  # an interjection taken for a verb
        ("A billion more [NAME] saves and I\u2019ll have [NAME]!", None),  # a plural noun taken for a verb
        ("They were barely given a chance", None),  # a negative adverb: no "not barely"
        ("Mine do honestly, but I try not to.", None),  # do as a pro-verb
        ("[NAME] forbid someone make a joke around YOU", None),  # God forbid, masked
        ("I do it all the time.", "I do not do it all the time."),
        ("Check that rabid post history lol", None),  # an imperative: left alone (mostly formulas here)
    ],
)
def test_negation_main_leaves_alone_what_the_version_3_audit_found_wrong(sentence, negated):
    """The audit's wrong negation-main rows (docs/audits/heros-v3.tsv), each a rule of `main_clause_doubtful`."""
    from evalfarm.taskdata.build_heros import minimal_pairs

    got = minimal_pairs(_doc(sentence), np.random.default_rng(0), frozenset())
    assert (got["negation-main"].text if got and "negation-main" in got else None) == negated


@pytest.mark.parametrize(
    "sentence",
    [
        # speaker and focus adverbs: "not" beside them takes the wrong scope
        "She is probably cheating on you. :(",
        "Yeah I could definitely see that, which is sad.",
        "I was just scrolling down and I screamed when I got to the feet",
        "I sincerely hope they'll take good elements from DMC 2 (outfits, [NAME]) and maybe make fun of DmC",
        # a floating quantifier stranded before the negation
        "From one of his posts: \u201cYou and I both know full well that multiculturalism isn\u2019t working.\u201d",
        # a second negation in the sentence
        "oof I hope he didn't break his arms landing like that",
        "[NAME] is trying not to laugh through his lines and hoesntly I love it.",
        "It sounds like he doesn't know exactly what he wants and he's taking it out on you.",
        # a negative-polarity word the removed negation licensed
        "I don't necessarily hate them, but then again, I dislike it when people breed.",
        # the main predicate is not the parse's root
        "Glad I took the 1st half spread",
        "Funny you say that... krav maga is quite popular in Evanston.",
        "I feel safe around you is a nice one",
        "And I\u2019m just sitting here wishing my cat would come at least sit by me.",
        # "looks like" = apparently; puns, a lower-case "name" and a non-word taken for verbs
        "oh trae turnover then a whistle looks like LP gonna show him the bench :|",
        "Hey buddy, wear did you ear like van-go.",
        "> set suggested.",
        "omgad that monster!",
        "Free weed lol don't get what you're complaining about.",
        # draw 2 (the first redraw): imperative formulas, hedges, glued and stacked verbs, caps, a leaning NPI
        "Excuse me, but define what a good world is",
        "Trust me dude, switch to stick deodorant and cologne.",
        "Make sure he gets some glucosamine(!)",
        "I bet you could do it.",
        "You\u2019re welcome \U0001f60a",
        "Girls gotta stick together.",
        "The huge attention paid by powerful male republicans takes makes a lot more sense.",
        "they do poorly making me feel otherwise",
        "I DON'T KNOW WHAT TO DO WITH MY HANDS",
        "So shocking a couple in their 20s in counseling isn’t going to work out.",
        "Before.revolution can happen in the streets it first has to happen in their minds",
        "I can’t believe sb found this even remotely funny.",
        # draw 3: an ambiguous tense, "until", "or", "always", "almost", a formula, "been", a fronted object
        "They put whoever has the highest gamescore on a winning team that night, and that happened",
        "I read the title, and honestly I thought it was [NAME] and his bill again",
        "Haha, I didn't know that station existed until I was working in E Ayrshire one day",
        "I don't know you or your story, but I love your syntax",
        "I don't always do this, but when I do, I'm listening to the unedited version",
        "Oh my [NAME] I almost forgot about the hot dr pepper in a glass",
        "I’m sorry but [NAME] has better memes",
        "My ETL been trying to tell us every box should take us 30 seconds max",
        "Terrible shade of lipstick she's wearing...",
        # draw 4 (draw 5, the last, is the audit file as it stands)
        "Thanks for the clarification, appreciate that.",
        "I'd like to add spontaneously experiencing unending self-loathing",
        "The best losers of grand finals cod has ever seen",
        "Girl I went to school with was killed like this.",
    ],
)
def test_negation_main_leaves_alone_what_the_later_audit_draws_found_wrong(sentence):
    """Rows of docs/audits/heros-v3.tsv's earlier draws that either pass called wrong or doubtful in
    `negation-main`, each now a rule of `main_clause_doubtful`: the sentence gets no negation-main pair."""
    from evalfarm.taskdata.build_heros import minimal_pairs

    got = minimal_pairs(_doc(sentence), np.random.default_rng(0), frozenset())
    assert got is None or "negation-main" not in got, got["negation-main"].text


@pytest.mark.parametrize(
    ("sentence", "word", "substitute"),
    [
        ("I mean, he did believe in a clearly terrible [NAME]", "mean", "look"),  # a discourse marker
        ("It's 3 Calling Cards I believe, and one sticker for getting Flawless.", "believe", "stop"),  # parenthetical
        ("Wow [NAME] has a lot more insecurities than I thought", "thought", "became"),  # a comparative clause
        ("No, I'm pointing to the fact that you think that without Capitalism.", "fact", "end"),  # a noun's clause
        ("It makes no sense that this happens.", "sense", "movement"),
        ("I'd rather have to spend all eternity in Sunday services", "eternity", "integer"),  # a mass use
        ("This was so touching", "touching", "responding"),  # a participle used as an adjective
    ],
)
def test_a_random_word_is_refused_in_the_slots_the_second_audit_pass_found_wrong(sentence, word, substitute):
    """The random-word rows both passes called wrong where the parse looked plain (`random_slot_doubtful`)."""
    from evalfarm.taskdata.build_heros import random_slot_doubtful

    doc = _doc(sentence)
    tok = next(t for t in doc if t.text == word)
    assert random_slot_doubtful(doc, tok, substitute)


@pytest.mark.parametrize(
    ("sentence", "word", "substitute"),
    [
        ("I bought the car yesterday.", "bought", "sold"),
        ("The dog ate my homework.", "homework", "ladder"),
        ("That movie was awful.", "awful", "green"),
    ],
)
def test_a_random_word_in_a_plain_slot_is_not_refused(sentence, word, substitute):
    from evalfarm.taskdata.build_heros import random_slot_doubtful

    doc = _doc(sentence)
    assert not random_slot_doubtful(doc, next(t for t in doc if t.text == word), substitute)


@pytest.mark.parametrize(
    ("sentence", "negated"),
    [
        ("I bought the car.", "I did not buy the car."),
        ("She is happy with the result.", "She is not happy with the result."),
        ("We can't go there.", "We can go there."),
    ],
)
def test_the_main_clause_rules_still_negate_a_plain_sentence(sentence, negated):
    """The rules are no blanket refusal: a plain main clause is still negated."""
    from evalfarm.taskdata.build_heros import minimal_pairs

    got = minimal_pairs(_doc(sentence), np.random.default_rng(0), frozenset())
    assert got is not None and got["negation-main"].text == negated
