"""Generated task data (``evalfarm data build``) and the two scorers over it: HEROS minimal pairs and DefSent
definition -> word retrieval. Hand-computed numbers, ties and empty cases; the real builds (spaCy, WordNet) twice,
byte-identical, in the slow tier."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalfarm.scorers.base import TextVectors
from evalfarm.scorers.defsent import DefSentData, DefSentScorer
from evalfarm.scorers.heros import HerosData, HerosScorer, cos_avg, normalise, read_released
from evalfarm.taskdata import build as databuild


# -- the build mechanism -------------------------------------------------------------------------------------------
@pytest.fixture
def toy_recipe(tmp_path: Path, monkeypatch):
    """A recipe over one input file: n seeded numbers per line of the input."""
    src = tmp_path / "in.txt"
    src.write_text("a\nb\n")
    calls = []

    def make(inputs, params):
        calls.append(dict(params))
        rng = np.random.default_rng(params["seed"])
        lines = inputs["src"].read_text().split()
        return "x\ty\n" + "".join(f"{w}\t{rng.integers(1000)}\n" for w in lines for _ in range(params["n"]))

    b = databuild.Builder(
        "toy",
        "1",
        "toy recipe",
        make,
        defaults={"n": 2, "seed": 0},
        inputs={"src": databuild.BuildInput("in.txt", hashlib.sha256(src.read_bytes()).hexdigest())},
        resources=lambda: {"lib": "1.0"},
    )
    monkeypatch.setitem(databuild._BUILDERS, "toy", b)
    monkeypatch.setattr(databuild, "builders", lambda: dict(databuild._BUILDERS))
    monkeypatch.setenv("EVALFARM_DATA", str(tmp_path))
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    return b, calls


def test_a_build_is_deterministic_named_by_its_parameters_and_reused(toy_recipe, tmp_path):
    _, calls = toy_recipe
    one = databuild.build("toy", out_dir=tmp_path / "a")
    two = databuild.build("toy", out_dir=tmp_path / "b")
    assert one.rebuilt and two.rebuilt and one.sha256 == two.sha256
    assert one.path.read_bytes() == two.path.read_bytes()
    assert one.sha256 == hashlib.sha256(one.path.read_bytes()).hexdigest()
    head = one.path.read_text().splitlines()[0]
    assert head == '# evalfarm data build toy 1 {"params":{"n":2,"seed":0},"resources":{"lib":"1.0"}}'
    again = databuild.build("toy", out_dir=tmp_path / "a")
    assert not again.rebuilt and again.sha256 == one.sha256 and len(calls) == 2
    other = databuild.build("toy", {"seed": "1"}, out_dir=tmp_path / "a")  # a CLI string, cast to the default's type
    assert other.params == {"n": 2, "seed": 1} and other.path != one.path and other.sha256 != one.sha256
    assert databuild.read_rows(one.path)[0][0] == "a" and len(databuild.read_rows(one.path)) == 4


def test_builds_go_to_the_cache_never_the_data_folder(toy_recipe, tmp_path):
    got = databuild.build("toy")
    assert got.path.is_relative_to(tmp_path / "cache" / "builds" / "toy" / "1")


def test_a_task_names_a_build_by_checksum(toy_recipe, tmp_path):
    sha = databuild.build("toy", out_dir=tmp_path / "a").sha256
    path = databuild.built_file(databuild.BuildRef(name="toy", version="1", sha256=sha))
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    with pytest.raises(databuild.BuildError, match="the task expects 0000000000000000"):
        databuild.built_file(databuild.BuildRef(name="toy", version="1", params={"n": 3}, sha256="0" * 64))
    with pytest.raises(databuild.BuildError, match="names version 2, this evalfarm builds 1"):
        databuild.built_file(databuild.BuildRef(name="toy", version="2", sha256=sha))


def test_bad_parameters_and_inputs_are_refused(toy_recipe, tmp_path):
    with pytest.raises(databuild.BuildError, match="unknown parameter 'size'"):
        databuild.build("toy", {"size": 3})
    with pytest.raises(databuild.BuildError, match="unknown data build 'nope'"):
        databuild.build("nope")
    (tmp_path / "in.txt").write_text("changed\n")
    with pytest.raises(databuild.BuildError, match="input .*in.txt has sha256"):
        databuild.build("toy", out_dir=tmp_path / "c")


# -- HEROS ----------------------------------------------------------------------------------------------------------
def _vectors(texts: list[str], rows: dict[str, tuple[float, ...]], oov: tuple[str, ...] = ()) -> TextVectors:
    emb = np.array([rows.get(t, (0.0, 0.0)) for t in texts], dtype=np.float32)
    return TextVectors("sentence", emb, np.array([t in oov for t in texts], dtype=bool))


def _rows(result, metric):
    return {(r.subset, r.ties): r.value for r in result.rows if r.metric == metric}


def test_heros_normalises_by_the_mean_cosine_between_the_first_and_last_originals():
    """Originals o1..o4 at 0, 90, 0 and 90 degrees; m = 2: first {o1, o2}, last {o3, o4}: cosines 1, 0, 0, 1, so
    cos_avg = 0.5. Synonym pairs at 60 degrees from their original (cos 0.5 -> 0.0); antonym pairs identical
    (cos 1 -> 1.0) except o4's, missing."""
    c60, s60 = 0.5, math.sqrt(3) / 2
    rows = {"o1": (1, 0), "o2": (0, 1), "o3": (2, 0), "o4": (0, 3), "s1": (c60, s60), "s2": (s60, c60)}
    rows |= {"s3": (c60, -s60), "s4": (-s60, c60)}
    data = HerosData(
        ["o1", "o2", "o3", "o4"],
        {"synonym": ["s1", "s2", "s3", "s4"], "antonym": ["o1", "o2", "o3", None]},
    )
    s = HerosScorer()
    result = s.evaluate(None, data, _vectors(data.texts, rows), {"n_avg": 500})
    assert _rows(result, "cos_avg")[("all", None)] == pytest.approx(0.5)
    assert _rows(result, "cosine")[("synonym", None)] == pytest.approx(0.5)
    assert _rows(result, "normalized_similarity")[("synonym", None)] == pytest.approx(0.0, abs=1e-6)
    assert _rows(result, "normalized_similarity")[("antonym", None)] == pytest.approx(1.0)
    assert _rows(result, "n_pairs") == {("synonym", None): 4.0, ("antonym", None): 3.0}
    primary = [(r.metric, r.subset) for r in result.rows if r.primary]
    assert primary == [("normalized_similarity", "synonym")]


