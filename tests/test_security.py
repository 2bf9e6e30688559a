"""Attacks that must fail: `evalfarm sql` writing or reading outside the warehouse, and a Ray head driven by anyone.

Each test really tries to get in (a forged result file, a file outside the warehouse, a second statement, an
unauthenticated job submission or ``ray.init``) and checks both the refusal and that nothing happened.
"""

from __future__ import annotations

import contextlib
import http.client as http_client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest

from evalfarm.warehouse import SCHEMAS, Warehouse, check_read_only, lock_down
from tests.support.warehouse_files import table_files

pytestmark = pytest.mark.faults  # issue 23's attack suite (`make faults`)

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
        task="evalrank-word",
        scorer="evalrank",
        subset="all",
        variant="cos",
        ties="optimistic",
        metric="mrr",
        is_primary=True,
        higher_is_better=True,
        value=0.5,
        fingerprint="f" * 16,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    wh.write("metrics", [row])
    return wh


def _metric_models(wh: Warehouse) -> list[tuple[str, float]]:
    return [(r["model"], r["value"]) for r in wh.query("SELECT model, value FROM metrics ORDER BY model").to_pylist()]


def _forge(wh: Warehouse) -> tuple[str, Path]:
    """The reported attack: a COPY that writes a Parquet file where the metrics view reads results."""
    target = Path(wh.root) / "tables" / "metrics" / "model=evil" / "task=evalrank-word" / "forged.parquet"
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
        "EXPLAIN(ANALYZE){copy}",
        "EXPLAIN (FORMAT json, ANALYZE) {copy}",
        "{copy}",
        "SELECT 1; {copy}",
        "SELECT 1 /* ; */; {copy}",
        "EXPLAIN {copy}",
    ],
)
@pytest.mark.slow
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
        "CREATE TABLE t AS PIVOT metrics ON metric USING avg(value)",  # MULTI statements, like a PIVOT
        "COPY (PIVOT metrics ON metric USING avg(value)) TO 'x.csv'",
        "INSERT INTO t PIVOT metrics ON metric USING avg(value)",
        "WITH m AS (FROM metrics) INSERT INTO t PIVOT m ON metric USING avg(value)",
        "PIVOT metrics ON metric USING avg(value); COPY metrics TO 'x.csv'",
        "PIVOT metrics ON metric USING avg(value) -- ; x\n;\nCOPY metrics TO 'x.csv'",
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
    assert sorted(p.name for p in (root / "tables" / "metrics").iterdir()) == ["_delta_log", "data"]


def test_sql_cannot_read_files_outside_the_warehouse(warehouse, tmp_path):
    """SELECTs pass the statement check; DuckDB's sandbox (external access off, one allowed prefix) stops them."""
    sibling = tmp_path / "wh-secrets"  # shares the warehouse's name as a prefix: '/…/wh' must not admit it
    sibling.mkdir()
    (honest,) = table_files(warehouse, "metrics")
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
    # what is inside stays readable: through the views, and a file by its read-only path (the local disk itself is
    # closed to DuckDB: a local warehouse is read through `local-ro://`, see the next tests)
    assert warehouse.query("SELECT count(*) AS n FROM metrics")["n"].to_pylist() == [1]
    inside = f"local-ro://{str(honest).lstrip('/')}"
    assert warehouse.query(f"SELECT count(*) AS n FROM read_parquet('{inside}')")["n"].to_pylist() == [1]


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


def test_a_read_only_connection_cannot_write_into_a_local_warehouse(warehouse):
    """A library user's ``connect()`` runs any statement (no statement check): DuckDB's lock allows writes inside
    its allowed directory, so on a local warehouse ``COPY … TO`` planted a forged metrics file that the views then
    showed, and ``EXPORT DATABASE`` / ``write_parquet`` / ``ATTACH`` wrote beside it. A read-only connection now
    reads a local warehouse through a read-only filesystem, as it reads an object store."""
    root = Path(warehouse.root)
    (honest,) = table_files(warehouse, "metrics")
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    forged = honest.parent / "forged.parquet"
    ro = f"local-ro://{str(root).lstrip('/')}"
    con = warehouse.connect()
    try:
        assert con.sql("SELECT value FROM metrics").fetchall() == [(0.5,)]
        for sql in [
            f"COPY (SELECT * REPLACE (0.99 AS value) FROM metrics) TO '{forged}' (FORMAT parquet)",
            f"COPY (SELECT * REPLACE (0.99 AS value) FROM metrics) TO '{ro}{str(forged)[len(str(root)) :]}'"
            " (FORMAT parquet)",
            f"COPY (SELECT * FROM metrics) TO '{honest}' (FORMAT parquet)",  # overwrite an honest file
            f"COPY (SELECT * FROM metrics) TO '{ro}{str(honest)[len(str(root)) :]}' (FORMAT parquet)",
            f"COPY (SELECT 1 AS x) TO '{root}/x.csv'",
            f"EXPORT DATABASE '{root}/export'",
            f"EXPORT DATABASE '{ro}/export'",
            f"ATTACH '{root}/planted.duckdb' AS x",
            f"ATTACH '{ro}/planted.duckdb' AS x",
        ]:
            with pytest.raises(duckdb.Error, match="(?i)permission|disabled|read-only"):
                con.execute(sql)
        for path in (forged, f"{ro}/y.parquet"):
            with pytest.raises(duckdb.Error, match="(?i)permission|disabled|read-only"):
                con.sql("SELECT 1 AS x").write_parquet(str(path))
        assert con.sql("SELECT value FROM metrics").fetchall() == [(0.5,)]  # and still readable
    finally:
        con.close()
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # nothing written, nothing changed
    assert warehouse.query("SELECT value FROM metrics")["value"].to_pylist() == [0.5]
    # a read-write connection (what runs use internally) still writes: only read_only=True is confined
    con = warehouse.connect(read_only=False)
    try:
        con.execute(f"COPY (SELECT 1 AS x) TO '{root}/rw.csv'")
    finally:
        con.close()
    assert (root / "rw.csv").exists()


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_object_store_warehouses_get_the_same_lock(scheme):
    """The prefix sandbox on an object-store root: only ``scheme://bucket/wh/…`` may be opened.

    The lock is the one ``Warehouse.connect`` applies, on the root it derives from the warehouse URI (pyarrow's
    ``?options`` dropped). No store is registered here (tests/test_object_store.py runs the same attacks through
    ``connect`` against a local S3 server), so the in-prefix read fails for want of a filesystem (not of
    permission); every other URL — another prefix, another bucket, another scheme, a local file — is refused by
    the lock.
    """
    options = "?endpoint_override=127.0.0.1:9&scheme=http" + ("&region=us-east-1" if scheme == "s3" else "")
    wh = Warehouse(f"{scheme}://bucket/wh{options}")
    assert wh.duckdb_root == f"{scheme}://bucket/wh"
    con = duckdb.connect()
    lock_down(con, wh.duckdb_root)
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
        "PIVOT metrics ON metric USING avg(value)",  # one statement (DuckDB parses it as MULTI): issue 23.7
        "PIVOT metrics ON metric USING avg(value);",
        "WITH m AS (FROM metrics) PIVOT m ON metric USING avg(value) GROUP BY model",
        "SELECT * FROM (PIVOT metrics ON metric USING avg(value))",
        "UNPIVOT (SELECT 1 AS a, 2 AS b) ON a, b INTO NAME k VALUE v",
    ]:
        assert warehouse.query(sql).num_rows >= 1, sql
    assert check_read_only("  SELECT 1 ; ").strip() == "SELECT 1 ;"


