"""``--address auto`` (issue 24): evalfarm's own recorded head first, and a prompt, named failure when unsure.

Ray's own "auto" took another user's GCS among three on a shared machine and hung for minutes. These tests stand up
plain TCP listeners for "heads" and replace Ray's process scan; no Ray process starts.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalfarm.scheduler.ray_executor import head_record_path, resolve_auto_address


@pytest.fixture
def listener() -> Iterator[str]:
    """Something that answers at 127.0.0.1:<port>, as a head's GCS does."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield f"127.0.0.1:{s.getsockname()[1]}"


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends: nothing answers there


@pytest.fixture
def state(tmp_path, monkeypatch) -> Iterator[list[str]]:
    """A private EVALFARM_RAY_DIR, no RAY_ADDRESS, and Ray's process scan returning the list yielded."""
    import ray._private.services as services

    scanned: list[str] = []
    monkeypatch.setenv("EVALFARM_RAY_DIR", str(tmp_path / "ray"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: list(scanned))
    yield scanned


def _record(address: str) -> None:
    path = head_record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"uid=0\ngcs_address={address}\ndashboard=http://127.0.0.1:8265\n")


def test_the_record_path_follows_start_head_sh(tmp_path, monkeypatch):
    monkeypatch.delenv("EVALFARM_RAY_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert head_record_path() == tmp_path / "state" / "evalfarm" / "ray" / "head"
    script = (Path(__file__).parents[1] / "cluster" / "local" / "start-head.sh").read_text()
    assert 'RAY_DIR="${EVALFARM_RAY_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/evalfarm/ray}"' in script
    assert 'RECORD="$RAY_DIR/head"' in script and 'echo "gcs_address=$NODE_IP:$GCS_PORT"' in script


def test_the_recorded_head_wins_over_other_clusters_the_scan_finds(state, listener):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        state += [f"127.0.0.1:{other.getsockname()[1]}"]
        _record(listener)
        assert resolve_auto_address() == listener


def test_ray_address_names_the_cluster_first(state, listener, monkeypatch):
    _record(listener)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")  # a submitted job's driver
    assert resolve_auto_address() == "10.0.0.7:6379"


def test_one_answering_cluster_found_by_the_scan_is_used(state, listener):
    state += [listener, _closed_port()]  # a dead one left in the process table does not count
    assert resolve_auto_address() == listener


def test_none_or_several_fail_at_once_naming_what_was_found(state, listener):
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=r"no head recorded at .*ray/head .*finds 0 GCS server\(s\)\. Pass"):
        resolve_auto_address()
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        second = f"127.0.0.1:{other.getsockname()[1]}"
        state += [listener, second]
        with pytest.raises(ConnectionError) as err:
            resolve_auto_address()
    said = str(err.value)
    assert f"finds 2 GCS server(s): {', '.join(sorted([listener, second]))}, 2 of them answering" in said
    assert "--address HOST:PORT" in said and "start-head.sh" in said
    assert time.monotonic() - start < 15  # seconds, not Ray's minutes


def test_a_recorded_head_that_does_not_answer_is_an_error_not_another_cluster(state, listener):
    dead = _closed_port()
    _record(dead)
    state += [listener]  # one answering cluster elsewhere: evalfarm's head was meant, so it is not taken
    with pytest.raises(ConnectionError) as err:
        resolve_auto_address()
    said = str(err.value)
    assert f"records the head {dead}, which does not answer" in said and f"finds 1 GCS server(s): {listener}" in said


@pytest.mark.slow  # a real head from cluster/local/start-head.sh, and `evalfarm run` on it (~1 min)
def test_evalfarm_run_address_auto_finds_the_head_start_head_sh_recorded(tmp_path, data_dir) -> None:
    import subprocess
    import sys

    from tests.support.ray_heads import start_head, stop_head
    from tests.test_light_commands import CATALOG

    (tmp_path / "light.yaml").write_text(CATALOG, encoding="utf-8")
    head = start_head(tmp_path / "head")
    try:
        env = head.client_env(EVALFARM_RAY_DIR=str(head.ray_dir), EVALFARM_DATA=str(data_dir))
        env.pop("RAY_ADDRESS", None)
        args = [sys.executable, "-m", "evalfarm", "run", "--catalog", str(tmp_path / "light.yaml"), "--warehouse"]
        args += [str(tmp_path / "wh"), "--address", "auto", "--workers", "1"]
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert "2 done, 0 skipped, 0 failed" in proc.stderr
        record = (head.ray_dir / "head").read_text()
    finally:
        stop_head(head)
    gone = tmp_path / "gone"  # the record of a head that died without stop.sh
    gone.mkdir()
    (gone / "head").write_text(record)
    env["EVALFARM_RAY_DIR"] = str(gone)
    start = time.monotonic()
    args[args.index(str(tmp_path / "wh"))] = str(tmp_path / "wh2")  # units to run: it must connect
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode != 0 and f"records the head {head.gcs}, which does not answer" in proc.stderr, proc.stderr
    assert time.monotonic() - start < 60  # said in seconds, not after minutes of waiting


# -- a remote address that does not answer (issue 24): no warehouse folder, an error in seconds -------------------


def test_tcp_target_of_remote_addresses() -> None:
    from evalfarm.scheduler.ray_executor import tcp_target

    assert tcp_target("ray://head") == "head:10001" and tcp_target("ray://10.0.0.7:2000") == "10.0.0.7:2000"
    assert tcp_target("10.0.0.7:6379") == "10.0.0.7:6379"
    assert tcp_target("local") is None and tcp_target("http://head:8265") is None and tcp_target("ray://") is None


def test_a_bad_ray_address_fails_in_seconds_and_creates_no_warehouse(tmp_path, monkeypatch, toy_glove):
    from evalfarm.runner import run_catalog

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cat = tmp_path / "cat.yaml"
    cat.write_text(
        f"include: [{Path(__file__).parents[1] / 'catalog' / 'tasks.yaml'}]\ntasks: [wordsim-rg-65]\nmodels:\n"
        "  - {id: toy, level: word, kind: word-vectors, format: glove-text,\n"
        f"     source: {{type: path, ref: {toy_glove}}}}}\n"
    )
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=r"cannot reach the Ray cluster at 'ray://127\.0\.0\.1:\d+': nothing"):
        run_catalog(cat, tmp_path / "wh", executor="ray", address=f"ray://{_closed_port()}")
    # "nothing accepted": the 3 s port check answered, not Ray's client (~30 s); loose for a loaded machine
    assert time.monotonic() - start < 60
    assert not (tmp_path / "wh").exists()


@pytest.mark.slow  # the CLI in a subprocess (imports Ray): the message a user sees
def test_evalfarm_run_with_a_bad_ray_address_leaves_no_folder(tmp_path, data_dir) -> None:
    import os
    import subprocess
    import sys

    from tests.test_light_commands import CATALOG

    (tmp_path / "light.yaml").write_text(CATALOG, encoding="utf-8")
    env = {**os.environ, "EVALFARM_DATA": str(data_dir), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "evalfarm.cli", "run", "--catalog", str(tmp_path / "light.yaml"),
         "--address", f"ray://{_closed_port()}", "--warehouse", str(tmp_path / "wh")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0 and "cannot reach the Ray cluster at 'ray://127.0.0.1:" in proc.stderr
    assert time.monotonic() - start < 60  # seconds (Ray's client alone waited ~30 s), start-up included
    assert not (tmp_path / "wh").exists()