def test_heros_n_avg_caps_the_averaging_block_and_oov_texts_are_zero():
    rows = {"o1": (1, 0), "o2": (0, 1), "o3": (1, 1), "o4": (1, 0)}
    data = HerosData(["o1", "o2", "o3", "o4"], {"typo": ["o1", "x", "o3", "o4"]})
    out = HerosScorer().evaluate(None, data, _vectors(data.texts, rows, oov=("x",)), {"n_avg": 1})
    assert _rows(out, "cos_avg")[("all", None)] == pytest.approx(1.0 * 1.0)  # o1 . o4 only
    assert math.isnan(_rows(out, "normalized_similarity")[("typo", None)])  # cos_avg 1: undefined
    assert _rows(out, "cosine")[("typo", None)] == pytest.approx(0.75)  # 1, 0 (OOV), 1, 1
    assert _rows(out, "oov_rate")[("all", None)] == pytest.approx(1 / 5)


def test_heros_an_empty_subset_and_too_few_originals_are_nan_not_numbers():
    data = HerosData(["o1"], {"synonym": [None]})
    out = HerosScorer().evaluate(None, data, _vectors(data.texts, {"o1": (1, 0)}), {"n_avg": 500})
    assert math.isnan(_rows(out, "cos_avg")[("all", None)])
    assert math.isnan(_rows(out, "cosine")[("synonym", None)])
    assert _rows(out, "n_pairs")[("synonym", None)] == 0.0
    assert HerosScorer().thin(out.rows, None) == "n_pairs 0 < 5 (synonym)"


def test_cos_avg_and_normalise_by_hand():
    x = np.array([[1, 0], [0, 1], [1, 0]], dtype=np.float32)
    assert cos_avg(x, np.array([0, 1, 2]), 1) == pytest.approx(1.0)  # x0 . x2
    assert cos_avg(x, np.array([0, 1, 2]), 2) == pytest.approx((0 + 1 + 1 + 0) / 4)  # {x0, x1} x {x1, x2}
    assert normalise(np.array([0.5, 1.0, 0.25]), 0.5) == pytest.approx([0.0, 1.0, -0.5])


def test_the_released_heros_file_reads_by_column_name(tmp_path):
    f = tmp_path / "heros.tsv"
    f.write_text(
        "Original\tSynonym\tAntonym\tNegation\tRandom (MLM)\tTypo\n"
        "I like it.\tI love it.\tI hate it.\tI do not like it.\tI eat it.\tI lkie it.\n"
        "Good day.\tFine day.\t\tNot a good day.\tGood dog.\tGood dya.\n"
    )
    data = read_released(f)
    assert data.originals == ["I like it.", "Good day."]
    assert sorted(data.subsets) == ["antonym", "negation-main", "random-mlm", "synonym", "typo"]
    assert data.subsets["antonym"] == ["I hate it.", None]
    assert data.texts[:2] == ["I like it.", "Good day."] and len(data.texts) == 11
    f.write_text("Original\tParaphrase\nA\tB\n")
    with pytest.raises(ValueError, match="unknown HEROS column"):
        read_released(f)
    f.write_text("Sentence\tSynonym\nA\tB\n")
    with pytest.raises(ValueError, match="no 'Original' column"):
        read_released(f)


# -- DefSent --------------------------------------------------------------------------------------------------------
def test_defsent_ranks_each_word_among_all_candidates_with_explicit_ties():
    """Words w1..w3 at 0, 90 and 180 degrees. d1 = (1, 0.1): w1 first (rank 1). d2 = (1, 0) defines w2: w1 above,
    w2 and w3... w2 (cos 0) is above w3 (cos -1): rank 2. d3 = (0, 0) (OOV, zero vector) defines w3: cosine 0 with
    every word, so w3 ties with w1 and w2: optimistic 1, pessimistic 3, realistic 2."""
    rows = {"w1": (1, 0), "w2": (0, 1), "w3": (-1, 0), "d1": (1, 0.1), "d2": (1, 0), "d3": (0, 0)}
    data = DefSentData(["w1", "w2", "w3"], ["d1", "d2", "d3"])
    s = DefSentScorer()
    out = s.evaluate(None, data, _vectors(data.texts, rows, oov=("d3",)), {"hits": [1, 3, 10]})
    mrr = {r.ties: r.value for r in out.rows if r.metric == "mrr"}
    assert mrr["optimistic"] == pytest.approx((1 + 1 / 2 + 1) / 3)
    assert mrr["pessimistic"] == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    assert mrr["realistic"] == pytest.approx((1 + 1 / 2 + 1 / 2) / 3)
    hits1 = {r.ties: r.value for r in out.rows if r.metric == "hits@1"}
    assert hits1 == {"optimistic": pytest.approx(2 / 3), "pessimistic": pytest.approx(1 / 3), "realistic": 1 / 3}
    assert {r.ties: r.value for r in out.rows if r.metric == "hits@3"}["pessimistic"] == 1.0
    assert {r.metric: r.value for r in out.rows if r.ties is None} == {
        "n_pairs": 3.0,
        "n_candidates": 3.0,
        "tie_rate": pytest.approx(1 / 3),
        "oov_rate": pytest.approx(1 / 6),
    }
    assert [(r.metric, r.ties) for r in out.rows if r.primary] == [("mrr", "realistic")]


