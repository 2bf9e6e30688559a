"""Attacks that must fail: `evalfarm sql` writing or reading outside the warehouse, and a Ray head driven by anyone.

Each test really tries to get in (a forged result file, a file outside the warehouse, a second statement, an
unauthenticated job submission or ``ray.init``) and checks both the refusal and that nothing happened.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from evalfarm.warehouse import SCHEMAS, Warehouse, check_read_only, lock_down

REPO = Path(__file__).resolve().parents[1]

# -- evalfarm sql ---------------------------------------------------------------------------------------------


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    """A warehouse with one honest result (MRR 0.5), the number a forged file would try to beat."""
    wh = Warehouse(tmp_path / "wh").init()
    row = {name: None for name in SCHEMAS["metrics"].names}
    row.update(
        run_id="r1",
        model="honest",
        pool="evalrank-word",
        similarity="cos",
        metric="mrr",
        value=0.5,
        fingerprint="f" * 16,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    wh.write("metrics", [row], wh.unit_path("metrics", "honest", "evalrank-word", "f" * 16))
    return wh


def _metric_models(wh: Warehouse) -> list[tuple[str, float]]:
    return [(r["model"], r["value"]) for r in wh.query("SELECT model, value FROM metrics ORDER BY model").to_pylist()]


def _forge(wh: Warehouse) -> tuple[str, Path]:
    """The reported attack: a COPY that writes a Parquet file where the metrics view reads results."""
    target = Path(wh.root) / "tables" / "metrics" / "model=evil" / "pool=evalrank-word" / "forged.parquet"
    target.parent.mkdir(parents=True)
    copy = f"COPY (SELECT * REPLACE ('evil' AS model, 0.99 AS value) FROM metrics_history) TO '{target}'"
    return copy, target


@pytest.mark.parametrize(
    "template",
    [
        "EXPLAIN ANALYZE {copy}",
        "explain   analyze {copy}",
        "EXPLAIN /* hidden */ ANALYZE {copy}",
        "EXPLAIN ANALYSE {copy}",
        "EXPLAIN (ANALYZE) {copy}",
        "EXPLAIN (FORMAT json, ANALYZE) {copy}",
        "{copy}",
        "SELECT 1; {copy}",
        "SELECT 1 /* ; */; {copy}",
        "EXPLAIN {copy}",
    ],
)
def test_sql_cannot_forge_a_result_file(warehouse, template):
    copy, target = _forge(warehouse)
    with pytest.raises(PermissionError, match="refused"):
        warehouse.query(template.format(copy=copy))
    assert not target.exists()
    assert _metric_models(warehouse) == [("honest", 0.5)]


def test_sql_cli_refuses_the_reported_attack(warehouse):
    """The exact attack of issue 11, through `evalfarm sql` as a user would type it."""
    copy, target = _forge(warehouse)
    proc = subprocess.run(
        [sys.executable, "-m", "evalfarm.cli", "sql", "--warehouse", str(warehouse.root), f"EXPLAIN ANALYZE {copy}"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode != 0 and "EXPLAIN ANALYZE" in proc.stderr and "refused" in proc.stderr
    assert not target.exists()
    assert _metric_models(warehouse) == [("honest", 0.5)]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1; SELECT 2",
        "SELECT 1;;SELECT 2",
        "CREATE TABLE t AS SELECT 1",
        "DROP VIEW metrics",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access=true",
        "RESET lock_configuration",
        "SET allowed_directories=['/']",
        "CALL pragma_version()",
        "PRAGMA enable_profiling",
        "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
        "PIVOT (SELECT 1 AS a, 2 AS b) ON a USING sum(b)",
        "PREPARE p AS SELECT 1",
        "BEGIN TRANSACTION",
        "",
        "-- only a comment",
    ],
)
def test_sql_runs_exactly_one_read_only_statement(warehouse, sql):
    with pytest.raises((PermissionError, ValueError)):
        warehouse.query(sql)


def test_sql_cannot_write_or_attach_files_in_or_outside_the_warehouse(warehouse, tmp_path):
    root = Path(warehouse.root)
    attempts = {
        "EXPORT DATABASE '{p}'": root / "tables" / "metrics" / "export",
        "ATTACH '{p}' AS x": root / "tables" / "metrics" / "x.duckdb",
        "IMPORT DATABASE '{p}'": tmp_path / "import",
        "COPY (SELECT 1) TO '{p}'": tmp_path / "outside.csv",
        "EXPLAIN ANALYZE COPY (SELECT 1) TO '{p}'": tmp_path / "outside.parquet",
    }
    (tmp_path / "import").mkdir()
    (tmp_path / "import" / "schema.sql").write_text(f"COPY (SELECT 1) TO '{tmp_path}/imported.csv';\n")
    (tmp_path / "import" / "load.sql").write_text("")
    for template, path in attempts.items():
        with pytest.raises(PermissionError, match="refused"):
            warehouse.query(template.format(p=path))
        assert not path.exists() or path == tmp_path / "import"
    assert not (tmp_path / "imported.csv").exists()
    assert sorted(p.name for p in (root / "tables" / "metrics").iterdir()) == ["_schema.parquet", "model=honest"]


def test_sql_cannot_read_files_outside_the_warehouse(warehouse, tmp_path):
    """SELECTs pass the statement check; DuckDB's sandbox (external access off, one allowed prefix) stops them."""
    sibling = tmp_path / "wh-secrets"  # shares the warehouse's name as a prefix: '/…/wh' must not admit it
    sibling.mkdir()
    honest = next((Path(warehouse.root) / "tables" / "metrics").rglob("f*.parquet"))
    pq.write_table(pq.read_table(honest), sibling / "s.parquet")
    (tmp_path / "secret.txt").write_text("token\n")
    for sql in [
        "SELECT * FROM read_csv('/etc/passwd', sep=':')",
        f"SELECT * FROM read_text('{tmp_path}/secret.txt')",
        f"SELECT * FROM read_parquet('{sibling}/s.parquet')",
        f"SELECT * FROM read_parquet('{warehouse.root}/../wh-secrets/s.parquet')",
        f"SELECT * FROM glob('{tmp_path}/*')",
        f"SELECT * FROM read_text('file://{tmp_path}/secret.txt')",
        "SELECT * FROM read_parquet('https://example.com/x.parquet')",
        "SELECT * FROM read_parquet('s3://bucket/x.parquet')",
    ]:
        with pytest.raises(duckdb.Error, match="(?i)permission|disabled|not allowed"):
            warehouse.query(sql)
    # what is inside stays readable
    assert warehouse.query(f"SELECT count(*) AS n FROM read_parquet('{warehouse.root}/tables/metrics/*/*/*.parquet')")[
        "n"
    ].to_pylist() == [1]


