"""docs/design.md's layout section names every module of ``evalfarm/`` and nothing that is not one (issue 54).

The section is a code block of entries: a line starting at its first column opens an entry (``evalfarm/plan.py``,
``evalfarm/warehouse/``, ``sql/``), indented lines continue it. A module is named by its path
(``evalfarm/atomic.py``) anywhere in the block, or by its file name (``rank_kernel.py``) in an entry of its own
folder: a package's entry (``evalfarm/scorers/``) or a module's of the same folder (``evalfarm/config.py`` names
``cache.py``, ``evalfarm/cache.py``). A package's ``__init__.py`` is named by its folder's entry. The modules are
found by walking the package, so a module added or moved fails this test until the section says where it is.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DESIGN = REPO / "docs" / "design.md"
HEADING = "## Layout: one module per stage"
FILE = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.py)\b")


def layout_block(text: str) -> str:
    """The code block of the layout section."""
    section = text.split(HEADING, 1)[1]
    return section.split("```", 2)[1].split("\n", 1)[1]


def entries(block: str) -> list[tuple[str, str]]:
    """(head, text) of each entry: the head is the first word of a line starting at column 1."""
    out: list[tuple[str, str]] = []
    for line in block.splitlines():
        if line and not line[0].isspace():
            out.append((line.split()[0], line))
        elif out:
            head, text = out[-1]
            out[-1] = (head, text + "\n" + line)
    return out


def named_modules(block: str) -> set[str]:
    """The module paths (``evalfarm/...py``) the block names."""
    named = set()
    for head, text in entries(block):
        folder = head if head.endswith("/") else head.rpartition("/")[0] + "/"
        if head.startswith("evalfarm/") and head.endswith("/"):
            named.add(head + "__init__.py")
        for name in FILE.findall(text):
            if name.startswith("evalfarm/"):
                named.add(name)
            elif "/" not in name and folder.startswith("evalfarm/"):
                named.add(folder + name)
    return named


def package_modules(root: Path) -> set[str]:
    """Every module under ``root``/evalfarm, as a path relative to ``root``."""
    return {p.relative_to(root).as_posix() for p in (root / "evalfarm").rglob("*.py")}


def layout_problems(doc: str, root: Path) -> list[str]:
    """The modules the layout does not name, then the names that are no module."""
    named, modules = named_modules(layout_block(doc)), package_modules(root)
    return [f"not in docs/design.md's layout: {m}" for m in sorted(modules - named)] + [
        f"named in docs/design.md's layout but not a module: {m}" for m in sorted(named - modules)
    ]


def test_the_layout_names_every_module_and_only_modules() -> None:
    problems = layout_problems(DESIGN.read_text(encoding="utf-8"), REPO)
    assert not problems, "\n".join(problems)


def test_the_layout_reads_the_real_package() -> None:
    """A walk or a parse that found nothing would pass the test above: both find what they must."""
    named, modules = named_modules(layout_block(DESIGN.read_text(encoding="utf-8"))), package_modules(REPO)
    assert len(modules) > 100 and "evalfarm/scorers/rank_kernel.py" in modules
    assert {"evalfarm/plugins.py", "evalfarm/scorers/rank_kernel.py", "evalfarm/atomic.py"} <= named


# ---- tests of the test: a planted module, a planted name ---------------------------------------------------------
DOC = f"""# Design

{HEADING}

```
evalfarm/plan.py    the units; cache.py (downloads)
evalfarm/scorers/   one module per task kind: evalrank.py, helpers: rank_kernel.py
sql/                the core views (not modules)
```

## Next
"""


def _package(root: Path, modules: list[str]) -> Path:
    for m in modules:
        path = root / m
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("", encoding="utf-8")
    return root


def test_a_planted_module_missing_from_the_layout_fails(tmp_path: Path) -> None:
    modules = [
        "evalfarm/plan.py", "evalfarm/cache.py", "evalfarm/scorers/__init__.py", "evalfarm/scorers/evalrank.py",
        "evalfarm/scorers/rank_kernel.py",
    ]  # fmt: skip
    root = _package(tmp_path, modules)
    assert layout_problems(DOC, root) == []
    _package(root, ["evalfarm/scorers/planted.py", "evalfarm/analysis/__init__.py"])
    assert layout_problems(DOC, root) == [
        "not in docs/design.md's layout: evalfarm/analysis/__init__.py",
        "not in docs/design.md's layout: evalfarm/scorers/planted.py",
    ]


def test_a_name_that_is_no_module_fails(tmp_path: Path) -> None:
    root = _package(tmp_path, ["evalfarm/plan.py", "evalfarm/scorers/__init__.py", "evalfarm/scorers/evalrank.py"])
    assert layout_problems(DOC, root) == [
        "named in docs/design.md's layout but not a module: evalfarm/cache.py",
        "named in docs/design.md's layout but not a module: evalfarm/scorers/rank_kernel.py",
    ]


def test_a_planted_module_in_the_real_package_fails(tmp_path: Path) -> None:
    """The real layout against the real package plus one planted module: exactly that module is reported."""
    doc = DESIGN.read_text(encoding="utf-8")
    planted = named_modules(layout_block(doc)) | {"evalfarm/planted_module.py"}
    _package(tmp_path, sorted(planted))
    assert layout_problems(doc, tmp_path) == ["not in docs/design.md's layout: evalfarm/planted_module.py"]