def test_defsent_with_no_pairs_reports_nan_and_is_thin():
    data = DefSentData([], [])
    out = DefSentScorer().evaluate(
        None, data, TextVectors("sentence", np.zeros((0, 2), np.float32), np.zeros(0, bool)), {}
    )
    assert all(math.isnan(r.value) for r in out.rows if r.ties is not None)
    assert DefSentScorer().thin(out.rows, None) == "n_pairs 0 < 5 (cos)"


def test_defsent_a_definition_identical_to_another_word_is_one_item():
    """A gloss that is literally another candidate's text shares its item: that word is the query itself and is
    never counted against it (the kernel excludes x and y)."""
    rows = {"w1": (1, 0), "w2": (0, 1)}
    data = DefSentData(["w1", "w2"], ["w2", "w1"])
    assert data.texts == ["w1", "w2"]
    out = DefSentScorer().evaluate(None, data, _vectors(data.texts, rows), {})
    assert {r.ties: r.value for r in out.rows if r.metric == "mr"}["optimistic"] == 1.0


# -- the real recipes (spaCy, WordNet, LemmInflect): slow ------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(("name", "n"), [("heros", 8), ("defsent", 40)])
def test_a_real_recipe_builds_byte_identical_twice(name, n, tmp_path, monkeypatch):
    """What CI checks on a fresh machine: the recipe runs from the project's own installs (WordNet from Debian's
    wordnet-base, spaCy's en_core_web_sm wheel, LemmInflect) and gives the same bytes twice."""
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    one = databuild.build(name, {"n": n}, out_dir=tmp_path / "a")
    two = databuild.build(name, {"n": n}, out_dir=tmp_path / "b", force=True)
    assert one.sha256 == two.sha256 and one.path.read_bytes() == two.path.read_bytes()
    rows = databuild.read_rows(one.path)
    if name == "heros":  # v2, v3: a subset's cell is filled where a right pair could be made, n pairs at most
        from evalfarm.taskdata.build_heros_v2 import COLUMNS, SUBSETS

        at = {c: i for i, c in enumerate(COLUMNS)}
        filled = {s: sum(bool(row[at[s]]) for row in rows) for s in SUBSETS}
        assert filled["negation-main"] == n and all(0 <= v <= n for v in filled.values()), filled
        for row in rows:
            original = row[at["original"]]
            assert "?" not in original and any(row[at[s]] for s in SUBSETS)
            assert all(row[at[s]] != original for s in SUBSETS), row
    else:  # version 3: version 2's n rows less those whose definition names the word in another form
        assert 0 < len(rows) <= n and all(all(cell.strip() for cell in row) for row in rows)
        words = [r[0] for r in rows]
        assert words == sorted(set(words)) and len({r[3] for r in rows}) == len(rows)  # one word per gloss


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sentence", "negated"),
    [
        ("I did not like the movie.", "I did like the movie."),
        ("I don't like it at all.", "I do like it at all."),
        ("She is happy with it.", "She is not happy with it."),
        ("He went home early today.", "He did not go home early today."),
        ("They have eaten the cake.", "They have not eaten the cake."),
        ("Can we forget that this happened", None),  # an inverted question without its "?"
    ],
)
def test_the_main_verb_is_negated_or_its_negation_removed(sentence, negated):
    from evalfarm.taskdata.build_heros_v2 import negate, nlp, render

    doc = nlp()(sentence)
    root = next(t for t in doc if t.dep_ == "ROOT")
    edits = negate(doc, root)
    assert (render(doc, edits) if edits is not None else None) == negated


