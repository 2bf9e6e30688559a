"""The warehouse as Delta tables: batched commits, snapshots and time travel, history and diff, compaction, retention,
concurrency, migration from layout 1, another engine reading the same rows, and readers that open regular files only.

Real components throughout: delta-rs commits on a real folder, DuckDB over the snapshot's Parquet files, a real
in-process run of a toy catalog, real processes racing to commit; the S3 variant (moto on loopback) is in
tests/test_object_store.py.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalfarm.warehouse import CommitBatcher, LegacyWarehouse, Warehouse, table_schemas, verify_warehouse
from evalfarm.warehouse.base import walk_inside
from evalfarm.warehouse.history import diff_runs, moved, parse_time, resolve_as_of
from evalfarm.warehouse.maintenance import compact, parse_duration, vacuum
from evalfarm.warehouse.migrate import migrate
from evalfarm.warehouse.pins import live_pins, pinned

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _metric(run: str, model: str, task: str, value: float, *, fp: str | None = None, at: datetime = T0,
            spec: str = "h", metric: str = "mrr", **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {"run_id": run, "model": model, "task": task, "scorer": "evalrank", "subset": "all", "variant": "cos",
            "ties": "optimistic", "metric": metric, "value": value, "is_primary": True, "higher_is_better": True,
            "fingerprint": fp or f"fp-{model}-{task}-{spec}", "spec_hash": spec, "task_checksum": "c",
            "scorer_version": "1", "params": "{}", "created_at": at, **extra}  # fmt: skip


def _run(wh: Warehouse, run: str, at: datetime, rows: list[dict[str, Any]]) -> None:
    """A run as the runner records it: its start, its units' rows, its end with the snapshot of every table."""
    wh.write_run_event(run, "start", status="running")
    for r in rows:
        wh.write("metrics", [r], unit=(r["model"], r["task"], r["fingerprint"]))
    versions = {t: wh.tables.snapshot(t).version for t in table_schemas() if t != "runs"}
    wh.write("runs", [{"run_id": run, "event": "end", "at": at, "status": "ok", "snapshot": json.dumps(versions)}])


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "wh").init()


# -- layout -------------------------------------------------------------------------------------------------------
def test_every_table_is_a_delta_table_with_its_schema_and_the_layout_version(wh):
    from deltalake import DeltaTable

    from evalfarm.warehouse import SCHEMA_VERSION

    assert json.loads((wh.root / "warehouse.json").read_text())["schema_version"] == SCHEMA_VERSION == 4
    assert wh.schema_version() == SCHEMA_VERSION
    assert not (wh.root / "tables").exists()  # a table is created by its first write; until then it reads as empty
    assert wh.query("SELECT count(*) AS n FROM metrics").to_pylist() == [{"n": 0}]
    for name, schema in table_schemas().items():
        wh.write(name, [{"run_id": "r"}])
        dt = DeltaTable(str(wh.root / "tables" / name))
        assert dt.protocol().min_reader_version == 1  # no deletion vectors, no column mapping
        assert pa.schema(dt.schema().to_arrow()).names == schema.names


def test_a_query_draws_no_progress_bar_on_stdout(wh):
    """DuckDB draws one on stdout for any query past 2 s, into a pipe too: it landed inside the benchmark's JSON
    answer at 100 models, and would land inside `evalfarm sql --format csv > file`."""
    got = wh.query("SELECT current_setting('enable_progress_bar') AS bar").to_pylist()
    assert got == [{"bar": False}]


def test_a_table_gains_the_columns_a_newer_evalfarm_adds_without_losing_rows(wh, monkeypatch):
    from evalfarm.warehouse import schemas

    wh.write("failures", [{"run_id": "r", "error": "x"}])
    wider = schemas.CORE_SCHEMAS["failures"].append(pa.field("hint", pa.string()))
    monkeypatch.setitem(schemas.CORE_SCHEMAS, "failures", wider)
    again = Warehouse(wh.root).init()
    assert again.tables.schema("failures").names[-1] == "hint"
    again.write("failures", [{"run_id": "r2", "error": "y", "hint": "z"}])
    rows = again.query("SELECT run_id, error FROM failures ORDER BY run_id").to_pylist()
    assert rows == [{"run_id": "r", "error": "x"}, {"run_id": "r2", "error": "y"}]


