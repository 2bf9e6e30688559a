"""The metrics table's current rows (evalfarm/warehouse/current.py): ``metrics`` reads them instead of a window over
the whole history, and must still be exactly the newest computation of every (model, task, scorer, subset, variant).

Each test holds the view against a reference computed here, in Python, from every row the history holds (not
through the SQL rule the view shares with the refresh): after appends, refreshes, the quarantine's removal of a
unit, rewrites that lost a race, writers in several processes at once, and writers killed at any point.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from evalfarm.warehouse import Warehouse, verify_warehouse
from evalfarm.warehouse.current import (
    CURRENT,
    SUPERSEDED,
    current_findings,
    drop_units,
    refresh_current,
    split_files,
)
from evalfarm.warehouse.maintenance import compact, compact_during_run, compact_if_needed
from evalfarm.warehouse.rewrite import rewrite
from evalfarm.warehouse.tables import RewriteConflict

T0 = datetime(2026, 11, 1, tzinfo=UTC)
COLUMNS = ("run_id", "model", "task", "scorer", "subset", "variant", "ties", "metric", "value", "fingerprint")


def _unit(run: str, model: str, task: str, fp: str, at: datetime, *, value: float = 0.5,
          variants: tuple[str | None, ...] = ("cos", None)) -> list[dict[str, Any]]:  # fmt: skip
    """One unit's metrics rows: two variants (one null), two tie policies (one null), two metrics each."""
    rows = []
    for variant in variants:
        for ties, metric in (("realistic", "mrr"), (None, "n_pairs")):
            rows.append({"run_id": run, "model": model, "task": task, "scorer": "evalrank", "subset": None,
                         "variant": variant, "ties": ties, "metric": metric, "value": value, "is_primary": True,
                         "higher_is_better": True, "fingerprint": fp, "created_at": at})  # fmt: skip
    return rows


def _write(wh: Warehouse, rows: list[dict[str, Any]]) -> None:
    r = rows[0]
    wh.write("metrics", rows, run_id=r["run_id"], unit=(r["model"], r["task"], r["fingerprint"]))


def _key(v: Any) -> Any:
    return "nan" if isinstance(v, float) and math.isnan(v) else v


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple(_key(r[c]) for c in COLUMNS) for r in table.to_pylist()), key=str)


def reference(history: pa.Table) -> list[tuple[Any, ...]]:
    """The newest computation of every (model, task, scorer, subset, variant) among ``history``'s rows, as the
    metrics view defines it (newest created_at, then the first fingerprint, then the first run id), in Python."""
    rows = [r for r in history.to_pylist() if r["task"] is not None]
    best: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for r in rows:
        k = (r["model"], r["task"], r["scorer"], r["subset"], r["variant"])
        c = (r["created_at"], r["fingerprint"], r["run_id"])
        old = best.get(k)
        if old is None or c[0] > old[0] or (c[0] == old[0] and (c[1], c[2]) < (old[1], old[2])):
            best[k] = c
    keep = [r for r in rows
            if best[(r["model"], r["task"], r["scorer"], r["subset"], r["variant"])]
            == (r["created_at"], r["fingerprint"], r["run_id"])]  # fmt: skip
    return sorted((tuple(_key(r[c]) for c in COLUMNS) for r in keep), key=str)


def _history(wh: Warehouse) -> pa.Table:
    """Every row of the metrics table's newest snapshot, read file by file (not through a view)."""
    parts = [wh.typed("metrics", wh.read_table(f.path)) for f in wh.tables.snapshot("metrics").files]
    return pa.concat_tables(parts) if parts else wh.typed("metrics", [])


def assert_current(wh: Warehouse) -> None:
    """``metrics`` is the reference's rows, verify's check agrees, and no row of the history is there twice."""
    history = _history(wh)
    got = _rows(wh.query("SELECT * FROM metrics", timeout_s=0, max_rows=0))
    assert got == reference(history)
    assert current_findings(wh) == []
    seen = [tuple(_key(r[c]) for c in (*COLUMNS, "created_at")) for r in history.to_pylist()]
    assert len(seen) == len(set(seen)), "a row of the history is there twice"


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "wh").init()


