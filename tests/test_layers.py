"""The layer contract counts type-level imports (issue 42): an import under ``if TYPE_CHECKING:`` that runs upward or
closes a circle is a dependency a reader must follow all the same, so `make lint` (import-linter, pyproject.toml's
``[tool.importlinter]`` with ``exclude_type_checking_imports = false``) fails on it. Each test plants one in a copy of
the package and runs the same check there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports --no-cache` on the tree at ``root`` (its pyproject.toml, its evalfarm/ first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the package and its pyproject.toml (the contracts), to plant an import in."""
    shutil.copytree(REPO / "evalfarm", tmp_path / "evalfarm", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def plant(tree: Path, module: str, imports: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    path.write_text(
        path.read_text(encoding="utf-8") + f"\n\nimport typing\n\nif typing.TYPE_CHECKING:\n    {imports}\n",
        encoding="utf-8",
    )


def test_the_contract_counts_type_checking_imports_and_the_tree_keeps_it() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    assert config.get("exclude_type_checking_imports", False) is False
    proc = lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("module", "imports", "contract", "detail"),
    [
        # upward, for annotations only: a low module naming the API
        ("evalfarm.options", "from evalfarm.api import run", "Layers", "evalfarm.options is not allowed to import"),
        # the plug-in layer naming the catalog's specs (the circle catalog.specs <-> plugins before issue 42)
        ("evalfarm.plugins", "from evalfarm.catalog.specs import ModelSpec", "evalfarm.plugins imports nothing",
         "evalfarm.plugins is not allowed to import evalfarm.catalog"),
        # a circle between two modules of one package, at the type level
        ("evalfarm.scorers.neighbours", "from evalfarm.scorers.rank_kernel import RankCounts", "No import cycles",
         "No cycles are allowed in evalfarm.scorers"),
        # the CLI past the API (issue 54): a type the API re-exports, named at its home instead
        ("evalfarm.cli.events", "from evalfarm.runner import RunSummary", "The CLI imports the API only",
         "evalfarm.cli is not allowed to import evalfarm.runner"),
    ],
)  # fmt: skip
def test_a_planted_type_checking_import_fails_the_check(
    tree: Path, module: str, imports: str, contract: str, detail: str
) -> None:
    assert lint_imports(tree).returncode == 0  # the copy keeps the contract before the plant
    plant(tree, module, imports)
    proc = lint_imports(tree)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Broken contracts" in out, out
    broken = out.split("Broken contracts", 1)[1]  # each broken contract's name, then the imports that break it
    assert contract in broken and detail in broken, out


@pytest.mark.docs
def test_the_layer_picture_in_design_md_is_the_contract() -> None:
    """docs/design.md's picture lists pyproject.toml's layers, top to bottom, module for module (a continuation
    line, indented, only describes)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    contracts = {c["id"]: c for c in config["contracts"]}
    layers = contracts["layers"]["layers"]
    doc = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    # the analyses' own layers (evalfarm/analysis/), in a sentence: `report | mteb_results` > `paper | robustness` ...
    inner = " > ".join(f"`{layer}`" for layer in contracts["analysis-layers"]["layers"])
    assert inner in " ".join(doc.split()), inner
    section = doc.split("## Layers", 1)[1].split("```", 2)[1]
    drawn = []
    for line in section.splitlines():
        if line and not line[0].isspace():
            names = line.split("  ", 1)[0].strip()
            drawn.append(" | ".join(n.strip() for n in names.split("|")))
    assert drawn == [" | ".join(n.strip() for n in layer.split("|")) for layer in layers]