# -- batches ------------------------------------------------------------------------------------------------------
class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_batch_commits_by_units_or_age_and_releases_leases_after_its_commit(wh):
    clock = _Clock()
    wh.deferred = True
    batcher = CommitBatcher(wh, "r1", max_units=3, max_seconds=10.0, clock=clock)
    released: list[str] = []
    for i in range(2):
        f = wh.write("metrics", [_metric("r1", f"m{i}", "t", 0.5)], unit=(f"m{i}", "t", f"fp-m{i}-t-h"))
        batcher.add(wh.take_pending(), units=1)
        batcher.after_commit(lambda i=i: released.append(f"m{i}"))
        assert f.table == "metrics"
    assert not batcher.maybe_flush() and wh.tables.snapshot("metrics").version == 0 and not released
    clock.t = 10.0  # the oldest waited max_seconds: due
    assert batcher.maybe_flush()
    assert released == ["m0", "m1"] and len(wh.tables.snapshot("metrics").files) == 2
    for i in range(3):  # three units: due by count
        wh.write("metrics", [_metric("r1", f"n{i}", "t", 0.5)])
        batcher.add(wh.take_pending(), units=1)
    assert batcher.due() and batcher.maybe_flush() and batcher.batches == 2
    history = wh.tables.history("metrics")
    assert [h.get("evalfarm.batch") for h in history[:2]] == [2, 1] and history[0]["evalfarm.run_id"] == "r1"


def test_a_batch_commits_the_manifest_first_and_the_metrics_last(wh):
    wh.deferred = True
    for table, row in [("metrics", _metric("r1", "m", "t", 1.0)), ("quality", {"run_id": "r1", "model": "m",
                       "task": "t", "fingerprint": "fp-m-t-h"})]:  # fmt: skip
        wh.write(table, [row], unit=("m", "t", "fp-m-t-h"))
    order: list[str] = []
    commit = wh.tables.commit

    def spy(table: str, files: Any, **kw: Any) -> None:
        order.append(table)
        commit(table, files, **kw)

    wh.tables.commit = spy  # type: ignore[method-assign]
    wh.commit(wh.take_pending(), run_id="r1", batch=1)
    assert order == ["manifests", "quality", "metrics"]


def test_a_failed_commit_keeps_its_files_for_the_next_try_and_their_units_undone(wh, monkeypatch):
    from evalfarm.plan import Unit
    from evalfarm.warehouse import WarehouseWriteError

    unit = Unit("m", "t", "s", "word", "h", "c", "{}", "fp-m-t-h")
    wh.deferred = True
    batcher = CommitBatcher(wh, "r1")
    wh.write("metrics", [_metric("r1", "m", "t", 1.0)], unit=("m", "t", "fp-m-t-h"))
    batcher.add(wh.take_pending(), units=1)
    real = wh.tables.commit
    monkeypatch.setattr(wh.tables, "commit", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "disk full")))
    with pytest.raises((WarehouseWriteError, OSError)):
        batcher.flush()
    assert not wh.done([unit])[0] and len(batcher.files) == 1
    monkeypatch.setattr(wh.tables, "commit", real)
    batcher.flush()
    assert wh.done([unit]) == [True]


# -- snapshots, time travel, history ------------------------------------------------------------------------------
@pytest.fixture
def three_runs(wh: Warehouse) -> Warehouse:
    """r1 computes m and n; r2 skips them (nothing new); r3 recomputes m under a changed spec and adds model o."""
    day2 = T0 + timedelta(days=2)
    _run(wh, "r1", T0 + timedelta(hours=1), [_metric("r1", "m", "t", 0.5, at=T0), _metric("r1", "n", "t", 0.4, at=T0)])
    _run(wh, "r2", T0 + timedelta(days=1, hours=1), [])
    _run(wh, "r3", day2 + timedelta(hours=1), [_metric("r3", "m", "t", 0.6, spec="h2", at=day2),
                                              _metric("r3", "o", "t", 0.7, at=day2)])  # fmt: skip
    return wh


def _rows(wh: Warehouse, sql: str, **kw: Any) -> list[dict[str, Any]]:
    return wh.query(sql, **kw).to_pylist()


