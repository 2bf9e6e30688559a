"""Warehouse: atomic Parquet files, typed empty views, read-only SQL, embeddings round trip with OOV nulls."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalfarm.warehouse import Warehouse, atomic_write_table, embeddings_table, new_run_id, read_embeddings, store


@pytest.mark.slow
def test_views_exist_and_are_empty_on_a_new_warehouse(tmp_path):
    wh = Warehouse(tmp_path / "wh").init()
    for view in ["metrics", "metrics_history", "models", "ranks", "runs", "failures", "leaderboard", "evalrank"]:
        assert wh.query(f"SELECT count(*) AS n FROM {view}").to_pylist() == [{"n": 0}]
    cols = wh.query("SELECT * FROM metrics LIMIT 0").column_names
    assert cols[:9] == ["run_id", "model", "task", "scorer", "subset", "variant", "ties", "metric", "value"]


def test_sql_is_read_only(tmp_path):
    wh = Warehouse(tmp_path / "wh").init()
    for stmt in [
        "CREATE TABLE t AS SELECT 1",
        f"COPY (SELECT 1) TO '{tmp_path}/wh/x.csv'",
        "INSTALL httpfs",
        "SET enable_external_access=true",
    ]:
        with pytest.raises((PermissionError, duckdb.Error)):  # evalfarm's read-only check, or DuckDB's own refusal
            wh.query(stmt)
    with pytest.raises((PermissionError, duckdb.Error), match="(?i)permission|disabled"):
        wh.query("SELECT * FROM read_csv('/etc/hostname')")
    assert not (tmp_path / "wh" / "x.csv").exists()


def test_atomic_write_leaves_no_temp_file_on_failure(tmp_path):
    target = tmp_path / "d" / "t.parquet"
    atomic_write_table(pa.table({"a": [1]}), target)
    with pytest.raises(pa.ArrowException, match="no-such-codec"):  # pyarrow's own refusal of the codec
        atomic_write_table(pa.table({"a": [2]}), target, compression="no-such-codec")
    assert pq.read_table(target).to_pylist() == [{"a": 1}]
    assert [p.name for p in target.parent.iterdir()] == ["t.parquet"]


def test_embeddings_round_trip_with_null_oov_rows(tmp_path):
    emb = np.arange(12, dtype=np.float32).reshape(4, 3)
    oov = np.array([False, True, False, False])
    t = embeddings_table(list("ABCD"), list("abcd"), emb, oov, {"model": "m", "vocab_mean": [1.0, 2.0, 3.0]})
    assert str(t.schema.field("embedding").type) == "fixed_size_list<item: float>[3]"
    path = tmp_path / "e.parquet"
    atomic_write_table(t, path)
    texts, back, back_oov, meta = read_embeddings(path)
    assert texts == list("abcd")
    assert back_oov.tolist() == oov.tolist()
    np.testing.assert_array_equal(back[~oov], emb[~oov])
    assert (back[1] == 0).all()
    assert meta["model"] == "m" and meta["vocab_mean"] == [1.0, 2.0, 3.0]


def test_run_ids_are_unique_and_sortable(monkeypatch):
    """Run ids sort as the runs started (the `conflicts` view lists a spec's runs in id order, as they ran; so do
    `ls` of quarantine/), across second, hour, day and year boundaries; ids made in the same second still differ."""
    ids = [new_run_id() for _ in range(50)]
    assert len(set(ids)) == 50
    start = datetime.now(UTC)
    assert start - timedelta(seconds=5) <= datetime.strptime(ids[0][:15], "%Y%m%dT%H%M%S").replace(tzinfo=UTC) <= start
    # creation times out of lexical order if the stamp were unpadded or local: 9 s -> 10 s, 09 h -> 10 h, ...
    times = [
        datetime(2024, 12, 31, 23, 59, 59, tzinfo=UTC),
        datetime(2025, 1, 1, 0, 0, 0, tzinfo=UTC),
        datetime(2025, 1, 1, 0, 0, 9, tzinfo=UTC),
        datetime(2025, 1, 1, 0, 0, 10, tzinfo=UTC),
        datetime(2025, 1, 1, 9, 59, 59, tzinfo=UTC),
        datetime(2025, 1, 1, 10, 0, 0, tzinfo=UTC),
        datetime(2025, 2, 9, 0, 0, 0, tzinfo=UTC),
        datetime(2025, 10, 1, 0, 0, 0, tzinfo=UTC),
    ]
    clock = iter(times)
    monkeypatch.setattr(sys.modules[new_run_id.__module__], "now", lambda: next(clock))
    made = [new_run_id() for _ in times]
    assert sorted(made) == made
    assert [datetime.strptime(i[:15], "%Y%m%dT%H%M%S").replace(tzinfo=UTC) for i in made] == times


def test_init_sweeps_temp_files_of_dead_writers_only(tmp_path):
    """A writer killed between temp file and rename leaves a hidden .tmp; the next init removes it, but never a
    live writer's (this process's) nor a fresh one from another host."""
    import os
    import subprocess
    import sys
    import time

    from evalfarm.warehouse import _temp_name

    wh = Warehouse(tmp_path / "wh").init()
    folder = tmp_path / "wh" / "tables" / "units" / "r1"
    folder.mkdir(parents=True)
    final = folder / "a.parquet"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    live = _temp_name(final)  # this process: alive
    killed = live.with_name(live.name.replace(f".{os.getpid()}.", f".{dead_pid}."))
    other_fresh = folder / f".a.parquet.0123abcd.{dead_pid}.otherhst.tmp"
    other_old = folder / ".b.parquet.0123abcd.77.otherhst.tmp"
    for p in (live, killed, other_fresh, other_old):
        p.write_bytes(b"x")
    day_ago = time.time() - 2 * 24 * 3600
    os.utime(other_old, (day_ago, day_ago))
    wh.init()
    assert sorted(p.name for p in folder.iterdir()) == sorted([live.name, other_fresh.name])
    assert wh.query("SELECT count(*) AS n FROM units").to_pylist() == [{"n": 0}]  # temp names are never read


def test_a_unit_is_done_when_its_metrics_rows_are_committed(tmp_path):
    """The one completion test (``Warehouse.done``) that the runner, the executor and the scheduler all ask: a unit
    is done when its (model, task, fingerprint) has committed ``metrics`` rows; staged rows do not count."""
    from evalfarm.plan import Unit

    wh = Warehouse(tmp_path / "wh").init()
    a, b = (Unit("m", t, "s", "word", "h", "c", "{}", f"fp-{t}") for t in "ab")
    assert wh.done([a, b]) == [False, False] and not wh.is_done(a) and not wh.is_done(a, since=0.0)
    row = {"run_id": "r1", "model": "m", "task": "a", "metric": "x", "value": 1.0, "fingerprint": "fp-a",
           "created_at": datetime.fromtimestamp(1000.0, UTC)}  # fmt: skip
    wh.deferred = True
    staged = wh.write("metrics", [row], unit=("m", "a", "fp-a"))
    assert wh.done([a, b]) == [False, False]  # staged, not committed: not done
    wh.deferred = False
    wh.commit(wh.take_pending())
    assert staged.path.startswith("tables/metrics/data/r1/")
    assert wh.done([a, b]) == [True, False] and wh.is_done(a) and not wh.is_done(b)
    assert wh.is_done(a, since=1000.0) and not wh.is_done(a, since=2000.0)  # computed before a --force run began
    wh.write("metrics", [{**row, "run_id": "r2", "created_at": datetime.fromtimestamp(3000.0, UTC)}])
    assert wh.is_done(a, since=2000.0)  # recomputed by another run since


def test_unsynced_replace_writes_are_still_whole_or_nothing(tmp_path):
    """Heartbeats and the verified-files cache skip fsync, not the temp file and rename."""
    from evalfarm import atomic

    target = tmp_path / "leases" / "runs" / "r.json"
    atomic.write_bytes(target, b"one", fsync=False)
    atomic.write_bytes(target, b"two", fsync=False)
    with pytest.raises(RuntimeError, match="writer died"), atomic.replacing(target, fsync=False) as f:
        f.write(b"half")
        raise RuntimeError("writer died")
    assert target.read_bytes() == b"two" and [p.name for p in target.parent.iterdir()] == ["r.json"]


def test_a_quarantined_file_is_one_failures_row_naming_its_unit(tmp_path):
    from evalfarm.outcomes import record_quarantine
    from evalfarm.warehouse import Quarantined

    wh = Warehouse(tmp_path / "wh").init()
    path = f"{wh.base}/tables/metrics/data/r0/x.parquet"
    metrics = Quarantined(path, "/q/x.parquet", "unreadable Parquet (x)", (("m", "t"),))
    shard = Quarantined(f"{wh.store_dir('m', 'st')}/s.parquet", "/q/s.parquet", "unreadable text-store shard")
    record_quarantine(wh, "run-1", metrics)
    record_quarantine(wh, "run-1", shard, model="m")
    rows = wh.query("SELECT model, task, stage, error, detail FROM failures ORDER BY detail").to_pylist()
    assert rows == [
        {"model": "m", "task": None, "stage": "quarantine", "error": "unreadable text-store shard; moved to "
         "/q/s.parquet", "detail": shard.path},
        {"model": "m", "task": "t", "stage": "quarantine", "error": "unreadable Parquet (x); moved to /q/x.parquet",
         "detail": metrics.path},
    ]  # fmt: skip


def test_a_connection_reads_its_snapshot_while_runs_commit(tmp_path):
    """A connection reads the files of the snapshot it opened (Delta's snapshot isolation): a commit meanwhile (a
    model's new row) is not half-seen by it, and the next connection sees it."""
    at = datetime(2026, 11, 25, tzinfo=UTC)
    wh = Warehouse(tmp_path / "wh").init()
    row = {"model": "m", "level": "sentence", "kind": "transformers", "spec_hash": "h", "created_at": at}
    wh.write_model(row)
    con = wh.connect()
    wh.write_model({**row, "kind": "onnx", "created_at": at + timedelta(seconds=1)})
    assert con.execute("SELECT kind FROM models").fetchall() == [("transformers",)]
    con.close()
    assert wh.query("SELECT kind FROM models").column(0).to_pylist() == ["onnx"]


def test_a_query_reads_again_when_a_file_of_its_snapshot_goes(tmp_path, monkeypatch):
    """A file of the snapshot a connection opened can be removed under it (a compaction, then a vacuum, while a reader
    that did not pin its snapshot reads): DuckDB then fails on the missing file, and ``query`` reads again on a fresh
    connection, which reads the newest snapshot. Any other error is raised at once."""
    from evalfarm.warehouse.maintenance import compact

    at = datetime(2026, 11, 25, tzinfo=UTC)
    wh = Warehouse(tmp_path / "wh").init()
    row = {"model": "m", "level": "sentence", "kind": "transformers", "spec_hash": "h", "created_at": at}
    wh.write_model(row)
    wh.write_model({**row, "model": "n"})
    old = [f.path for f in wh.tables.snapshot("models").files]

    def compact_and_vacuum() -> None:
        compact(wh, tables=["models"])
        for path in old:  # what a vacuum past the retention does to the files only the old snapshot needs
            os.unlink(path)

    con = wh.connect()
    compact_and_vacuum()
    with pytest.raises(duckdb.Error) as seen:
        con.execute("SELECT model FROM models").fetchall()
    assert store.replaced_under_read(seen.value)
    con.close()

    wh.write_model({**row, "model": "o"})
    old = [f.path for f in wh.tables.snapshot("models").files]
    connect, calls, done = Warehouse.connect, [], []

    def a_vacuum_between_snapshot_and_read(self, **kw):
        con = connect(self, **kw)
        calls.append(1)
        if not done:
            done.append(1)
            compact_and_vacuum()
        return con

    monkeypatch.setattr(Warehouse, "connect", a_vacuum_between_snapshot_and_read)
    assert sorted(wh.query("SELECT model FROM models").column(0).to_pylist()) == ["m", "n", "o"]
    assert len(calls) == 2
    calls.clear()
    with pytest.raises(duckdb.Error, match="Catalog Error|does not exist"):  # any other error: raised at once
        wh.query("SELECT * FROM no_such_view")
    assert len(calls) == 1
