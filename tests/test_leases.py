"""Leases on a real local folder (O_EXCL) and on an object store's protocol (create-then-verify, on pyarrow's
in-memory ``mock://`` filesystem): one winner per lease under contention, takeover of dead claims only."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from evalfarm.leases import HOST, Holder, Leases, unit_key
from evalfarm.warehouse import Warehouse


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["local", "object-store"])
def wh(request, tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "wh") if request.param == "local" else Warehouse("mock:///wh")


def _contend(wh: Warehouse, n: int, key: str) -> list[Holder | None]:
    runs = [Leases(wh, f"run-{i}", timeout=30.0).start() for i in range(n)]
    barrier = threading.Barrier(n)
    got: list[Holder | None] = [Holder("unset")] * n

    def go(i: int) -> None:
        barrier.wait()
        got[i] = runs[i].claim(key)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def test_one_winner_among_concurrent_claims(wh):
    for round_ in range(5):
        got = _contend(wh, 6, unit_key(f"fp{round_}"))
        winners = [i for i, h in enumerate(got) if h is None]
        assert len(winners) <= 1, got  # never two owners
        if wh.local:
            assert len(winners) == 1  # O_EXCL: exactly one
        # (on an object store a loser may name a contender that withdraws right after: it asks again next poll)
        if winners and wh.local:
            # everyone else sees the winner ("?": its lease file, caught between O_EXCL create and write)
            assert {h.run_id for h in got if h is not None} <= {f"run-{winners[0]}", "?"}
        elif not winners:  # create-then-verify: contenders that raced all withdrew; alone, the next try wins
            assert Leases(wh, "run-late").start().claim(unit_key(f"fp{round_}")) is None


def test_claim_release_and_claim_again(wh):
    a, b = Leases(wh, "run-a").start(), Leases(wh, "run-b").start()
    assert a.claim("unit/x") is None and a.claim("unit/x") is None  # idempotent for the holder
    held = b.claim("unit/x")
    assert held is not None and held.run_id == "run-a" and held.host == HOST
    assert b.holder("unit/x") == held
    b.release("unit/x")  # not b's: nothing happens
    assert b.claim("unit/x") is not None
    a.release("unit/x")
    assert b.holder("unit/x") is None and b.claim("unit/x") is None
    a.stop()
    b.stop()
    assert b.holder("unit/x") is None  # stop released it, and the heartbeats are gone
    files = [i.path for i in wh.fs.get_file_info(__import__("pyarrow.fs").fs.FileSelector(wh._p("leases"),
             recursive=True, allow_not_found=True)) if i.type.name == "File"]  # fmt: skip
    assert files == []


def test_a_run_whose_heartbeat_stops_loses_its_leases_after_the_timeout(wh):
    clock = Clock()
    dead = Leases(wh, "run-dead", timeout=10.0, clock=clock).start()
    dead._stop.set()  # its heartbeat thread stops: the run hangs or its host vanished
    assert dead.claim("unit/x") is None
    me = Leases(wh, "run-me", timeout=10.0, clock=clock).start()
    assert me.claim("unit/x").run_id == "run-dead"  # first look: alive
    clock.t = 9.0
    assert me.claim("unit/x").run_id == "run-dead"
    clock.t = 10.5  # its heartbeat has not moved for a whole timeout of my clock
    assert me.claim("unit/x") is None


def test_a_beating_run_keeps_its_lease(wh):
    clock = Clock()
    live = Leases(wh, "run-live", timeout=10.0, clock=clock).start()
    live._stop.set()
    live.claim("unit/x")
    me = Leases(wh, "run-me", timeout=10.0, clock=clock).start()
    for t in range(0, 60, 5):
        clock.t = float(t)
        live.beat()
        me._beats.clear()
        assert me.claim("unit/x").run_id == "run-live"


def test_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = int(pid.stdout)
    lease = Path(wh._p("leases", "unit", "x.json"))
    lease.parent.mkdir(parents=True)
    lease.write_text(json.dumps({"key": "unit/x", "run_id": "run-crashed", "host": HOST, "pid": gone}))
    me = Leases(wh, "run-me").start()
    assert me.claim("unit/x") is None
    assert json.loads(lease.read_text())["run_id"] == "run-me"


def test_a_missing_heartbeat_means_a_dead_run(wh):
    me = Leases(wh, "run-me").start()
    other = Leases(wh, "run-other").start()
    other._stop.set()
    assert other.claim("unit/x") is None
    other._delete(other._beat_path("run-other"))  # ended without releasing (killed between the two steps)
    assert me.claim("unit/x") is None


def test_a_takeover_never_removes_a_fresh_claim(tmp_path):
    """The dead claim judged stale has meanwhile been replaced by a live run's: the taker must leave it."""
    wh = Warehouse(tmp_path / "wh")
    me = Leases(wh, "run-me").start()
    path = me._path("unit/x")
    Path(path).parent.mkdir(parents=True)
    Path(path).write_text(json.dumps({"run_id": "run-fresh", "host": HOST, "pid": 1}))
    judged = json.dumps({"run_id": "run-dead", "host": HOST, "pid": 1}).encode()
    assert me._drop_if_same(path, judged)  # done with it...
    assert json.loads(Path(path).read_text())["run_id"] == "run-fresh"  # ...but the fresh claim is still there
    assert not Path(path + ".takeover").exists()