def test_metrics_is_the_newest_computation_before_and_after_each_refresh(wh):
    _write(wh, _unit("r1", "a", "t", "fa1", T0, value=0.1))
    _write(wh, _unit("r1", "b", "t", "fb1", T0, value=float("nan")))
    _write(wh, _unit("r1", "c", "t", "fc1", T0))
    wh.write("metrics", [{"run_id": "r0", "model": "a", "task": None, "metric": "old", "value": 1.0}], run_id="r0")
    assert_current(wh)  # nothing current yet: every file pending, as a schema-2 warehouse reads
    refresh_current(wh)
    files = split_files(wh.tables.snapshot("metrics"), wh.tables.folder("metrics"))
    assert (len(files.current), len(files.superseded), len(files.pending)) == (1, 1, 0)  # the task-less row aside
    assert_current(wh)
    # a newer computation of a; b computed again at the same time under another fingerprint (the first one wins);
    # c's l2 variant only, which must not hide its cos and null-variant rows
    _write(wh, _unit("r2", "a", "t", "fa2", T0 + timedelta(days=1), value=0.2))
    _write(wh, _unit("r2", "b", "t", "fb0", T0, value=0.3))
    _write(wh, _unit("r2", "c", "t", "fc2", T0 + timedelta(days=1), variants=("l2",)))
    assert_current(wh)  # pending: the window runs over the keys they touch
    refresh_current(wh)
    assert_current(wh)
    files = split_files(wh.tables.snapshot("metrics"), wh.tables.folder("metrics"))
    assert not files.pending and files.current and files.superseded
    assert all(f"/data/{CURRENT}/" in f.path for f in files.current)
    assert all(f"/data/{SUPERSEDED}/" in f.path for f in files.superseded)
    assert verify_warehouse(wh).ok


def test_removing_a_units_current_rows_brings_its_older_computation_back(wh):
    """The quarantine drops a unit whose file was lost: where its rows were current, the computation before it is
    current again, as the window over the whole history made it."""
    _write(wh, _unit("r1", "a", "t", "fa1", T0, value=0.1))
    _write(wh, _unit("r1", "b", "t", "fb1", T0, value=0.4))
    refresh_current(wh)
    _write(wh, _unit("r2", "a", "t", "fa2", T0 + timedelta(days=1), value=0.2))
    refresh_current(wh)  # fa1 superseded, fa2 current
    assert {r[-1] for r in _rows(wh.query("SELECT * FROM metrics")) if r[1] == "a"} == {"fa2"}
    assert drop_units(wh, {("a", "t", "fa2")}) == 4
    assert_current(wh)
    assert {r[-1] for r in _rows(wh.query("SELECT * FROM metrics")) if r[1] == "a"} == {"fa1"}
    refresh_current(wh)
    assert_current(wh)
    assert drop_units(wh, {("b", "t", "fb1")}) == 4  # no older computation: the unit is gone from metrics
    assert_current(wh)
    assert "b" not in {r[1] for r in _rows(wh.query("SELECT * FROM metrics"))}


def test_a_rewrite_whose_files_another_writer_removed_commits_nothing(wh):
    """Two compactions (or refreshes) of the same files: delta-rs lets the second land on top of the first (its
    removals unchecked), which doubled every row (measured). The second now finds its files gone and stops."""
    for i in range(3):
        _write(wh, _unit("r1", f"m{i}", "t", f"f{i}", T0))
    snap = wh.tables.snapshot("metrics")
    merged = pa.concat_tables([wh.typed("metrics", wh.read_table(f.path)) for f in snap.files])
    rewrite(wh, "metrics", [merged], list(snap.files), operation="compact", data_change=False)
    with pytest.raises(RewriteConflict, match="removed by another writer"):
        rewrite(wh, "metrics", [merged], list(snap.files), operation="compact", data_change=False)
    assert wh.query("SELECT count(*) AS n FROM metrics_history").to_pylist() == [{"n": 12}]
    assert_current(wh)


def test_compaction_keeps_the_kinds_apart_and_a_run_end_refreshes_what_is_worth_it(wh):
    for i in range(4):
        _write(wh, _unit("r1", f"m{i}", "t", f"f{i}", T0))
    assert [c.table for c in compact_if_needed(wh, threshold=32)] == ["metrics"]  # a first run: nothing current yet
    for i in range(3):
        _write(wh, _unit("r2", f"m{i}", "t", f"g{i}", T0 + timedelta(days=1)))
    # few files, a small share of the current bytes: left pending for the readers' window (a run of a few units)
    assert compact_if_needed(wh, threshold=32, refresh_share=10.0) == []
    assert [c.table for c in compact_if_needed(wh, threshold=3, refresh_share=10.0)][0] == "metrics"  # 3 files
    assert not split_files(wh.tables.snapshot("metrics"), wh.tables.folder("metrics")).pending
    assert_current(wh)
    for i in range(3):
        _write(wh, _unit("r3", f"m{i}", "t", f"h{i}", T0 + timedelta(days=2)))
    done = compact_during_run(wh, threshold=3, refresh_share=10.0)  # many files, few bytes: merged, not refreshed
    files = split_files(wh.tables.snapshot("metrics"), wh.tables.folder("metrics"))
    assert [c.merged for c in done if c.table == "metrics"] == [3]
    assert len(files.pending) == 1 and len(files.current) == 1
    assert_current(wh)
    compact(wh, tables=["metrics"])  # a current file is never merged into a pending one
    assert split_files(wh.tables.snapshot("metrics"), wh.tables.folder("metrics")) == files
    compact_during_run(wh, threshold=1, refresh_share=0.0)
    files = split_files(wh.tables.snapshot("metrics"), wh.tables.folder("metrics"))
    assert not files.pending
    assert_current(wh)


