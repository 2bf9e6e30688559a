"""`evalfarm report` on a small real warehouse (real models through run_catalog, hand-written downstream rows, one
hostile model), opened in headless Chromium (Debian's `chromium`, driven by playwright): the pages load with no
console error, show the expected tables and figures, and render hostile data as text."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalfarm.analysis.report import model_slug
from evalfarm.cli import app
from evalfarm.runner import run_catalog
from evalfarm.warehouse import Warehouse, now
from tests.support.task_files import copy_task_files, data_folder

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DOWNSTREAM = {"bow-toy": 0.61, "bow-toy-abtt1": 0.64, "static": 0.72}
EVIL = "<img src=x onerror=alert(1)>"  # a model id that must stay text (no "/": ids are path segments)
EVIL_TEXT = '<script>alert("query")</script> & "quoted"'


def _slice(src: Path, dest: Path, n: int) -> str:
    dest.write_text("\n".join(src.read_text(encoding="utf-8").splitlines()[:n]) + "\n", encoding="utf-8")
    return hashlib.sha256(dest.read_bytes()).hexdigest()


def _accuracy_row(model: str, task: str, value: float, fingerprint: str) -> dict:
    return {
        "run_id": "hand", "model": model, "task": task, "scorer": "downstream", "subset": "all", "variant": "logreg",
        "ties": None, "metric": "accuracy", "value": value, "is_primary": True, "higher_is_better": True,
        "fingerprint": fingerprint, "spec_hash": "hand", "created_at": now(),
    }  # fmt: skip


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, data_dir, toy_glove) -> tuple[Warehouse, str]:
    """Toy GloVe (+ ABTT), their bags of words and the static model on small slices of both EvalRank pools, two
    word-similarity sets and the STS bands; downstream accuracies written by hand; a hostile extra model."""
    d = tmp_path_factory.mktemp("report-data")
    er = data_dir / "evalrank"
    sha = {
        "wp": _slice(er / "word_evalrank/pos_pair_5514.txt", d / "wp.txt", 600),
        "wb": _slice(er / "word_evalrank/basic_vocab.txt", d / "wb.txt", 1000),
        "ww": _slice(er / "word_evalrank/wiki_vocab.txt", d / "ww.txt", 3000),
        "sp": _slice(er / "sent_evalrank/pos_pair.txt", d / "sp.txt", 300),
        "sb": _slice(er / "sent_evalrank/background_sent.txt", d / "sb.txt", 1500),
    }
    (d / "cat.yaml").write_text(f"""
include: [{REPO / "catalog" / "tasks.yaml"}]
tasks:
  - {{id: er-word-small, level: word, kind: evalrank, format: evalrank-word, version: "1", licence: test,
      source: tests, files: {{pairs: wp.txt, background_basic: wb.txt, background_wiki: ww.txt}},
      sha256: {{pairs: {sha["wp"]}, background_basic: {sha["wb"]}, background_wiki: {sha["ww"]}}}}}
  - {{id: er-sent-small, level: sentence, kind: evalrank, format: evalrank-sentence, version: "1", licence: test,
      source: tests, files: {{pairs: sp.txt, background: sb.txt}},
      sha256: {{pairs: {sha["sp"]}, background: {sha["sb"]}}}}}
  - wordsim-mc-30
  - wordsim-rg-65
  - sts-bands
models:
  - {{id: toy, level: word, kind: word-vectors, format: glove-text, source: {{type: path, ref: {toy_glove}}}}}
  - {{id: toy-abtt1, level: word, base: toy, postprocess: {{method: abtt, d: 1}}}}
  - {{id: bow-toy, level: sentence, kind: bow, base: toy, lowercase: true}}
  - {{id: bow-toy-abtt1, level: sentence, kind: bow, base: toy-abtt1, lowercase: true}}
  - {{id: static, level: sentence, kind: static,
      source: {{type: package, ref: tokenlearn-static-model, path: static_model/model}}}}