def test_a_read_only_connection_cannot_unlock_itself(warehouse, tmp_path):
    """Without the statement check (a library user calling connect()), the engine's lock still holds."""
    con = warehouse.connect()
    try:
        for sql in [
            "SET enable_external_access=true",
            "SET allowed_directories=['/']",
            "RESET allowed_directories",
            "SET lock_configuration=false",
            "INSTALL httpfs",
            f"COPY (SELECT 1) TO '{tmp_path}/outside.csv'",
            f"ATTACH '{tmp_path}/outside.duckdb' AS x",
        ]:
            with pytest.raises(duckdb.Error):
                con.execute(sql)
        assert con.sql("SELECT current_setting('enable_external_access')").fetchall() == [(False,)]
    finally:
        con.close()
    assert not (tmp_path / "outside.csv").exists() and not (tmp_path / "outside.duckdb").exists()


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_object_store_warehouses_get_the_same_lock(scheme):
    """The prefix sandbox on an object-store root: only ``scheme://bucket/wh/…`` may be opened.

    DuckDB's httpfs is not installable offline, so the in-prefix read fails for want of it (not of permission);
    every other URL — another prefix, another bucket, another scheme, a local file — is refused by the lock.
    """
    con = duckdb.connect()
    lock_down(con, f"{scheme}://bucket/wh")
    refused = [
        f"{scheme}://bucket/wh-other/x.parquet",
        f"{scheme}://bucket/other/x.parquet",
        f"{scheme}://other-bucket/wh/x.parquet",
        f"{scheme}://bucket/wh/../other/x.parquet",
        "s3://bucket/x.parquet" if scheme == "gs" else "gs://bucket/wh/x.parquet",
        "https://bucket.example.com/wh/x.parquet",
        "/etc/hostname",
    ]
    for url in refused:
        with pytest.raises(duckdb.PermissionException):
            con.sql(f"SELECT * FROM read_parquet('{url}')").fetchall()
    with pytest.raises(duckdb.Error) as inside:
        con.sql(f"SELECT * FROM read_parquet('{scheme}://bucket/wh/tables/metrics/x.parquet')").fetchall()
    assert not isinstance(inside.value, duckdb.PermissionException)
    with pytest.raises(duckdb.Error):
        con.execute("SET enable_external_access=true")
    con.close()


def test_object_store_queries_are_checked_before_anything_is_opened():
    """The statement check does not depend on where the warehouse lives: nothing is contacted for a refusal."""
    wh = Warehouse("s3://bucket/wh?region=us-east-1&endpoint_override=127.0.0.1:9&scheme=http")
    with pytest.raises(PermissionError, match="EXPLAIN ANALYZE"):
        wh.query("EXPLAIN ANALYZE COPY (SELECT 1) TO 's3://bucket/wh/tables/metrics/x.parquet'")
    with pytest.raises(PermissionError, match="2 statements"):
        wh.query("SELECT 1; SELECT 2")


def test_read_only_statements_still_work(warehouse):
    for sql in [
        "SELECT model FROM metrics",
        "WITH m AS (SELECT * FROM metrics) SELECT model FROM m",
        "FROM metrics SELECT model",
        "DESCRIBE metrics",
        "SHOW TABLES",
        "SUMMARIZE metrics",
        "EXPLAIN SELECT * FROM metrics",
        "EXPLAIN (FORMAT json) SELECT * FROM metrics",
        "SELECT 'analyze' AS \"analyze\";",
    ]:
        assert warehouse.query(sql).num_rows >= 1, sql
    assert check_read_only("  SELECT 1 ; ").strip() == "SELECT 1 ;"
