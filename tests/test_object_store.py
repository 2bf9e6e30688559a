"""An object-store warehouse, for real (issue 25): runs write to a local S3 server, every reader reads it back.

The server is moto's S3 on 127.0.0.1 (:mod:`tests.support.s3_server`), reached as a user reaches any S3-compatible
store: ``AWS_ENDPOINT_URL`` and the ``AWS_*`` credentials in the environment, the warehouse a plain ``s3://`` URI.
DuckDB reads it through the warehouse's own pyarrow filesystem (``prefix_filesystem``), so no extension is needed
offline. The data folder may be on the bucket too (``EVALFARM_DATA=s3://…``). The fast tier keeps the pure parts
(the endpoint option, the confined filesystem's path check); the rest starts the server once per module and is
slow-tier.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from evalfarm.warehouse import Warehouse, lock_down, verify_warehouse
from evalfarm.warehouse.sandbox import prefix_filesystem
from evalfarm.warehouse.store import with_endpoint
from tests.support.s3_server import INSTALL_HINT, S3Server, moto_python, s3_server
from tests.support.warehouse_files import unit_file

REPO = Path(__file__).resolve().parents[1]


# -- pure logic (fast tier) -------------------------------------------------------------------------------------


def test_the_endpoint_comes_from_the_standard_variables():
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000/"}
    assert with_endpoint("s3://b/wh", env) == "s3://b/wh?endpoint_override=127.0.0.1%3A9000&scheme=http"
    assert with_endpoint("s3://b/wh?region=x", env).startswith("s3://b/wh?region=x&endpoint_override=")
    both = {**env, "AWS_ENDPOINT_URL_S3": "https://minio.internal"}  # the S3-specific one wins
    assert with_endpoint("s3://b/wh", both) == "s3://b/wh?endpoint_override=minio.internal&scheme=https"
    # a URI's own endpoint wins; other schemes and local paths are left alone; no variable: AWS itself
    assert with_endpoint("s3://b/wh?endpoint_override=h:1", env) == "s3://b/wh?endpoint_override=h:1"
    assert with_endpoint("gs://b/wh", env) == "gs://b/wh"
    assert with_endpoint("/data/wh", env) == "/data/wh"
    assert with_endpoint("s3://b/wh", {}) == "s3://b/wh"


def test_the_duckdb_filesystem_serves_only_the_warehouse_prefix(tmp_path):
    """The registered filesystem refuses what DuckDB's textual prefix check lets through (``..``), and anything
    outside the prefix, before the store is asked."""
    (tmp_path / "bucket" / "wh").mkdir(parents=True)
    (tmp_path / "bucket" / "wh" / "a.txt").write_text("in")
    (tmp_path / "bucket" / "other").mkdir()
    (tmp_path / "bucket" / "other" / "b.txt").write_text("secret")
    fs = prefix_filesystem(pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()), "s3", "bucket/wh")
    assert fs.cat_file("s3://bucket/wh/a.txt") == b"in"
    for path in [
        "s3://bucket/wh/../other/b.txt",
        "s3://bucket/wh/./../other/b.txt",
        "s3://bucket/other/b.txt",
        "s3://bucket/wh-other/b.txt",
        "s3://bucket",
        "bucket/wh/../other/b.txt",
    ]:
        with pytest.raises(PermissionError, match="outside the warehouse"):
            fs.cat_file(path)
    with pytest.raises(PermissionError):
        fs.glob("s3://bucket/*/b.txt")
    for write in (lambda: fs.open("s3://bucket/wh/new.txt", "wb"), lambda: fs.rm("s3://bucket/wh/a.txt"),
                  lambda: fs.mv("s3://bucket/wh/a.txt", "s3://bucket/wh/b.txt")):  # fmt: skip
        with pytest.raises(PermissionError, match="read-only"):
            write()
    assert sorted(p.name for p in (tmp_path / "bucket" / "wh").iterdir()) == ["a.txt"]


# -- against the local S3 server (slow tier) ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    if moto_python() is None:
        pytest.skip(f"no local S3 server: needs {INSTALL_HINT}")
    with s3_server() as server:
        server.make_bucket("evalfarm")
        server.make_bucket("other-bucket")
        yield server


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The server's variables in this process (the Python API) and for the CLI's child processes."""
    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    return {**os.environ, **s3.env}


