"""Shared fixtures: the real evaluation data (../shared/data or EVALFARM_DATA), offline model loading."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests run the same examples on every CI run (a failure is reproducible, never a coin toss);
# HYPOTHESIS_PROFILE=explore searches new examples locally.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("explore", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("EVALFARM_DATA", str((REPO.parent / "shared" / "data").resolve()))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# `path` model sources read only the data folder, the cache and the folders the user names (issue 40.3): the suite's
# models live in the data folder (tests that use another one still read its toy vectors), pytest's temp folders and
# tests/, named here as a user names theirs. The attacks on path sources set their own (tests/test_security.py).
os.environ.setdefault(
    "EVALFARM_MODEL_PATHS",
    os.pathsep.join([os.environ["EVALFARM_DATA"], tempfile.gettempdir(), str(Path(__file__).resolve().parent)]),
)
# No settings file: `make install` writes the checkout's .evalfarm.toml (data folder, warehouse, catalog) for users,
# and a test that means "no data folder" or "the default warehouse" must not read it. A test that wants a settings
# file sets EVALFARM_CONFIG itself (tests/test_cli.py, tests/test_settings.py).
os.environ["EVALFARM_CONFIG"] = ""


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = Path(os.environ["EVALFARM_DATA"])
    if not (d / "evalrank").is_dir():
        pytest.fail(f"evaluation data not found at {d}: set EVALFARM_DATA")
    return d


@pytest.fixture(scope="session")
def toy_glove(data_dir: Path) -> Path:
    return data_dir / "evalrank" / "reference" / "toy_emb.txt"


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The evalfarm wheel, built once per session from a clean copy of the sources (tests/support/wheel_venv.py)."""
    from tests.support import wheel_venv

    return wheel_venv.build_wheel(tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist"))


@pytest.fixture(autouse=True)
def registries():
    """Every test leaves the plug-in registries as it found them: a kind a test registers is gone afterwards."""
    from evalfarm.plugins import model_kinds, task_kinds

    saved = {r: r.snapshot() for r in (model_kinds, task_kinds)}
    yield
    for r, state in saved.items():
        r.restore(state)


@pytest.fixture(autouse=True)
def leases_stop_after_each_test(monkeypatch):
    """Every ``Leases`` a test starts is stopped when the test ends. A test that leaves one running leaves its
    heartbeat thread beating for the rest of the session: several of them on one of pyarrow's ``mock://``
    filesystems (tests/test_leases.py) once crashed the whole pytest process with a segfault in that filesystem."""
    from evalfarm.leases import Leases

    started: list[Leases] = []
    start = Leases.start

    def recording_start(self: Leases) -> Leases:
        started.append(self)
        return start(self)

    monkeypatch.setattr(Leases, "start", recording_start)
    yield
    for leases in started:
        leases.stop()


# `make test` runs the suite on every CPU (pytest-xdist, `--dist loadgroup`). Each module is one group, so a
# module's fixtures are built once and its tests keep their order. The modules that start `ray start` heads, join
# them by address or read Ray's "current cluster" file (`--address auto`) are one group, on one worker, one after
# the other: two of them side by side could find each other's head. Local clusters (`ray.init(address="local")`,
# what `evalfarm run` starts) are private to their process and run beside anything.
CLUSTER_MODULES = frozenset(
    {
        "test_address_auto.py",
        "test_autoscale.py",
        "test_cluster.py",
        "test_multinode.py",
        "test_other_users.py",
        "test_security.py",
        "test_submit.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        name = item.path.name
        item.add_marker(pytest.mark.xdist_group("cluster" if name in CLUSTER_MODULES else name))
