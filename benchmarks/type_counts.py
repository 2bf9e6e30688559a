"""How loosely evalfarm's code is typed: ``Any`` in annotations per 1,000 lines, and the ``type: ignore`` comments
(issue 54).

What is counted, over every ``*.py`` file under ``evalfarm/`` (the package; not the tests or the benchmarks):

- ``lines``: physical lines, blank lines and comments included (what ``wc -l`` says);
- ``any``: each ``Any`` (a name or ``typing.Any``) inside an annotation: a function's parameters (``*args`` and
  ``**kwargs`` too) and return, and an annotated assignment (``x: dict[str, Any] = ...``, a dataclass field, a
  class attribute); a string annotation is parsed and counted alike. ``dict[str, Any]`` counts one; an ``Any`` in a
  type alias's value or a ``cast`` does not (it is no annotation);
- ``any_per_kloc``: ``any`` per 1,000 ``lines``;
- ``type_ignores``: the ``# type: ignore`` comments (tokens, so a string that says it is not one);
  ``unexplained_ignores``: those with no reason: nothing after the ignore's own code (``# type: ignore[x]  # why``
  has one) and no comment line just above the line it is on (``# why`` there: a reason too long for the line).

The previous review's figures are this script's on those commits (main at issue 54's filing: 797 ``Any`` in
36,437 lines, 21.9 per 1,000, 21 ignores). tests/test_type_counts.py holds the ceiling that a change may not
exceed.

    python benchmarks/type_counts.py                 # the totals, and the 15 modules with most Any
    python benchmarks/type_counts.py --json out.json  # the totals and every module's counts
    python benchmarks/type_counts.py --smoke --json /tmp/t.json

Pure Python (ast, tokenize): about a second.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import sys
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "evalfarm"

_IGNORE = re.compile(r"#\s*type:\s*ignore(\[[^\]]*\])?(?P<rest>.*)$")


@dataclass
class Counts:
    lines: int = 0
    any: int = 0
    type_ignores: int = 0
    unexplained_ignores: int = 0

    @property
    def any_per_kloc(self) -> float:
        return 1000 * self.any / self.lines if self.lines else 0.0

    def add(self, other: Counts) -> None:
        self.lines += other.lines
        self.any += other.any
        self.type_ignores += other.type_ignores
        self.unexplained_ignores += other.unexplained_ignores


def _annotations(tree: ast.AST) -> list[ast.expr]:
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
                if arg is not None and arg.annotation is not None:
                    found.append(arg.annotation)
            if node.returns is not None:
                found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return found


def _any_in(annotation: ast.expr) -> int:
    n = 0
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id == "Any":
            n += 1
        elif isinstance(node, ast.Attribute) and node.attr == "Any":
            n += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                n += _any_in(ast.parse(node.value, mode="eval").body)
            except SyntaxError:  # a Literal["..."]'s text, not an annotation
                pass
    return n


def explained(comment: str) -> bool:
    """Whether a ``# type: ignore`` comment gives a reason after its code (module docstring)."""
    m = _IGNORE.search(comment)
    return m is not None and bool(m.group("rest").strip(" :#-"))


def count_source(text: str) -> Counts:
    counts = Counts(lines=len(text.splitlines()))
    counts.any = sum(_any_in(a) for a in _annotations(ast.parse(text)))
    lines = text.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT and _IGNORE.search(tok.string):
            counts.type_ignores += 1
            above = lines[tok.start[0] - 2].strip() if tok.start[0] > 1 else ""
            said_above = above.startswith("#") and not _IGNORE.search(above)
            counts.unexplained_ignores += not (explained(tok.string) or said_above)
    return counts


def count_tree(root: Path = PACKAGE) -> tuple[Counts, dict[str, Counts]]:
    """The totals over ``root``'s ``*.py`` files and each file's counts (by path relative to the repository)."""
    total, per_file = Counts(), {}
    for path in sorted(root.rglob("*.py")):
        c = count_source(path.read_text(encoding="utf-8"))
        per_file[path.relative_to(root.parent).as_posix()] = c
        total.add(c)
    return total, per_file


def summary(c: Counts) -> dict[str, float | int]:
    return {**asdict(c), "any_per_kloc": round(c.any_per_kloc, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the totals and every module's counts here")
    ap.add_argument("--smoke", action="store_true", help="the same count (it is fast): for tests")
    ap.add_argument("--root", type=Path, default=PACKAGE, help="the package folder (default: evalfarm/)")
    args = ap.parse_args(argv)
    total, per_file = count_tree(args.root)
    out = {"total": summary(total), "files": {k: summary(v) for k, v in per_file.items()}}
    t = out["total"]
    print(
        f"{t['lines']} lines, {t['any']} Any in annotations ({t['any_per_kloc']} per 1,000 lines), "
        f"{t['type_ignores']} type: ignore ({t['unexplained_ignores']} without a reason)"
    )
    for name, c in sorted(per_file.items(), key=lambda kv: -kv[1].any)[:15]:
        print(f"  {c.any:4d} Any  {c.any_per_kloc:5.1f}/kloc  {name}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