""")
    wh = Warehouse(d / "wh").init()
    for i, (model, acc) in enumerate(DOWNSTREAM.items()):
        for j, task in enumerate(["mr", "cr", "sst2", "trec"]):
            fp = f"hand-{model}-{task}"
            wh.write(
                "metrics",
                [_accuracy_row(model, task, acc + (i * j) / 100, fp)],
                unit=(model, task, fp),
            )
    # d is the run's data folder: the slices above and a copy of the shipped tasks' files
    copy_task_files(data_dir, "tasks", ["wordsim-mc-30", "wordsim-rg-65", "sts-bands"], d)
    with data_folder(d):
        summary = run_catalog(d / "cat.yaml", wh.root, executor="local")
    assert summary.ok, [o.error for o in summary.failed]
    _add_hostile_model(wh, summary.run_id)
    return wh, summary.run_id


def _add_hostile_model(wh: Warehouse, run_id: str) -> None:
    """A model whose id, pair texts and failure message are HTML: the report must show them as text."""
    fp = "evil-unit"
    created = now()
    wh.write_model({"model": EVIL, "level": "sentence", "kind": "static", "dim": 2, "spec_hash": "evil",
                    "provenance": '{"note": "</pre><script>alert(3)</script>"}', "spec": "[]", "run_id": run_id,
                    "created_at": created})  # fmt: skip
    wh.write(
        "ranks",
        [{"run_id": run_id, "model": EVIL, "task": "er-sent-small", "variant": "cos", "query_id": 1, "positive_id": 2,
          "query": EVIL_TEXT, "positive": "<b>bold?</b>", "rank": 7, "tied": 0, "score": 0.5, "oov": False,
          "fingerprint": fp}],
        unit=(EVIL, "er-sent-small", fp),
    )  # fmt: skip
    wh.write(
        "metrics",
        [{"run_id": run_id, "model": EVIL, "task": "er-sent-small", "scorer": "evalrank", "subset": "all",
          "variant": "cos", "ties": "optimistic", "metric": "mrr", "value": 0.5, "is_primary": True,
          "higher_is_better": True, "fingerprint": fp, "spec_hash": "evil", "created_at": created}],
        unit=(EVIL, "er-sent-small", fp),
    )  # fmt: skip
    wh.write_failure(run_id, EVIL, "er-sent-small", "score", "<iframe src=javascript:alert(4)>")


@pytest.fixture(scope="module")
def report(warehouse, tmp_path_factory) -> Path:
    wh, _ = warehouse
    out = tmp_path_factory.mktemp("report")
    res = CliRunner().invoke(app, ["report", "--warehouse", str(wh.root), "--out", str(out), "--hardest", "5"])
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Debian's Chromium, headless, on a fresh profile, with the network closed (no background fetches)."""
    chromium = os.environ.get("EVALFARM_CHROMIUM") or shutil.which("chromium")
    if chromium is None:
        message = "no chromium on PATH: apt-get install chromium (what .ci/run does), or set EVALFARM_CHROMIUM"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_ARGS,
        )
        yield context
        context.close()


def _open(browser, path: Path):
    """Load a page; returns (page, problems): console errors and warnings, uncaught exceptions, failed loads."""
    page = browser.new_page()
    problems: list[str] = []
    page.on(
        "console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None
    )
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"requestfailed: {r.url}"))
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, problems


def _images(page) -> list[dict]:
    return page.evaluate(
        "[...document.images].map(i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0}))"
    )


def _rows(table, part: str = "tbody") -> list[list[str]]:
    """The cell texts of one table's rows (``part``: thead or tbody), as the browser renders them."""
    return table.evaluate(
        f"t => [...t.querySelectorAll('{part} tr')].map(tr => [...tr.cells].map(c => c.innerText.trim()))"
    )