def test_as_of_a_run_reads_each_table_at_the_versions_its_end_recorded(three_runs):
    wh = three_runs
    q = "SELECT model, value FROM metrics ORDER BY model"
    assert _rows(wh, q, as_of="r1") == [{"model": "m", "value": 0.5}, {"model": "n", "value": 0.4}]
    assert _rows(wh, q, as_of="r2") == _rows(wh, q, as_of="r1")
    assert _rows(wh, q) == [{"model": "m", "value": 0.6}, {"model": "n", "value": 0.4}, {"model": "o", "value": 0.7}]
    assert _rows(wh, "SELECT run_id, status FROM runs", as_of="r1") == [{"run_id": "r1", "status": "ok"}]
    point = resolve_as_of(wh, "r2")
    assert point.run_id == "r2" and point.versions is not None and point.versions["metrics"] is not None


def test_as_of_a_time_reads_the_versions_committed_by_then(three_runs):
    wh = three_runs
    assert _rows(wh, "SELECT count(*) AS n FROM metrics", as_of=datetime(2020, 1, 1, tzinfo=UTC)) == [{"n": 0}]
    assert _rows(wh, "SELECT count(*) AS n FROM metrics", as_of=datetime.now(UTC)) == [{"n": 3}]
    with pytest.raises(ValueError, match="not a run id of this warehouse .* nor a time"):
        wh.query("SELECT 1", as_of="yesterday-ish")
    assert parse_time("2026-11-28") == datetime(2026, 11, 28, tzinfo=UTC)
    assert parse_time("2026-11-28T03:00Z") == datetime(2026, 11, 28, 3, tzinfo=UTC)


def test_the_history_view_places_every_value_in_every_runs_state(three_runs):
    rows = _rows(three_runs, "SELECT run_id, model, value, computed_by FROM history ORDER BY run_id, model")
    assert rows == [
        {"run_id": "r1", "model": "m", "value": 0.5, "computed_by": "r1"},
        {"run_id": "r1", "model": "n", "value": 0.4, "computed_by": "r1"},
        {"run_id": "r2", "model": "m", "value": 0.5, "computed_by": "r1"},  # r2 computed nothing: r1's values
        {"run_id": "r2", "model": "n", "value": 0.4, "computed_by": "r1"},
        {"run_id": "r3", "model": "m", "value": 0.6, "computed_by": "r3"},
        {"run_id": "r3", "model": "n", "value": 0.4, "computed_by": "r1"},
        {"run_id": "r3", "model": "o", "value": 0.7, "computed_by": "r3"},
    ]


def test_changes_and_run_diff_say_why_a_value_moved(three_runs):
    wh = three_runs
    changes = _rows(wh, "SELECT run_id, model, previous_value, value, reason FROM changes ORDER BY run_id, model")
    assert changes == [
        {"run_id": "r1", "model": "m", "previous_value": None, "value": 0.5, "reason": "new model"},
        {"run_id": "r1", "model": "n", "previous_value": None, "value": 0.4, "reason": "new model"},
        {"run_id": "r3", "model": "m", "previous_value": 0.5, "value": 0.6, "reason": "spec changed"},
        {"run_id": "r3", "model": "o", "previous_value": None, "value": 0.7, "reason": "new model"},
    ]
    assert diff_runs(wh, "r1", "r2").rows == []
    d = diff_runs(wh)  # the two newest runs that ended: r2 -> r3
    assert (d.run_a, d.run_b) == ("r2", "r3")
    assert [(r["model"], r["reason"], r["value_a"], r["value_b"]) for r in d.rows] == [
        ("o", "new model", None, 0.7),
        ("m", "spec changed", 0.5, 0.6),
    ]
    assert d.counts() == {"new model": 1, "spec changed": 1} and not d.nondeterministic