def _catalog(d: Path, data_dir: Path, tasks: str = "wordsim-mc-30, wordsim-rg-65") -> Path:
    toy = data_dir / "evalrank" / "reference" / "toy_emb.txt"
    cat = d / "cat.yaml"
    cat.write_text(
        f"include: [{REPO / 'catalog' / 'tasks.yaml'}]\ntasks: [{tasks}]\nmodels:\n"
        f"  - {{id: toy, level: word, kind: word-vectors, format: glove-text, source: {{type: path, ref: {toy}}}}}\n"
    )
    return cat


def _cli(env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evalfarm.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=env.get("EVALFARM_TEST_CWD", str(REPO)),
    )


def _keys(s3: S3Server, prefix: str) -> dict[str, int]:
    """Every object under ``bucket/prefix``: key -> size."""
    fs = pafs.FileSystem.from_uri(with_endpoint(f"s3://{prefix}", s3.env))[0]
    sel = pafs.FileSelector(prefix, recursive=True, allow_not_found=True)
    return {i.path: int(i.size or 0) for i in fs.get_file_info(sel) if i.type == pafs.FileType.File}


@pytest.fixture(scope="module")
def filled(s3: S3Server, data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One `evalfarm run --warehouse s3://evalfarm/wh` (local executor), from a folder it must leave empty."""
    d = tmp_path_factory.mktemp("run")
    cwd = d / "cwd"
    cwd.mkdir()
    env = {**os.environ, **s3.env, "EVALFARM_TEST_CWD": str(cwd)}
    s3.reset()
    proc = _cli(env, "run", "--catalog", str(_catalog(d, data_dir)), "--warehouse", "s3://evalfarm/wh",
                "--executor", "local")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"uri": "s3://evalfarm/wh", "cwd": cwd, "requests": s3.counts(), "stdout": proc.stdout}


@pytest.mark.slow
def test_a_run_writes_every_table_and_the_embeddings_to_the_bucket(s3, filled):
    keys = _keys(s3, "evalfarm/wh")
    tables = {k.split("/")[3] for k in keys if k.startswith("evalfarm/wh/tables/")}
    assert {"metrics", "quality", "models", "runs", "units", "manifests"} <= tables  # failures: none was written
    for table in ("metrics", "quality"):  # a Delta table each: its log, and one file per unit
        assert any(k.startswith(f"evalfarm/wh/tables/{table}/_delta_log/") for k in keys)
        units = [k for k in keys if k.startswith(f"evalfarm/wh/tables/{table}/data/") and "/data/current/" not in k]
        assert len(units) == 2, units
    # the end-of-run refresh keeps the metrics table's current rows apart: one file of them (the units' files stay
    # in the bucket, out of the snapshot, until a vacuum)
    assert sum(k.startswith("evalfarm/wh/tables/metrics/data/current/") for k in keys) == 1
    assert any(k.startswith("evalfarm/wh/embeddings/model=toy/store=") for k in keys)
    assert all(size > 0 for size in keys.values())
    assert list(filled["cwd"].iterdir()) == []  # nothing written to the driver's disk
    assert filled["requests"].get("PutObject", 0) + filled["requests"].get("CompleteMultipartUpload", 0) > 0


@pytest.mark.slow
def test_sql_correlations_report_and_the_api_read_the_bucket(s3, filled, s3_env, tmp_path):
    import evalfarm

    proc = _cli(s3_env, "sql", "--warehouse", filled["uri"], "--format", "json",
                "SELECT model, task, count(*) AS n FROM metrics GROUP BY ALL ORDER BY task")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = __import__("json").loads(proc.stdout)
    assert [(r["model"], r["task"]) for r in rows] == [("toy", "wordsim-mc-30"), ("toy", "wordsim-rg-65")]
    got = evalfarm.query("SELECT DISTINCT model, task FROM metrics ORDER BY task", warehouse=filled["uri"])
    assert got.to_pylist() == [{"model": "toy", "task": t} for t in ("wordsim-mc-30", "wordsim-rg-65")]
    proc = _cli(s3_env, "correlations", "--warehouse", filled["uri"], "--level", "word")
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = _cli(s3_env, "report", "--warehouse", filled["uri"], "--out", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "toy" in (tmp_path / "report" / "index.html").read_text(encoding="utf-8")


def _plant(s3: S3Server, key: str, table: pa.Table) -> None:
    import pyarrow.parquet as pq

    fs = pafs.FileSystem.from_uri(with_endpoint(f"s3://{key}", s3.env))[0]
    with fs.open_output_stream(key) as out:
        pq.write_table(table, out)


@pytest.mark.slow
def test_the_read_only_sandbox_holds_on_the_bucket(s3, filled, s3_env):
    """The attacks of test_security.py against the s3 warehouse: no write anywhere, no read outside the prefix
    (a sibling prefix sharing the name, another prefix, another bucket, ``..``, a local file), no unlocking."""
    secret = pa.table({"model": ["secret"], "value": [1.0]})
    for key in ("evalfarm/wh-secrets/s.parquet", "evalfarm/other/s.parquet", "other-bucket/wh/s.parquet"):
        _plant(s3, key, secret)
    wh = Warehouse(filled["uri"])
    before = _keys(s3, "evalfarm")
    forged = "s3://evalfarm/wh/tables/metrics/model=evil/task=wordsim-mc-30/forged.parquet"
    copy = f"COPY (SELECT * REPLACE ('evil' AS model) FROM metrics) TO '{forged}'"
    for sql in [f"EXPLAIN ANALYZE {copy}", copy, f"SELECT 1; {copy}", "INSTALL httpfs", f"ATTACH '{forged}.db' AS x",
                "SET enable_external_access=true", "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')"]:  # fmt: skip
        with pytest.raises((PermissionError, ValueError)):
            wh.query(sql)
    for url in [
        "s3://evalfarm/wh-secrets/s.parquet",
        "s3://evalfarm/other/s.parquet",
        "s3://other-bucket/wh/s.parquet",
        "s3://evalfarm/wh/../other/s.parquet",
        "s3://evalfarm/wh/../wh-secrets/s.parquet",
        "s3://evalfarm/*/s.parquet",
        "gs://evalfarm/wh/tables/metrics/_schema.parquet",
        "/etc/hostname",
    ]:
        with pytest.raises(duckdb.Error, match="(?i)permission|disabled|not allowed|outside the warehouse"):
            wh.query(f"SELECT * FROM read_parquet('{url}')")
    con = wh.connect()  # a library user's connection, without the statement check: the lock still holds
    try:
        for sql in ["SET enable_external_access=true", "RESET allowed_directories", "SET lock_configuration=false",
                    f"COPY (SELECT 1 AS x) TO '{forged}'", f"COPY (SELECT 1 AS x) TO '{forged}.csv'"]:  # fmt: skip
            with pytest.raises(duckdb.Error):
                con.execute(sql)
    finally:
        con.close()
    assert _keys(s3, "evalfarm") == before  # nothing written
    n = wh.query("SELECT count(*) AS n FROM read_parquet('s3://evalfarm/wh/tables/metrics/*/*/*.parquet')")
    assert n["n"].to_pylist()[0] > 0  # what is inside stays readable
    proc = _cli(
        s3_env, "sql", "--warehouse", filled["uri"], "SELECT * FROM read_parquet('s3://evalfarm/other/s.parquet')"
    )
    assert proc.returncode != 0 and "secret" not in proc.stdout


@pytest.mark.slow
def test_the_lock_matches_the_one_of_a_local_warehouse(s3, filled, s3_env):
    """`lock_down` on the object-store root: the same allowed prefix a local warehouse gets, with its slash."""
    wh = Warehouse(filled["uri"])
    assert wh.duckdb_root == "s3://evalfarm/wh"
    con = duckdb.connect()
    con.register_filesystem(prefix_filesystem(wh.fs, "s3", "evalfarm/wh"))
    lock_down(con, wh.duckdb_root)
    assert con.sql("SELECT current_setting('allowed_directories')").fetchall() == [(["s3://evalfarm/wh/"],)]
    con.close()


@pytest.mark.slow
def test_two_concurrent_runs_on_one_bucket_compute_each_unit_once(s3, s3_env, data_dir, tmp_path):
    """The object-store lease path (create-then-verify claims): two runs started together split the units."""
    cat = _catalog(tmp_path, data_dir, "wordsim-mc-30, wordsim-rg-65, wordsim-ws353-sim, wordsim-ws353-rel")
    uri = "s3://evalfarm/concurrent"
    args = [
        sys.executable,
        "-m",
        "evalfarm.cli",
        "run",
        "--catalog",
        str(cat),
        "--warehouse",
        uri,
        "--executor",
        "local",
    ]
    env = {**s3_env, "EVALFARM_LEASE_TIMEOUT": "20"}
    procs = [subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    wh = Warehouse(uri)
    units = wh.query("SELECT run_id, task, stage, status FROM units WHERE stage = 'score'").to_pylist()
    done = [u for u in units if u["status"] == "done"]
    assert sorted(u["task"] for u in done) == sorted(
        ["wordsim-mc-30", "wordsim-rg-65", "wordsim-ws353-sim", "wordsim-ws353-rel"]
    )  # each unit computed by exactly one of the two runs
    computed = wh.query("SELECT fingerprint, count(DISTINCT run_id) AS runs FROM metrics_history GROUP BY ALL")
    assert sorted(computed["runs"].to_pylist()) == [1, 1, 1, 1]  # four units, each committed once, by one run
    assert not _keys(s3, "evalfarm/concurrent/leases/unit")  # every claim released


@pytest.mark.slow
def test_a_truncated_object_is_quarantined_and_its_unit_recomputed(s3, s3_env, data_dir, tmp_path):
    cat = _catalog(tmp_path, data_dir)
    uri = "s3://evalfarm/damaged"
    run = ["run", "--catalog", str(cat), "--warehouse", uri, "--executor", "local"]
    assert _cli(s3_env, *run).returncode == 0
    key = str(unit_file(Warehouse(uri), "quality", "toy", "wordsim-mc-30"))
    fs = pafs.FileSystem.from_uri(with_endpoint(f"s3://{key}", s3.env))[0]
    with fs.open_input_stream(key) as fh:
        body = fh.read()
    with fs.open_output_stream(key) as out:
        out.write(body[: len(body) // 2])  # a copy cut short: no footer
    wh = Warehouse(uri)
    con = wh.connect()  # meanwhile the views skip it
    assert con.sql("SELECT count(*) FROM quality").fetchall() == [(1,)]
    con.close()
    assert [q.path for q in wh.excluded] == [key]
    proc = _cli(s3_env, *run)  # the run quarantines it and drops its unit's metrics rows: the unit is computed again
    assert proc.returncode == 0, proc.stderr[-3000:]
    moved = _keys(s3, "evalfarm/damaged/quarantine")
    rel = key[len("evalfarm/damaged/") :]
    assert any(k.endswith(rel) for k in moved) and any(k.endswith(rel + ".why.txt") for k in moved)
    assert "1 done, 1 skipped" in proc.stdout + proc.stderr
    w = Warehouse(uri)
    assert w.query("SELECT count(DISTINCT task) AS n FROM quality")["n"].to_pylist() == [2]
    assert verify_warehouse(w).ok


@pytest.mark.slow
def test_object_store_request_counts_per_unit(s3, filled):
    """The capacity model's object-store figures (benchmarks/README.md) come from these counts: a run of 2 units
    on a fresh warehouse. Bounds, not exact numbers, so a new table file does not fail it."""
    req = filled["requests"]
    writes = req.get("PutObject", 0) + req.get("CompleteMultipartUpload", 0)
    assert 10 <= writes <= 80, req
    assert req.get("ListObjects", 0) <= 600 and req.get("HeadObject", 0) <= 1500, req


@pytest.mark.slow
def test_the_data_folder_may_be_an_object_store_uri(s3, s3_env, data_dir, tmp_path, filled):
    """``EVALFARM_DATA=s3://…``: each task file is copied from the bucket into the node's cache, checksummed, so
    nodes need no shared disk for the data either; the results equal those of the run over the local folder."""
    from evalfarm.catalog.registry import load_catalog

    cat = _catalog(tmp_path, data_dir)
    catalog = load_catalog(cat)
    tasks = [catalog.tasks[t] for t in catalog.default_tasks]
    fs = pafs.FileSystem.from_uri(with_endpoint("s3://evalfarm/data", s3.env))[0]
    for task in tasks:
        for rel in task.files.values():
            with fs.open_output_stream(f"evalfarm/data/{rel}") as out:
                out.write((data_dir / rel).read_bytes())
    env = {**s3_env, "EVALFARM_DATA": "s3://evalfarm/data", "EVALFARM_CACHE": str(tmp_path / "cache")}
    proc = _cli(env, "run", "--catalog", str(cat), "--warehouse", "s3://evalfarm/from-store", "--executor", "local")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert any((tmp_path / "cache" / "data").rglob("*"))  # the copies, in the cache
    sql = "SELECT model, task, variant, metric, value FROM metrics ORDER BY ALL"
    assert Warehouse("s3://evalfarm/from-store").query(sql) == Warehouse(filled["uri"]).query(sql)
    # a file whose bytes differ from the catalog's checksum is refused, not used
    rel = next(iter(tasks[0].files.values()))
    with fs.open_output_stream(f"evalfarm/data/{rel}") as out:
        out.write(b"tampered\n")
    env["EVALFARM_CACHE"] = str(tmp_path / "cache2")
    proc = _cli(env, "run", "--catalog", str(cat), "--warehouse", "s3://evalfarm/tampered", "--executor", "local")
    assert "sha256" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_the_loopback_store_honours_conditional_writes(s3):
    """Delta's commits on S3 rest on ``If-None-Match: *`` (a second PUT of one key fails): the server the tests use
    must refuse it as S3 does, or the concurrency tests below would pass against a store that loses commits."""
    code = (
        "import boto3, os\n"
        "c = boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL'])\n"
        "c.put_object(Bucket='evalfarm', Key='cond/k', Body=b'1', IfNoneMatch='*')\n"
        "try:\n"
        "    c.put_object(Bucket='evalfarm', Key='cond/k', Body=b'2', IfNoneMatch='*'); print('overwritten')\n"
        "except c.exceptions.ClientError as e:\n"
        "    print(e.response['Error']['Code'])\n"
        "print(c.get_object(Bucket='evalfarm', Key='cond/k')['Body'].read().decode())\n"
    )
    from tests.support.s3_server import moto_python

    proc = subprocess.run([moto_python(), "-c", code], env={**os.environ, **s3.env}, capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    assert proc.stdout.split() == ["PreconditionFailed", "1"]


def _append_to_bucket(args: tuple[str, dict[str, str], int, int]) -> None:
    uri, env, writer, n = args
    os.environ.update(env)
    wh = Warehouse(uri)
    for i in range(n):
        wh.write("units", [{"run_id": f"w{writer}", "model": f"m{i}", "task": "t", "stage": "score"}])


@pytest.mark.slow
def test_concurrent_writers_on_the_bucket_lose_and_duplicate_no_row(s3, s3_env):
    """Four processes commit to one table of an ``s3://`` warehouse at once: each commit lands exactly once (the
    store's conditional PUT decides every race; the losers rebase and retry)."""
    import multiprocessing

    uri = "s3://evalfarm/racing"
    Warehouse(uri).init()
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_append_to_bucket, [(uri, s3_env, w, 10) for w in range(4)])
    rows = Warehouse(uri).query("SELECT run_id, model FROM units").to_pylist()
    assert len(rows) == 40 and len({(r["run_id"], r["model"]) for r in rows}) == 40


