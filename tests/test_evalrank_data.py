"""Pools from the real EvalRank data: counts match the paper; corrupt files and bad checksums are clear errors."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from evalfarm.catalog.registry import load_catalog
from evalfarm.scorers.evalrank import EvalRankTask
from evalfarm.taskdata import load_task
from evalfarm.taskdata.data import TaskDataError
from tests.support.http_files import serve


@pytest.fixture(scope="module")
def catalog():
    return load_catalog("tasks")


def test_word_pool_matches_paper_table_2(catalog, data_dir):
    pool = load_task(catalog.task("evalrank-word"))
    assert pool.n_pairs == 5514
    assert len(pool.items) == 22207
    assert pool.n_duplicate_pairs == 0
    # every item is a background item; pair words come first
    assert set(pool.queries.tolist()) | set(pool.positives.tolist()) <= set(range(2774))


def test_sentence_pool_matches_paper_table_2(catalog):
    pool = load_task(catalog.task("evalrank-sentence"))
    assert pool.n_pairs == 6989
    assert len(pool.items) == 24957
    assert int((pool.queries == pool.positives).sum()) == 13  # self-pairs kept, as in the paper


def _pool_spec(tmp: Path, pairs: str, background: str, **over) -> EvalRankTask:
    (tmp / "p").mkdir(parents=True, exist_ok=True)
    (tmp / "p" / "pairs.txt").write_text(pairs)
    (tmp / "p" / "bg.txt").write_text(background)
    sha = {
        r: hashlib.sha256((tmp / "p" / f).read_bytes()).hexdigest()
        for r, f in [("pairs", "pairs.txt"), ("background", "bg.txt")]
    }
    fields = dict(
        id="tiny",
        level="sentence",
        kind="evalrank",
        version="1",
        format="evalrank-sentence",
        files={"pairs": "p/pairs.txt", "background": "p/bg.txt"},
        sha256=sha,
        licence="test",
        source="tests",
    )
    fields.update(over)
    return EvalRankTask(**fields)


def test_corrupt_pair_file_names_file_and_line(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALFARM_DATA", str(tmp_path))
    spec = _pool_spec(tmp_path, "a b\tc d\nno tab here\n", "e f\n")
    with pytest.raises(TaskDataError, match=r"pairs.txt:2: expected two non-empty tab-separated fields"):
        load_task(spec)


def test_duplicate_pairs_are_collapsed_and_counted(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALFARM_DATA", str(tmp_path))
    pool = load_task(_pool_spec(tmp_path, "a\tb\nb\ta\na\tb\n", "c\na\n"))
    assert pool.n_pairs == 2 and pool.n_duplicate_pairs == 1
    assert pool.items == ["a", "b", "c"]


def test_checksum_mismatch_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALFARM_DATA", str(tmp_path))
    spec = _pool_spec(tmp_path, "a\tb\n", "c\n")
    (tmp_path / "p" / "bg.txt").write_text("tampered\n")
    with pytest.raises(TaskDataError, match="sha256"):
        load_task(spec)


def test_missing_data_dir_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALFARM_DATA", str(tmp_path / "nope"))
    with pytest.raises(TaskDataError, match="EVALFARM_DATA"):
        load_task(load_catalog("tasks").task("evalrank-word"))


def test_download_into_cache_verifies_checksum(tmp_path, monkeypatch):
    """Without EVALFARM_DATA the files are fetched from their URLs (a loopback http server here) and checked."""
    src = tmp_path / "src"
    spec = _pool_spec(src, "a\tb\nb\ta\n", "c\n")
    monkeypatch.delenv("EVALFARM_DATA", raising=False)
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALFARM_ALLOW_HTTP", "1")
    monkeypatch.setattr("evalfarm.cache.DOWNLOAD_RETRIES", 0)  # the mismatch below would be retried (1 s, 2 s)
    with serve(src) as base:
        spec = spec.model_copy(update={"urls": {role: f"{base}/{rel}" for role, rel in spec.files.items()}})
        pool = load_task(spec)
        assert pool.n_pairs == 2
        assert (tmp_path / "cache" / "tasks" / "tiny" / "1" / "p" / "pairs.txt").is_file()
        bad = spec.model_copy(update={"id": "tiny2", "sha256": {**spec.sha256, "pairs": "0" * 64}})
        with pytest.raises(TaskDataError, match="expected"):
            load_task(bad)
    assert not list((tmp_path / "cache" / "tasks" / "tiny2").rglob("*.txt"))  # nothing half-written is kept