def test_a_value_that_moves_under_an_unchanged_fingerprint_is_nondeterminism(wh):
    _run(wh, "r1", T0 + timedelta(hours=1), [_metric("r1", "m", "t", 0.5, at=T0)])
    _run(wh, "r2", T0 + timedelta(days=1, hours=1), [_metric("r2", "m", "t", 0.5 + 1e-12, at=T0 + timedelta(days=1))])
    assert diff_runs(wh, "r1", "r2").rows == []  # below the tolerance: the same number summed in another order
    _run(wh, "r3", T0 + timedelta(days=2, hours=1), [_metric("r3", "m", "t", 0.52, at=T0 + timedelta(days=2))])
    d = diff_runs(wh, "r2", "r3")
    assert [r["reason"] for r in d.nondeterministic] == ["nondeterminism"]
    assert _rows(wh, "SELECT reason FROM changes WHERE run_id = 'r3'") == [{"reason": "nondeterminism"}]
    assert moved(1.0, 1.0 + 1e-10, 1e-9) is False and moved(1.0, 1.1, 1e-9) and moved(None, 1.0, 0.0)
    assert moved(float("nan"), float("nan"), 0.0) is False and moved(float("nan"), 1.0, 0.0)


@pytest.mark.slow
def test_the_diff_command_prints_json_and_exits_1_on_nondeterminism(wh):
    _run(wh, "r1", T0 + timedelta(hours=1), [_metric("r1", "m", "t", 0.5, at=T0)])
    _run(wh, "r2", T0 + timedelta(days=1), [_metric("r2", "m", "t", 0.6, at=T0 + timedelta(hours=20))])
    cmd = [sys.executable, "-m", "evalfarm", "diff", "--warehouse", str(wh.root), "--format", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    body = json.loads(proc.stdout)
    assert body["run_a"] == "r1" and body["counts"] == {"nondeterminism": 1}
    assert "moved under an unchanged fingerprint" in proc.stderr
    proc = subprocess.run([*cmd[:6], "r1", "r1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "nothing moved" in proc.stderr


# -- a real run ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def toy_catalog(tmp_path_factory, toy_glove) -> Path:
    d = tmp_path_factory.mktemp("cat")
    (d / "toy.yaml").write_text(f"""
include: [{REPO / "catalog" / "tasks.yaml"}]
tasks: [evalrank-word, wordsim-rg-65, wordsim-mc-30]
models:
  - {{id: toy, level: word, kind: word-vectors, format: glove-text, source: {{type: path, ref: {toy_glove}}}}}
  - {{id: toy-abtt1, level: word, base: toy, postprocess: {{method: abtt, d: 1}}}}
""")
    return d / "toy.yaml"


@pytest.mark.slow
def test_a_second_run_is_a_second_snapshot_with_an_empty_diff_and_a_spec_change_is_a_real_one(toy_catalog, tmp_path):
    from evalfarm.runner import run_catalog

    root = tmp_path / "wh"
    first = run_catalog(toy_catalog, root, executor="local")
    second = run_catalog(toy_catalog, root, executor="local")
    assert second.counts() == {"done": 0, "skipped": 6, "failed": 0}
    wh = Warehouse(root)
    d = diff_runs(wh)
    assert (d.run_a, d.run_b) == (first.run_id, second.run_id) and d.rows == []
    end = wh.query(f"SELECT snapshot FROM run_events WHERE run_id = '{first.run_id}' AND event = 'end'")
    assert json.loads(end.column(0)[0].as_py())["metrics"] is not None  # the run's snapshot: every table's version
    changed = tmp_path / "changed.yaml"
    changed.write_text(toy_catalog.read_text().replace("d: 1}", "d: 2}"))
    third = run_catalog(changed, root, executor="local")
    assert third.counts()["done"] == 3  # toy-abtt1's three units: its spec changed
    d = diff_runs(wh)
    assert {r["reason"] for r in d.rows} == {"spec changed"} and {r["model"] for r in d.rows} == {"toy-abtt1"}
    # the nightly's end summary says what moved since the run before it (what --notify receives)
    assert second.report["moved"] == {"since": first.run_id, "counts": {}, "nondeterministic": 0, "changes": []}
    moved = third.report["moved"]
    assert moved["since"] == second.run_id and moved["counts"] == {"spec changed": len(d.rows)}
    assert {c["model"] for c in moved["changes"]} == {"toy-abtt1"}
    board = "SELECT model, value FROM metrics WHERE task = 'evalrank-word' AND metric = 'mrr' AND variant = 'cos' AND ties = 'optimistic' ORDER BY model"  # noqa: E501
    assert wh.query(board, as_of=first.run_id).to_pylist() != wh.query(board).to_pylist()
    assert wh.query(board, as_of=second.run_id).to_pylist() == wh.query(board, as_of=first.run_id).to_pylist()
    assert verify_warehouse(wh, strict=True).ok


KILLED_RUN = """
import sys
from evalfarm.runner import run_catalog
run_catalog(sys.argv[1], sys.argv[2], executor="local")
"""


@pytest.mark.slow
def test_a_killed_run_keeps_what_it_committed_and_the_same_command_resumes(toy_catalog, tmp_path):
    from evalfarm.runner import run_catalog

    root = tmp_path / "wh"
    env = {**os.environ, "EVALFARM_COMMIT_UNITS": "1"}  # a batch per unit: what a long nightly does every minute
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(toy_catalog), str(root)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 240
    committed = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if (root / "tables" / "metrics" / "_delta_log").is_dir():
            committed = len(Warehouse(root).tables.snapshot("metrics").files)
            if committed >= 2:
                break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert committed >= 2, "the run ended before two units were committed"
    wh = Warehouse(root)
    kept = wh.query("SELECT count(DISTINCT fingerprint) AS n FROM metrics").to_pylist()[0]["n"]
    assert kept >= 2
    summary = run_catalog(toy_catalog, root, executor="local")
    assert summary.counts()["skipped"] == kept and summary.counts()["failed"] == 0
    assert wh.query("SELECT count(DISTINCT fingerprint) AS n FROM metrics").to_pylist() == [{"n": 6}]
    # the killed run wrote no end event; its staged-but-uncommitted files are never read, and verify holds
    assert verify_warehouse(wh).ok


# -- concurrency ---------------------------------------------------------------------------------------------------
def _append(args: tuple[str, int, int]) -> None:
    root, writer, n = args
    wh = Warehouse(root)
    for i in range(n):
        wh.write("units", [{"run_id": f"w{writer}", "model": f"m{i}", "task": "t", "stage": "score", "seconds": 1.0}])


def test_a_log_entry_renamed_away_while_a_reader_walks_the_log_is_left_out_not_fatal(wh):
    """delta-rs stages each commit as ``NNN.json#k`` and renames it into place; a reader listing the log beside it
    meets names gone by the time it looks at them. The walk leaves them out (CI once failed a writer's ``ensure``
    on exactly that, in the four-writer test below, which cannot make the race happen on demand: this does)."""
    wh.write("units", [{"run_id": "r", "model": "m", "task": "t", "stage": "score", "seconds": 1.0}])
    log = wh.root / "tables" / "units" / "_delta_log"
    staged = log / "00000000000000000099.json#1"
    staged.write_text("{}")
    renamed: list[str] = []

    def rename_the_staged_commit_once(name: str) -> bool:
        if not renamed:  # the writer renames after the reader listed the folder, before it looked at each entry
            os.rename(staged, log / "staged-elsewhere")
            renamed.append(name)
        return name == "staged-elsewhere"

    seen = [e.path for e in walk_inside(str(wh.root), "tables/units/_delta_log", skip=rename_the_staged_commit_once)]
    assert renamed and staged.name not in seen and "00000000000000000000.json" in seen
    (log / "staged-elsewhere").unlink()
    wh.tables._check_log("units")  # the reader's own check of the log walks the same way


@pytest.mark.slow
def test_concurrent_writers_lose_and_duplicate_no_row(wh):
    """Four processes commit 15 times each to one table: Delta's exclusive creation of the next log entry makes each
    commit land once, whoever wins each race (the losers rebase and retry)."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        pool.map(_append, [(str(wh.root), w, 15) for w in range(4)])
    rows = wh.query("SELECT run_id, model FROM units").to_pylist()
    assert len(rows) == 60 and len({(r["run_id"], r["model"]) for r in rows}) == 60
    assert wh.tables.snapshot("units").version == 60


# -- compaction and retention ----------------------------------------------------------------------------------------
def test_compaction_merges_small_files_into_one_sorted_by_model_with_the_same_rows(wh):
    for i in range(12):
        wh.write("metrics", [_metric(f"r{i}", f"m{11 - i:02d}", "t", i / 10)], unit=(f"m{11 - i:02d}", "t", "fp"))
    before = sorted(map(str, wh.query("SELECT * FROM metrics_history").to_pylist()))
    done = compact(wh, tables=["metrics"])
    assert [(c.files_before, c.files_after, c.merged) for c in done] == [(12, 1, 12)]
    (f,) = wh.tables.snapshot("metrics").files
    assert pq.read_table(f.path).column("model").to_pylist() == [f"m{i:02d}" for i in range(12)]
    assert sorted(map(str, wh.query("SELECT * FROM metrics_history").to_pylist())) == before
    result = verify_warehouse(wh, strict=True)
    assert result.ok and result.checked == len([f for t in table_schemas() if t != "manifests"
                                                for f in wh.tables.snapshot(t).files])  # fmt: skip
    from evalfarm.warehouse.manifests import manifest_index

    units = manifest_index(wh)[wh.relative(f.path)].units
    assert len(units) == 12 and units[0][0] == "m00"  # the compacted file still names its units (quarantine)
    assert wh.tables.history("metrics")[0]["operation"] == "WRITE"  # an append-mode transaction, dataChange false


def test_compaction_beside_a_writer_loses_nothing(wh):
    for i in range(6):
        wh.write("units", [{"run_id": "a", "model": f"m{i}"}])
    dt_before = wh.tables.snapshot("units")
    wh.write("units", [{"run_id": "b", "model": "late"}])  # lands between the compaction's snapshot and its commit
    from evalfarm.warehouse.rewrite import rewrite

    merged = pa.concat_tables([wh.typed("units", wh.read_table(f.path)) for f in dt_before.files])
    rewrite(wh, "units", [merged], list(dt_before.files), operation="compact", data_change=False)
    assert sorted(wh.query("SELECT model FROM units").column(0).to_pylist()) == sorted(
        [f"m{i}" for i in range(6)] + ["late"]
    )


def test_vacuum_keeps_what_the_retention_and_a_pinned_reader_need_and_refuses_too_short_a_keep(wh):
    for i in range(4):
        wh.write("units", [{"run_id": "a", "model": f"m{i}"}])
    orphan = wh.root / "tables" / "units" / "data" / "killed" / "x.parquet"  # a killed worker's staged file
    orphan.parent.mkdir(parents=True)
    pq.write_table(pa.table({"run_id": ["x"]}), orphan)
    old_version = wh.tables.snapshot("units").version
    compact(wh, tables=["units"])
    with pytest.raises(ValueError, match="shorter than"):
        vacuum(wh, keep=timedelta(minutes=5))
    assert vacuum(wh, keep=timedelta(hours=1), dry_run=False) and orphan.exists()  # all younger than an hour
    assert all(os.path.isfile(f.path) for f in wh.tables.snapshot("units", old_version).files)  # within the hour

    # two hours later: the compacted-away files and the orphan go, unless pinned
    later = time.time() + 7200
    with pinned(wh, as_of=None) as versions:  # a reader of the newest snapshot: nothing of it goes
        assert live_pins(wh)["units"] == {versions["units"]}
    assert live_pins(wh) == {}  # released when the reader is done
    pin_old = wh.root / "_readers" / "old.json"
    pin_old.parent.mkdir(exist_ok=True)
    pin_old.write_text(json.dumps({"versions": {"units": old_version}, "expires": time.time() + 60}))
    (kept,) = [v for v in vacuum(wh, keep=timedelta(hours=1), now=later) if v.table == "units"]
    assert kept.pinned == [old_version] and kept.files == ["data/killed/x.parquet"] and not orphan.exists()
    assert sorted(wh.query("SELECT model FROM units", as_of=None).column(0).to_pylist()) == [f"m{i}" for i in range(4)]
    pin_old.unlink()
    (gone,) = [v for v in vacuum(wh, keep=timedelta(hours=1), now=later) if v.table == "units"]
    assert len(gone.files) == 4  # the four small files only the old, now unpinned, version needed
    assert sorted(wh.query("SELECT model FROM units").column(0).to_pylist()) == [f"m{i}" for i in range(4)]
    assert parse_duration("90d") == timedelta(days=90) and parse_duration("12h") == timedelta(hours=12)
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")


# -- migration from layout 1 ------------------------------------------------------------------------------------------
def _legacy(root: Path) -> Path:
    """A layout-1 warehouse as evalfarm wrote it before the table format: a typed empty `_schema.parquet` per table,
    one file per unit and table under model=/task= folders, per-run files for runs and units."""
    from evalfarm.warehouse import empty_table

    for name, schema in table_schemas().items():
        (root / "tables" / name).mkdir(parents=True)
        pq.write_table(empty_table(schema), root / "tables" / name / "_schema.parquet")
    for i, (model, task) in enumerate([("m", "t"), ("m", "u"), ("n", "t")]):
        unit = root / "tables" / "metrics" / f"model={model}" / f"task={task}"
        unit.mkdir(parents=True)
        rows = [_metric("r1", model, task, 0.1 * i, fp=f"fp{i}", metric=m) for m in ("mrr", "hits@1")]
        pq.write_table(pa.Table.from_pylist(rows), unit / f"fp{i}.parquet")  # an older file: fewer columns than today
    (root / "tables" / "runs" / "r1.start.parquet").parent.mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist([{"run_id": "r1", "event": "start", "at": T0}]),
                   root / "tables" / "runs" / "r1.start.parquet")  # fmt: skip
    (root / "embeddings" / "model=m" / "store=s").mkdir(parents=True)
    pq.write_table(pa.table({"text": ["a"]}), root / "embeddings" / "model=m" / "store=s" / "x.parquet")
    return root


def test_a_layout_1_warehouse_is_read_as_it_is_and_refused_for_writes(tmp_path, toy_catalog):
    from typer.testing import CliRunner

    from evalfarm.cli import app

    old = Warehouse(_legacy(tmp_path / "old"))
    assert old.layout() == "legacy" and old.schema_version() == 1
    assert old.query("SELECT count(*) AS n FROM metrics").to_pylist() == [{"n": 6}]
    with pytest.raises(LegacyWarehouse, match="evalfarm warehouse migrate"):
        old.init()
    got = CliRunner().invoke(app, ["run", "--catalog", str(toy_catalog), "--warehouse", str(old.root), "--executor",
                                   "local"])  # fmt: skip
    assert got.exit_code == 2 and f"evalfarm warehouse migrate {old.root}" in got.output
    assert old.layout() == "legacy"  # nothing written


@pytest.mark.parametrize("in_place", [True, False])
def test_migration_copies_every_row_identically(tmp_path, in_place):
    src = _legacy(tmp_path / "old")
    before = {t: sorted(map(str, Warehouse(src).query(f"SELECT * FROM {v}").to_pylist()))
              for t, v in [("metrics", "metrics_history"), ("runs", "run_events")]}  # fmt: skip
    result = migrate(src, None if in_place else tmp_path / "new")
    new = Warehouse(src if in_place else tmp_path / "new")
    assert result.identical and result.rows["metrics"] == 6 and new.layout() == "delta"
    for t, v in [("metrics", "metrics_history"), ("runs", "run_events")]:
        assert sorted(map(str, new.query(f"SELECT * FROM {v}").to_pylist())) == before[t]
    assert (new.root / "embeddings" / "model=m" / "store=s" / "x.parquet").exists()
    assert verify_warehouse(new, strict=True).ok
    if in_place:
        assert result.moved_to is not None and not list((src / "tables" / "metrics").glob("model=*"))
    else:
        assert Warehouse(src).layout() == "legacy"  # the source is untouched


def test_an_interrupted_migration_is_said_and_started_over(tmp_path, monkeypatch):
    from evalfarm.warehouse import migrate as migration

    src = _legacy(tmp_path / "old")
    monkeypatch.setattr(migration, "_park_legacy", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        migrate(src)
    assert Warehouse(src).layout() == "migrating"
    with pytest.raises(LegacyWarehouse, match="half-way through a migration"):
        Warehouse(src).query("SELECT 1")
    monkeypatch.undo()
    assert migrate(src).identical
    assert Warehouse(src).query("SELECT count(*) AS n FROM metrics").to_pylist() == [{"n": 6}]


# -- another engine ---------------------------------------------------------------------------------------------------
def test_delta_rs_own_scan_and_its_sql_engine_read_the_same_rows_as_the_views(three_runs):
    """Readable by other engines: delta-rs's own scan (and its DataFusion SQL) returns the rows DuckDB's views read."""
    from deltalake import DeltaTable, QueryBuilder

    wh = three_runs
    dt = DeltaTable(str(wh.root / "tables" / "metrics"))
    theirs = pa.table(dt.to_pyarrow_table()).select(["run_id", "model", "value"]).to_pylist()
    ours = wh.query("SELECT run_id, model, value FROM metrics_history").to_pylist()
    key = lambda r: (r["run_id"], r["model"])  # noqa: E731
    assert sorted(theirs, key=key) == sorted(ours, key=key)
    got = QueryBuilder().register("metrics", dt).execute("SELECT count(*) AS n FROM metrics WHERE run_id = 'r3'")
    assert pa.table(got.read_all()).column(0).to_pylist() == [2]
    assert DeltaTable(str(wh.root / "tables" / "metrics"), version=1).to_pyarrow_table().num_rows == 1  # r1's first


# -- readers open regular files only ----------------------------------------------------------------------------------
def test_a_symlink_planted_over_a_data_file_is_refused_not_followed(wh, tmp_path):
    wh.write("metrics", [_metric("r1", "m", "t", 0.5)], unit=("m", "t", "fp"))
    (f,) = wh.tables.snapshot("metrics").files
    secret = tmp_path / "secret.parquet"
    pq.write_table(pa.table({"model": ["stolen"]}), secret)
    os.unlink(f.path)
    os.symlink(secret, f.path)
    assert wh.query("SELECT model FROM metrics_history").to_pylist() == []  # left out of the view, never followed
    (q,) = wh.excluded
    assert q.path == f.path and "not a regular file" in q.reason
    findings = verify_warehouse(wh).findings
    assert [x.problem for x in findings if x.path.startswith("tables/metrics/")] == ["damaged"]


def test_a_fifo_planted_in_a_table_or_its_log_never_hangs_a_reader(wh):
    wh.write("metrics", [_metric("r1", "m", "t", 0.5)], unit=("m", "t", "fp"))
    (f,) = wh.tables.snapshot("metrics").files
    os.unlink(f.path)
    os.mkfifo(f.path)
    t0 = time.monotonic()
    assert wh.query("SELECT model FROM metrics_history", timeout_s=30).to_pylist() == []
    assert "not a regular file" in wh.excluded[0].reason
    assert verify_warehouse(wh).findings[0].problem == "damaged"
    wh.write_run_event("r1", "start")  # the runs table, created by its first write
    log = wh.root / "tables" / "runs" / "_delta_log" / "00000000000000000099.json"
    os.mkfifo(log)
    assert wh.query("SELECT * FROM runs", timeout_s=30).num_rows == 0  # the damaged table is left out of the views
    (damaged,) = wh.damaged
    assert damaged.table == "runs" and "not a regular file" in str(damaged)
    assert wh.query("SELECT model FROM metrics_history", timeout_s=30).num_rows == 0  # the others stay readable
    assert time.monotonic() - t0 < 30


def test_the_report_shows_each_models_primary_metrics_across_runs(wh, tmp_path):
    from evalfarm.analysis.report import build_report, model_slug

    day2, real = T0 + timedelta(days=2), {"ties": "realistic"}  # the boards' tie policy
    _run(wh, "r1", T0 + timedelta(hours=1), [_metric("r1", "m", "t", 0.5, at=T0, **real),
                                             _metric("r1", "n", "t", 0.4, at=T0, **real)])  # fmt: skip
    _run(wh, "r2", T0 + timedelta(days=1, hours=1), [])
    _run(wh, "r3", day2 + timedelta(hours=1), [_metric("r3", "m", "t", 0.6, spec="h2", at=day2, **real)])
    build_report(wh, tmp_path / "report", refresh=False)
    page = (tmp_path / "report" / "models" / f"{model_slug('m')}.html").read_text(encoding="utf-8")
    assert "Across the last 3 runs" in page
    assert "<b>0.6000</b>" in page and page.count("0.5000") == 2  # r1 and r2 held 0.5; r3 moved it (bold)
    other = (tmp_path / "report" / "models" / f"{model_slug('n')}.html").read_text(encoding="utf-8")
    assert "Across the last 3 runs" in other and "<b>" not in other.split("Across the last")[1].split("</table>")[0]
