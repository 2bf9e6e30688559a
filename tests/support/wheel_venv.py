"""The evalfarm wheel as users get it: built from a clean copy of the sources (as `pip wheel .` does, in an isolated
build env) and installed with ``--no-deps`` into a fresh venv outside the checkout.

The fresh venv sees the dependencies of the venv running the tests through a ``.pth`` line (instead of
``--system-site-packages``, which would expose the *base* interpreter's site-packages, not this venv's): nothing is
downloaded, and evalfarm itself can only come from the wheel, because the ``.pth`` line adds the folder without
running its ``.pth`` files (the editable install's import hook). The dependencies' console scripts are not
installed by a ``.pth`` line, so ``ray`` gets one as pip would write it: a head started from this venv (its
processes, its workers, the jobs it runs) uses this venv's Python, and so the wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# what would send a process in the venv back to the checkout or to another catalog folder
_LEAKS = ("PYTHONPATH", "EVALFARM_CATALOG_DIR", "EVALFARM_CATALOG_PATH", "VIRTUAL_ENV")


def run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def build_wheel(src: Path, dist: Path) -> Path:
    """The wheel of a clean copy (in ``src``) of the sources that go into it, written to ``dist``."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("evalfarm", "catalog", "sql"):
        shutil.copytree(REPO / folder, src / folder, ignore=ignore)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)], cwd=src, env=env)
    (whl,) = dist.glob("evalfarm-*.whl")
    return whl


@dataclass
class WheelVenv:
    root: Path
    site: Path  # its site-packages, where the wheel went
    env: dict[str, str]  # this environment, with the venv first on PATH and nothing pointing at the checkout

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def evalfarm(self) -> str:
        return str(self.bin / "evalfarm")


def install(wheel: Path, root: Path) -> WheelVenv:
    """A fresh venv at ``root`` with ``wheel`` installed (see the module docstring)."""
    run([sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=root.parent, env=dict(os.environ))
    py = root / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in _LEAKS}
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        cwd=root.parent,
        env=env,
    )
    site = Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root, env=env)
                .stdout.strip())  # fmt: skip
    # the shared dependencies, after the fresh venv's own site-packages
    (site / "zz-shared-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    ray = root / "bin" / "ray"
    ray.write_text(f"#!{py}\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n")
    ray.chmod(0o755)
    return WheelVenv(root, site, env)
