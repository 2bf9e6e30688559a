"""The bad-input corpus beyond vector files (tests/bad_inputs/inputs.yaml): degenerate models are flagged and kept off
the leaderboard, corrupt warehouse files are quarantined and their units recomputed (views meanwhile leave them out),
bad catalogs / warehouse paths / config files are one-line errors. Real files, real runs (local executor), real DuckDB.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from evalfarm.catalog.registry import load_catalog
from evalfarm.runner import run_catalog
from evalfarm.warehouse import Warehouse, verify_warehouse
from evalfarm.warehouse.current import drop_units
from tests.support.task_files import data_folder
from tests.support.warehouse_files import unit_file, unit_files

REPO = Path(__file__).resolve().parents[1]
BAD = Path(__file__).parent / "bad_inputs"
MANIFEST = yaml.safe_load((BAD / "inputs.yaml").read_text(encoding="utf-8"))
WORDS = [line.split()[0] for line in (BAD / "glove_clean.txt").read_text().splitlines()]
MODELS = {name: Path(name).stem for name, e in MANIFEST.items() if isinstance(e, dict) and e["as"] == "model"}
CLEAN = "glove_clean"


def _entries() -> list:
    return [
        pytest.param(name, e["as"], e["expect"], command, id=f"{name}:{e['as']}" + (f":{command}" if command else ""))
        for name, entry in MANIFEST.items()
        for e in (entry if isinstance(entry, list) else [entry])
        for command in e.get("commands", [None])
    ]


DEFAULT_COMMANDS = {"catalog": ["validate"], "warehouse": ["sql", "run"], "config": ["list"]}


def _commands(use: str, path: Path, command: str | None, tmp_path: Path) -> list[list[str]]:
    """The CLI calls that get ``path`` as --catalog / --warehouse (``command``: one of them, else the usual ones)."""
    p = str(path)
    calls = {
        "catalog": {
            "validate": ["catalog", "validate", "--catalog", p],
            "list": ["catalog", "list", "--catalog", p],
            "run": ["run", "--catalog", p, "--warehouse", str(tmp_path / "wh"), "--executor", "local"],
        },
        "warehouse": {
            "sql": ["sql", "--warehouse", p, "SELECT 1"],
            "run": ["run", "--warehouse", p, "--executor", "local", "--models", "glove-6b-50d"],
            "correlations": ["correlations", "--warehouse", p],
            "report": ["report", "--warehouse", p, "--out", str(tmp_path / "report")],
        },
        "config": {"list": ["catalog", "list"]},  # the file goes in EVALFARM_CONFIG
    }[use]
    return [calls[c] for c in ([command] if command else DEFAULT_COMMANDS[use])]


def test_every_entry_names_a_file_of_the_corpus() -> None:
    for name in MANIFEST:
        assert (BAD / name).exists(), name


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evalfarm.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80", **(env or {})},
        cwd=REPO,
        timeout=300,
    )


@pytest.fixture(scope="module")
def tiny_catalog(tmp_path_factory) -> Path:
    """Two tasks over glove_clean.txt's ten words (an EvalRank pool, a word-similarity set) and one model per
    `as: model` file of the corpus."""
    d = tmp_path_factory.mktemp("tiny")
    pairs = [("the", "of"), ("and", "to"), ("in", "is"), ("was", "for"), ("on", "as")]
    (d / "pairs.txt").write_text("".join(f"{a}\t{b}\n{b}\t{a}\n" for a, b in pairs))
    (d / "background.txt").write_text("\n".join(WORDS) + "\n")
    scores = [3.5, 1.0, 2.25, 0.5, 4.0, 3.0, 1.5, 2.0]
    (d / "sim.txt").write_text("".join(f"{WORDS[i]} {WORDS[-1 - i]} {s}\n" for i, s in enumerate(scores)))

    def sha(name: str) -> str:
        return hashlib.sha256((d / name).read_bytes()).hexdigest()

    models = "".join(
        f"  - {{id: {mid}, level: word, kind: word-vectors, format: glove-text, "
        f"source: {{type: path, ref: {BAD / name}}}}}\n"
        for name, mid in MODELS.items()
    )
    (d / "tiny.yaml").write_text(
        f"""
tasks:
  - {{id: tiny-evalrank, level: word, kind: evalrank, format: evalrank-word, version: "1", licence: test, source: test,
      files: {{pairs: pairs.txt, background: background.txt}},
      sha256: {{pairs: {sha("pairs.txt")}, background: {sha("background.txt")}}}}}
  - {{id: tiny-wordsim, level: word, kind: word-similarity, version: "1", licence: test, source: test,
      files: {{pairs: sim.txt}}, sha256: {{pairs: {sha("sim.txt")}}}}}