# -- Ray heads: token authentication and loopback ---------------------------------------------------------------
# `start_head` runs cluster/local/start-head.sh itself (free ports, its own session): tests/support/ray_heads.py.

from tests.support.ray_heads import (  # noqa: E402 - the head helpers every Ray test shares
    head_env,
    http,
    is_loopback,
    listening_sockets,
    routable_ip,
    session_pids,
    start_head,
    stop_head,
)

# The attacker's ray.init: a task that leaves a mark if it ever runs.
ATTACK = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)
@ray.remote
def mark(path):
    open(path, "w").write("ran")
    return "RAN"
print(ray.get(mark.remote(sys.argv[2]), timeout=60), flush=True)
"""


ATTACKER_TRIES = 3
"""How often the attacker's ``ray.init`` asks the GCS before it gives up (Ray's default: 20, about a second apart).
A refused token is refused on every try alike, so more tries prove nothing more; they only cost the suite ~20 s
of waiting per attack."""


def _no_token_env(home: Path, **extra: str) -> dict[str, str]:
    """No token anywhere: no RAY_AUTH_* and a HOME without ~/.ray/auth_token (root's default token file)."""
    home.mkdir(exist_ok=True)
    return head_env(HOME=str(home), **extra)


def _attacker_env(home: Path, **extra: str) -> dict[str, str]:
    """No token anywhere (``_no_token_env``), and an attacker that gives up after ``ATTACKER_TRIES`` refusals."""
    return _no_token_env(home, RAY_NUM_REDIS_GET_RETRIES=str(ATTACKER_TRIES), **extra)


def _ray_init(address: str, mark: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", ATTACK, address, str(mark)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[int | None, str]:
    """(exit code, or None when it was still trying and was killed; output)."""
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out


def _routable_or_skip() -> str:
    """This host's routable address, or an explicit skip: a machine without a default route (a CI sandbox, a
    laptop offline) has no network side to attack from, and the loopback attacks in the other tests still run."""
    ip = routable_ip()
    if ip is None:
        pytest.skip(
            "this machine has no routable address (no default route): the attack from the network cannot be tried"
        )
    return ip


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    h = start_head(tmp_path_factory.mktemp("head"))  # checks, too, that every socket of the head is on loopback
    try:
        yield h
    finally:
        stop_head(h)


@pytest.mark.slow
def test_start_head_listens_on_loopback_only(head):
    """Every listening socket of the head's processes is on 127.0.0.1 (Ray's single-node mode)."""
    sockets = listening_sockets(head.pids())
    print("\n".join(f"{pid:>7} {name:<16} {addr}:{port}" for pid, name, addr, port in sockets))
    ports = {port for *_, port in sockets}
    assert {head.ports["gcs"], head.ports["dashboard"], head.ports["agent_http"], head.ports["node_manager"]} <= ports
    exposed = [s for s in sockets if not is_loopback(s[2])]
    assert not exposed, f"listening beyond loopback: {exposed}"
    # the token: a new random one, readable by this user only, and the client settings beside it
    assert len(head.token) == 64 and int(head.token, 16) >= 0
    assert (head.ray_dir / "auth_token").stat().st_mode & 0o777 == 0o600
    assert (head.ray_dir / "env").stat().st_mode & 0o777 == 0o600
    assert head.ray_dir.stat().st_mode & 0o777 == 0o700


@pytest.mark.slow
def test_job_api_refuses_callers_without_the_token(head, tmp_path):
    """From this machine (another user, a browser page): the job API wants the token."""
    mark = tmp_path / "pwned"
    job = {"entrypoint": f"touch {mark}"}
    for url in (
        f"http://127.0.0.1:{head.ports['agent_http']}/api/job_agent/jobs/",
        f"http://127.0.0.1:{head.ports['dashboard']}/api/jobs/",
    ):
        code, text = http(url, body=job)
        assert code == 401 and "authentication token" in text.lower(), (url, code, text)
        code, _ = http(url, body=job, token="0" * 64)
        assert code in (401, 403), (url, code)
    # and Ray's own CLI without the token
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ray"), "job", "submit", "--address", head.dashboard, "--no-wait", "--"]
        + job["entrypoint"].split(),
        env=_attacker_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "auth" in (proc.stdout + proc.stderr).lower()
    time.sleep(2)
    assert not mark.exists()
    code, text = http(f"{head.dashboard}/api/jobs/", token=head.token)
    assert code == 200 and str(mark) not in text  # no job was ever created


@pytest.mark.slow
def test_nothing_of_the_head_answers_on_the_routable_address(head, tmp_path):
    """From the network: no port of the head accepts a connection there, so neither job API nor GCS can be asked."""
    ip = _routable_or_skip()
    mark = tmp_path / "pwned"
    job = {"entrypoint": f"touch {mark}"}
    for port in sorted({p for *_, p in listening_sockets(head.pids())}):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((ip, port), timeout=5).close()
    assert http(f"http://{ip}:{head.ports['agent_http']}/api/job_agent/jobs/", body=job)[0] == "ConnectionRefusedError"
    assert http(f"http://{ip}:{head.ports['dashboard']}/api/jobs/", body=job)[0] == "ConnectionRefusedError"
    # Ray's own client tries an address where nothing listens for ever: 15 s to do what it cannot
    code, out = _finish(_ray_init(f"{ip}:{head.ports['gcs']}", mark, _attacker_env(tmp_path / "home")), 15)
    assert code != 0 and "RAN" not in out, out[-2000:]  # killed still trying, or refused
    assert not mark.exists()


@pytest.mark.slow
def test_ray_init_refuses_callers_without_the_token(head, tmp_path):
    """GCS (ray.init) on loopback without the token is refused; the same call with the token runs a task.

    The loopback attacker runs in Ray's single-node mode too, or its Ray would rewrite 127.0.0.1 to the routable
    address and never reach the GCS: that is the strongest attempt.
    """
    gcs = head.ports["gcs"]
    tries = {
        "loopback, no token": (
            f"127.0.0.1:{gcs}",
            _attacker_env(tmp_path / "home", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0"),
        ),
        "with the token": (f"127.0.0.1:{gcs}", head.client_env()),
    }
    procs = {}
    for name, (addr, env) in tries.items():
        mark = tmp_path / name.replace(" ", "-").replace(",", "")
        procs[name] = (_ray_init(addr, mark, env), mark)
    # Ray retries a refused token (ATTACKER_TRIES times, a second apart): each gets 90 s to run to its end
    results = {name: (*_finish(proc, 90), mark) for name, (proc, mark) in procs.items()}

    code, out, mark = results["with the token"]
    assert code == 0 and "RAN" in out and mark.exists(), out[-2000:]
    code, out, mark = results["loopback, no token"]
    assert code not in (0, None) and not mark.exists(), out[-2000:]
    assert "Failed to connect to Ray cluster" in out and re.search(r"Unauthenticated|InvalidAuthToken", out)


# -- evalfarm's own local Ray (`evalfarm run` without --address) -----------------------------------------------------

OWN_RAY = """
import json, os, sys
from evalfarm.scheduler.ray_executor import connect
import ray
assert connect(None, num_cpus=1)
node = ray._private.worker._global_node
agent = node.dashboard_agent_listen_port  # -1 when the agent registered late (a loaded machine): see below
token = os.environ["RAY_AUTH_TOKEN_PATH"]
mode = oct(os.stat(token).st_mode & 0o777)
folder = oct(os.stat(os.path.dirname(token)).st_mode & 0o777)
print(json.dumps({"gcs": node.gcs_address, "agent": agent, "token": token,
                  "mode": mode, "dir": folder, "ip": ray.util.get_node_ip_address()}), flush=True)
sys.stdin.readline()
ray.shutdown()
"""


class OwnRay:
    """A driver process that called ``connect(None)`` and holds its local Ray until ``stop``."""

    def __init__(self, home: Path) -> None:
        self.stderr = ""
        self.proc = subprocess.Popen(
            [sys.executable, "-c", OWN_RAY],
            env=_no_token_env(home),  # no token of its own: connect makes one (and waits for its GCS as usual)
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        line = self.proc.stdout.readline()
        if not line:
            self.stop()
            raise RuntimeError(f"the driver did not start its Ray:\n{self.stderr[-3000:]}")
        self.info = json.loads(line)
        self.sockets = listening_sockets(session_pids(self.proc.pid))

    def stop(self) -> int:
        if self.proc.returncode is None:
            try:
                _, self.stderr = self.proc.communicate("\n", timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                _, self.stderr = self.proc.communicate()
        return self.proc.returncode


@pytest.fixture(scope="module")
def own_ray(tmp_path_factory):
    ray_ = OwnRay(tmp_path_factory.mktemp("own-ray-home"))
    try:
        yield ray_
    finally:
        ray_.stop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(ray_.proc.pid, signal.SIGKILL)  # what its Ray left behind, if anything


@pytest.mark.slow
def test_evalfarms_own_local_ray_is_closed_too(own_ray, tmp_path):
    """`evalfarm run` without --address starts its own Ray: token per head (0600 file), every server on loopback."""
    info, sockets = own_ray.info, own_ray.sockets
    assert info["mode"] == "0o600" and info["dir"] == "0o700" and info["ip"] == "127.0.0.1"
    print("\n".join(f"{pid:>7} {name:<16} {addr}:{port}" for pid, name, addr, port in sockets))
    # the agent's HTTP port as the node reports it; when it reports none (-1: the agent registered after the
    # node, as on a loaded machine), every port the dashboard agent's process listens on is attacked
    agent_ports = [info["agent"]] if info["agent"] > 0 else [p for _, n, _, p in sockets if "DashboardA" in n]
    assert agent_ports and int(info["gcs"].rsplit(":", 1)[1]) in {port for *_, port in sockets}
    assert set(agent_ports) <= {port for *_, port in sockets}
    assert all(is_loopback(addr) for _, _, addr, _ in sockets), sockets

    mark = tmp_path / "pwned"
    attack = _ray_init(info["gcs"], mark, _attacker_env(tmp_path / "home", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0"))

    def job_post(port: int) -> tuple[object, str]:
        try:
            return http(f"http://127.0.0.1:{port}/api/job_agent/jobs/", body={"entrypoint": f"touch {mark}"})
        except http_client.HTTPException as exc:  # the agent's gRPC port answers HTTP/1.1 with binary frames
            return type(exc).__name__, ""

    answers = [job_post(port) for port in agent_ports]
    assert not [a for a in answers if isinstance(a[0], int) and a[0] < 400], answers  # nothing accepts a job
    if info["agent"] > 0:
        assert answers[0][0] == 401, answers  # the job API is there and refuses the caller without the token
    code, out = _finish(attack, 45)
    assert code not in (0, None) and re.search(r"Unauthenticated|InvalidAuthToken", out), out[-2000:]
    assert not mark.exists()


@pytest.mark.slow
def test_evalfarms_own_local_ray_is_unreachable_from_the_network(own_ray):
    ip = _routable_or_skip()
    for *_, port in own_ray.sockets:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((ip, port), timeout=5).close()


@pytest.mark.slow
def test_evalfarms_own_local_ray_ends_with_its_token_and_no_warning(own_ray):
    """Run last of the three: it stops the driver. The token goes with it, and Ray never warned about tokens."""
    assert own_ray.stop() == 0, own_ray.stderr[-3000:]
    assert "Token authentication is" not in own_ray.stderr, own_ray.stderr[-3000:]  # Ray's warning (issue 13)
    assert not Path(own_ray.info["token"]).exists()


@pytest.mark.parametrize(
    "tag",
    ["!!python/object/apply:os.system", "!!python/object/new:os.system", "!!python/name:os.system"],
)
def test_a_catalog_cannot_run_code_through_yaml_tags(tmp_path, tag):
    """Catalogs are parsed with a safe loader (libyaml's when present): a Python tag is an error, never a call."""
    from evalfarm.catalog.registry import CatalogError, load_catalog

    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.yaml"
    evil.write_text(f'name: evil\nmodels:\n  - {tag} ["touch {marker}"]\n', encoding="utf-8")
    with pytest.raises(CatalogError, match=r"evil\.yaml line 3: not valid YAML"):
        load_catalog(evil)
    assert not marker.exists()


@pytest.mark.parametrize("shape", ["chain", "cycle"])
def test_a_3000_deep_base_chain_fails_in_one_short_line(tmp_path, shape):
    """Issue 40: 3,000 models each deriving from the next validated, then failed at load with a RecursionError
    whose message named every model (22 KB in `failures`, the output and the report); a 3,000-model cycle gave 26 KB.
    """
    from typer.testing import CliRunner

    from evalfarm.catalog.registry import CatalogError, load_catalog
    from evalfarm.cli import app

    n = 3000
    derived = "  - {{id: m{i}, level: word, base: m{base}, postprocess: {{method: abtt, d: 1}}}}"
    if shape == "chain":  # m2999 -> m2998 -> ... -> m0, a word-vector file
        root = "  - {id: m0, level: word, kind: word-vectors, format: glove-text, source: {type: data, ref: v.txt}}"
        models = [root] + [derived.format(i=i, base=i - 1) for i in range(1, n)]
    else:  # m0 -> m1 -> ... -> m2999 -> m0
        models = [derived.format(i=i, base=(i + 1) % n) for i in range(n)]
    catalog = tmp_path / "deep.yaml"
    catalog.write_text("models:\n" + "\n".join(models) + "\n")
    with pytest.raises(CatalogError, match=r"base chain \(m\d+ -> m\d+ -> m\d+ -> …\) is deeper than 16") as err:
        load_catalog(catalog)
    assert len(str(err.value)) < 300
    out = CliRunner().invoke(app, ["catalog", "validate", "--catalog", str(catalog)])
    assert out.exit_code != 0 and len(out.output) < 400 and "deeper than 16" in out.output, out.output[:500]


EVIL_TOKENIZER = """
import pathlib, sys
pathlib.Path(sys.argv[1]).write_text("ran")  # what a tokenizer's custom code could do
from transformers import PreTrainedTokenizer
class EvilTokenizer(PreTrainedTokenizer):
    pass
"""

LOAD_ONNX = """
import sys
from evalfarm.catalog.specs import ModelSpec
from evalfarm.encoders.loader import load_encoder
spec = ModelSpec.model_validate({"id": "evil", "level": "sentence", "kind": "onnx",
    "source": {"type": "path", "ref": sys.argv[1]}, "tokenizer": {"type": "path", "ref": sys.argv[2]}})
try:
    load_encoder([spec])
except Exception as exc:
    print("refused:", str(exc).splitlines()[0])
"""


@pytest.mark.slow  # a child process with transformers
def test_an_onnx_models_tokenizer_never_runs_custom_code_even_when_asked_yes(tmp_path):
    """Issue 40: the ONNX kind loaded a tokenizer folder with trust_remote_code unset; transformers then *asks*
    whether to run the folder's code, and `echo y |` (a piped stdin) answered yes. It is now explicitly False."""
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    (tok / "tokenizer_config.json").write_text(
        json.dumps({"auto_map": {"AutoTokenizer": ["evil.EvilTokenizer", None]}, "tokenizer_class": "EvilTokenizer"})
    )
    marker = tmp_path / "pwned"
    (tok / "evil.py").write_text(EVIL_TOKENIZER.replace("sys.argv[1]", repr(str(marker))))
    (tmp_path / "model.onnx").write_bytes(b"not a graph")
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_ONNX, str(tmp_path / "model.onnx"), str(tok)],
        input="y\ny\ny\n", capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert not marker.exists(), "the tokenizer's code ran"
    assert "refused:" in proc.stdout and "contains custom code" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "Do you wish to run the custom code" not in proc.stdout + proc.stderr  # never asked


# -- a catalog cannot make evalfarm read or write outside its base (issue 23, item 1) ---------------------------------
# The attack: a third-party catalog names an attacker's URL, its payload's sha256 and a `files:` path that points
# outside the data folder / the cache (absolute, `..`, `~`, or a symlink planted inside the folder). Every target here
# lies inside tmp_path, never the real home.

PAYLOAD = b"echo pwned-by-a-catalog\n"
SECRET = "TOPSECRET first line of a file outside the data folder"


def _entry(files: str, *, sha: str, url: str | None = None, tid: str = "evil", version: str = '"1"') -> str:
    urls = f", urls: {{pairs: '{url}'}}" if url else ""
    return (
        f"  - {{id: '{tid}', level: word, kind: word-similarity, version: {version}, licence: x, source: x,\n"
        f"      files: {{pairs: '{files}'}}, sha256: {{pairs: {sha}}}{urls}}}\n"
    )


def _catalog(tmp_path: Path, tasks: str, *, model_id: str = "toy") -> Path:
    toy = REPO.parent / "shared" / "data" / "evalrank" / "reference" / "toy_emb.txt"
    path = tmp_path / "third-party.yaml"
    path.write_text(
        f"tasks:\n{tasks}models:\n  - {{id: '{model_id}', level: word, kind: word-vectors, format: glove-text,"
        f" source: {{type: path, ref: '{toy}'}}}}\n"
    )
    return path


def _validate(catalog: Path) -> tuple[int, str]:
    """`evalfarm catalog validate` in process: its exit code and what it printed."""
    from typer.testing import CliRunner

    from evalfarm.cli import app

    res = CliRunner().invoke(app, ["catalog", "validate", "--catalog", str(catalog)])
    return res.exit_code, res.output


@contextlib.contextmanager
def _serving(folder: Path) -> Iterator[str]:
    from tests.support.http_files import serve

    with serve(folder) as base:
        yield base


@pytest.fixture
def attacker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """The attacker's server (plain http on loopback, allowed here so the scheme is not what stops the attack):
    (URL of the payload, its sha256); no data folder, a cache and a HOME inside tmp_path."""
    import hashlib

    served = tmp_path / "served"
    served.mkdir()
    (served / "payload.sh").write_bytes(PAYLOAD)
    monkeypatch.delenv("EVALFARM_DATA", raising=False)
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EVALFARM_ALLOW_HTTP", "1")
    with _serving(served) as base:
        yield f"{base}/payload.sh", hashlib.sha256(PAYLOAD).hexdigest()


def _planted(tmp_path: Path) -> list[Path]:
    return [p for p in tmp_path.rglob("*") if p.is_file() and p.read_bytes() == PAYLOAD and "served" not in p.parts]


def _wordsim(**update: Any) -> Any:
    """A shipped task with attacker fields, built without validation (as a plug-in or API caller could)."""
    from evalfarm.catalog.registry import load_catalog

    return load_catalog("tasks").task("wordsim-mc-30").model_copy(update=update)


@pytest.mark.parametrize("where", ["absolute", "dotdot", "tilde"])
def test_a_catalog_cannot_plant_a_downloaded_file_outside_the_cache(tmp_path, attacker, where):
    from evalfarm.catalog.registry import CatalogError, load_catalog
    from evalfarm.taskdata import load_task
    from evalfarm.taskdata.data import TaskDataError

    url, sha = attacker
    target = tmp_path / "home" / ".bashrc"
    files = {
        "absolute": str(target),
        "dotdot": "../../../../home/.bashrc",  # <cache>/tasks/evil/1/ + 4 x '..' = tmp_path
        "tilde": "~/.bashrc",
    }[where]
    catalog = _catalog(tmp_path, _entry(files, sha=sha, url=url))
    with pytest.raises(CatalogError) as err:
        load_catalog(catalog)
    said = str(err.value)
    assert "third-party.yaml" in said and "'evil'" in said and "'pairs'" in said, said
    code, out = _validate(catalog)
    assert code != 0 and "'evil'" in out and " ok" not in out, out
    with pytest.raises(TaskDataError, match="'evil'"):  # and at use, for a spec that skipped validation
        load_task(_wordsim(id="evil", version="1", files={"pairs": files}, sha256={"pairs": sha}, urls={"pairs": url}))
    assert _planted(tmp_path) == [] and not target.exists()


@pytest.mark.parametrize("scheme", ["file", "ftp", "gopher", "http"])
def test_only_https_urls_are_fetched(tmp_path, monkeypatch, scheme):
    """file:// would read any local file into the cache; http only with the documented opt-in."""
    from evalfarm.cache import UnsafeLocation, download
    from evalfarm.catalog.registry import CatalogError, load_catalog
    from evalfarm.taskdata import load_task
    from evalfarm.taskdata.data import TaskDataError

    monkeypatch.delenv("EVALFARM_DATA", raising=False)
    monkeypatch.delenv("EVALFARM_ALLOW_HTTP", raising=False)
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET + "\n")
    url = secret.as_uri() if scheme == "file" else f"{scheme}://127.0.0.1:9/secret.txt"
    import hashlib

    sha = hashlib.sha256(secret.read_bytes()).hexdigest()
    catalog = _catalog(tmp_path, _entry("wordsim/x.txt", sha=sha, url=url))
    with pytest.raises(CatalogError, match="EVALFARM_ALLOW_HTTP" if scheme == "http" else "only https"):
        load_catalog(catalog)
    assert _validate(catalog)[0] != 0
    with pytest.raises(UnsafeLocation):
        download(url, tmp_path / "cache" / "got.txt", sha)
    spec = _wordsim(id="evil", files={"pairs": "x.txt"}, sha256={"pairs": sha}, urls={"pairs": url})
    with pytest.raises(TaskDataError, match="not downloaded"):
        load_task(spec)
    assert not (tmp_path / "cache").exists() or not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))


def test_http_is_fetched_only_with_the_opt_in(tmp_path, attacker, monkeypatch):
    from evalfarm.cache import download

    url, sha = attacker
    assert download(url, tmp_path / "got.sh", sha) == sha  # EVALFARM_ALLOW_HTTP=1 (the fixture)
    monkeypatch.delenv("EVALFARM_ALLOW_HTTP")
    from evalfarm.cache import UnsafeLocation

    with pytest.raises(UnsafeLocation, match="EVALFARM_ALLOW_HTTP=1"):
        download(url, tmp_path / "again.sh", sha)
    assert not (tmp_path / "again.sh").exists()


@pytest.fixture
def data_with_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A data folder, and beside it a file the catalog should not reach (its sha256 known to the attacker)."""
    import hashlib

    data = tmp_path / "data"
    (data / "wordsim").mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET + "\nmore\n")
    monkeypatch.setenv("EVALFARM_DATA", str(data))
    return data, hashlib.sha256(secret.read_bytes()).hexdigest()


@pytest.mark.parametrize("files", ["../secret.txt", "wordsim/../../secret.txt", "{tmp}/secret.txt"])
def test_a_catalog_cannot_read_a_file_outside_the_data_folder(tmp_path, data_with_secret, files):
    from evalfarm.catalog.registry import CatalogError, load_catalog
    from evalfarm.taskdata import load_task
    from evalfarm.taskdata.data import TaskDataError

    _, sha = data_with_secret
    files = files.format(tmp=tmp_path)
    catalog = _catalog(tmp_path, _entry(files, sha=sha))
    with pytest.raises(CatalogError, match=r"'evil'.*'pairs'"):
        load_catalog(catalog)
    code, out = _validate(catalog)
    assert code != 0 and SECRET not in out
    with pytest.raises(TaskDataError, match="'evil'") as err:
        load_task(_wordsim(id="evil", files={"pairs": files}, sha256={"pairs": sha}))
    assert SECRET not in str(err.value) and "TOPSECRET" not in str(err.value)


@pytest.mark.parametrize("link", ["file", "folder"])
def test_a_symlink_inside_the_data_folder_cannot_lead_outside(tmp_path, data_with_secret, link):
    """The path is checked once resolved: a link planted in the data folder (a file, or a folder on the way)."""
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.taskdata import load_task
    from evalfarm.taskdata.data import TaskDataError

    data, sha = data_with_secret
    if link == "file":
        (data / "wordsim" / "pairs.txt").symlink_to(tmp_path / "secret.txt")
        files = "wordsim/pairs.txt"
    else:
        (data / "outside").symlink_to(tmp_path)
        files = "outside/secret.txt"
    load_catalog(_catalog(tmp_path, _entry(files, sha=sha)))  # a plain relative path: only its target tells
    with pytest.raises(TaskDataError, match="resolves outside") as err:
        load_task(_wordsim(id="evil", files={"pairs": files}, sha256={"pairs": sha}))
    assert "TOPSECRET" not in str(err.value)


def test_a_symlink_in_the_cache_cannot_redirect_a_download(tmp_path, attacker):
    from evalfarm.taskdata import load_task
    from evalfarm.taskdata.data import TaskDataError

    url, sha = attacker
    outside = tmp_path / "outside"
    outside.mkdir()
    task_dir = tmp_path / "cache" / "tasks" / "evil" / "1"
    task_dir.mkdir(parents=True)
    (task_dir / "sub").symlink_to(outside)
    with pytest.raises(TaskDataError, match="resolves outside"):
        load_task(_wordsim(id="evil", version="1", files={"pairs": "sub/pairs.txt"}, sha256={"pairs": sha},
                           urls={"pairs": url}))  # fmt: skip
    assert _planted(tmp_path) == []


@pytest.mark.parametrize(
    ("what", "tid", "version", "model_id"),
    [
        ("long task id", "t" * 300, '"1"', "toy"),
        ("long model id", "evil", '"1"', "m" * 300),
        ("long version", "evil", "'" + "1" * 300 + "'", "toy"),
        ("version with a slash", "evil", '"../../x"', "toy"),
        ("version with a space", "evil", '"1 0"', "toy"),
    ],
)
def test_ids_and_versions_are_short_slugs(tmp_path, data_with_secret, what, tid, version, model_id):
    """Each becomes a file-name segment: a 300-character id used to validate, then fail with "File name too long"."""
    from evalfarm.catalog.registry import CatalogError, load_catalog

    catalog = _catalog(tmp_path, _entry("wordsim/x.txt", sha="0" * 64, tid=tid, version=version), model_id=model_id)
    with pytest.raises(CatalogError, match="at most 100 characters|should match pattern"):
        load_catalog(catalog)
    assert _validate(catalog)[0] != 0


@pytest.mark.parametrize("ref", ["../secret.txt", "/etc/hostname", "~/.ssh/id_rsa", "link/secret.txt"])
def test_a_data_model_source_stays_inside_the_data_folder(tmp_path, data_with_secret, ref):
    from evalfarm.catalog.specs import Source
    from evalfarm.encoders.protocol import ModelLoadError
    from evalfarm.encoders.sources import resolve_source

    data, _ = data_with_secret
    (data / "link").symlink_to(tmp_path)
    if ref.startswith("link/"):
        src = Source(type="data", ref=ref)  # valid as written: the symlink is found at use
    else:
        with pytest.raises(ValueError, match="absolute|'\\.\\.'|'~'"):
            Source(type="data", ref=ref)
        src = Source.model_construct(type="data", ref=ref, path=None, sha256=None, verify=True)
    with pytest.raises(ModelLoadError, match="outside|absolute|'\\.\\.'|'~'"):
        resolve_source(src)
    with pytest.raises(ValueError, match="'\\.\\.'"):
        Source(type="data", ref="vectors", path="../../secret.txt")


# -- issue 23.7: the smaller holes of `evalfarm sql` --------------------------------------------------------------
_CROSS_JOIN = "SELECT count(*) AS n FROM range(100000000) a, range(100000000) b"


_RUNAWAY = """
import sys, time
import evalfarm

t0 = time.monotonic()
try:
    evalfarm.query(sys.argv[2], warehouse=sys.argv[1], timeout_s=1.0)
except TimeoutError as exc:
    print("stopped", round(time.monotonic() - t0, 1), exc)
print(evalfarm.query("SELECT 1 AS one", warehouse=sys.argv[1]).to_pylist())
"""


@pytest.mark.slow  # a child process running a query until it is stopped (seconds)
def test_a_runaway_query_stops_at_its_timeout(warehouse):
    """A cross join of two 10^8 ranges runs for hours; the timeout stops it within a second of the limit. (In a
    child process: DuckDB's worker threads keep their memory, which the RSS checks of later tests would count.)"""
    proc = subprocess.run(
        [sys.executable, "-c", _RUNAWAY, str(warehouse.root), _CROSS_JOIN],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    stopped, answer = proc.stdout.strip().splitlines()
    assert stopped.startswith("stopped") and "--timeout" in stopped, stopped
    assert float(stopped.split()[1]) < 10
    assert answer == "[{'one': 1}]"  # the warehouse still answers


def test_the_query_limits_have_defaults_and_settings(monkeypatch):
    from evalfarm.warehouse.sandbox import DEFAULT_MEMORY_LIMIT, DEFAULT_TIMEOUT_S, QueryLimits

    assert QueryLimits.resolve() == QueryLimits(DEFAULT_TIMEOUT_S, DEFAULT_MEMORY_LIMIT)
    assert DEFAULT_TIMEOUT_S > 0 and DEFAULT_MEMORY_LIMIT
    monkeypatch.setenv("EVALFARM_SQL_TIMEOUT", "7")
    monkeypatch.setenv("EVALFARM_SQL_MEMORY_LIMIT", "1GB")
    assert QueryLimits.resolve() == QueryLimits(7.0, "1GB")
    assert QueryLimits.resolve(0, "2GB") == QueryLimits(None, "2GB")  # an option wins; 0 is "no limit"


def test_a_query_past_its_memory_limit_fails_cleanly(warehouse):
    """The cap is DuckDB's: an aggregation that needs more than it stops with MemoryError, not the machine's RAM."""
    big = "SELECT list(i) AS l FROM range(50000000) t(i)"
    with pytest.raises(MemoryError, match="--memory-limit"):
        warehouse.query(big, memory_limit="64MB")


# -- issue 40.5: a query's result is bounded too ------------------------------------------------------------------
def test_a_querys_result_stops_at_its_row_limit_under_the_memory_cap(warehouse):
    """The reported attack: ``SELECT … FROM range(N)`` passed a 100 MB memory cap at 900 MB (the Arrow result and
    the CLI's rows live outside DuckDB's cap). Now the result is fetched in batches and stops past 1,000,000 rows."""
    import evalfarm
    from evalfarm.warehouse.sandbox import ResultTooLarge

    big = "SELECT range AS i FROM range(20000000)"
    with pytest.raises(ResultTooLarge, match=r"limit of 1,000,000 rows .*--max-rows.*EVALFARM_SQL_MAX_ROWS") as err:
        evalfarm.query(big, warehouse=warehouse.root, memory_limit="100MB")
    assert isinstance(err.value, MemoryError)  # what a caller of the memory cap already catches
    assert evalfarm.query("SELECT * FROM range(10)", warehouse=warehouse.root, max_rows=10).num_rows == 10
    with pytest.raises(ResultTooLarge, match="limit of 9 rows"):
        evalfarm.query("SELECT * FROM range(10)", warehouse=warehouse.root, max_rows=9)
    wide = "SELECT range AS i, repeat('x', 200) AS s FROM range(500000)"
    with pytest.raises(ResultTooLarge, match=r"limit of 8,000,000 bytes .*--max-bytes.*EVALFARM_SQL_MAX_BYTES"):
        evalfarm.query(wide, warehouse=warehouse.root, max_bytes="8MB")
    assert evalfarm.query(wide, warehouse=warehouse.root, max_bytes=0).num_rows == 500000  # 0: no limit


def test_the_result_limits_are_options_variables_and_settings(warehouse, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from evalfarm.cli import app
    from evalfarm.warehouse.sandbox import QueryLimits, result_limits

    assert QueryLimits.resolve().max_rows == 1_000_000 and QueryLimits.resolve().max_bytes == 10**9
    monkeypatch.setenv("EVALFARM_SQL_MAX_ROWS", "5")
    monkeypatch.setenv("EVALFARM_SQL_MAX_BYTES", "1MiB")
    assert (QueryLimits.resolve().max_rows, QueryLimits.resolve().max_bytes) == (5, 2**20)
    with result_limits(7, 0):  # what evalfarm.query passes down; an argument still wins
        assert (QueryLimits.resolve().max_rows, QueryLimits.resolve(max_rows=3).max_rows) == (7, 3)
        assert QueryLimits.resolve().max_bytes is None
    runner = CliRunner()
    out = runner.invoke(app, ["sql", "--warehouse", str(warehouse.root), "SELECT * FROM range(6)"])
    assert out.exit_code == 2 and "limit of 5 rows" in out.output and "Traceback" not in out.output
    out = runner.invoke(app, ["sql", "--warehouse", str(warehouse.root), "--max-rows", "6", "SELECT * FROM range(6)"])
    assert out.exit_code == 0, out.output
    monkeypatch.delenv("EVALFARM_SQL_MAX_ROWS")
    monkeypatch.delenv("EVALFARM_SQL_MAX_BYTES")
    cfg = tmp_path / ".evalfarm.toml"
    cfg.write_text('sql_max_rows = 4\nsql_max_bytes = "1GB"\n')
    monkeypatch.setenv("EVALFARM_CONFIG", str(cfg))
    out = runner.invoke(app, ["sql", "--warehouse", str(warehouse.root), "SELECT * FROM range(5)"])
    assert out.exit_code == 2 and "limit of 4 rows" in out.output and "sql_max_rows" in out.output
    out = runner.invoke(app, ["sql", "--warehouse", str(warehouse.root), "--max-bytes", "lots", "SELECT 1"])
    assert out.exit_code == 2 and "sql_max_bytes must be a size" in out.output


@pytest.mark.slow  # a child process fetching until it is stopped (seconds)
def test_fetching_a_result_stops_at_the_timeout(warehouse):
    """With no row or byte limit, the fetch itself (not only the query) is under the timeout."""
    code = (
        "import sys, evalfarm\n"
        "try:\n"
        "    evalfarm.query(sys.argv[2], warehouse=sys.argv[1], timeout_s=1.0, max_rows=0, max_bytes=0,"
        " memory_limit='16GB')\n"
        "except TimeoutError as exc:\n"
        "    print('stopped', exc)\n"
    )
    endless = "SELECT range AS i, md5(range::VARCHAR) AS h FROM range(10000000000)"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(warehouse.root), endless], capture_output=True, text=True, cwd=REPO,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("stopped") and "--timeout" in proc.stdout, proc.stderr


def test_the_statement_check_does_not_parse_a_200000_term_query(warehouse, monkeypatch):
    """Parsing ran outside the timeout and the memory cap: an OR of 200,000 terms took seconds and gigabytes in
    DuckDB's parser before anything else. The check refuses a query that long before the parser sees it."""
    from typer.testing import CliRunner

    from evalfarm.cli import app

    huge = "SELECT 1 WHERE " + " OR ".join(["1 = 1"] * 200_000)
    parsed: list[int] = []
    real = duckdb.extract_statements
    monkeypatch.setattr(duckdb, "extract_statements", lambda sql: parsed.append(len(sql)) or real(sql))
    with pytest.raises(ValueError, match=r"refused: the query is 1,\d{3},\d{3} characters long, and at most 100,000"):
        check_read_only(huge)
    out = CliRunner().invoke(app, ["sql", "--warehouse", str(warehouse.root), huge])
    assert out.exit_code == 2 and "characters long" in out.output and len(out.output) < 400
    assert parsed == []  # the parser never saw it
    assert check_read_only("SELECT 1 WHERE " + " OR ".join(["1 = 1"] * 5_000)).startswith("SELECT")


_TAKES_CTRL_C = (
    "import os, signal, sys; "
    "ignored, blocked = signal.getsignal(signal.SIGINT) is signal.SIG_IGN, "
    "signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []); "
    "print(f'inherited SIGINT: ignored={ignored} blocked={blocked}', file=sys.stderr, flush=True); "
    "signal.signal(signal.SIGINT, signal.SIG_DFL); signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT]); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


def _taking_ctrl_c(cmd: list[str]) -> list[str]:
    """``cmd`` (``sys.executable`` and its arguments) run as a terminal would: Ctrl-C neither ignored nor blocked.
    A process started in the background by a non-interactive shell ignores SIGINT, and so does every process it
    starts (Python then installs no KeyboardInterrupt handler): the Ctrl-C tests timed out in such a suite. The
    launcher says what it inherited on stderr, sets SIGINT back and execs ``cmd`` (the same pid)."""
    assert cmd[0] == sys.executable
    return [sys.executable, "-c", _TAKES_CTRL_C, *cmd[1:]]


@pytest.mark.slow  # a child process running a query until it is stopped (seconds)
def test_sql_cli_takes_the_limits_and_stops_at_ctrl_c(warehouse):
    """Ctrl-C stops a running cross join within a second (it took 111 s when DuckDB had to notice the signal)."""
    cmd = [sys.executable, "-m", "evalfarm.cli", "sql", "--warehouse", str(warehouse.root)]
    proc = subprocess.run([*cmd, "--timeout", "1", _CROSS_JOIN], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode != 0 and "1 s limit" in proc.stderr, proc.stderr
    proc = subprocess.Popen(
        _taking_ctrl_c([*cmd, "--timeout", "0", _CROSS_JOIN]), cwd=REPO, stderr=subprocess.PIPE, text=True
    )
    time.sleep(8)  # the interpreter starts, opens the warehouse and runs the join
    assert proc.poll() is None
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    assert time.monotonic() - t0 < 2, "Ctrl-C took more than a second to stop the query"
    assert proc.returncode != 0


_EARLY_CTRL_C = f"""
import os, signal, threading, time
import duckdb
from evalfarm.warehouse import sandbox as query

real_fetch = query._fetch
ended = threading.Event()
def late_fetch(con, statement, limits):  # Ctrl-C while the main thread waits, then the statement starts
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.5)
    try:
        return real_fetch(con, statement, limits)
    finally:
        ended.set()
query._fetch = late_fetch
try:
    query.run_limited(duckdb.connect(), {_CROSS_JOIN!r}, 0)
except KeyboardInterrupt:
    print("stopped", "and ended" if ended.is_set() else "but still running")
"""


def test_a_ctrl_c_before_the_query_starts_still_stops_it():
    """A Ctrl-C in the moment before the statement starts (CI sent one while the CLI was starting its query) let
    the cross join run on past the test's 30 s: DuckDB drops an interrupt that comes before its statement, and
    Python 3.11's interrupted ``join()`` marks the running thread stopped, so nothing waited for it to end."""
    cmd = _taking_ctrl_c([sys.executable, "-c", _EARLY_CTRL_C])
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.stdout.strip() == "stopped and ended", proc.stderr


def test_sql_cannot_read_duckdbs_temp_directory(warehouse, tmp_path, monkeypatch):
    """DuckDB's default spill folder, ``<cwd>/.tmp/``, was readable under the lock: a query could read any file a
    user (or another program) kept in the current folder's ``.tmp/``."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "secret.csv").write_text("token\nhunter2\n")
    for sql in ["SELECT * FROM read_csv('.tmp/secret.csv')", f"SELECT * FROM read_csv('{tmp_path}/.tmp/secret.csv')"]:
        with pytest.raises(duckdb.Error, match="(?i)permission|disabled"):
            warehouse.query(sql)


def test_a_read_only_query_never_writes_into_the_warehouse(warehouse):
    """`evalfarm sql` once recreated missing ``_schema.parquet`` files: a read-only open must write nothing (no
    schema file, no pin, no checkpoint), and the views still have every column (a private typed empty file is read
    beside each table's snapshot, so a column no file has yet exists too)."""
    root = Path(warehouse.root)
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    assert _metric_models(warehouse) == [("honest", 0.5)]
    assert warehouse.query("SELECT count(*) AS n FROM failures").to_pylist() == [{"n": 0}]
    described = {r["column_name"] for r in warehouse.query("DESCRIBE failures").to_pylist()}
    assert set(SCHEMAS["failures"].names) <= described
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("name", ["wh[1]", "wh*", "wh?"])
def test_a_warehouse_path_with_glob_characters_is_a_path(tmp_path, name):
    """`evalfarm sql` on a warehouse at ``wh[1]`` failed (DuckDB read the root as a glob pattern); it must read
    that warehouse, and only it (not ``wh1`` beside it)."""
    wh = Warehouse(tmp_path / name).init()
    decoy = Warehouse(tmp_path / "wh1").init()
    for w, model in ((wh, "mine"), (decoy, "decoy")):
        row = {n: None for n in SCHEMAS["metrics"].names}
        row.update(model=model, task="t", metric="mrr", value=0.5, fingerprint="f" * 16, run_id="r")
        w.write("metrics", [row])
    assert [r["model"] for r in wh.query("SELECT model FROM metrics").to_pylist()] == ["mine"]
    escaped = "".join(f"[{c}]" if c in "[*?" else c for c in name)
    for outside in (f"{tmp_path}/wh1", f"{tmp_path}/{escaped}/../wh1", f"{tmp_path}/{name}/../wh1"):
        with pytest.raises(duckdb.Error):  # the lock still holds: no way into the decoy beside it
            wh.query(f"SELECT model FROM read_parquet('{outside}/tables/metrics/**/*.parquet')")
    (bad,) = table_files(wh, "metrics")
    bad.write_bytes(b"PAR1 truncated")  # the excluded-files path lists files, each a glob too
    assert wh.query("SELECT count(*) AS n FROM metrics").to_pylist() == [{"n": 0}]


def test_a_missing_or_wrong_ray_token_is_reported_as_the_token(monkeypatch):
    """Ray's own refusal, as ``ray.init`` raises it (a ConnectionError caused by the GCS's InvalidAuthToken), was
    worded "cannot reach the Ray cluster": the user then restarts a head that is running. Say it is the token."""
    import ray

    from evalfarm.scheduler import ray_executor

    def refused(**_: Any) -> None:
        try:
            raise RuntimeError("InvalidAuthToken: Authentication token is missing or incorrect")
        except RuntimeError as exc:
            raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6379") from exc

    def absent(**_: Any) -> None:
        raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6379")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_executor, "_answers", lambda *a, **k: True)  # a head listens there (connect checks)
    monkeypatch.setattr(ray, "init", refused)
    with pytest.raises(ConnectionError, match="token") as info:
        ray_executor.connect("127.0.0.1:6379")
    assert "cannot reach" not in str(info.value)
    monkeypatch.setattr(ray, "init", absent)  # a head that is not there is still "cannot reach"
    with pytest.raises(ConnectionError, match="cannot reach the Ray cluster"):
        ray_executor.connect("127.0.0.1:6379")


def test_the_job_api_refusing_the_token_is_reported_as_the_token(monkeypatch):
    import ray.job_submission
    from ray.exceptions import AuthenticationError

    from evalfarm import submit

    def refused(address: str) -> None:
        raise AuthenticationError("Authentication failed: Forbidden: Invalid authentication token")

    monkeypatch.setattr(ray.job_submission, "JobSubmissionClient", refused)
    with pytest.raises(submit.SubmitError, match="refused this token") as info:
        submit._client("http://127.0.0.1:8265")
    assert "cannot reach" not in str(info.value)


def test_a_killed_drivers_token_folder_is_swept_at_the_next_start(tmp_path):
    """A SIGKILLed driver cannot remove its Ray token folder: the next driver removes every folder of a driver
    that is gone, and nothing else."""
    from evalfarm.scheduler.ray_executor import TOKEN_FOLDER_PREFIX, sweep_stale_token_folders

    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    gone.send_signal(signal.SIGKILL)
    gone.wait()
    dead = tmp_path / f"{TOKEN_FOLDER_PREFIX}{gone.pid}-abc"
    live = tmp_path / f"{TOKEN_FOLDER_PREFIX}{os.getpid()}-def"
    legacy = tmp_path / f"{TOKEN_FOLDER_PREFIX}xyz"  # no pid in the name: cannot tell, left alone
    other = tmp_path / "unrelated-99999999-x"
    for d in (dead, live, legacy, other):
        d.mkdir()
        (d / "auth_token").write_text("secret")
    assert sweep_stale_token_folders(str(tmp_path)) == [str(dead)]
    assert not dead.exists() and live.exists() and legacy.exists() and other.exists()


KILLED_DRIVER = """
import os, sys
from evalfarm.scheduler.ray_executor import connect
import ray
assert connect(None, num_cpus=1)
ray.get(ray.remote(lambda: 1).remote())  # a worker process too
print(os.environ["RAY_AUTH_TOKEN_PATH"], flush=True)
sys.stdin.readline()
"""


def _carrying(token: str) -> list[int]:
    """This user's processes whose environment holds the driver's token path: its Ray's, and nothing else."""
    marker = f"RAY_AUTH_TOKEN_PATH={token}".encode()
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if marker in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                found.append(int(name))
    return found


@pytest.mark.slow  # a driver with its own local Ray, killed
def test_a_killed_driver_leaves_no_ray_process_and_no_token_folder(tmp_path):
    """Issue 40: a driver killed with SIGKILL runs no atexit; its GCS and raylet die with it, but Ray's dashboard and
    runtime-env agents lived on, and its token folder stayed until the next run. Its watchdog now removes both."""
    driver = subprocess.Popen(
        [sys.executable, "-c", KILLED_DRIVER], cwd=REPO, env=_no_token_env(tmp_path / "home"), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    token = ""
    try:
        token = driver.stdout.readline().strip()
        assert token, driver.stderr.read()[-3000:] if driver.poll() is not None else "no token"
        ray_pids = [p for p in _carrying(token) if p != driver.pid]
        assert len(ray_pids) >= 3  # the GCS, the raylet, the agents, a worker...
        driver.kill()  # SIGKILL of the driver alone, as the OOM killer or `kill -9 <pid>` does
        driver.wait(timeout=30)
        deadline = time.monotonic() + 60
        while (_carrying(token) or Path(token).parent.exists()) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = {p: _cmdline(p) for p in _carrying(token)}
        assert left == {}, f"the killed driver's Ray left {left}"
        assert not Path(token).parent.exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        for pid in _carrying(token) if token else ():  # what a failing run left
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
    return "?"


def test_connect_names_its_token_folder_after_its_pid_and_sweeps_first(tmp_path, monkeypatch):
    """The folder ``connect`` makes carries the driver's pid (what the sweep reads), and a dead driver's folder
    is gone once ``connect`` has started."""
    import ray

    from evalfarm.scheduler import ray_executor

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    stale = tmp_path / f"{ray_executor.TOKEN_FOLDER_PREFIX}{2**22 + 12345}-old"
    stale.mkdir()
    seen: dict[str, str] = {}

    def fake_init(**_: Any) -> None:
        seen["token"] = os.environ["RAY_AUTH_TOKEN_PATH"]
        raise RuntimeError("stop here")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN"):
        monkeypatch.setenv(name, "")  # recorded, so what connect sets is undone below
        monkeypatch.delenv(name)
    try:
        with pytest.raises(RuntimeError, match="stop here"):
            ray_executor.connect(None, num_cpus=1)
    finally:  # connect re-read Ray's per-process config with token auth on: read it again without
        monkeypatch.undo()
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    assert not stale.exists()
    folder = Path(seen["token"]).parent
    assert folder.parent == tmp_path and folder.name.startswith(f"{ray_executor.TOKEN_FOLDER_PREFIX}{os.getpid()}-")


def test_a_read_only_warehouse_file_reads_at_each_threads_own_position(tmp_path):
    """DuckDB reads one file from several threads through one handle, each read a seek and then a read: on a
    shared position one thread read where another had sought (a 150-model warehouse read through the read-only
    filesystem failed with "Failed to read 24054 bytes … only 2640 bytes returned", or a corrupt page)."""
    import threading

    import pyarrow.fs as pafs

    from evalfarm.warehouse.sandbox import prefix_filesystem

    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / "f.bin").write_bytes(bytes(range(256)) * 4)
    fs = prefix_filesystem(pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()), "local-ro", "wh")
    handle = fs.open("local-ro://wh/f.bin", "rb")
    sought, read_b = threading.Event(), threading.Event()
    got: dict[str, bytes] = {}

    def a() -> None:
        handle.seek(10)
        sought.set()
        read_b.wait(10)  # b seeks and reads between a's seek and a's read
        got["a"] = handle.read(4)

    def b() -> None:
        sought.wait(10)
        handle.seek(700)
        got["b"] = handle.read(4)
        read_b.set()

    threads = [threading.Thread(target=f) for f in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert got == {"a": bytes([10, 11, 12, 13]), "b": bytes([700 % 256 + i for i in range(4)])}
    assert handle.tell() == 0  # this thread's own position, untouched by the others
    handle.seek(0, 2)
    assert handle.tell() == 1024 and handle.read(5) == b""
    handle.close()


# -- issue 48: printing a result is bounded like the result -------------------------------------------------------
PRINTED = """
import resource, subprocess, sys
cmd = [sys.executable, "-m", "evalfarm", "sql", sys.argv[1], "--warehouse", sys.argv[2], "-f", sys.argv[3]]
subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
"""


def _printing_peak_mb(warehouse: Warehouse, sql: str, fmt: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", PRINTED, sql, str(warehouse.root), fmt], capture_output=True,
                          text=True, env=env, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return float(proc.stdout.strip())


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_printing_a_result_holds_a_chunk_not_the_whole_result_as_python_objects(warehouse, fmt):
    """``evalfarm sql`` of a million rows (36 MB of Arrow, under the default limits): the CLI made every row a dict
    of Python values first, 0.5 GB (CSV) and 1.2 GB (JSON) over a one-row query's peak on main. Now it prints
    RENDER_ROWS rows at a time: its peak is the result's size and a chunk's over the small query's."""
    big = "SELECT range AS i, 'row ' || range::VARCHAR AS s, range * 0.5 AS x FROM range(1000000)"
    result_mb = duckdb.sql(big).to_arrow_table().nbytes / 2**20
    small = _printing_peak_mb(warehouse, "SELECT 1 AS i", fmt)
    peak = _printing_peak_mb(warehouse, big, fmt)
    print(f"{fmt}: {result_mb:.0f} MB result, printing peak {peak:.0f} MB, a one-row query's {small:.0f} MB")
    assert peak - small < 3 * result_mb, (peak, small, result_mb)
