"""House rules checked on the source (issue 42): no function in ``evalfarm/`` runs over 60 lines unless a
``# long: <reason>`` comment directly above its ``def`` (or above its first decorator) says why."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 60
LONG = re.compile(r"^\s*#\s*long:(.*)$")


def long_functions(source: str, name: str = "<string>") -> list[str]:
    """Each function of ``source`` over ``MAX_LINES`` lines (``def`` to its last line, decorators excluded)
    without a ``# long: <reason>`` line directly above it, as ``name:line:function (N lines)``; an empty reason
    counts as none."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source, filename=name)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length <= MAX_LINES:
            continue
        tops = {node.lineno, min([node.lineno, *(d.lineno for d in node.decorator_list)])}
        reasons = [m.group(1).strip() for top in tops if top >= 2 and (m := LONG.match(lines[top - 2]))]
        if any(reasons):
            continue
        why = "an empty `# long:` reason" if reasons else "no `# long: <reason>` above it"
        found.append(f"{name}:{node.lineno}:{node.name} ({length} lines; {why})")
    return found


def test_no_function_in_evalfarm_runs_over_60_lines_without_a_reason() -> None:
    found = []
    for path in sorted((REPO / "evalfarm").rglob("*.py")):
        found += long_functions(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    assert not found, (
        f"functions over {MAX_LINES} lines (split them, or say why with `# long: <reason>`):\n" + "\n".join(found)
    )


def planted(lines: int, comment: str = "", decorator: str = "") -> str:
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 1))
    return f"import functools\n\n\n{comment}{decorator}def planted():\n{body}"


def test_the_checker_flags_a_61_line_function_and_passes_an_annotated_one(tmp_path: Path) -> None:
    path = tmp_path / "planted.py"
    path.write_text(planted(61), encoding="utf-8")
    assert long_functions(path.read_text(encoding="utf-8"), "planted.py") == [
        "planted.py:4:planted (61 lines; no `# long: <reason>` above it)"
    ]
    assert long_functions(planted(60)) == []
    assert long_functions(planted(61, "# long: a table of sixty constants reads best in one piece\n")) == []
    decorated = planted(61, "# long: kept whole\n", "@functools.cache\n")
    assert long_functions(decorated) == []
    assert long_functions(planted(61, "# long: not directly above\n\n")) != []


def test_the_checker_rejects_an_empty_reason() -> None:
    for comment in ("# long:\n", "# long:   \n"):
        assert long_functions(planted(61, comment)) == ["<string>:5:planted (61 lines; an empty `# long:` reason)"]