@pytest.mark.slow
def test_index_loads_cleanly_with_leaderboards_correlations_and_figures(browser, report, warehouse):
    wh, run_id = warehouse
    page, problems = _open(browser, report / "index.html")
    assert problems == []
    assert page.title() == "evalfarm report"
    headings = page.eval_on_selector_all("h2", "hs => hs.map(h => h.innerText)")
    assert headings[:2] == ["Leaderboards", "Intrinsic evaluators against downstream accuracy"]
    assert {"Models (6)", "Runs and provenance"} <= set(headings)
    assert any(h.startswith("Models ordered by a downstream task") for h in headings)

    # a leaderboard per task, with the warehouse's numbers
    tasks = page.eval_on_selector_all("details > summary > b", "bs => bs.map(b => b.innerText)")
    assert set(tasks) == {"er-word-small", "er-sent-small", "wordsim-mc-30", "wordsim-rg-65", "sts-bands", "mr", "cr",
                          "sst2", "trec"}  # fmt: skip
    (mrr,) = wh.query(
        "SELECT value FROM leaderboard WHERE task = 'er-sent-small' AND model = 'static' AND variant = 'cos' "
        "AND ties = 'realistic'"
    ).to_pylist()  # the board's choice: cos, realistic ties (the other variants are folded below it)
    board = page.locator("details", has=page.get_by_text("er-sent-small", exact=True)).locator("table.leaderboard")
    assert _rows(board, "thead")[0][:3] == ["#", "model", "mrr"]
    (static_row,) = [r for r in _rows(board) if r[1] == "static"]
    assert static_row[2] == f"{mrr['value']:.4f}"

    # the correlation tables (sentence: all models and without the post-processed one; word level), heatmaps, Fig. 4
    corr = page.locator("table.correlations")
    assert corr.count() == 4
    header = _rows(corr.first, "thead")[0]
    assert header == ["intrinsic evaluator", "mr", "cr", "sst2", "trec", "n"]  # the paper's column order
    first = _rows(corr.first)
    assert {r[0] for r in first} >= {"er-sent-small (cos)", "er-sent-small (l2)", "sts-bands 0-2 (cos)"}
    assert all(r[-1] == "3" for r in first)  # three sentence models have downstream rows (the hostile one has none)
    assert page.locator("table.correlations td.best").count() >= 4  # a best cell in every column
    assert "meaningless: at most 3 models" in page.locator("#correlations ~ p.note").first.inner_text()
    images = _images(page)
    assert images and all(i["ok"] for i in images), images
    assert {i["src"] for i in images} == {
        "img/heatmap-sentence.png",
        "img/heatmap-sentence-no-postprocessed.png",
        "img/heatmap-word.png",
        "img/heatmap-word-no-postprocessed.png",
        "img/figure4-sentence-mr.png",  # the paper's Figure 4: MR and SST2
        "img/figure4-word-mr.png",
        "img/figure4-sentence-sst2.png",
        "img/figure4-word-sst2.png",
    }
    # provenance: this run, the model versions, the failures
    runs = _rows(page.locator("table.runs"))
    assert [r[0] for r in runs] == [run_id] and runs[0][3] == "ok"
    versions = {r[0]: r for r in _rows(page.locator("table.versions"))}
    assert "gensim" in versions["toy"][4] and "tokenlearn-static-model" in versions["static"][4]
    page.close()


@pytest.mark.slow
def test_model_page_lists_every_metric_and_the_hardest_pairs(browser, report, warehouse):
    wh, _ = warehouse
    page, problems = _open(browser, report / "index.html")
    page.locator("table.models a", has_text="static").first.click()
    page.wait_for_load_state("load")
    assert page.url.endswith("/models/static.html") and problems == []
    assert page.locator("h1").inner_text() == "static"
    n_metrics = wh.query("SELECT count(*) AS n FROM metrics WHERE model = 'static'").to_pylist()[0]["n"]
    assert page.locator("table.metrics tbody tr").count() == n_metrics
    primary = _rows(page.locator("table.primary"))
    assert {r[0] for r in primary} == {"er-sent-small", "sts-bands", "mr", "cr", "sst2", "trec"}
    worst = wh.query(
        "SELECT variant, query, positive, rank, top_neighbour FROM hardest_pairs WHERE model = 'static' "
        "AND task = 'er-sent-small' ORDER BY variant, worst"
    ).to_pylist()
    tables = page.locator("table.hardest")
    assert tables.count() == 2  # cos and l2
    for i, variant in enumerate(("cos", "l2")):
        shown = _rows(tables.nth(i))
        want = [w for w in worst if w["variant"] == variant][:5]
        # the hardest_pairs view's pairs in its order, and (cos) what the model put first
        assert [(r[2], r[4], r[5], r[7]) for r in shown] == [
            (f"{w['rank']:.1f}", w["query"], w["positive"], w["top_neighbour"] or "") for w in want
        ]
    assert all(r[7] for r in _rows(tables.nth(0)))  # the cos pass has neighbours
    assert page.locator("a", has_text="← report").count() == 1
    page.close()


