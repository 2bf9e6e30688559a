"""Each fault on a real local Ray, through `evalfarm run` as users run it: the reduced form of `make faults`
(``benchmarks/faults.py --small``). Each scenario injects its fault from outside the driver and compares the
warehouse with a fault-free reference run: no metric row may be lost, duplicated or different.

The killed worker of two is also covered, in-process, by tests/test_scheduler.py; the state machine behind all of
this by tests/test_scheduler_states.py (fake backend) and tests/test_leases.py.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from tests.support.faults_harness import faults

pytestmark = [pytest.mark.slow, pytest.mark.faults]  # the reduced fault injection (`make faults`)


@pytest.fixture(scope="module")
def farm(tmp_path_factory, data_dir):
    return faults.Faults(tmp_path_factory.mktemp("faults"), small=True)


@pytest.fixture(scope="module")
def shared_head(tmp_path_factory):
    """cluster/local/start-head.sh's head (token, loopback only: checked when it starts) that two runs share."""
    with faults.ray_head(tmp_path_factory.mktemp("head")) as head:
        yield head


def _check(r) -> None:
    assert r.ok, json.dumps(asdict(r), indent=1, default=str)
    assert (r.lost, r.duplicated) == (0, 0)


def _mounts() -> None:
    if not faults.can_mount():
        pytest.skip("needs a private mount namespace (unshare -Urm) for a read-only / full warehouse")


def test_the_only_worker_killed_is_waited_for_and_reused(farm):
    r = farm.only_worker_killed()
    _check(r)
    d = r.details
    assert d["exit"] == 0 and d["tasks after the kill"] > 0  # the restarted worker took work again
    # the progress line showed it restarting (printed when it was lost), then alive again
    (line,) = d["progress shows it restarting"]
    assert "0 workers alive · 1 restarting" in line and d["progress shows it alive again"]


def test_a_lost_head_is_recorded_as_interrupted_and_the_same_command_resumes(farm):
    r = farm.head_lost()
    _check(r)
    d = r.details
    assert d["exit"] == 3 and d["processes left"] == 0 and len(d["message"]) == 1
    # the driver ends within seconds of its message (once it sat 6 minutes in interpreter shutdown): the head is
    # noticed after EVALFARM_HEAD_TIMEOUT (5 s), the run recorded, and the process gone, well within a minute
    assert d["seconds to exit after the kill"] < 60, d
    assert d["message gives the same command"]  # and that command, run as given, resumed
    (run,) = d["run recorded"]
    assert run["status"] == "interrupted" and "has not answered" in run["reason"]
    assert run["n_done"] + (run["n_units"] - run["n_done"]) == farm.n_units
    assert d["resumed run"]["n_skipped"] == run["n_done"]  # nothing computed twice


def test_a_read_only_warehouse(farm):
    _mounts()
    r = farm.read_only()
    _check(r)
    assert r.details["no-op exit"] == 0 and r.details["warehouse unchanged"]
    (line,) = r.details["error"]
    assert line.startswith("error: cannot write ") and "Read-only file system" in line


def test_a_full_warehouse(farm):
    _mounts()
    r = farm.full()
    _check(r)
    assert r.details["exit"] == 1 and not r.details["traceback"] and r.details["rerun exit"] == 0


def test_two_concurrent_runs_split_the_work(farm, shared_head):
    r = farm.concurrent(shared_head)
    _check(r)
    assert sum(r.details["units computed per run"]) == farm.n_units  # each unit computed once, by one run


def test_a_new_spec_under_an_old_id_is_flagged(farm, shared_head):
    r = farm.respec(shared_head)
    _check(r)
    # every line of the run's output that mentions the conflict: the warning is printed once, not once per source
    (line,) = r.details["warning"]
    assert line.startswith("warning: model 'toy'") and r.details["conflicts rows"] == 2