models:
{models}"""
    )
    return d / "tiny.yaml"


@pytest.fixture(scope="module")
def tiny_run(tiny_catalog, tmp_path_factory):
    wh = tmp_path_factory.mktemp("wh") / "wh"
    with data_folder(tiny_catalog.parent):  # the task files sit beside the catalog
        summary = run_catalog(load_catalog(tiny_catalog), wh, executor="local")
    assert summary.counts() == {"done": 2 * len(MODELS), "skipped": 0, "failed": 0}, summary.failed
    return wh, summary


def _q(wh: Path, sql: str) -> list[dict]:
    return Warehouse(wh).query(sql).to_pylist()


# -- the walk ----------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(("name", "use", "expect", "command"), _entries())
def test_bad_input(name: str, use: str, expect: dict, command: str | None, request, tmp_path: Path) -> None:
    if use == "model":
        _check_model(MODELS[name], expect["degenerate"], *request.getfixturevalue("tiny_run"))
    elif use in ("metrics-file", "ranks-file", "shard"):
        wh, _ = request.getfixturevalue("tiny_run")
        _check_quarantine(BAD / name, use, expect, wh, request.getfixturevalue("tiny_catalog"), tmp_path)
    else:
        env = {"EVALFARM_CONFIG": str(BAD / name)} if use == "config" else None
        for args in _commands(use, BAD / name, command, tmp_path):
            proc = _cli(*args, env=env)
            assert proc.returncode == expect["exit"], proc.stderr
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr  # one line, no traceback
            assert re.search(expect["error"], lines[0]), lines[0]
        assert list(tmp_path.iterdir()) == []  # a command that failed wrote nothing (no report, no warehouse)


def _check_model(model: str, reason: str | None, wh: Path, summary) -> None:
    rows = _q(wh, f"SELECT task, degenerate, degenerate_reason FROM metrics WHERE model = '{model}'")
    assert {r["task"] for r in rows} == {"tiny-evalrank", "tiny-wordsim"}
    quality = _q(wh, f"SELECT task, degenerate, reason FROM quality WHERE model = '{model}'")
    assert len(quality) == 2
    board = _q(wh, f"SELECT * FROM leaderboard WHERE model = '{model}'")
    flagged = _q(wh, f"SELECT degenerate, degenerate_reason FROM leaderboard_all WHERE model = '{model}'")
    said = {(o.task, o.degenerate) for o in summary.outcomes if o.model == model}
    if reason is None:
        assert not any(r["degenerate"] for r in rows + quality) and board and flagged
        assert said == {("tiny-evalrank", None), ("tiny-wordsim", None)}
        return
    for r in rows:  # every row of every unit, each with the reason
        assert r["degenerate"] and re.search(reason, r["degenerate_reason"]), r
    assert all(q["degenerate"] and re.search(reason, q["reason"]) for q in quality)
    assert board == [], "a degenerate model must not be on the leaderboard"
    assert flagged and all(f["degenerate"] for f in flagged)
    assert _q(wh, f"SELECT * FROM evalrank WHERE model = '{model}'") == []
    assert all(re.search(reason, why) for _, why in said)


@pytest.mark.slow
def test_a_degenerate_model_would_top_the_board_and_is_kept_off_it(tiny_run) -> None:
    """Issue 13.4 as reported: all-zero vectors tie everything, so optimistic ties rank every pair first (MRR 1.0,
    above the real model); leaderboard_all shows that, flagged; the leaderboard's best is the real model."""
    wh, _ = tiny_run
    where = "task = 'tiny-evalrank' AND ties = 'optimistic' AND variant = 'cos'"
    top = _q(wh, f"SELECT model, value, degenerate FROM leaderboard_all WHERE {where} AND position = 1")
    assert {"model": "zero_vectors", "value": 1.0, "degenerate": True} in top
    assert _q(wh, f"SELECT model FROM leaderboard WHERE {where}") == [{"model": CLEAN}]
    clean = _q(wh, f"SELECT value FROM leaderboard WHERE {where}")[0]["value"]
    assert clean < 1.0


