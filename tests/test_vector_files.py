"""Reading word-vector files: the bad-input corpus, property-based round trips and corruptions of the text readers,
the binary cache, vocabulary statistics by hand, finite post-processing, and pickle attacks that must not run."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from evalfarm.catalog.registry import CatalogError, load_catalog
from evalfarm.catalog.specs import ModelSpec, PostProcess, Source, spec_hash
from evalfarm.embed import lowercased_view, word_lookup
from evalfarm.encoders import vocab_index
from evalfarm.encoders import word_vectors as wv_mod
from evalfarm.encoders.loader import load_encoder
from evalfarm.encoders.postprocess import PostProcessedWordVectors, fit_postprocess
from evalfarm.encoders.protocol import ModelLoadError
from evalfarm.encoders.vector_cache import (
    NpyWriter,
    VocabStats,
    cached_vectors,
    lowercase_first_rows,
    vocab_statistics,
)
from evalfarm.encoders.vocab_index import INDEX_FILES, DictIndex, MappedIndex, VocabIndex, lowercased_words
from evalfarm.encoders.word_vectors import NonFiniteVectors, TextVectorReader, WordVectors, save_numpy_vocab
from tests.support.fuzz import mutated

BAD = Path(__file__).parent / "bad_inputs"
MANIFEST = yaml.safe_load((BAD / "vectors.yaml").read_text(encoding="utf-8"))
TEXT = ("glove-text", "word2vec-text")


@contextlib.contextmanager
def cache_root(path: Path) -> Iterator[Path]:
    """EVALFARM_CACHE pointed at ``path`` for the block (hypothesis tests cannot take function fixtures)."""
    old = os.environ.get("EVALFARM_CACHE")
    os.environ["EVALFARM_CACHE"] = str(path)
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop("EVALFARM_CACHE", None)
        else:
            os.environ["EVALFARM_CACHE"] = old


def finished_cache_folders(root: Path) -> list[Path]:
    d = root / "vectors"
    return [p for p in d.iterdir() if p.is_dir()] if d.is_dir() else []


# -- the bad-input corpus ---------------------------------------------------------------------------------------
def _cases() -> list:
    return [
        pytest.param(name, label, expect, id=f"{name}:{label}")
        for name, per_format in MANIFEST.items()
        for label, expect in per_format.items()
    ]


def test_every_corpus_file_is_in_the_manifest() -> None:
    """Every file of tests/bad_inputs is in vectors.yaml or in inputs.yaml (tests/test_bad_inputs.py's corpus: a
    listed folder covers its files)."""
    other = yaml.safe_load((BAD / "inputs.yaml").read_text(encoding="utf-8"))
    files = {str(p.relative_to(BAD)) for p in BAD.rglob("*") if p.is_file() and p.suffix != ".yaml"}
    files |= {str(p.relative_to(BAD)) for p in BAD.glob("*.yaml") if p.name not in ("vectors.yaml", "inputs.yaml")}
    theirs = {f for f in files if f.split("/")[0] in other}
    assert files == set(MANIFEST) | theirs, "tests/bad_inputs files and vectors.yaml / inputs.yaml entries must match"


@pytest.mark.faults  # hostile model files (`make faults`)
@pytest.mark.parametrize(("name", "label", "expect"), _cases())
def test_bad_vector_file(name: str, label: str, expect: str | dict | None, tmp_path: Path) -> None:
    if isinstance(expect, dict):
        opts = {k: expect[k] for k in ("dim", "vocab") if k in expect}
        fmt, pattern, error = expect.get("format", label), expect.get("match"), expect.get("error", "ModelLoadError")
    else:
        opts, fmt, pattern, error = {}, label, expect, "ModelLoadError"
    path = BAD / name
    modes = [False, True] if fmt in TEXT else [None]
    for cache in modes:
        kw = {**opts, **({"cache": cache} if cache is not None else {})}
        with cache_root(tmp_path / f"cache-{cache}") as root:
            if pattern is None:
                enc = WordVectors.load(path, fmt, **kw)
                assert enc.vocab_size() > 0 and np.isfinite(enc.vectors).all()
                continue
            with pytest.raises(ModelLoadError) as exc:
                WordVectors.load(path, fmt, **kw)
            assert type(exc.value).__name__ == error, exc.value
            assert re.search(pattern, str(exc.value)), f"{name} as {fmt}: {exc.value}"
            assert not finished_cache_folders(root), "a failed read must leave no cache behind"


def test_a_nan_outside_the_pool_fails_the_model_through_the_loader() -> None:
    """Issue 13.3 end to end: the catalog path names the model, the file, the line and the word."""
    spec = ModelSpec.model_validate(
        {
            "id": "glove-with-a-nan",
            "level": "word",
            "kind": "word-vectors",
            "format": "glove-text",
            "source": {"type": "path", "ref": str(BAD / "nan_outside_pool.txt")},
        }
    )
    nan = r"model 'glove-with-a-nan'.*nan_outside_pool\.txt:7: a vector with NaN"
    with pytest.raises(ModelLoadError, match=nan) as exc:
        load_encoder([spec])
    assert isinstance(exc.value.__cause__, NonFiniteVectors)


def _declared(path: Path, **fields) -> dict:
    return {"id": "declared", "level": "word", "kind": "word-vectors", "format": "glove-text",
            "source": {"type": "path", "ref": str(path)}, **fields}  # fmt: skip


def test_a_declared_dim_goes_from_the_spec_to_the_reader() -> None:
    """Issue 13.1's "(or the declared `dim`)": a word-vectors spec's `dim` is what the text reader uses, checked
    against the file, through the loader that runs the catalog's models."""
    assert load_encoder([ModelSpec.model_validate(_declared(BAD / "glove_clean.txt", dim=6))]).dim == 6
    wrong = ModelSpec.model_validate(_declared(BAD / "glove_clean.txt", dim=8))
    said = r"model 'declared'.*glove_clean\.txt:1: the declared dimension is 8, but 10 of the first 10 vector lines "
    with pytest.raises(ModelLoadError, match=said + "have a word and 6 numbers"):
        load_encoder([wrong])
    # the right dim, and a broken first line: that line is named, the declared dimension as the yardstick
    right = ModelSpec.model_validate(_declared(BAD / "first_line_short.txt", dim=10))
    said = r"1 of 12 vector lines is not a word and 10 numbers \(dimension 10: the declared dimension\): "
    with pytest.raises(ModelLoadError, match=said + r"\S*first_line_short\.txt:1: expected a word and 10 numbers"):
        load_encoder([right])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dim": 0}, r"dim: Input should be greater than or equal to 1"),
        ({"dim": -50}, r"dim: Input should be greater than or equal to 1"),
        ({"dim": "50"}, r"dim: Input should be a valid integer"),
        ({"dim": 50.0}, r"dim: Input should be a valid integer"),
        ({"dim": True}, r"dim: Input should be a valid integer"),
        ({"kind": "static", "format": None, "dim": 50}, r"'dim' declares the model's width \(kind "),
    ],
)  # fmt: skip
def test_a_declared_dim_is_a_positive_int_of_a_word_vectors_model(tmp_path: Path, fields: dict, message: str) -> None:
    entry = {k: v for k, v in _declared(BAD / "glove_clean.txt", **fields).items() if v is not None}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"models": [entry]}))
    with pytest.raises(CatalogError, match=message) as exc:
        load_catalog(tmp_path / "c.yaml")
    assert str(tmp_path / "c.yaml") in str(exc.value) and "(id 'declared')" in str(exc.value)