def test_a_schema_2_warehouse_is_read_right_and_migrated_in_place(wh):
    from evalfarm.warehouse.migrate import migrate
    from evalfarm.warehouse.store import FORMAT_FILE, SCHEMA_VERSION

    for i in range(3):
        _write(wh, _unit("r1", f"m{i}", "t", f"f{i}", T0 + timedelta(hours=i)))
        _write(wh, _unit("r2", f"m{i}", "t", f"g{i}", T0 - timedelta(hours=i)))
    (Path(wh.base) / FORMAT_FILE).write_text('{"schema_version": 2, "format": "delta"}\n')
    assert Warehouse(wh.root).schema_version() == 2
    assert_current(wh)  # what an older evalfarm wrote reads the same: every file pending
    result = migrate(wh.root)
    assert result.identical and result.rows == {"metrics": 12}
    assert Warehouse(wh.root).schema_version() == SCHEMA_VERSION == 4  # 2 -> 3 -> 4 in one migrate
    assert_current(wh)
    (Path(wh.base) / FORMAT_FILE).write_text('{"schema_version": 99, "format": "delta"}\n')
    with pytest.raises(PermissionError, match="schema version 99, written by a newer evalfarm"):
        Warehouse(wh.root).init()
    assert_current(Warehouse(wh.root))  # reading it works


# -- writers in several processes, and writers killed ------------------------------------------------------------
def _writer(args: tuple[str, int, int, int]) -> int:
    """Computations of a few shared keys, created at times that interleave with the other writers', with a refresh
    of the current rows (or a compaction) every few; returns the rows written."""
    root, writer, n, seed = args
    wh = Warehouse(root)
    rng = random.Random(seed)
    written = 0
    for i in range(n):
        model = f"m{rng.randrange(4)}"
        at = T0 + timedelta(minutes=rng.randrange(50))  # ties between writers included
        rows = _unit(f"w{writer}", model, "t", f"fp{writer}-{i}", at, value=rng.random())
        _write(wh, rows)
        written += len(rows)
        if i % 3 == 2:
            refresh_current(wh) if rng.random() < 0.7 else compact(wh, tables=["metrics"])
    return written


@pytest.mark.slow
def test_writers_and_refreshes_in_four_processes_leave_the_newest_rows_current(wh):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        written = sum(pool.map(_writer, [(str(wh.root), w, 12, w) for w in range(4)]))
    assert wh.query("SELECT count(*) AS n FROM metrics_history").to_pylist() == [{"n": written}]
    assert_current(wh)
    refresh_current(wh)
    assert_current(wh)
    assert verify_warehouse(wh).ok


KILLED_WRITER = """
import sys
sys.path.insert(0, sys.argv[3])
from tests.test_current_rows import _writer
_writer((sys.argv[1], int(sys.argv[2]), 1000, int(sys.argv[2])))
"""


@pytest.mark.slow
def test_writers_killed_at_any_point_leave_the_newest_rows_current(wh):
    """SIGKILL in the middle of staging, committing, refreshing or compacting: whatever committed is exact; a
    refresh that did not commit changed nothing."""
    repo = Path(__file__).resolve().parents[1]
    rng = random.Random(7)
    for k in range(4):
        proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(wh.root), str(k), str(repo)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": str(repo)})  # fmt: skip
        start = len(wh.tables.snapshot("metrics").files) if wh.tables.exists("metrics") else 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            now = len(wh.tables.snapshot("metrics").files) if wh.tables.exists("metrics") else 0
            if now != start:
                time.sleep(rng.uniform(0.0, 1.5))  # somewhere in its next writes
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert_current(Warehouse(wh.root))
    assert wh.query("SELECT count(DISTINCT run_id) AS n FROM metrics_history").to_pylist() == [{"n": 4}]