@pytest.mark.slow
def test_data_build_command_prints_the_task_entry(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from evalfarm.cli import app

    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    got = CliRunner().invoke(app, ["data", "build", "defsent", "-p", "n=20", "--out", str(tmp_path / "o")])
    assert got.exit_code == 0, got.output
    built = next((tmp_path / "o").iterdir())
    assert f"sha256: {hashlib.sha256(built.read_bytes()).hexdigest()}" in got.output
    assert '"params": {"n": 20, "seed": 0}' in got.output
    bad = CliRunner().invoke(app, ["data", "build", "defsent", "-p", "n"])
    assert bad.exit_code == 2 and "give NAME=VALUE" in bad.output
    listed = CliRunner().invoke(app, ["data", "list"])
    assert listed.exit_code == 0 and "defsent 1 {'n': 3000, 'seed': 0}" in listed.output
    assert "heros 1 {'n': 1000, 'seed': 0}" in listed.output and "heros 2 {'n': 1000, 'seed': 0}" in listed.output
    old = CliRunner().invoke(app, ["data", "build", "defsent", "--version", "1", "-p", "n=20", "--out", str(tmp_path)])
    assert old.exit_code == 0 and '"version": "1"' in old.output


# -- task entries ---------------------------------------------------------------------------------------------------
def test_a_task_entry_can_point_at_the_released_heros_file(tmp_path, monkeypatch):
    from evalfarm.scorers.heros import HerosTask

    (tmp_path / "heros").mkdir()
    f = tmp_path / "heros" / "heros.tsv"
    f.write_text("Original\tSynonym\tTypo\nI like it.\tI love it.\tI lkie it.\nGood day.\tFine day.\tGood dya.\n")
    monkeypatch.setenv("EVALFARM_DATA", str(tmp_path))
    task = HerosTask(
        id="heros-released",
        version="1",
        format="heros-released",
        files={"pairs": "heros/heros.tsv"},
        sha256={"pairs": hashlib.sha256(f.read_bytes()).hexdigest()},
        licence="Apache-2.0",
        source="fixture",
    )
    data = HerosScorer().load(task)
    assert data.originals == ["I like it.", "Good day."] and sorted(data.subsets) == ["synonym", "typo"]
    with pytest.raises(ValueError, match="needs 'build'"):
        HerosScorer().load(task.model_copy(update={"format": "evalfarm-build"}))


# -- a property: the kernel's counts are the definition's ---------------------------------------------------------
_AXES = st.sampled_from([(0, 0), (1, 0), (-1, 0), (0, 1), (0, -1), (2, 0), (0, -3)])


@settings(max_examples=30)  # ~75 ms an example on 2 shared cores: the fast tier stays under a minute
@given(st.lists(_AXES, min_size=2, max_size=7), st.lists(_AXES, min_size=7, max_size=7))
def test_defsent_ranks_are_one_plus_the_words_scoring_above_plus_the_tie_share(words, defs):
    """Axis vectors (and zero vectors) of any length: every cosine is exactly -1, 0 or 1 in any float arithmetic, so
    ties are common and exact; the realistic rank of each word is 1 + #{other words with a higher cosine} +
    #{other words with the same cosine} / 2, computed here directly. (Cosines such as (1, 1) . (1, -1) = 0 are not
    exact in a float32 GEMM: a tie there is the arithmetic's, not the definition's.)"""
    n = len(words)
    rows = {f"w{i}": v for i, v in enumerate(words)} | {f"d{i}": defs[i] for i in range(n)}
    data = DefSentData([f"w{i}" for i in range(n)], [f"d{i}" for i in range(n)])
    oov = tuple(t for t, v in rows.items() if v == (0, 0))
    out = DefSentScorer().evaluate(None, data, _vectors(data.texts, rows, oov=oov), {})

    def unit(v):
        v = np.asarray(v, dtype=np.float64)
        norm = np.linalg.norm(v)
        return v / norm if norm else v

    expected = []
    for i in range(n):
        cos = np.array([unit(defs[i]) @ unit(w) for w in words], dtype=np.float32)
        others = np.delete(cos, i)
        above, tied = (others > cos[i]).sum(), (others == cos[i]).sum()
        expected.append(1 + above + tied / 2)
    got = {r.metric: r.value for r in out.rows if r.ties == "realistic"}
    assert got["mr"] == pytest.approx(np.mean(expected))
    assert got["mrr"] == pytest.approx(np.mean(1 / np.array(expected)))


# -- end to end on a small real model: reduced builds, the toy GloVe as a bag of words ------------------------------
@pytest.mark.slow
def test_both_diagnostics_run_end_to_end_on_the_toy_glove_bag_of_words(tmp_path, monkeypatch, toy_glove):
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.runner import run_catalog
    from evalfarm.warehouse import Warehouse

    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    shipped = load_catalog("tasks")
    entries = []
    for task_id, name, n in (("heros-goemotions", "heros", 6), ("defsent-wordnet", "defsent", 30)):
        built = databuild.build(name, {"n": n})  # into the cache, where the run finds it
        task = shipped.task(task_id).model_dump(mode="json", exclude_defaults=False)
        task["build"] = {
            "name": name,
            "version": databuild.builder(name).version,
            "params": {"n": n},
            "sha256": built.sha256,
        }
        entries.append(task)
    import yaml

    cat = tmp_path / "cat.yaml"
    cat.write_text(
        yaml.safe_dump(
            {
                "name": "diag",
                "tasks": entries,
                "models": [
                    {
                        "id": "toy",
                        "level": "word",
                        "kind": "word-vectors",
                        "format": "glove-text",
                        "source": {"type": "path", "ref": str(toy_glove)},
                    },
                    {"id": "bow-toy", "level": "sentence", "kind": "bow", "base": "toy", "lowercase": True},
                ],
            }
        )
    )
    wh = tmp_path / "wh"
    summary = run_catalog(cat, wh, models=["bow-toy"], executor="local")
    assert summary.ok, [(o.model, o.task, o.error) for o in summary.failed]
    w = Warehouse(wh)
    heros = w.query("SELECT subset, n_pairs, normalized_similarity FROM heros ORDER BY subset").to_pylist()
    assert [r["subset"] for r in heros] == sorted(
        ["synonym", "antonym", "typo", "random-word", "negation-main", "negation-antonym"]
    )
    assert all(r["n_pairs"] == 6 and np.isfinite(r["normalized_similarity"]) for r in heros)
    defsent = w.query("SELECT ties, mrr, hits_10 FROM defsent ORDER BY ties").to_pylist()
    assert [r["ties"] for r in defsent] == ["optimistic", "pessimistic", "realistic"]
    assert defsent[0]["mrr"] >= defsent[2]["mrr"] >= defsent[1]["mrr"] > 0
    board = w.query("SELECT task, metric FROM leaderboard ORDER BY task").to_pylist()
    assert board == [
        {"task": "defsent-wordnet", "metric": "mrr"},
        {"task": "heros-goemotions", "metric": "normalized_similarity"},
    ]


# -- issue 43: the source text as written, glosses without example residue, pairs that are what they say ------------
GOEMOTIONS_QUOTED = (
    "Plain text, no quotes at all.\t27\tedaaaaa\n"
    '"play who you find fun, ""tiers don\'t matter"""\t27\teeosnxn\n'
    '"color me embarrassed"" I wonder what colour he\'d be. "\t12,26\tedp5a2y\n'
)


def test_goemotions_rows_are_read_with_their_csv_quoting_undone(tmp_path):
    """GoEmotions quotes a text holding ``"`` CSV-style (137 dev and 149 test lines): the wrapping quotes go and a
    doubled quote is one. Version 1 split on tabs and kept them (38 of its 1,000 originals); it still does, so its
    numbers stay reproducible."""
    from evalfarm.taskdata import build_heros, build_heros_v1

    f = tmp_path / "dev.tsv"
    f.write_text(GOEMOTIONS_QUOTED)
    assert build_heros.read_goemotions(f) == [
        ("Plain text, no quotes at all.", "edaaaaa"),
        ('play who you find fun, "tiers don\'t matter"', "eeosnxn"),
        ("color me embarrassed\" I wonder what colour he'd be.", "edp5a2y"),
    ]
    assert build_heros_v1.read_goemotions(f)[1][0] == '"play who you find fun, ""tiers don\'t matter"""'


def test_a_quoted_row_left_open_or_with_a_wrong_column_count_names_its_line(tmp_path):
    from evalfarm.taskdata.data import TaskDataError
    from evalfarm.taskdata.textfiles import read_quoted_tsv

    f = tmp_path / "bad.tsv"
    f.write_text('ok\t1\tid1\n"never closed\t2\tid2\n')
    with pytest.raises(TaskDataError, match=r"bad.tsv:2: not a CSV-quoted"):
        read_quoted_tsv(f, 3)
    f.write_text('ok\t1\tid1\n"two\nlines"\t2\tid2\nshort\t3\n')
    with pytest.raises(TaskDataError, match=r"bad.tsv:4: expected 3 tab-separated columns, found 2"):
        read_quoted_tsv(f, 3)  # the quoted field spans lines 2-3: the next row starts on line 4


@pytest.mark.slow
def test_the_real_goemotions_dev_and_test_files_read_unquoted(data_dir):
    from evalfarm.taskdata.build_heros_v2 import read_goemotions

    for split, quoted in (("dev", 137), ("test", 149)):
        rows = read_goemotions(data_dir / "heros" / "goemotions_fallback" / f"{split}.tsv")
        raw = (data_dir / "heros" / "goemotions_fallback" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
        assert len(rows) == len(raw) and sum(line.startswith('"') for line in raw) == quoted
        assert sum('"' in text for text, _ in rows) == quoted  # each quoted text holds a quote of its own
        assert not any('""' in text for text, _ in rows)  # and no doubled one is left


@pytest.mark.parametrize(
    ("raw", "definition"),
    [
        (  # examples with attributions: version 1 kept "; ; - B.N.Cardozo; - Thomas Jefferson"
            'having or showing distrust; "a man of distrustful nature"; "my experience...has made me distrustful of '
            'rules of thumb generally"- B.N.Cardozo; "vigilant and distrustful superintendence"- Thomas Jefferson',
            "having or showing distrust",
        ),
        (  # an example WordNet left without its opening quote
            'put together out of artificial or natural components or parts; "the company fabricates plastic chairs";'
            ' "They manufacture small toys"; He manufactured a popular cereal"',
            "put together out of artificial or natural components or parts",
        ),
        (
            'the ending of a series or sequence; "the Alpha and the Omega"--Revelation',
            "the ending of a series or sequence",
        ),
        (  # a quoted phrase inside parentheses is part of the definition
            'significant progress (especially in the phrase "make strides"); "they made big strides in productivity"',
            'significant progress (especially in the phrase "make strides")',
        ),
        ('a local branch where postal services are available"', "a local branch where postal services are available"),
        (
            'keep in a certain state, position, or activity; e.g., "keep clean"; "hold in place"',
            "keep in a certain state, position, or activity",
        ),
        ('an area in which something acts: "the range of a supersonic jet"', "an area in which something acts"),
        (
            "still in existence; not extinct or destroyed or lost",
            "still in existence; not extinct or destroyed or lost",
        ),
    ],
)
def test_a_wordnet_gloss_is_cleaned_of_its_examples_and_their_residue(raw, definition):
    from evalfarm.taskdata.build_defsent import clean_gloss

    assert clean_gloss(raw) == definition


@pytest.mark.slow
def test_no_cleaned_wordnet_definition_keeps_example_residue():
    """Every noun, verb and adjective gloss of WordNet 3.0, cleaned: no empty part ("; ;"), no attribution ("- Thomas
    Jefferson", "--Revelation"), no quote left unbalanced, no trailing separator; NLTK's definitions, version 1's,
    had all four."""
    import re

    from evalfarm.taskdata.build_defsent import clean_gloss, nltk_definition, raw_glosses
    from evalfarm.taskdata.wordnet import wordnet

    residue = re.compile(r";\s*;|;\s*--?\s*[A-Z]|;\s*$|[;:,]$")
    cleaned = [clean_gloss(g) for g in raw_glosses().values()]
    assert len(cleaned) > 100_000
    assert not [d for d in cleaned if residue.search(d) or d.count('"') % 2 or not d]
    nltk = [nltk_definition(s) for s in wordnet().all_synsets() if s.pos() in "nvas"]
    assert sum(bool(residue.search(d)) for d in nltk) > 100  # what version 1 read


def test_an_earlier_recipe_version_stays_buildable_by_version(toy_recipe, tmp_path, monkeypatch):
    b1, _ = toy_recipe

    def make2(inputs, params):
        return "x\ty\nversion\t2\n"

    b2 = databuild.Builder("toy", "2", "toy recipe, version 2", make2, defaults=dict(b1.defaults), inputs=b1.inputs)
    monkeypatch.setattr(databuild, "_EARLIER", {})
    monkeypatch.delitem(databuild._BUILDERS, "toy")
    databuild.register_builder(b1)
    databuild.register_builder(b2)
    assert databuild.builder("toy") is b2 and databuild.builder("toy", "1") is b1
    assert [b.version for b in databuild.versions("toy")] == ["1", "2"]
    one = databuild.build("toy", version="1", out_dir=tmp_path / "v1")
    two = databuild.build("toy", out_dir=tmp_path / "v2")
    assert one.path.name.startswith("toy-1-") and two.path.name.startswith("toy-2-") and one.sha256 != two.sha256
    assert databuild.built_file(databuild.BuildRef(name="toy", version="1", sha256=one.sha256)).read_bytes() == (
        one.path.read_bytes()
    )
    with pytest.raises(databuild.BuildError, match="names version 3, this evalfarm builds 1, 2"):
        databuild.built_file(databuild.BuildRef(name="toy", version="3", sha256=one.sha256))


def test_a_built_heros_file_reads_by_its_column_line_and_an_empty_cell_is_no_pair(tmp_path):
    from evalfarm.scorers.heros import read_built

    f = tmp_path / "h.tsv"
    cols = ["id", "split", "comment_id", "original", "synonym", "antonym", "typo", "random-word", "negation-main"]
    cols += ["negation-antonym", "edits"]
    f.write_text(
        "# evalfarm data build heros 2 {}\n"
        + "\t".join(cols)
        + "\n0\tdev\ta\tI am glad.\t\tI am sad.\tI am glda.\tI am wooden.\tI am not glad.\tI am not glad.\tantonym\n"
    )
    data = read_built(f)
    assert data.originals == ["I am glad."] and data.subsets["synonym"] == [None]
    assert data.subsets["antonym"] == ["I am sad."] and "I am glda." in data.texts
    f.write_text("# x\nid\toriginal\tsynonym\n0\ta\tb\n")
    with pytest.raises(ValueError, match="no column antonym, typo"):
        read_built(f)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sentence", "negated"),
    [
        ("That\u2019s a terrible amount of bp", "That\u2019s not a terrible amount of bp"),  # curly apostrophe: be
        ("thats why she is going crazy", "thats not why she is going crazy"),
        ("Oh, I definitely got muted, too.", "Oh, I definitely did not get muted, too."),  # a get-passive
        ("I'd rather die than drive a Volvo!", "I'd rather not die than drive a Volvo!"),
        ("Oof that\u2019s terrible", None),  # an interjection, no verb
        ("Someone tell me how to feel about this", None),  # an imperative with its addressee
        ("Yeah thank you you ungrateful bast.....", None),  # a formula
        ("What a cute little accident you turned out to be", None),  # an exclamative
        ("I don't know and you don't either", None),  # "either" leans on the negation
        ("She is happy with it.", "She is not happy with it."),
    ],
)
def test_version_2_negates_the_main_verb_where_version_1_went_wrong(sentence, negated):
    from evalfarm.taskdata.build_heros_v2 import main_negation, nlp, render

    doc = nlp()(sentence)
    edits = main_negation(doc)
    assert (render(doc, edits) if edits is not None else None) == negated


@pytest.mark.slow
def test_version_2_chooses_the_sense_in_context_and_keeps_the_slot_grammatical():
    """The dominant sense, not the first synonym across all senses (version 1: "good" -> "full"); a random verb
    with the slot's valency; a typo that is no word; nothing taken from an idiom WordNet lists."""
    import numpy as np

    from evalfarm.taskdata import lexical
    from evalfarm.taskdata.build_heros_v2 import Word, nlp, qualifies, random_word, slot_frames, synonym_of, typo

    def word(sentence: str, text: str) -> Word:
        doc = nlp()(sentence)
        tok = next(t for t in doc if t.text == text)
        pos = {"VERB": "v", "ADJ": "a", "NOUN": "n"}[tok.pos_]
        return Word(tok, pos, tok.lemma_.lower(), lexical.dominant_sense(tok.lemma_.lower(), pos))

    assert synonym_of(word("At least she tried to be prepared for this.", "tried")) == "attempt"
    assert synonym_of(word("I hate my hometown.", "hate")) is None  # "detest": under a tenth as frequent
    assert synonym_of(word("Oh that's good!", "good")) is None  # good.a.01 has no other lemma: no "full"
    assert synonym_of(word("That doesn't matter to me.", "matter")) is None  # no dominant sense
    buy = word("I bought the double barrel.", "bought")
    assert slot_frames(buy.tok) == lexical.TRANSITIVE_FRAMES
    got = random_word(buy, {"buy"}, np.random.default_rng(0))
    assert got is not None and got.endswith(("ed", "t", "n")) or got in ("got",)  # VBD like "bought"
    assert lexical.lemma_frames(lexical.wn().synsets(lexical.wn().morphy(got, "v") or got, "v")[0],
                                lexical.wn().morphy(got, "v") or got) & lexical.TRANSITIVE_FRAMES  # fmt: skip
    doc = nlp()("It makes sense to me.")
    assert not qualifies(doc, doc[1])  # "make sense" is a WordNet expression
    for seed in range(20):
        bad = typo("hate", np.random.default_rng(seed), frozenset())
        assert bad is None or (bad[0] == "h" and not lexical.is_real_word(bad, frozenset()))


@pytest.mark.slow
def test_a_synonym_or_antonym_pair_enters_only_with_a_right_verdict_in_the_review(tmp_path):
    """make_rows with the review: a reviewed-wrong pair and an unreviewed one are left out; without it (the
    candidates a review reads), both are there."""
    from evalfarm.taskdata.build_heros_v2 import COLUMNS, make_rows

    dev = tmp_path / "dev.tsv"
    dev.write_text("At least she tried to be prepared for this.\t1\tc1\nThey agree with your statement.\t1\tc2\n")
    test = tmp_path / "test.tsv"
    test.write_text("")
    words = tmp_path / "words.txt"
    words.write_text("the\n")
    inputs = {"dev": dev, "test": test, "wordlist_wiki": words, "wordlist_basic": words}
    params = {"n": 10, "seed": 0}
    at = {c: i for i, c in enumerate(COLUMNS)}

    def cells(review):
        rows = [r.split("\t") for r in make_rows(inputs, params, review).splitlines()[1:]]
        return {(r[at["comment_id"]], s): r[at[s]] for r in rows for s in ("synonym", "antonym") if r[at[s]]}

    free = cells(None)
    assert free == {
        ("c1", "synonym"): "At least she attempted to be prepared for this.",
        ("c2", "antonym"): "They disagree with your statement.",
    }
    assert cells({("c1", "synonym", "try>attempt"): "ok", ("c2", "antonym", "agree>disagree"): "wrong"}) == {
        ("c1", "synonym"): free[("c1", "synonym")]
    }
    assert cells({}) == {}  # unreviewed: left out


@pytest.mark.slow
def test_the_disjoint_whitening_corpus_shares_no_sentence_with_an_sts_set():
    """The starter zoo's all-minilm-l6-v2-whiten-subj is fitted on SUBJ: no sentence of an STS set is among its fit
    texts, while the default fit corpus (the EvalRank sentence pool) holds every STS-B sentence."""
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.options import RunOptions
    from evalfarm.scorers import scorer_for

    cat = load_catalog("zoo-starter")
    fit_on = cat.model("all-minilm-l6-v2-whiten-subj").postprocess.fit_on

    def texts(task_id: str) -> set[str]:
        spec = cat.task(task_id)
        scorer = scorer_for(spec.kind)
        return {t.lower() for t in scorer.texts(scorer.load_for(spec, RunOptions()))}

    fit = texts(fit_on)
    assert fit_on == "subj" and len(fit) > 9_000
    for sts in ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sick-r", "str"):
        assert not fit & texts(sts), sts
    assert texts("stsb") <= texts("evalrank-sentence")


def test_the_audit_rates_in_the_docs_are_the_audit_files():
    """docs/evaluators.md's HEROS table and docs/audits/README.md quote the counts of wrong verdicts in the audit
    files (and the review's), so the two cannot drift apart."""
    import csv
    import re

    repo = Path(__file__).resolve().parents[1]
    counts = {}
    for version in ("v1", "v2"):
        with open(repo / "docs" / "audits" / f"heros-{version}.tsv", encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        assert {r["verdict"] for r in rows} <= {"ok", "wrong"}
        for subset in {r["subset"] for r in rows}:
            got = [r for r in rows if r["subset"] == subset]
            counts[(version, subset)] = (sum(r["verdict"] == "wrong" for r in got), len(got))
    assert all(total == 40 for _, total in counts.values()) and len(counts) == 12
    review = (repo / "evalfarm" / "taskdata" / "heros_review.tsv").read_text(encoding="utf-8").splitlines()[1:]
    wrong = {
        s: sum(1 for r in review if r.split("\t")[1] == s and r.split("\t")[3] == "wrong")
        for s in ("synonym", "antonym")
    }
    total = {s: sum(1 for r in review if r.split("\t")[1] == s) for s in ("synonym", "antonym")}
    readme = (repo / "docs" / "audits" / "README.md").read_text(encoding="utf-8")
    evaluators = (repo / "docs" / "evaluators.md").read_text(encoding="utf-8")
    for subset in ("synonym", "antonym", "typo", "random-word", "negation-main", "negation-antonym"):
        line = next(x for x in readme.splitlines() if re.match(rf"\| {subset} \| \d", x))  # the rates table
        v1, v2 = counts[("v1", subset)][0], counts[("v2", subset)][0]
        assert re.fullmatch(rf"\| {subset} \| {v1} (\(.*\) )?\| {v2}( .*)? \|", line), line
        row = next(x for x in evaluators.splitlines() if re.match(rf"\| `{subset}` \| \d+ of 40", x))
        assert row.startswith(f"| `{subset}` | {v2} of 40") and row.endswith(f"| {v1} of 40 |"), row
    for subset in ("synonym", "antonym"):
        assert f"{wrong[subset]} of {total[subset]}" in readme


def _marked(text: str, name: str) -> str:
    """The text between ``<!-- name -->`` and ``<!-- /name -->`` in a doc."""
    start, end = f"<!-- {name} -->\n", f"\n<!-- /{name} -->"
    return text[text.index(start) + len(start) : text.index(end)]


def test_the_version_3_audit_table_in_the_docs_is_generated_from_the_audit_file():
    """docs/evaluators.md's version-3 table is `markdown_table` of docs/audits/heros-v3.tsv and its sidecar; every
    audited row has a verdict and a reason of its own (none used for more than three rows of a subset); the
    overview table's size range is the sidecar's."""
    from collections import Counter

    from evalfarm.taskdata.audit import markdown_table, rates, read_audit, read_sidecar

    repo = Path(__file__).resolve().parents[1]
    path = repo / "docs" / "audits" / "heros-v3.tsv"
    rows, meta = read_audit(path), read_sidecar(path)
    subsets = ("synonym", "antonym", "typo", "random-word", "negation-main", "negation-antonym")
    assert all(r["verdict_1"] and r["reason_1"] for r in rows)
    for subset in subsets:
        got = [r for r in rows if r["subset"] == subset]
        assert len(got) == min(meta["per_subset"], meta["sizes"][subset]), subset
        for k in ("1", "2"):  # each pass's reasons are its own (pass 2: once it is filled)
            said = Counter(r[f"reason_{k}"] for r in got if r[f"verdict_{k}"])
            repeated = [(reason, n) for reason, n in said.items() if n > 3]
            assert not repeated, (subset, k, repeated)
    table = markdown_table(rates(rows, subsets), meta["sizes"], meta["substitutions"])
    evaluators = (repo / "docs" / "evaluators.md").read_text(encoding="utf-8")
    assert _marked(evaluators, "heros-v3-audit") == table, "\n" + table
    low, high = min(meta["sizes"].values()), max(meta["sizes"].values())
    assert f"(generated, version 3: GoEmotions minimal pairs, {low:,}–{high:,} per subset, audited)" in evaluators
    assert meta["built"]["version"] == "3"


def test_an_audit_file_needs_a_reason_with_every_verdict_and_counts_either_readers_wrong(tmp_path):
    from evalfarm.taskdata.audit import AUDIT_COLUMNS, AuditError, cohen_kappa, rates, read_audit, wilson

    f = tmp_path / "a.tsv"
    head = "\t".join(AUDIT_COLUMNS) + "\n"
    f.write_text(head + "synonym\t1\ta\tb\te\tok\t\t\t\n")
    with pytest.raises(AuditError, match=r"a\.tsv:2: pass 1 needs both"):
        read_audit(f)
    f.write_text(head + "synonym\t1\ta\tb\te\tfine\tx\t\t\n")
    with pytest.raises(AuditError, match="verdict_1 must be one of"):
        read_audit(f)
    f.write_text(
        head
        + "synonym\t1\ta\tb\te\tok\tsame sense\twrong\tregister\n"
        + "synonym\t2\ta\tc\te\twrong\tidiom broken\twrong\tidiom\n"
        + "synonym\t3\ta\td\te\tdoubtful\todd\tok\tfine\n"
    )
    (r,) = rates(read_audit(f), ["synonym"])
    assert (r.n, r.wrong, r.doubtful, r.passes, r.disagreements) == (3, 2, 1, 2, 2)
    assert r.kappa == pytest.approx(cohen_kappa(["ok", "wrong", "doubtful"], ["wrong", "wrong", "ok"]))
    lo, hi = wilson(5, 170)  # 2.9 %: 1.3-6.7 % (Wilson 1927)
    assert round(lo, 3) == 0.013 and round(hi, 3) == 0.067
    assert wilson(0, 10)[0] == 0.0 and cohen_kappa(["ok", "wrong"], ["ok", "wrong"]) == 1.0


@pytest.mark.slow
def test_the_version_3_audit_was_drawn_from_the_final_built_file():
    """The audited rows are the documented draw from the file the catalog's task builds: built (or found in the
    cache, where the task-kind contract's run of the same task leaves it) and checked against the catalog's sha256,
    which is the sidecar's; the draw gives the audit file's rows."""
    import yaml

    from evalfarm.taskdata.audit import draw, read_audit, read_sidecar

    repo = Path(__file__).resolve().parents[1]
    path = repo / "docs" / "audits" / "heros-v3.tsv"
    meta = read_sidecar(path)
    tasks = yaml.safe_load((repo / "catalog" / "tasks.yaml").read_text())["tasks"]
    entry = next(t for t in tasks if t["id"] == "heros-goemotions")
    assert meta["built"]["sha256"] == entry["build"]["sha256"]
    built = databuild.built_file(databuild.BuildRef(**entry["build"]))  # raises on a different sha256
    cols, rows = databuild.read_table(built)
    at = {c: i for i, c in enumerate(cols)}
    subsets = ("synonym", "antonym", "typo", "random-word", "negation-main", "negation-antonym")
    assert {s: sum(bool(r[at[s]]) for r in rows) for s in subsets} == meta["sizes"]
    want = [(s, r[at["id"]], r[at["original"]], r[at[s]]) for s, r in draw(rows, at, subsets, 53, 170)]
    got = [(r["subset"], r["id"], r["original"], r["pair"]) for r in read_audit(path)]
    assert got == want


@pytest.mark.slow
def test_the_defsent_counts_in_the_docs_are_the_built_files(tmp_path, monkeypatch):
    """docs/evaluators.md's DefSent leak counts and examples are `leak_summary` of the built version 2; version 3
    is version 2 less exactly those rows, and none of its definitions names its word in any form."""
    from evalfarm.taskdata.build_defsent import leak_summary, names_its_word

    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    v2 = databuild.read_rows(databuild.build("defsent", version="2", out_dir=tmp_path / "b").path)
    v3 = databuild.read_rows(databuild.build("defsent", out_dir=tmp_path / "b").path)
    repo = Path(__file__).resolve().parents[1]
    evaluators = (repo / "docs" / "evaluators.md").read_text(encoding="utf-8")
    assert _marked(evaluators, "defsent-leaks") == leak_summary(v2)
    assert [r for r in v2 if names_its_word(r[0], r[3]) is None] == v3
    assert f"version 3: {len(v3):,} WordNet first-sense glosses" in evaluators
    for word, definition in (("scan", "the act of scanning"), ("nightly", "happening every night")):
        assert names_its_word(word, definition) is not None
    assert names_its_word("dog", "a domesticated carnivorous mammal") is None


@pytest.mark.slow
def test_the_version_2_sizes_in_the_docs_are_its_built_file():
    """Version 2 stays buildable byte for byte (the catalog's sha256), and the sizes the docs state are its file's."""
    import yaml

    repo = Path(__file__).resolve().parents[1]
    tasks = yaml.safe_load((repo / "catalog" / "diagnostics-v2.yaml").read_text())["tasks"]
    entry = next(t for t in tasks if t["id"] == "heros-goemotions-v2")
    ref = databuild.BuildRef(**entry["build"])
    cols, rows = databuild.read_table(databuild.built_file(ref))
    at = {c: i for i, c in enumerate(cols)}
    n = {s: sum(bool(r[at[s]]) for r in rows) for s in ("synonym", "antonym")}
    evaluators = (repo / "docs" / "evaluators.md").read_text(encoding="utf-8")
    assert f"({n['synonym']} synonym and {n['antonym']} antonym pairs)" in evaluators