def _check_quarantine(bad: Path, use: str, expect: dict, finished: Path, catalog: Path, tmp_path: Path) -> None:
    """A damaged file of a finished warehouse: left out of the views meanwhile, quarantined by the next run, and every
    unit of the run's model whose rows it held recomputed. A metrics file may hold many units' rows: the run's end
    keeps the table's current rows together (evalfarm.warehouse.current): the damage reaches every unit they hold."""
    wh = tmp_path / "wh"
    shutil.copytree(finished, wh)
    marker = unit_file(Warehouse(wh), "metrics", CLEAN, "tiny-evalrank")
    clean_units = {r["task"] for r in _q(wh, f"SELECT DISTINCT task FROM metrics WHERE model = '{CLEAN}'")}
    if use == "metrics-file":
        target = marker
    elif use == "ranks-file":
        target = unit_file(Warehouse(wh), "ranks", CLEAN, "tiny-evalrank")
    else:
        (target,) = (wh / "embeddings" / f"model={CLEAN}").rglob("*.parquet")
        (fp,) = {r["fingerprint"] for r in _q(wh, f"SELECT fingerprint FROM metrics WHERE model = '{CLEAN}' "
                                                  "AND task = 'tiny-evalrank'")}  # fmt: skip
        drop_units(Warehouse(wh), {(CLEAN, "tiny-evalrank", fp)})  # a unit that needs the shard's texts
    # the model's units whose rows the damaged file holds (a shard's: the unit dropped above, which needs it)
    held = _units_of(target) if use == "metrics-file" else {(CLEAN, "tiny-evalrank")}
    lost = {t for m, t in held if m == CLEAN}
    (named,) = {m for m, _ in held} if len({m for m, _ in held}) == 1 else {None}  # the failure row's model
    elsewhere = use != "metrics-file" or any(f != target for f in unit_files(Warehouse(wh), "metrics", CLEAN))
    shutil.copyfile(bad, target)
    # queries still work meanwhile (a truncated file used to break every view, even SELECT 1), over the other files
    w = Warehouse(wh)
    assert w.query("SELECT 1 AS one").to_pylist() == [{"one": 1}]
    n = w.query(f"SELECT count(*) AS n FROM leaderboard WHERE model = '{CLEAN}'").to_pylist()[0]["n"]
    assert (n > 0) == elsewhere, n
    if expect.get("left_out"):
        assert str(target) in {q.path for q in w.excluded}
    if "views_warn" in expect:
        proc = _cli("sql", "--warehouse", str(wh), "SELECT count(*) AS n FROM metrics")
        assert proc.returncode == 0 and re.search(expect["views_warn"], proc.stderr), proc.stderr
        assert str(target) in proc.stderr
    with data_folder(catalog.parent):
        summary = run_catalog(load_catalog(catalog), wh, executor="local", models=[CLEAN])
    moved = {q.path: q for q in summary.quarantined}
    assert str(target) in moved, summary.quarantined
    q = moved[str(target)]
    assert re.search(expect["quarantined"], q.reason), q.reason
    assert Path(q.moved_to).read_bytes() == bad.read_bytes()
    assert Path(q.moved_to + ".why.txt").read_text().startswith(str(target.relative_to(wh)))
    assert str(wh / "quarantine" / summary.run_id) in q.moved_to
    # the units were recomputed, not skipped: their files are whole again and nothing is left out of the views
    assert summary.counts() == {"done": len(lost), "skipped": len(clean_units - lost), "failed": 0}
    w = Warehouse(wh)
    assert w.scan(quarantine=False) == [] and verify_warehouse(w).ok  # every file of every table whole again
    assert w.query(f"SELECT count(*) AS n FROM metrics WHERE model = '{CLEAN}'").to_pylist()[0]["n"] > 0
    assert w.excluded == ()
    rows = _q(wh, "SELECT model, stage, detail FROM failures WHERE stage = 'quarantine'")
    assert {"model": named, "stage": "quarantine", "detail": str(target)} in rows
    with data_folder(catalog.parent):
        again = run_catalog(load_catalog(catalog), wh, executor="local", models=[CLEAN])
    assert again.counts() == {"done": 0, "skipped": len(clean_units), "failed": 0} and again.quarantined == []


def _units_of(path: Path) -> set[tuple[str, str]]:
    """(model, task) of the units whose rows the metrics file ``path`` holds (read before it is damaged)."""
    t = pq.read_table(path, columns=["model", "task"])
    return set(zip(t.column("model").to_pylist(), t.column("task").to_pylist(), strict=True))


@pytest.mark.slow
def test_a_corrupt_shard_found_while_reading_is_quarantined_and_its_texts_count_as_missing(tiny_run, tmp_path):
    """The text store verifies what it reads, whoever reads it (a worker between the driver's scan and its read)."""
    from evalfarm.embed import TextStore

    wh = tmp_path / "wh"
    shutil.copytree(tiny_run[0], wh)
    (shard,) = (wh / "embeddings" / f"model={CLEAN}").rglob("*.parquet")
    shutil.copyfile(BAD / "truncated.parquet", shard)
    store = TextStore(Warehouse(wh), CLEAN, shard.parent.name.removeprefix("store="))
    assert store.missing(WORDS) == WORDS
    assert [q.path for q in store.quarantined] == [str(shard)] and not shard.exists()
    assert "unreadable text-store shard" in store.quarantined[0].reason