def test_a_declared_dim_counts_in_the_spec_hash_only_when_set() -> None:
    glove = load_catalog("zoo-starter").model("glove-6b-50d")
    assert glove.dim is None and spec_hash(glove) == "1be65e909ce158a7"  # the hash from before `dim` existed
    assert spec_hash(glove.model_copy(update={"dim": 50})) != spec_hash(glove)
    derived = ModelSpec.model_validate({"id": "d", "level": "word", "base": "glove-6b-50d",
                                        "postprocess": {"method": "abtt", "d": 1}})  # fmt: skip
    with pytest.raises(ValueError, match="'dim' declares"):  # a derived model's dimension is its base's
        ModelSpec.model_validate({**derived.model_dump(), "dim": 50})


# -- property-based: text readers ------------------------------------------------------------------------------
_PIECE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="\ufeff"),
    min_size=1,
    max_size=8,
)


@st.composite
def _word(draw, spaces: bool) -> str:
    """A word; with ``spaces``, sometimes a GloVe-840B-style multi-word token whose last piece is not a number
    (a line whose word ends in a number reads as a line with too many numbers, which the reader reports)."""
    pieces = [draw(_PIECE)]
    if spaces and draw(st.booleans()):
        more = draw(st.lists(_PIECE, min_size=1, max_size=3))
        assume(not wv_mod._NUMBER.fullmatch(more[-1]))
        pieces += more
    return " ".join(pieces)


@st.composite
def vector_files(draw):
    fmt = draw(st.sampled_from(TEXT))
    dim = draw(st.integers(1, 6))
    words = draw(st.lists(_word(spaces=fmt == "glove-text"), min_size=3, max_size=25, unique=True))
    finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32)
    M = np.array(
        draw(st.lists(st.lists(finite, min_size=dim, max_size=dim), min_size=len(words), max_size=len(words)))
    )
    M = M.astype(np.float32).reshape(len(words), dim)
    dups = draw(st.lists(st.integers(0, len(words) - 1), max_size=3))  # re-listed later with other numbers
    style = draw(st.sampled_from(["plain", "crlf", "trailing-space", "blank-lines", "sci"]))
    return fmt, words, M, dups, style


def _fmt(x: float, style: str) -> str:
    return f"{x:.9e}" if style == "sci" else repr(float(x))  # both round-trip a float32 exactly


def _write(path: Path, fmt: str, words: list[str], M: np.ndarray, dups: list[int], style: str) -> list[int]:
    """Write the file; returns the line number of each word's (first) line."""
    eol = "\r\n" if style == "crlf" else "\n"
    tail = " " if style == "trailing-space" else ""
    lines, where = [], []
    if fmt == "word2vec-text":
        lines.append(f"{len(words) + len(dups)} {M.shape[1]}")
    for w, row in zip(words, M, strict=True):
        if style == "blank-lines":
            lines.append("")
        lines.append(f"{w} " + " ".join(_fmt(x, style) for x in row) + tail)
        where.append(len(lines))
    for i in dups:
        lines.append(f"{words[i]} " + " ".join(_fmt(x + 1, style) for x in M[i]) + tail)
    path.write_bytes((eol.join(lines) + eol).encode("utf-8"))
    return where


@pytest.mark.slow
@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(vector_files())
def test_text_files_read_back_equal(case) -> None:
    fmt, words, M, dups, style = case
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "v.txt"
        _write(path, fmt, words, M, dups, style)
        enc = WordVectors.load(path, fmt, cache=False)
        assert enc.words == words and enc.dim == M.shape[1]
        np.testing.assert_array_equal(enc.vectors, M)  # duplicates: the first occurrence wins
        np.testing.assert_array_equal(enc.lookup([words[0]])[0][0], M[0])
        with cache_root(Path(d) / "cache"):
            cached = WordVectors.load(path, fmt, cache=True)
            assert isinstance(cached.vectors, np.memmap)
            assert cached.words == words
            np.testing.assert_array_equal(cached.vectors, M)
            np.testing.assert_allclose(cached.vocab_mean(), M.astype(np.float64).mean(axis=0), rtol=1e-6, atol=1e-6)


CORRUPTIONS = ("drop-number", "add-number", "not-a-number", "nan", "inf", "bad-utf8", "word-only")


@settings(
    max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    case=vector_files(),
    which=st.sampled_from(CORRUPTIONS),
    pick=st.integers(0, 10**6),
    token=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=6),
)
@pytest.mark.slow
def test_corrupted_text_files_fail_naming_the_line(case, which: str, pick: int, token: str) -> None:
    """Never a silently wrong matrix: one corrupted line (of >= 3) gives an error naming that line."""
    fmt, words, M, _dups, style = case
    if which == "not-a-number":
        assume(not wv_mod._NUMBER.fullmatch(token))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "v.txt"
        where = _write(path, fmt, words, M, [], style)
        raw = path.read_bytes().split(b"\n")
        i = pick % len(words)
        lineno = where[i]
        fields = raw[lineno - 1].rstrip(b"\r").rstrip(b" ").split(b" ")
        k = len(fields) - 1 - (pick % M.shape[1])  # a position inside the vector
        if which == "drop-number":
            fields.pop()
        elif which == "add-number":
            fields.append(b"0.5")
        elif which == "not-a-number":
            fields[k] = token.encode()
        elif which == "nan":
            fields[k] = b"nan"
        elif which == "inf":
            fields[k] = b"-inf"
        elif which == "bad-utf8":
            fields[0] = fields[0] + b"\xff"
        elif which == "word-only":
            fields = fields[: len(fields) - M.shape[1]]
        raw[lineno - 1] = b" ".join(fields)
        path.write_bytes(b"\n".join(raw))
        with pytest.raises(ModelLoadError) as exc:
            WordVectors.load(path, fmt, cache=False)
        assert f"{path}:{lineno}:" in str(exc.value), (which, str(exc.value))
        if which in ("nan", "inf"):
            assert isinstance(exc.value, NonFiniteVectors)


def test_a_multi_word_token_is_read_as_one_word(tmp_path: Path) -> None:
    (tmp_path / "g.txt").write_text("a 1 2\n. . . 3 4\nat name@domain.com 5 6\nb 7 8\n")
    enc = WordVectors.load(tmp_path / "g.txt", "glove-text")
    assert enc.words == ["a", ". . .", "at name@domain.com", "b"]
    assert enc.lookup(["at name@domain.com"])[0].tolist() == [[5, 6]]


