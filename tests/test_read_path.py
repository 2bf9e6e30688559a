"""The warehouse's read path costs what a query reads: a connection binds the views and tables the query names (one
relation a table), ``history_of`` and ``run_diff`` build the history of what they are asked for, and ``evalfarm
status`` reads one connection a refresh. Each checked for the same rows as the full path gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from evalfarm.warehouse import Warehouse
from evalfarm.warehouse.query import TABLES_SCHEMA, needed_statements, view_sources

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _night(wh: Warehouse, night: int, models: list[str]) -> None:
    run = f"2026110{night}T000000-{night:08d}"
    at = T0 + timedelta(days=night)
    wh.write_run_event(run, "start", status="running")
    for m in models:
        fp = f"{m}-{night}"
        rows = [{"run_id": run, "model": m, "task": "t", "scorer": "similarity", "subset": None, "variant": v,
                 "ties": None, "metric": "spearman", "value": 0.1 * night + (0.01 if v == "l2" else 0),
                 "is_primary": True, "higher_is_better": True, "fingerprint": fp, "created_at": at}
                for v in ("cos", "l2")]  # fmt: skip
        wh.write("metrics", rows, run_id=run, unit=(m, "t", fp))
        wh.write_units(run, [{"model": m, "task": "t", "stage": "score", "status": "done", "seconds": 1.0}])
    wh.write_run_event(run, "end", status="ok", at=at + timedelta(hours=1))


@pytest.fixture(scope="module")
def nights(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    wh = Warehouse(tmp_path_factory.mktemp("read") / "wh").init()
    _night(wh, 1, ["a", "b", "c"])
    _night(wh, 2, ["b"])
    _night(wh, 3, ["a", "d"])
    return wh


def test_a_query_binds_only_what_it_names(nights, monkeypatch):
    read: list[str] = []
    real = nights.tables.snapshot

    def counted(table: str, *args: Any, **kwargs: Any) -> Any:
        read.append(table)
        return real(table, *args, **kwargs)

    monkeypatch.setattr(nights.tables, "snapshot", counted)
    con = nights.connect(needs=["SELECT * FROM board"])
    try:
        assert read == ["metrics"]  # one table's log, not every table's
        views = {r[0] for r in con.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        assert {"board", "leaderboard", "metrics"} <= views
        assert not views & {"history", "correlations", "units", "runs", "ranks"}
        relations = {r[0] for r in con.sql(f"SELECT view_name FROM duckdb_views() WHERE schema_name = "
                                           f"'{TABLES_SCHEMA}'").fetchall()}  # fmt: skip
        assert "metrics_current" in relations and not relations & {"metrics", "units", "runs"}  # no history
        board = con.sql("SELECT * FROM board ORDER BY ALL").fetchall()
    finally:
        con.close()
    read.clear()
    full = nights.connect()  # every view, as a library user's connect() gets
    try:
        assert full.sql("SELECT * FROM board ORDER BY ALL").fetchall() == board
        assert "units" in read and "runs" in read
    finally:
        full.close()
    assert nights.query("SHOW TABLES").num_rows > 30  # a statement that names no view gets them all


def test_the_views_a_statement_needs_follow_what_they_read():
    every = needed_statements(view_sources(), None)
    names = {st.name for st in needed_statements(view_sources(), ["select * from run_diff('a', 'b')"])}
    assert {"run_diff", "history_of", "run_points", "runs", "run_events", "metrics_history"} <= names
    assert "board" not in names and len(names) < len({st.name for st in every})
    # a name inside a string or a comment binds more than needed, never less
    more = {st.name for st in needed_statements(view_sources(), ["SELECT 'board' -- units\nFROM metrics"])}
    assert {"metrics", "board", "units"} <= more


def test_history_of_gives_the_history_views_rows_of_what_it_is_asked(nights):
    cols = "run_id, model, task, variant, metric, value, computed_by, fingerprint"
    whole = nights.query(f"SELECT {cols} FROM history ORDER BY ALL").to_pylist()
    assert len(whole) == 3 * 2 * 4 - 2 * 2 * 1  # 3 runs x 2 variants x models known by then (3, 3, 4 models)
    for model in ("a", "b", "d"):
        one = nights.query(f"SELECT {cols} FROM history_of(models := ['{model}']) ORDER BY ALL").to_pylist()
        assert one == [r for r in whole if r["model"] == model] and one
    runs = sorted({r["run_id"] for r in whole})
    two = nights.query(f"SELECT {cols} FROM history_of(runs := ['{runs[0]}', '{runs[2]}']) ORDER BY ALL").to_pylist()
    assert two == [r for r in whole if r["run_id"] in (runs[0], runs[2])]
    both = nights.query(f"SELECT {cols} FROM history_of(models := ['a'], tasks := ['t'], runs := ['{runs[1]}']) "
                        "ORDER BY ALL").to_pylist()  # fmt: skip
    assert both == [r for r in whole if r["model"] == "a" and r["run_id"] == runs[1]]
    assert nights.query("SELECT count(*) AS n FROM history_of(tasks := ['nope'])").to_pylist() == [{"n": 0}]


def test_status_reads_one_connection_a_refresh(nights, monkeypatch):
    from evalfarm.status import run_status

    opened: list[Any] = []
    real = Warehouse.connect

    def counted(self: Warehouse, **kwargs: Any) -> Any:
        opened.append(kwargs.get("needs"))
        return real(self, **kwargs)

    monkeypatch.setattr(Warehouse, "connect", counted)
    st = run_status(nights)
    assert len(opened) == 1 and opened[0] is not None  # the tables its queries name, bound once
    assert st.state == "ok" and st.per_worker and st.per_worker[0]["units"] == 2


def test_the_first_snapshot_of_a_process_does_not_import_pandas(tmp_path: Path):
    """pyarrow's pa.table() asks whether its argument is a pandas DataFrame, which imports pandas: 0.9-1.3 s of
    every reading process (`evalfarm sql`, `status`, the report's) before the first query, measured."""
    import subprocess
    import sys

    wh = Warehouse(tmp_path / "wh").init()
    _night(wh, 1, ["a"])
    code = (f"import sys; from evalfarm.warehouse import Warehouse; w = Warehouse({str(wh.root)!r}); "
            "w.tables.snapshot('metrics'); w.query('SELECT * FROM board'); "
            "print('pandas' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_rows_of_is_to_pylist_without_pandas(tmp_path: Path):
    """A reading command's rows (status, diff, the run list): the same values as pyarrow's ``to_pylist``, whose
    timestamps import pandas (0.4 CPU-s a process, measured). The table reaches a fresh process as Arrow IPC (pyarrow's
    own constructors import pandas too)."""
    import subprocess
    import sys

    import pyarrow as pa

    us = pa.array([1_767_232_984_567_891, None], pa.int64())  # 2026-01-01T02:03:04.567891Z
    ms = pa.array([-1, None]).cast(pa.timestamp("ms"))  # 1969-12-31T23:59:59.999, no zone
    t = pa.Table.from_arrays([us.cast(pa.timestamp("us", tz="UTC")), ms, pa.array([1.5, None]), pa.array(["a", None])],
                             names=["at", "naive", "x", "s"])  # fmt: skip
    with pa.OSFile(str(tmp_path / "t.arrow"), "wb") as sink, pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    code = f"""
import sys
import pyarrow as pa
from evalfarm.warehouse.query import rows_of
t = pa.ipc.open_stream(pa.OSFile({str(tmp_path / "t.arrow")!r})).read_all()
got = rows_of(t)
print("pandas" in sys.modules)
assert got == t.to_pylist(), (got, t.to_pylist())
assert got[0]["at"].utcoffset().total_seconds() == 0 and got[0]["naive"].tzinfo is None and got[1]["at"] is None
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_table_of_many_small_files_is_read_once_with_the_same_rows(tmp_path: Path):
    """Mid-run, before its compaction, a table holds a file per batch: a connection reads such a table once (every
    view and query over it then reads memory), and gets the rows a view over the files gives, older shapes included."""
    from evalfarm.warehouse.query import READ_ONCE_FILES, TABLES_SCHEMA

    wh = Warehouse(tmp_path / "wh").init()
    for i in range(READ_ONCE_FILES + 3):
        row: dict[str, Any] = {"model": f"m{i}", "task": "t", "stage": "score", "status": "done", "seconds": i * 0.5}
        if i % 2:
            row["worker"] = f"w{i % 3}"
        wh.write_units("r1", [row])
    sql = "SELECT * FROM units ORDER BY model"
    con = wh.connect(needs=[sql])
    try:
        kinds = dict(con.sql(f"SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = "
                             f"'{TABLES_SCHEMA}'").fetchall())  # fmt: skip
        assert kinds["units"] == "BASE TABLE"  # read once
        once = con.sql(sql).fetchall()
    finally:
        con.close()
    view = wh.connect(read_only=False)  # no reader of small files: a view over them
    try:
        assert view.sql(sql).fetchall() == once and len(once) == READ_ONCE_FILES + 3
    finally:
        view.close()


def test_a_link_among_many_small_files_is_left_out_and_not_followed(tmp_path: Path):
    """The reader of many small files opens each as a regular file through its folder, never through a link: a data
    file replaced by a link to a file outside the warehouse is left out of the views (and named), never read."""
    import pyarrow.parquet as pq

    from evalfarm.warehouse.query import READ_ONCE_FILES

    wh = Warehouse(tmp_path / "wh").init()
    for i in range(READ_ONCE_FILES + 3):
        wh.write_units("r1", [{"model": f"m{i}", "task": "t", "stage": "score", "status": "done", "seconds": 1.0}])
    secret = tmp_path / "secret.parquet"
    pq.write_table(wh.typed("units", [{"run_id": "r1", "model": "SECRET", "task": "t"}]), secret)
    victim = Path(wh.tables.snapshot("units").files[0].path)
    victim.unlink()
    victim.symlink_to(secret)
    models = wh.query("SELECT model FROM units").column("model").to_pylist()
    assert "SECRET" not in models and len(models) == READ_ONCE_FILES + 2
    assert [q.path for q in wh.excluded] == [str(victim)]