def test_a_lease_being_written_counts_as_held(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    me = Leases(wh, "run-me").start()
    path = Path(me._path("unit/x"))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")  # created with O_EXCL, content not written yet
    assert me.claim("unit/x") is not None and me.holder("unit/x") is not None


# -- attacks: a warehouse writer plants links under leases/ (issue 48's leftover; docs/operations.md row 48.7) -------


def _outside(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A folder beside the warehouse holding a victim's files, and their bytes as planted."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret.json").write_text(json.dumps({"run_id": "SECRET-RUN", "host": "x", "pid": 1}))
    (victim / "x.json").write_text("victim's own file")
    return victim, {p.name: p.read_bytes() for p in victim.iterdir()}


def _untouched(victim: Path, before: dict[str, bytes]) -> None:
    assert {p.name: p.read_bytes() for p in victim.iterdir()} == before  # nothing written, replaced or removed


@pytest.mark.faults
@pytest.mark.parametrize("link_at", ["leases", "leases/unit", "leases/runs"])
def test_a_leases_folder_replaced_by_a_link_gets_nothing_written_through_it(tmp_path, link_at):
    victim, before = _outside(tmp_path)
    wh = Warehouse(tmp_path / "wh")
    link = tmp_path / "wh" / link_at
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim, target_is_directory=True)
    me = Leases(wh, "run-me")
    with pytest.raises(PermissionError, match="link"):  # the heartbeat (leases/runs) or the claim (leases/unit)
        me.start()
        me.claim("unit/x")
    me.stop()
    _untouched(victim, before)


@pytest.mark.faults
def test_a_lease_file_planted_as_a_link_is_neither_followed_nor_removed_through(tmp_path):
    victim, before = _outside(tmp_path)
    wh = Warehouse(tmp_path / "wh")
    me = Leases(wh, "run-me").start()
    lease = Path(me._path("unit/x"))
    lease.parent.mkdir(parents=True, exist_ok=True)
    lease.symlink_to(victim / "x.json")
    with pytest.raises(PermissionError, match="outside the warehouse|symbolic link"):  # O_EXCL meets it; read: refused
        me.claim("unit/x")
    with pytest.raises(PermissionError, match="link"):
        me._delete(str(lease))  # a release never unlinks through it either
    (Path(me._beat_path("run-me"))).unlink()
    Path(me._beat_path("run-me")).symlink_to(victim / "x.json")
    me.beat()  # the heartbeat replaces the link itself (a rename over it), never writes into its target
    me.stop()
    assert not Path(me._beat_path("run-me")).is_symlink()
    _untouched(victim, before)


@pytest.mark.faults
def test_status_reads_no_heartbeat_planted_as_a_link(tmp_path):
    from evalfarm.leases import heartbeats

    victim, before = _outside(tmp_path)
    wh = Warehouse(tmp_path / "wh")
    runs = tmp_path / "wh" / "leases" / "runs"
    runs.mkdir(parents=True)
    (runs / "planted.json").symlink_to(victim / "secret.json")
    (runs / "real.json").write_text(json.dumps({"run_id": "run-real", "host": HOST, "pid": 1}))
    seen = heartbeats(wh)
    assert list(seen) == ["run-real"]  # the link's target (another run's, or a secret) is never read into status
    assert "SECRET-RUN" not in json.dumps(seen)
    _untouched(victim, before)