def test_dimension_is_the_consensus_not_line_one(tmp_path: Path, toy_glove: Path) -> None:
    """The case of issue 13.1 on real data: toy GloVe (50d) with line 1 cut to 48 numbers."""
    src = toy_glove
    lines = src.read_text(encoding="utf-8").splitlines()
    lines[0] = " ".join(lines[0].split(" ")[:49])
    (tmp_path / "cut.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ModelLoadError, match=r"1 of 5000 vector lines is not a word and 50 numbers.*cut\.txt:1: "):
        WordVectors.load(tmp_path / "cut.txt", "glove-text")
    reader = TextVectorReader(src, header=False)
    assert sum(len(w) for w, _ in reader) == 5000 and reader.dim == 50


def test_a_one_dimensional_word2vec_header_in_glove_text_is_told_apart_from_a_word(tmp_path: Path) -> None:
    """Over lines of one number each, a first line `count 1` reads as a word and a number: it is a header when the
    count is the number of lines after it (in a file longer than the sample: at least the sample's), else a word."""
    n = wv_mod.SAMPLE_LINES + 500
    body = "".join(f"w{i} {i / n!r}\n" for i in range(n))
    (tmp_path / "long.txt").write_text(f"{n} 1\n" + body)
    header = r"long\.txt:1: the first line \(two whole numbers\) looks like a word2vec 'count dim' header"
    with pytest.raises(ModelLoadError, match=header):
        WordVectors.load(tmp_path / "long.txt", "glove-text", cache=False)
    assert WordVectors.load(tmp_path / "long.txt", "word2vec-text", cache=False).vocab_size() == n
    (tmp_path / "word.txt").write_text("7 1\nalpha 0.5\nbeta 0.25\n")  # the word '7', not a count of 2 lines
    enc = WordVectors.load(tmp_path / "word.txt", "glove-text", cache=False)
    assert enc.words == ["7", "alpha", "beta"] and enc.dim == 1


# -- the binary cache -------------------------------------------------------------------------------------------
def test_cache_is_built_once_and_reopened_memory_mapped(tmp_path: Path) -> None:
    src = tmp_path / "g.txt"
    rng = np.random.default_rng(1)
    M = rng.normal(size=(300, 7)).astype(np.float32)
    words = [f"w{i}" for i in range(300)]
    src.write_text("".join(f"{w} {' '.join(repr(float(x)) for x in r)}\n" for w, r in zip(words, M, strict=True)))
    with cache_root(tmp_path / "cache") as root:
        a = WordVectors.load(src, "glove-text", cache=True)
        folders = finished_cache_folders(root)
        assert len(folders) == 1
        assert {p.name for p in folders[0].iterdir()} == {"matrix.npy", "vocab.txt", "meta.json", *INDEX_FILES}
        mtime = (folders[0] / "matrix.npy").stat().st_mtime_ns
        b = WordVectors.load(src, "glove-text", cache=True)
        assert (folders[0] / "matrix.npy").stat().st_mtime_ns == mtime  # reopened, not rebuilt
        assert isinstance(b.vectors, np.memmap) and not b.vectors.flags.writeable
        np.testing.assert_array_equal(b.vectors, M)
        np.testing.assert_array_equal(a.vocab_mean(), b.vocab_mean())
        np.testing.assert_allclose(b.vocab_mean(), M.mean(axis=0, dtype=np.float64), rtol=1e-6)
        # an edited file is a new cache entry
        src.write_text(src.read_text().replace("w0 ", "zz ", 1))
        c = WordVectors.load(src, "glove-text", cache=True)
        assert c.words[0] == "zz" and len(finished_cache_folders(root)) == 2
        # the vocabulary statistics are computed once and kept beside the matrix
        st1 = c.vocab_statistics()
        assert (c._cache.folder / "stats-lower-first.json").is_file()
        st2 = WordVectors.load(src, "glove-text", cache=True).vocab_statistics()
        np.testing.assert_array_equal(st1.mean_unit_centred, st2.mean_unit_centred)


def test_cache_build_failure_leaves_nothing(tmp_path: Path) -> None:
    def build(open_matrix, vocab):
        w = open_matrix(3)
        w.write(np.ones((2, 3), np.float32))
        raise ModelLoadError("bad line found at the end of the file")

    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(ModelLoadError, match="bad line"):
        cached_vectors(tmp_path / "f.txt", options={}, build=build, root=tmp_path / "c")
    assert [p for p in (tmp_path / "c").iterdir() if p.is_dir()] == []  # no cache, no temp folder (a lock file)


def test_two_openers_of_one_file_build_its_cache_once(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x")
    builds: list[int] = []
    started = threading.Event()

    def build(open_matrix, vocab):
        builds.append(1)
        started.set()
        time.sleep(0.2)  # the second opener arrives while this build holds the lock
        open_matrix(2).write(np.ones((1, 2), np.float32))
        vocab.write(b"a\n")
        return {"rows": 1, "dim": 2, "mean": [1.0, 1.0]}

    out: list = []

    def opener() -> None:
        out.append(cached_vectors(tmp_path / "f.txt", options={}, build=build, root=tmp_path / "c"))

    first = threading.Thread(target=opener)
    first.start()
    started.wait(10)
    opener()
    first.join()
    assert len(builds) == 1 and sorted(built for _, built in out) == [False, True]
    assert out[0][0].folder == out[1][0].folder and out[1][0].words == ["a"]


# -- the memory-mapped vocabulary index of a cached file --------------------------------------------------------
# Exact duplicates, case variants (a capitalised word before its lower-case form), non-ASCII case rules (ß, İ,
# final sigma, the title-case digraph ǅ), a multi-word token and line-separator-like characters that are not "\n".
VOCAB = [
    "the", "The", "THE", "the", "Straße", "STRASSE", "strasse", "ß", "ẞ", "İstanbul", "i̇stanbul", "istanbul",
    "ΣΑΣ", "σας", "Σας", "ǅemal", "džemal", "日本", "naïve", "NAÏVE", "naïve", ". . .", "a\u2028b", "x\ry", "Apple",
    "apple", "APPLE", "Apple", "zebra",
]  # fmt: skip
ABSENT = ["zzz", "Thé", "appl", "日", "", "\ud800", "the ", "ss"]


def _cached_vocab(folder: Path, words: list[str], dim: int = 3):
    """A cache folder of ``words`` (duplicates kept: one matrix row per line) written through cached_vectors."""
    folder.mkdir(parents=True, exist_ok=True)
    matrix = np.arange(len(words) * dim, dtype=np.float32).reshape(len(words), dim)
    src = folder / "src.txt"
    src.write_text(repr(words), encoding="utf-8")  # the fingerprinted source: one cache per vocabulary

    def build(open_matrix, vocab):
        open_matrix(dim).write(matrix)
        vocab.write("".join(w + "\n" for w in words).encode("utf-8"))
        return {"rows": len(words), "dim": dim, "mean": matrix.astype(np.float64).mean(axis=0).tolist()}

    cached, _ = cached_vectors(src, options={}, build=build, root=folder / "cache")
    return cached, matrix


def _queries(words: list[str]) -> list[str]:
    forms = [f(w) for w in words for f in (str, str.lower, str.upper, str.title, str.casefold)]
    return forms + ABSENT


def _assert_same_index(mapped: VocabIndex, ram: DictIndex, queries: list[str]) -> None:
    assert mapped.words == ram.words and len(mapped) == len(ram)
    assert mapped.positions(queries).tolist() == ram.positions(queries).tolist()
    assert mapped.lower_positions(queries).tolist() == ram.lower_positions(queries).tolist()
    assert mapped.lower_first().tolist() == ram.lower_first().tolist()
    mv, rv = mapped.lowercased(), ram.lowercased()
    assert mv.words == rv.words and mv.word_rows.tolist() == rv.word_rows.tolist()
    lowered = [q.lower() for q in queries]
    assert mv.positions(lowered).tolist() == rv.positions(lowered).tolist()
    assert mv.rows(queries).tolist() == rv.rows(queries).tolist()


def test_the_mapped_index_answers_as_the_dict_index(tmp_path: Path) -> None:
    cached, M = _cached_vocab(tmp_path, VOCAB)
    assert isinstance(cached.index, MappedIndex) and cached.meta["index"]["words"] == len(VOCAB)
    ram = DictIndex(VOCAB)
    queries = _queries(VOCAB)
    _assert_same_index(cached.index, ram, queries)
    # by hand: the first occurrence wins, exact and lower-cased
    assert cached.index.positions(["the", "Apple", "naïve", "日本", "zzz"]).tolist() == [0, 24, 18, 17, -1]
    assert cached.index.lower_positions(["the", "apple", "straße", "i̇stanbul", "σας"]).tolist() == [0, 24, 4, 9, 12]
    # words[i] is read lazily, one line at a time; slices and negative positions as a list's
    assert cached.words[21] == ". . ." and cached.words[-1] == "zebra" and cached.words[22:24] == ["a\u2028b", "x\ry"]
    with pytest.raises(IndexError):
        cached.words[len(VOCAB)]
    # through WordVectors: exact, lower-cased queries (the spec's lowercase), and the protocol's view
    for lowercase in (False, True):
        a = WordVectors(None, cached.matrix, index=cached.index, lowercase=lowercase, check_finite=False)
        b = WordVectors(VOCAB, M, lowercase=lowercase)
        for got, want in ((a, b), (lowercased_view(a), lowercased_view(b))):
            gv, go = got.lookup(queries)
            wv_, wo = want.lookup(queries)
            np.testing.assert_array_equal(gv, wv_)
            np.testing.assert_array_equal(go, wo)
            assert got.vocab_size() == want.vocab_size()
            assert [q in got for q in queries] == [q in want for q in queries]
        np.testing.assert_array_equal(a.vocab_statistics().mean, b.vocab_statistics().mean)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.text(alphabet="aAbBßẞİiıΣσςǅǆ日 é\u0301\u2028\r", min_size=1, max_size=4), min_size=1, max_size=25),
    st.lists(st.text(alphabet="aAbBßİiΣσς日 é", min_size=0, max_size=4), max_size=10),
)
def test_the_mapped_index_agrees_with_the_dict_index_on_any_vocabulary(words: list[str], extra: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        cached, _ = _cached_vocab(Path(d), words)
        _assert_same_index(cached.index, DictIndex(words), _queries(words) + extra)


def test_a_hash_collision_resolves_through_the_real_words(tmp_path: Path, monkeypatch) -> None:
    """With a 2-bit hash every key collides with a quarter of the others: each hit is still checked against the
    word read from vocab.txt, and the rest of the run of equal hashes is searched."""
    real = vocab_index.key_hashes
    monkeypatch.setattr(vocab_index, "key_hashes", lambda keys: real(keys) % np.uint64(4))
    cached, _ = _cached_vocab(tmp_path, VOCAB)
    hashes = np.load(cached.folder / "vocab-exact-hash.npy")
    assert set(hashes.tolist()) <= {0, 1, 2, 3} and len(hashes) == len(set(VOCAB))  # every distinct word kept
    _assert_same_index(cached.index, DictIndex(VOCAB), _queries(VOCAB))
    # a one-value hash: the whole vocabulary is one run
    monkeypatch.setattr(vocab_index, "key_hashes", lambda keys: real(keys) * np.uint64(0))
    cached, _ = _cached_vocab(tmp_path / "one", VOCAB)
    _assert_same_index(cached.index, DictIndex(VOCAB), _queries(VOCAB))


def _glove_file(path: Path, words: list[str], dim: int = 4) -> np.ndarray:
    M = np.random.default_rng(3).normal(size=(len(words), dim)).astype(np.float32)
    path.write_text("".join(f"{w} {' '.join(repr(float(x)) for x in r)}\n" for w, r in zip(words, M, strict=True)))
    return M


def test_opening_a_cached_file_does_no_per_word_work(tmp_path: Path, monkeypatch) -> None:
    """Open, exact and protocol lookups and the vocabulary statistics of a cached file never list its words, build
    a dict of them or walk them for the lower-cased view (what made a 2.2 M-word open take 1.2 s)."""
    words = [w for w in dict.fromkeys(VOCAB) if " " not in w]  # the text reader keeps first occurrences
    src = tmp_path / "g.txt"
    _glove_file(src, words)
    with cache_root(tmp_path / "cache"):
        ram = WordVectors.load(src, "glove-text", cache=False)
        WordVectors.load(src, "glove-text", cache=True)  # built
        with monkeypatch.context() as m:
            for cls, name in ((vocab_index._MappedWords, "_all"), (vocab_index._LoweredWords, "_all")):
                m.setattr(cls, name, lambda self: pytest.fail("a cached vocabulary was listed"))
            m.setattr(vocab_index, "lowercase_first_rows", lambda *a: pytest.fail("a cached vocabulary was walked"))
            m.setattr(vocab_index.DictIndex, "__init__", lambda *a, **k: pytest.fail("a dict of every word"))
            cached = WordVectors.load(src, "glove-text", cache=True)
            got = word_lookup(cached, _queries(words))
            exact = cached.lookup(_queries(words))
            cached.vocab_statistics(lowercase_first=False)
        want = word_lookup(ram, _queries(words))
    np.testing.assert_array_equal(got.emb, want.emb)
    np.testing.assert_array_equal(got.oov, want.oov)
    assert got.meta == want.meta
    np.testing.assert_array_equal(exact[0], ram.lookup(_queries(words))[0])


@pytest.mark.parametrize(
    "damage",
    ["missing", "truncated", "pickled", "meta without index", "layout 1", "vocab edited"],
)
def test_a_damaged_index_makes_the_cache_inconsistent_and_it_is_rebuilt(
    tmp_path: Path, damage: str, monkeypatch
) -> None:
    words = [f"w{i}" for i in range(50)] + ["Apple", "apple"]
    src = tmp_path / "g.txt"
    M = _glove_file(src, words)
    marker = tmp_path / "pwned"
    with cache_root(tmp_path / "cache") as root:
        WordVectors.load(src, "glove-text", cache=True)
        (folder,) = finished_cache_folders(root)
        target = folder / "vocab-lower-hash.npy"
        meta_path = folder / "meta.json"
        meta = json.loads(meta_path.read_text())
        if damage == "missing":
            target.unlink()
        elif damage == "truncated":
            target.write_bytes(target.read_bytes()[:-8])
        elif damage == "pickled":  # an object array: np.load(allow_pickle=False) refuses it, nothing runs
            np.save(target, np.array([_Payload(marker), 1], dtype=object), allow_pickle=True)
        elif damage == "meta without index":
            meta_path.write_text(json.dumps({k: v for k, v in meta.items() if k != "index"}))
        elif damage == "layout 1":  # a folder written before the index existed (reader version 1)
            meta_path.write_text(json.dumps({**meta, "reader": "1"}))
        elif damage == "vocab edited":  # the offsets no longer end at the file's size
            (folder / "vocab.txt").write_bytes((folder / "vocab.txt").read_bytes() + b"extra\n")
        before = (folder / "matrix.npy").stat().st_mtime_ns
        time.sleep(0.01)
        wv = WordVectors.load(src, "glove-text", cache=True)
        assert isinstance(wv.index, MappedIndex) and finished_cache_folders(root) == [folder]
        assert (folder / "matrix.npy").stat().st_mtime_ns != before  # rebuilt, not patched up
        assert target.is_file() and json.loads(meta_path.read_text())["index"]["words"] == len(words)
        np.testing.assert_array_equal(lowercased_view(wv).lookup(["APPLE", "w3", "nope"])[0][:2], M[[50, 3]])
    assert not marker.exists()


def test_npy_writer_writes_a_plain_npy(tmp_path: Path) -> None:
    w = NpyWriter(tmp_path / "m.npy", 5)
    rows = [np.arange(10, dtype=np.float64).reshape(2, 5), np.full((3, 5), -1.5, np.float32)]
    for r in rows:
        w.write(r)
    w.close()
    got = np.load(tmp_path / "m.npy", allow_pickle=False)
    assert got.dtype == np.float32 and got.shape == (5, 5)
    np.testing.assert_array_equal(got, np.concatenate(rows).astype(np.float32))
    with open(tmp_path / "m.npy", "rb") as f:
        version = np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        assert version == (1, 0) and f.tell() == 128  # data aligned after a fixed-size header
    w = NpyWriter(tmp_path / "empty.npy", 3)
    w.close()
    assert np.load(tmp_path / "empty.npy").shape == (0, 3)


# -- vocabulary statistics --------------------------------------------------------------------------------------
def test_lowercase_first_rows() -> None:
    words = ["The", "the", "a", "THE", "A", "b", "Apple"]
    assert lowercase_first_rows(words).tolist() == [0, 2, 5, 6]
    assert lowercase_first_rows(words, np.array([9, 8, 7, 6, 5, 4, 3])).tolist() == [9, 7, 4, 3]


@given(st.lists(st.text(alphabet=st.sampled_from("aAΣσςΟΔİIıßẞǅ'.- \u0345\u0307"), max_size=6), max_size=40))
@settings(max_examples=200, deadline=None, derandomize=True)
def test_lower_casing_the_joined_words_is_lower_casing_each(words: list[str]) -> None:
    """The vocabulary is lower-cased in one call over the joined words; str.lower's context rule (final sigma,
    with case-ignorable marks between) must see a word boundary exactly where a word ends."""
    assert lowercased_words(words) == [w.lower() for w in words]


def test_lower_casing_words_with_context_rules_and_a_newline() -> None:
    words = ["ΟΔΟΣ", "Σ", "ΑΣ'", "ΣΑ", "ΌΣΟΣ.", "xΣ", "Σx", "İstanbul", "ǅ", "STRASSE", "a\nB"]
    assert lowercased_words(words) == [w.lower() for w in words]  # the last one: the per-word fallback
    assert lowercased_words(["ΟΔΟΣ", "ΣΑ"]) == ["οδος", "σα"]


def test_vocab_statistics_by_hand() -> None:
    M = np.array([[3, 4], [0, 0], [1, 0], [9, 9]], dtype=np.float32)
    st = vocab_statistics(M, np.array([2, 0, 1]), chunk=2)  # row 3 is not selected; order does not matter
    assert st.n == 3
    m = (4 / 3, 4 / 3)
    np.testing.assert_allclose(st.mean, m)
    np.testing.assert_allclose(st.mean_unit, [(0.6 + 0 + 1) / 3, (0.8 + 0 + 0) / 3])  # unit(0) = 0
    centred = [(3 - m[0], 4 - m[1]), (0 - m[0], 0 - m[1]), (1 - m[0], 0 - m[1])]
    units = [(x / (x * x + y * y) ** 0.5, y / (x * x + y * y) ** 0.5) for x, y in centred]
    np.testing.assert_allclose(st.mean_unit_centred, [sum(u[0] for u in units) / 3, sum(u[1] for u in units) / 3])
    assert st.mean.dtype == np.float64
    assert VocabStats.from_json(st.to_json()).mean_unit_centred.tolist() == st.mean_unit_centred.tolist()
    full = vocab_statistics(M)
    np.testing.assert_allclose(full.mean, M.mean(axis=0))


def test_word_vectors_statistics_use_the_lowercased_first_vocabulary() -> None:
    enc = WordVectors(["Cat", "cat", "dog"], np.array([[2, 0], [0, 4], [0, 6]], np.float32))
    st = enc.vocab_statistics()
    assert st.n == 2
    np.testing.assert_allclose(st.mean, [1, 3])  # rows of "Cat" and "dog"; "cat" is a later duplicate key
    np.testing.assert_allclose(enc.vocab_statistics(lowercase_first=False).mean, [2 / 3, 10 / 3])


# -- finite post-processing -------------------------------------------------------------------------------------
@pytest.mark.parametrize("method, d", [("abtt", 1), ("pcr", 1), ("whitening", None)])
def test_postprocessing_refuses_non_finite_inputs_and_transforms(method: str, d: int | None) -> None:
    pp = PostProcess(method=method, d=d)
    X = np.random.default_rng(0).normal(size=(50, 4))
    X[7, 2] = np.nan
    with pytest.raises(NonFiniteVectors, match=rf"{method} post-processing: the fitted .*\(rows \[7\]\)"):
        fit_postprocess(X, pp)
    big = np.random.default_rng(0).normal(size=(50, 4)) * 1e200  # finite, but its second moments overflow
    with pytest.raises(NonFiniteVectors, match=rf"{method} post-processing.*overflow"), np.errstate(over="ignore"):
        fit_postprocess(big, pp)
    assert np.isfinite(fit_postprocess(X[8:], pp).apply(X[8:])).all()


def test_word_vectors_refuse_a_non_finite_matrix() -> None:
    M = np.ones((4, 2), np.float32)
    M[3, 0] = np.inf
    with pytest.raises(NonFiniteVectors, match=r"m: 1 of 4 vectors holds NaN or inf: row 3 \('d'\)"):
        WordVectors(list("abcd"), M, name="m")
    base = WordVectors(list("abc"), np.array([[1, 0], [0, 1], [1, 1]], np.float32))
    assert np.isfinite(PostProcessedWordVectors(base, PostProcess(method="abtt", d=1)).vectors).all()


# -- pickles and code on load (issue 11.9) ---------------------------------------------------------------------
class _Payload:
    """Unpickling this runs ``touch <marker>``: the os.system attack of issue 11.9."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def _write_catalog(folder: Path, entry: dict) -> Path:
    path = folder / "attack.yaml"
    path.write_text(yaml.safe_dump({"name": "attack", "models": [entry]}), encoding="utf-8")
    return path


@pytest.mark.faults  # hostile model files (`make faults`)
def test_a_malicious_gensim_kv_in_a_catalog_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    kv = tmp_path / "model.kv"
    kv.write_bytes(pickle.dumps(_Payload(marker)))
    entry = {
        "id": "evil",
        "level": "word",
        "kind": "word-vectors",
        "format": "gensim-kv",
        "source": {"type": "path", "ref": str(kv)},
    }
    with pytest.raises(ValueError, match=r"model 'evil': format 'gensim-kv' is a Python pickle.*allow_pickle"):
        load_catalog(_write_catalog(tmp_path, entry))
    # a spec that skipped validation (model_construct) still meets the loader's refusal
    spec = ModelSpec.model_construct(**{**entry, "source": Source.model_validate(entry["source"])})
    with pytest.raises(ModelLoadError, match=r"model 'evil'.*is a Python pickle"):
        load_encoder([spec])
    with pytest.raises(ModelLoadError, match="is a Python pickle"):
        WordVectors.load(kv, "gensim-kv")
    assert not marker.exists()
    # the payload is real: opting in runs it (which is why the opt-in is named after what it does)
    cat = load_catalog(_write_catalog(tmp_path, {**entry, "allow_pickle": True}))
    with pytest.raises(ModelLoadError):
        load_encoder(cat.lineage("evil"), base_dir=tmp_path)
    assert marker.exists()


@pytest.mark.faults  # hostile model files (`make faults`)
def test_a_pickled_npy_matrix_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    folder = tmp_path / "m"
    folder.mkdir()
    np.save(folder / "matrix.npy", np.array([_Payload(marker), 1.0], dtype=object), allow_pickle=True)
    (folder / "vocab.txt").write_text("a\nb\n")
    cat = load_catalog(
        _write_catalog(
            tmp_path,
            {
                "id": "evil-npy",
                "level": "word",
                "kind": "word-vectors",
                "format": "numpy-vocab",
                "vocab": "vocab.txt",
                "source": {"type": "path", "ref": str(folder / "matrix.npy")},
            },
        )
    )
    with pytest.raises(ModelLoadError, match=r"model 'evil-npy'.*holds Python objects"):
        load_encoder(cat.lineage("evil-npy"), base_dir=tmp_path)
    assert not marker.exists()
    np.load(folder / "matrix.npy", allow_pickle=True)  # the control: this payload does run when unpickled
    assert marker.exists()


@pytest.mark.faults  # hostile model files (`make faults`)
def test_a_spacy_folder_with_pickled_vectors_never_runs(tmp_path: Path) -> None:
    """The spaCy reader reads vocab/ only (config.cfg is never resolved) and numpy refuses pickled arrays."""
    pytest.importorskip("spacy")
    marker = tmp_path / "pwned"
    folder = tmp_path / "pipeline"
    (folder / "vocab").mkdir(parents=True)
    (folder / "config.cfg").write_text('[nlp]\nlang = "en"\n[components.evil]\nsource = "/nonexistent"\n')
    (folder / "vocab" / "strings.json").write_text('["apple"]')
    with open(folder / "vocab" / "vectors", "wb") as f:
        np.save(f, np.array([_Payload(marker)], dtype=object), allow_pickle=True)
    with pytest.raises(ModelLoadError, match="holds Python objects"):
        WordVectors.load(folder, "spacy")
    assert not marker.exists()


# -- spaCy pipelines (kind spacy-tok2vec): what spacy.load would run, refused (evalfarm/encoders/spacy_tok2vec.py) --

CNN = {
    "@architectures": "spacy.Tok2Vec.v2",
    "embed": {"@architectures": "spacy.MultiHashEmbed.v2", "width": 8, "attrs": ["NORM"], "rows": [50],
              "include_static_vectors": False},
    "encode": {"@architectures": "spacy.MaxoutWindowEncoder.v2", "width": 8, "window_size": 1, "maxout_pieces": 2,
               "depth": 1},
}  # fmt: skip
TORCH = {**CNN, "encode": {"@architectures": "spacy.TorchBiLSTMEncoder.v1", "width": 8, "depth": 1, "dropout": 0.0}}


def _pipeline(folder: Path, model: dict) -> Path:
    """A real spaCy pipeline folder: a blank English pipeline with one trained-shape tok2vec, saved."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("tok2vec", config={"model": model})
    nlp.initialize()
    nlp.to_disk(folder)
    return folder


def _poison_torch_state(folder: Path, marker: Path) -> None:
    """Replace the PyTorch layer's saved state (what thinc hands to torch.load) with a pickle that runs a command."""
    import srsly

    msg = srsly.msgpack_loads((folder / "tok2vec" / "model").read_bytes())
    (i, shims), *_ = [(i, sh) for i, sh in enumerate(msg["shims"]) if sh]
    state = srsly.msgpack_loads(shims[0])
    state["state"] = pickle.dumps(_Payload(marker))
    msg["shims"][i] = [srsly.msgpack_dumps(state)]
    (folder / "tok2vec" / "model").write_bytes(srsly.msgpack_dumps(msg))


def _tok2vec_spec(folder: Path, **extra) -> dict:
    return {"id": "evil-t2v", "level": "sentence", "kind": "spacy-tok2vec",
            "source": {"type": "path", "ref": str(folder)}, **extra}  # fmt: skip


def _load_t2v(tmp_path: Path, entry: dict):
    cat = load_catalog(_write_catalog(tmp_path, entry))
    return load_encoder(cat.lineage(entry["id"]), base_dir=tmp_path)


@pytest.mark.faults  # hostile model files (`make faults`)
@pytest.mark.slow
def test_a_spacy_pipeline_with_a_pickled_torch_layer_never_runs(tmp_path: Path, monkeypatch) -> None:
    """spaCy's own TorchBiLSTMEncoder saves its state with torch.save and loads it with torch.load: a pickle. With
    torch 2.4–2.5 (which evalfarm allows) or TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 (set here: the weakest torch), any
    pickle in that state runs. evalfarm refuses the pipeline before reading a weight; `allow_pickle` lets it load."""
    pytest.importorskip("spacy")
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    marker = tmp_path / "pwned"
    folder = _pipeline(tmp_path / "pipeline", TORCH)
    _poison_torch_state(folder, marker)
    with pytest.raises(ModelLoadError, match=r"model 'evil-t2v'.*wraps a PyTorchShim.*a pickle.*allow_pickle: true"):
        _load_t2v(tmp_path, _tok2vec_spec(folder))
    assert not marker.exists()
    # the payload is real: opting in runs it (which is why the opt-in is named after what it does)
    with pytest.raises(ModelLoadError):
        _load_t2v(tmp_path, _tok2vec_spec(folder, allow_pickle=True))
    assert marker.exists()


@pytest.mark.faults  # hostile model files (`make faults`)
@pytest.mark.slow
def test_a_spacy_pipeline_that_loads_more_than_itself_is_refused(tmp_path: Path, monkeypatch) -> None:
    """A sourced component, a creation callback that loads another pipeline, another package's registered function:
    each would run more than this folder's data; each is refused before anything is built or loaded."""
    pytest.importorskip("spacy")
    from spacy.util import registry

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    marker = tmp_path / "pwned"
    evil = _pipeline(tmp_path / "evil", TORCH)  # loading this one runs the payload (as above)
    _poison_torch_state(evil, marker)
    good = _pipeline(tmp_path / "good", CNN)
    config = (good / "config.cfg").read_text()

    called: list[str] = []
    # a function registered by "another package" (this test module): spacy.load would call it while building
    registry.architectures.register("evalfarm-test.Evil.v1", func=lambda **kw: called.append("evil") or None)

    cnn = '@architectures = "spacy.Tok2Vec.v2"'
    copy_from = f'{{"@callbacks":"spacy.copy_from_base_model.v1","tokenizer":"{evil}","vocab":"{evil}"}}'
    variants = {
        "sourced": config.replace(
            '[components.tok2vec]\nfactory = "tok2vec"', f'[components.tok2vec]\nsource = "{evil}"'
        ),
        "callback": config.replace("after_creation = null", f"after_creation = {copy_from}"),
        "foreign function": config.replace(cnn, '@architectures = "evalfarm-test.Evil.v1"'),
    }
    refusals = {
        "sourced": r"is sourced from .*evil",
        "callback": r"after_creation calls",
        "foreign function": r"evalfarm-test\.Evil\.v1.*another package than spaCy and thinc",
    }
    for name, text in variants.items():
        assert text != config, name  # the edit took
        folder = tmp_path / name.replace(" ", "-")
        shutil.copytree(good, folder)
        (folder / "config.cfg").write_text(text)
        with pytest.raises(ModelLoadError, match=refusals[name]):
            _load_t2v(tmp_path, _tok2vec_spec(folder))
    assert not marker.exists() and not called
    # the honest pipeline beside them loads and encodes
    enc = _load_t2v(tmp_path, _tok2vec_spec(good))
    assert enc.encode(["a sentence", ""]).shape == (2, 8)


@pytest.mark.faults  # hostile model files (`make faults`)
@pytest.mark.slow
def test_a_spacy_pipeline_with_pickled_vectors_never_runs(tmp_path: Path) -> None:
    """The tok2vec loader reads the vocabulary's vectors with numpy, which refuses a pickled array."""
    pytest.importorskip("spacy")
    marker = tmp_path / "pwned"
    folder = _pipeline(tmp_path / "pipeline", CNN)
    with open(folder / "vocab" / "vectors", "wb") as f:
        np.save(f, np.array([_Payload(marker)], dtype=object), allow_pickle=True)
    with pytest.raises(ModelLoadError, match="allow_pickle=False|Python objects|Object arrays"):
        _load_t2v(tmp_path, _tok2vec_spec(folder))
    assert not marker.exists()


def test_save_numpy_vocab_round_trips(tmp_path: Path) -> None:
    M = np.arange(6, dtype=np.float64).reshape(3, 2)
    save_numpy_vocab(tmp_path, ["a", "é", "c d"], M)
    enc = WordVectors.load(tmp_path / "model.npy", "numpy-vocab", vocab="vocab.txt")
    assert enc.words == ["a", "é", "c d"] and enc.vectors.dtype == np.float32
    np.testing.assert_array_equal(enc.vectors, M)
    with pytest.raises(ValueError, match="line breaks"):
        save_numpy_vocab(tmp_path, ["a\nb"], M[:1])


def test_numpy_vocab_statistics_are_kept_and_follow_the_files(tmp_path: Path, monkeypatch) -> None:
    """A numpy-vocab model's vocabulary statistics are computed once per version of its files: a second load reads
    them (no pass over the matrix), and an edited vocabulary is a new key (recomputed, not the stale numbers)."""
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    M = np.array([[3, 1], [1, 3], [3, -1], [1, -3]], dtype=np.float32)
    (tmp_path / "m").mkdir()
    save_numpy_vocab(tmp_path / "m", ["a", "B", "c", "b"], M)  # "b" repeats "B" once lower-cased
    first = WordVectors.load(tmp_path / "m" / "model.npy", "numpy-vocab", vocab="vocab.txt").vocab_statistics()
    np.testing.assert_allclose(first.mean, M[:3].mean(axis=0))  # the lower-cased first occurrences: a, B, c
    with monkeypatch.context() as m:
        m.setattr(wv_mod, "vocab_statistics", lambda *a, **k: pytest.fail("kept statistics were recomputed"))
        again = WordVectors.load(tmp_path / "m" / "model.npy", "numpy-vocab", vocab="vocab.txt").vocab_statistics()
    np.testing.assert_array_equal(again.mean, first.mean)
    (tmp_path / "m" / "vocab.txt").write_text("a\nB\nc\nd\n")  # the same size, no duplicate: every row counts
    edited = WordVectors.load(tmp_path / "m" / "model.npy", "numpy-vocab", vocab="vocab.txt").vocab_statistics()
    np.testing.assert_allclose(edited.mean, M.mean(axis=0))  # recomputed, not the kept numbers of the old file
    assert len(list((tmp_path / "cache" / "vectors" / "stats").glob("*.json"))) == 2


def test_allow_pickle_is_validated_and_kept_out_of_old_hashes() -> None:
    base = {"id": "w", "level": "word", "kind": "word-vectors", "source": {"type": "path", "ref": "x"}}
    with pytest.raises(ValueError, match="'allow_pickle' only applies to format gensim-kv and kind spacy-tok2vec"):
        ModelSpec.model_validate({**base, "format": "glove-text", "allow_pickle": True})
    opted = ModelSpec.model_validate({**base, "format": "gensim-kv", "allow_pickle": True})
    assert spec_hash(opted) != spec_hash(opted.model_copy(update={"allow_pickle": False}))


# -- headers that claim more than the file holds (issue 23.2) ---------------------------------------------------------
# Each reader checks a header's claims (rows, dimension, .npy shape) against the file's size before allocating
# anything for them. The attacks run in a child process under an address-space limit: a reader that believed a
# header would hit MemoryError (or be killed) there; a checked one says what the header claimed and what the file
# holds.

_ATTACK_LIMIT = 1536 << 20
_ATTACK_CHILD = r"""
import json, resource, sys
from pathlib import Path

import numpy as np

from evalfarm.encoders.word_vectors import WordVectors

folder = Path(sys.argv[1])
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
out = {}
for name, fmt, file, vocab in json.loads(sys.argv[3]):
    try:
        enc = WordVectors.load(folder / file, fmt, vocab=vocab, cache=False)
        enc.lookup(["a"])
        enc.vocab_mean()
        out[name] = {"error": None, "message": repr(enc)}
    except BaseException as exc:  # noqa: BLE001 - the parent judges every outcome
        out[name] = {"error": type(exc).__name__, "message": str(exc)[:400]}
# the peak RSS of this process's own memory: VmHWM belongs to the address space, which exec replaces, while
# ru_maxrss survives exec and so reports the forking pytest process's peak (2.4 GB late in the full suite)
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")]
out["maxrss_kb"] = int(hwm[0]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(out))
"""


def _npy_header_only(path: Path, shape: tuple[int, ...], descr: str = "<f4") -> None:
    """A ``.npy`` file that is all header: its shape claims rows the file does not hold."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False, "shape": shape})


def _write_attacks(folder: Path) -> list[tuple[str, str, str, str | None]]:
    """(name, format, file, vocab): tiny files whose headers claim gigabytes."""
    one_row = b"a " + np.ones(2, dtype="<f4").tobytes() + b"\n"
    (folder / "rows.bin").write_bytes(b"536870912 2\n" + one_row)  # the reported 36-byte file: 4.4 GB
    (folder / "dim.bin").write_bytes(b"1 1000000000\n" + one_row)  # an absurd dimension
    (folder / "rows.txt").write_text("536870912 2\na 1 2\n")
    (folder / "dim.txt").write_text("1 900000000\na 1 2\n")
    _npy_header_only(folder / "rows.npy", (1 << 28, 300))
    _npy_header_only(folder / "dim.npy", (0, 1 << 40))  # no rows, a dimension of 10^12: a 8 TB vocabulary mean
    (folder / "vocab.txt").write_text("a\n")
    (folder / "empty.txt").write_text("")
    attacks = [
        ("binary-rows", "word2vec-binary", "rows.bin", None),
        ("binary-dim", "word2vec-binary", "dim.bin", None),
        ("text-rows", "word2vec-text", "rows.txt", None),
        ("text-dim", "word2vec-text", "dim.txt", None),
        ("npy-rows", "numpy-vocab", "rows.npy", "vocab.txt"),
        ("npy-dim", "numpy-vocab", "dim.npy", "empty.txt"),
    ]
    with contextlib.suppress(ImportError):
        import spacy  # noqa: F401 - only whether it is installed

        (folder / "pipe" / "vocab").mkdir(parents=True)
        (folder / "pipe" / "vocab" / "strings.json").write_text('["a"]')
        _npy_header_only(folder / "pipe" / "vocab" / "vectors", (1 << 28, 300))
        attacks.append(("spacy-rows", "spacy", "pipe", None))
    return attacks


@pytest.fixture(scope="module")
def header_attacks(tmp_path_factory) -> tuple[dict[str, tuple[str, str]], dict]:
    folder = tmp_path_factory.mktemp("attacks")
    attacks = _write_attacks(folder)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _ATTACK_CHILD, str(folder), str(_ATTACK_LIMIT), json.dumps(attacks)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, f"the reader process died (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return {name: (fmt, file) for name, fmt, file, _ in attacks}, json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.faults  # issue 23.2 (`make faults`)
@pytest.mark.parametrize(
    "name", ["binary-rows", "binary-dim", "text-rows", "text-dim", "npy-rows", "npy-dim", "spacy-rows"]
)
def test_a_header_cannot_make_a_reader_allocate_more_than_its_file(header_attacks, name: str) -> None:
    attacks, out = header_attacks
    if name not in attacks:
        pytest.skip("spaCy is not installed")
    got = out[name]
    assert got["error"] == "ModelLoadError", got
    msg = got["message"]
    assert attacks[name][1] in msg and "MemoryError" not in msg, msg
    claims = r"claims .* needs at least \d+ bytes, but the file holds \d+|is not a vector dimension"
    claims += r"|header says \d+ vectors but the file has 1"  # text: streamed, the count is checked at the end
    assert re.search(claims, msg), msg
    assert out["maxrss_kb"] < _ATTACK_LIMIT // 1024


# -- fuzzing the readers: random bytes and mutated valid files (issue 23) ---------------------------------------------
# Whatever the bytes, a reader returns a consistent model or raises ModelLoadError / ValueError naming the file:
# never another exception, never a hang (every file is small, every property bounded by max_examples).

_FUZZ = settings(max_examples=50, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
_GOOD_TEXT = b"3 2\nthe 0.1 0.2\nof -1.5e-1 3\nand 2 .5\n"


def _good_binary() -> bytes:
    rows = [(b"the", (0.1, 0.2)), (b"of", (-1.0, 3.0)), (b"and", (2.0, 0.5))]
    return b"3 2\n" + b"".join(w + b" " + np.asarray(v, dtype="<f4").tobytes() + b"\n" for w, v in rows)


def _good_npy() -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, np.array([[0.1, 0.2], [-1.0, 3.0], [2.0, 0.5]], dtype=np.float32), allow_pickle=False)
    return buf.getvalue()


def _mutated(good: bytes) -> st.SearchStrategy[bytes]:
    """``good`` mutated, inserting random bytes or the characters that broke the headers."""
    return mutated(good, st.binary(min_size=1, max_size=8) | st.sampled_from(_TRICKY))


_TRICKY = [
    t.encode()
    for t in ["\u00b2", "\u0663", "\u00a0", "\u2028", "\x85", "\ufeff", "_", "9" * 30, "1e999", "nan", " ", "\n", "\r"]
]
"""Inserted by the fuzzing: digits ``isdigit`` takes and ``int`` may not, line breaks ``str.splitlines`` splits on,
overflowing numbers."""


def _load_or_clear_error(path: Path, fmt: str, **kwargs) -> None:
    """Load ``path``: a model whose words, rows and dimension agree, or an error that names the file."""
    try:
        enc = WordVectors.load(path, fmt, cache=False, **kwargs)
    except (ModelLoadError, ValueError) as exc:
        assert path.name in str(exc), str(exc)
        return
    rows, dim = enc.vectors.shape
    assert 1 <= dim <= wv_mod.MAX_DIM and enc.dim == dim and rows >= 1
    assert enc.vocab_size() >= 1 and np.isfinite(np.asarray(enc.vectors)).all()
    assert ((enc.word_rows >= 0) & (enc.word_rows < rows)).all()
    vecs, oov = enc.lookup(list(enc.words)[:3])
    assert vecs.shape == (min(3, enc.vocab_size()), dim) and not oov.any()


@pytest.mark.faults  # issue 23: fuzzed readers (`make faults`)
@pytest.mark.parametrize("fmt", TEXT)
@_FUZZ
@given(data=_mutated(_GOOD_TEXT))
def test_text_readers_fuzzed(fmt: str, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "fuzz.txt"
        path.write_bytes(data if fmt == "word2vec-text" else data.split(b"\n", 1)[-1])
        _load_or_clear_error(path, fmt)


@pytest.mark.faults  # issue 23: fuzzed readers (`make faults`)
@_FUZZ
@given(data=_mutated(_good_binary()))
def test_word2vec_binary_reader_fuzzed(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "fuzz.bin"
        path.write_bytes(data)
        _load_or_clear_error(path, "word2vec-binary")


@pytest.mark.faults  # issue 23: fuzzed readers (`make faults`)
@_FUZZ
@given(data=_mutated(_good_npy()), vocab=st.sampled_from([b"the\nof\nand\n", b"the\nof\n", b"", b"\xff\n\n\n"]))
def test_numpy_vocab_reader_fuzzed(data: bytes, vocab: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "fuzz.npy"
        path.write_bytes(data)
        (Path(d) / "vocab.txt").write_bytes(vocab)
        _load_or_clear_error(path, "numpy-vocab", vocab="vocab.txt")


def _good_parquet_vocab() -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"index": ["the", "of", "and"]}), buf)
    return buf.getvalue()


@pytest.mark.faults  # issue 23: fuzzed readers (`make faults`)
@_FUZZ
@given(vocab=_mutated(_good_parquet_vocab()))
def test_numpy_vocab_parquet_vocabulary_fuzzed(vocab: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "fuzz.npy"
        path.write_bytes(_good_npy())
        (Path(d) / "vocab.parquet").write_bytes(vocab)
        try:
            WordVectors.load(path, "numpy-vocab", vocab="vocab.parquet", cache=False)
        except (ModelLoadError, ValueError) as exc:
            assert "vocab.parquet" in str(exc) or "fuzz.npy" in str(exc), str(exc)


def _good_spacy_vectors() -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, np.array([[0.1, 0.2], [-1.0, 3.0]], dtype=np.float32), allow_pickle=False)
    return buf.getvalue()


@pytest.mark.faults  # issue 23: fuzzed readers (`make faults`)
@settings(_FUZZ, max_examples=25)
@given(data=_mutated(_good_spacy_vectors()))
def test_spacy_vectors_reader_fuzzed(data: bytes) -> None:
    pytest.importorskip("spacy")
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "vocab").mkdir()
        (Path(d) / "vocab" / "strings.json").write_text('["the", "of"]')
        (Path(d) / "vocab" / "vectors").write_bytes(data)
        try:
            enc = WordVectors.load(Path(d), "spacy")
        except (ModelLoadError, ValueError) as exc:
            assert d in str(exc), str(exc)
            return
        assert np.isfinite(enc.vectors).all() and 1 <= enc.dim <= wv_mod.MAX_DIM


@pytest.mark.faults  # issue 23.2 (`make faults`)
def test_a_parquet_vocabulary_longer_than_the_matrix_is_refused_from_its_footer(tmp_path: Path, monkeypatch) -> None:
    """A few KB of parquet can hold millions of (dictionary-encoded) words: the footer's row count is compared with
    the matrix's rows before a single word is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    np.save(tmp_path / "m.npy", np.ones((2, 3), dtype=np.float32))
    pq.write_table(pa.table({"index": pa.array(["a"] * 1_000_000).dictionary_encode()}), tmp_path / "v.parquet")
    assert (tmp_path / "v.parquet").stat().st_size < 64 << 10
    monkeypatch.setattr(pq, "read_table", lambda *a, **k: pytest.fail("the words were read"))
    with pytest.raises(ModelLoadError, match=r"v\.parquet: 1000000 words but .*m\.npy has 2 rows"):
        WordVectors.load(tmp_path / "m.npy", "numpy-vocab", vocab="v.parquet")


@pytest.mark.faults  # issue 23.2 (`make faults`)
@pytest.mark.parametrize(
    ("fmt", "data", "match"),
    [
        # int() reads "536_870_912" and a first line of any length: such headers are refused, not left to gensim
        ("word2vec-binary", b"536_870_912 2\na \x00\x00\x80?\x00\x00\x80?\n", "the first line must be a header"),
        ("word2vec-binary", b"0" * 300 + b"536870912 2\na \x00\x00\x80?\x00\x00\x80?\n", "must be a header"),
        ("word2vec-binary", b"0 2\n", "claims 0 vectors: no vectors in file"),
        # str.isdigit() takes "\u00b2" and 5000 digits, int() refuses both with a ValueError naming no file
        ("word2vec-text", "2 \u00b2\na 1 2\nb 1 2\n".encode(), "expected a word2vec header 'count dim'"),
        ("word2vec-text", b"1 " + b"9" * 5000 + b"\na 1 2\n", "expected a word2vec header 'count dim'"),
        ("glove-text", "\u00b2 1\na 1\n".encode(), None),
        ("glove-text", b"9" * 5000 + b" 1\na 1\n", None),
    ],
)
def test_headers_only_the_check_can_read_are_refused_naming_the_file(
    tmp_path: Path, fmt: str, data: bytes, match: str | None
) -> None:
    path = tmp_path / "odd-header.vec"
    path.write_bytes(data)
    try:
        WordVectors.load(path, fmt)
    except ModelLoadError as exc:
        assert "odd-header.vec" in str(exc) and (match is None or match in str(exc)), str(exc)
    else:
        assert match is None


@pytest.mark.faults  # issue 23.2 (`make faults`)
def test_a_text_vocabulary_of_another_length_than_the_matrix_is_refused(tmp_path: Path) -> None:
    """The lines of vocab.txt are counted against the matrix's rows (before a string is built for each)."""
    np.save(tmp_path / "m.npy", np.ones((2, 3), dtype=np.float32))
    (tmp_path / "v.txt").write_text("ab\n" * 100_000)
    with pytest.raises(ModelLoadError, match=r"v\.txt: 100000 words but .*m\.npy has 2 rows"):
        WordVectors.load(tmp_path / "m.npy", "numpy-vocab", vocab="v.txt")
    (tmp_path / "v.txt").write_text("a\n\nb\n\n")  # an empty line inside is a word; trailing ones are not
    with pytest.raises(ModelLoadError, match=r"v\.txt: 3 words but .*m\.npy has 2 rows"):
        WordVectors.load(tmp_path / "m.npy", "numpy-vocab", vocab="v.txt")