@pytest.mark.slow
@pytest.mark.faults
def test_vacuum_on_a_bucket_deletes_only_under_the_tables_own_prefix(s3, s3_env):
    """Issue 48: vacuum computes its deletions from the log and the keys under each table's own prefix: a key
    beside the table (a neighbouring prefix, the warehouse's other folders, another bucket) is never deleted, however
    old; a forged log entry naming ``../`` makes the table refused, not a deletion."""
    import time
    from datetime import timedelta

    from evalfarm.warehouse.maintenance import vacuum

    uri = "s3://evalfarm/vac"
    wh = Warehouse(uri).init()
    wh.write("units", [{"run_id": "a", "model": "m"}])
    fs = wh.fs
    planted = ["evalfarm/vac/tables/unitsX/old.parquet", "evalfarm/vac/quarantine/old.parquet",
               "evalfarm/victim/old.parquet", "other-bucket/vac/tables/units/data/old.parquet"]  # fmt: skip
    orphan = "evalfarm/vac/tables/units/data/killed/x.parquet"
    for key in [*planted, orphan]:
        with fs.open_output_stream(key) as out:
            out.write(b"PAR1 old PAR1")
    later = time.time() + 7200
    (units,) = [v for v in vacuum(wh, keep=timedelta(hours=1), now=later) if v.table == "units"]
    assert units.refused is None and units.files == ["data/killed/x.parquet"]
    left = {**_keys(s3, "evalfarm"), **_keys(s3, "other-bucket")}
    assert all(k in left for k in planted) and orphan not in left
    assert wh.query("SELECT model FROM units").column(0).to_pylist() == ["m"]
    log = "evalfarm/vac/tables/units/_delta_log"
    version = max(int(k.rsplit("/", 1)[1][:20]) for k in _keys(s3, log) if k.endswith(".json"))
    with fs.open_output_stream(f"{log}/{version + 1:020d}.json") as out:
        out.write(b'{"add":{"path":"../../../victim/old.parquet","size":13,"partitionValues":{},'
                  b'"modificationTime":0,"dataChange":true}}\n')  # fmt: skip
    (units,) = [v for v in vacuum(wh, keep=timedelta(hours=1), now=later) if v.table == "units"]
    assert units.refused and "add '../../../victim/old.parquet'" in units.refused
    assert "evalfarm/victim/old.parquet" in _keys(s3, "evalfarm")