@pytest.mark.slow
def test_hostile_ids_texts_and_errors_are_shown_as_text(browser, report):
    page, problems = _open(browser, report / "index.html")
    assert page.evaluate("document.scripts.length") == 0
    assert page.locator("iframe").count() == 0
    assert page.locator("table.models a", has_text=EVIL).count() == 1  # the id, as text, links to its page
    failures = _rows(page.locator("table.failures"))
    assert ["<iframe src=javascript:alert(4)>"] == [r[5] for r in failures if r[2] == EVIL]
    page.locator("table.models a", has_text=EVIL).click()
    page.wait_for_load_state("load")
    assert page.url.endswith(f"/models/{model_slug(EVIL)}.html") and "<" not in model_slug(EVIL)
    assert page.locator("h1").inner_text() == EVIL
    (pair,) = _rows(page.locator("table.hardest"))
    assert pair[4:6] == [EVIL_TEXT, "<b>bold?</b>"]
    assert "</pre><script>alert(3)</script>" in page.locator("pre").first.inner_text()
    assert page.evaluate("document.scripts.length") == 0 and page.locator("b", has_text="bold?").count() == 0
    assert problems == []  # no alert dialog, no CSP report of a blocked script, nothing failed to load
    page.close()


@pytest.mark.slow
def test_a_degenerate_units_numbers_are_flagged_on_its_model_page(browser, tmp_path):
    """A model whose vectors are all one vector (tests/bad_inputs/constant_vectors.txt), run for real: its page shows
    every number of its units beside "degenerate: <reason>" and says so above them; a real model's page does not."""
    bad = Path(__file__).parent / "bad_inputs"
    words = [line.split()[0] for line in (bad / "glove_clean.txt").read_text().splitlines()]
    (tmp_path / "sim.txt").write_text("".join(f"{words[i]} {words[-1 - i]} {i + 0.5}\n" for i in range(6)))
    sha = hashlib.sha256((tmp_path / "sim.txt").read_bytes()).hexdigest()
    (tmp_path / "cat.yaml").write_text(f"""
tasks:
  - {{id: sim, level: word, kind: word-similarity, version: "1", licence: test, source: test,
      files: {{pairs: sim.txt}}, sha256: {{pairs: {sha}}}}}
models:
  - {{id: clean, level: word, kind: word-vectors, format: glove-text,
      source: {{type: path, ref: {bad}/glove_clean.txt}}}}
  - {{id: constant, level: word, kind: word-vectors, format: glove-text,
      source: {{type: path, ref: {bad}/constant_vectors.txt}}}}
""")
    with data_folder(tmp_path):
        summary = run_catalog(tmp_path / "cat.yaml", tmp_path / "wh", executor="local")
    assert summary.ok and [o.model for o in summary.degenerate] == ["constant"]
    reason = summary.degenerate[0].degenerate
    res = CliRunner().invoke(app, ["report", "--warehouse", str(tmp_path / "wh"), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output

    page, problems = _open(browser, tmp_path / "out" / "models" / "constant.html")
    assert problems == []
    note = page.locator("p.degenerate").inner_text()
    assert note.startswith("Degenerate on 1 task(s)") and f"sim: {reason}" in note
    page.locator("summary", has_text="metrics").click()  # open "All N metrics"
    for table in ("table.primary", "table.metrics"):
        assert _rows(page.locator(table), "thead")[0][-2:] == ["value", "flag"]
        rows = _rows(page.locator(table))
        assert rows and all(r[-1] == f"degenerate: {reason}" for r in rows), rows
    assert page.locator("td.degenerate").count() == len(_rows(page.locator("table.primary"))) + len(
        _rows(page.locator("table.metrics"))
    )
    page.close()
    page, problems = _open(browser, tmp_path / "out" / "models" / "clean.html")
    assert problems == [] and page.locator(".degenerate").count() == 0
    assert _rows(page.locator("table.primary"), "thead")[0][-1] == "value"
    page.close()


def test_report_of_an_empty_warehouse_says_so(browser, tmp_path):
    wh = Warehouse(tmp_path / "wh").init()
    res = CliRunner().invoke(app, ["report", "--warehouse", str(wh.root), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    page, problems = _open(browser, tmp_path / "out" / "index.html")
    assert problems == [] and _images(page) == []
    assert "The warehouse has no results yet." in page.inner_text("body")
    assert "no correlations for level sentence" in page.inner_text("body")
    res = CliRunner().invoke(app, ["report", "--warehouse", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and not (tmp_path / "missing").exists()
