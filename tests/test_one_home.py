"""One home for each fact, guarded on the source (issue 54): the checks below read every module of ``evalfarm/``
(found by walking the package, so a module that moves is still read) as an AST, and fail when

- a tie policy's name (``"optimistic"``, ``"pessimistic"``, ``"realistic"``) is spelled as a string outside
  :mod:`evalfarm.ranking` (the names are :data:`~evalfarm.ranking.TIES`, the defaults ``BOARD_TIES`` and
  ``PAPER_TIES``); docstrings may name them;
- a tie policy's weight formula is written again outside :mod:`evalfarm.ranking`: the tied count added to a rank
  (``rank + tied``) or scaled by a number (``tied / 2``), in Python or in SQL kept in a Python string;
- a default constant (``DEFAULT_*``, ``*_RESAMPLES``, ``*_SEED``, ``*_TIES``, ``CONFIDENCE``) is spelled again:
  its value as a literal default of a parameter the constant is the default of elsewhere (``resamples: int =
  2000``), as a literal keyword argument of that name, beside such a name in a call (``max(resamples, 2000)``), or
  the constant defined again in another module;
- two public module constants share a name with different values (``DEFAULT_RESAMPLES`` was 1,000 in one module and
  2,000 in another). A private ``_NAME`` is its module's own knob and may differ.

Each check is also run on a planted copy (tests of the tests): the real package plus one planted module must fail
with exactly the planted line, so a check that cannot fail does not pass silently.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from evalfarm import ranking

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "evalfarm"
RANKING = Path(ranking.__file__).resolve().relative_to(REPO).as_posix()
"""The home of the tie policies and their weights (found from the module, not spelled: it may move)."""

Source = tuple[str, str]
"""A module as (its path relative to the repository, its text)."""


def package_sources(root: Path = PACKAGE) -> list[Source]:
    """Every module of the package under ``root``, walked (a module that moves is still found)."""
    return [(p.relative_to(REPO).as_posix(), p.read_text(encoding="utf-8")) for p in sorted(root.rglob("*.py"))]


@functools.lru_cache(maxsize=1024)
def parse(path: str, text: str) -> ast.Module:
    """The AST of a module, parsed once per text (the checks only read it)."""
    return ast.parse(text, filename=path)


def module_name(path: str) -> str:
    """``evalfarm/a/b.py`` -> ``evalfarm.a.b`` (``__init__.py``: the package)."""
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string expression statements (docstrings of modules, classes, functions and attributes)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def _strings(tree: ast.AST) -> Iterator[ast.Constant]:
    """The string constants of ``tree`` that are code, not documentation."""
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node


# ---- tie policies: their names and their weights ------------------------------------------------------------------
SQL_TIES = re.compile("'(" + "|".join(ranking.TIES) + ")'")
"""A tie policy's name quoted in SQL held in a Python string (``WHERE ties = 'realistic'``)."""


def tie_name_literals(sources: Iterable[Source], home: str = RANKING) -> list[str]:
    """``path:line: ...`` for each tie policy name spelled as a string outside ``home``."""
    found = []
    for path, text in sources:
        if path == home:
            continue
        for node in _strings(parse(path, text)):
            if node.value in ranking.TIES:
                found.append(
                    f"{path}:{node.lineno}: the tie policy {node.value!r} spelled as a string (use evalfarm.ranking: "
                    "BOARD_TIES, PAPER_TIES, TIES)"
                )
            elif m := SQL_TIES.search(node.value):
                found.append(
                    f"{path}:{node.lineno}: the tie policy {m.group(0)} spelled in SQL (use board_ties(), "
                    "paper_ties() or tie_rank(rank, tied, ties))"
                )
    return found


TIED_NAME = re.compile(r"(^|_)tied$")
SQL_WEIGHT = re.compile(r"\btied\s*[*/]\s*\d|\d\s*\*\s*(\w+\.)?tied\b|\+\s*(\w+\.)?tied\b|\btied\s*\+")


def _is_tied(node: ast.expr) -> bool:
    """Whether ``node`` reads a tied count: ``tied``, ``x.tied``, ``x["tied"]``, ``t.column("tied")``."""
    if isinstance(node, ast.Name):
        return bool(TIED_NAME.search(node.id))
    if isinstance(node, ast.Attribute):
        return bool(TIED_NAME.search(node.attr))
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "tied"
    if isinstance(node, ast.Call):
        if any(isinstance(a, ast.Constant) and a.value == "tied" for a in node.args):
            return True
        return isinstance(node.func, ast.Attribute) and _is_tied(node.func.value)  # tied.astype(...)
    return False


def _is_number(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool)


def tie_weight_formulas(sources: Iterable[Source], home: str = RANKING) -> list[str]:
    """``path:line: ...`` for each tie weight written outside ``home``: a tied count added to a rank or scaled by a
    number (Python), or the same in SQL held in a string."""
    found = []
    for path, text in sources:
        if path == home:
            continue
        tree = parse(path, text)
        for node in ast.walk(tree):
            if not isinstance(node, ast.BinOp) or not (_is_tied(node.left) or _is_tied(node.right)):
                continue
            other = node.right if _is_tied(node.left) else node.left
            if isinstance(node.op, ast.Add) or (isinstance(node.op, ast.Mult | ast.Div) and _is_number(other)):
                found.append(
                    f"{path}:{node.lineno}: a tie weight written again ({ast.unparse(node)}): use "
                    "evalfarm.ranking.tie_ranks (SQL: tie_rank(rank, tied, ties))"
                )
        for s in _strings(tree):
            if SQL_WEIGHT.search(s.value):
                found.append(f"{path}:{s.lineno}: a tie weight written again in SQL: use tie_rank(rank, tied, ties)")
    return found


# ---- module constants -------------------------------------------------------------------------------------------
GUARDED = re.compile(r"^(DEFAULT_[A-Z0-9_]+|[A-Z0-9_]+_RESAMPLES|[A-Z0-9_]+_SEED|[A-Z0-9_]+_TIES|CONFIDENCE)$")
"""The names of default constants: facts a caller would otherwise spell again."""
UPPER = re.compile(r"^[A-Z][A-Z0-9_]*$")
_UNKNOWN = object()


@dataclass(frozen=True)
class Constant:
    path: str
    line: int
    name: str
    value: object  # _UNKNOWN when the AST does not tell it
    alias_of: str | None = None  # `from m import X as NAME`: m.X


def _module_constants(path: str, tree: ast.Module) -> Iterator[tuple[str, int, ast.expr | str]]:
    """(name, line, value expression or ``"module.NAME"`` for an import) of each module-level UPPER binding."""
    package = module_name(path).rsplit(".", 1)[0] if not path.endswith("__init__.py") else module_name(path)
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and UPPER.match(t.id):
                    yield t.id, node.lineno, node.value
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            source = node.module if not node.level else ".".join([package, node.module])
            for alias in node.names:
                if UPPER.match(alias.asname or alias.name):
                    yield alias.asname or alias.name, node.lineno, f"{source}.{alias.name}"


def _value(
    raw: dict[str, dict[str, tuple[str, int, ast.expr | str]]], module: str, name: str, depth: int = 0
) -> object:
    """The value of ``module.name`` as the AST tells it (through names and imports), or ``_UNKNOWN``."""
    entry = raw.get(module, {}).get(name)
    if entry is None or depth > 10:
        return _UNKNOWN
    expr = entry[2]
    if isinstance(expr, str):
        source, _, imported = expr.rpartition(".")
        return _value(raw, source, imported, depth + 1)
    if isinstance(expr, ast.Name):
        return _value(raw, module, expr.id, depth + 1)
    try:
        return ast.literal_eval(expr)
    except ValueError:
        return _UNKNOWN


def module_constants(sources: Iterable[Source]) -> list[Constant]:
    """Every public module-level constant of ``sources`` whose value the AST tells (a literal, or a name bound to
    one in the same module or imported from another), and the aliases (``import X as Y``) of such constants."""
    raw: dict[str, dict[str, tuple[str, int, ast.expr | str]]] = {}
    for path, text in sources:
        raw[module_name(path)] = {n: (path, line, v) for n, line, v in _module_constants(path, parse(path, text))}
    out = []
    for module, names in raw.items():
        for name, (path, line, expr) in names.items():
            imported = expr if isinstance(expr, str) else None
            if name.startswith("_") or (imported and imported.rpartition(".")[2] == name):
                continue  # private; or a plain import: the same constant, not a second one
            value = _value(raw, module, name)
            if value is not _UNKNOWN:
                out.append(Constant(path, line, name, value, imported))
    return out


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b


def _short(value: object, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def constants_sharing_a_name(sources: Iterable[Source]) -> list[str]:
    """One line per public constant name bound to different values in different modules."""
    by_name: dict[str, list[Constant]] = defaultdict(list)
    for c in module_constants(sources):
        by_name[c.name].append(c)
    found = []
    for name, consts in sorted(by_name.items()):
        if any(not _same(c.value, consts[0].value) for c in consts[1:]):
            where = "; ".join(f"{c.path}:{c.line} = {_short(c.value)}" for c in consts)
            found.append(f"{name} has different values ({where}): give each fact its own name and one home")
    return found


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> Iterator[tuple[str, ast.expr]]:
    a = fn.args
    positional = a.posonlyargs + a.args
    yield from zip((p.arg for p in positional[len(positional) - len(a.defaults) :]), a.defaults, strict=True)
    yield from ((p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None)


def _param_key(name: str) -> str:
    return name.removeprefix("n_")  # n_resamples and resamples are one parameter


def _default_constants(sources: list[Source]) -> dict[str, list[Constant]]:
    """Parameter name (``n_`` dropped) -> the guarded constants that are its default somewhere."""
    guarded = {c.name: c for c in module_constants(sources) if GUARDED.match(c.name) and c.alias_of is None}
    params: dict[str, list[Constant]] = defaultdict(list)
    for path, text in sources:
        for fn in ast.walk(parse(path, text)):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                for name, default in _params(fn):
                    ref = default.id if isinstance(default, ast.Name) else getattr(default, "attr", None)
                    if ref in guarded and guarded[ref] not in params[_param_key(name)]:
                        params[_param_key(name)].append(guarded[ref])
    return params


def _literal(node: ast.expr) -> object:
    """The value of a literal (a constant, or a tuple / list / set / dict of them), or ``_UNKNOWN``."""
    if not isinstance(node, ast.Constant | ast.Tuple | ast.List | ast.Set | ast.Dict):
        return _UNKNOWN
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _UNKNOWN


TRIVIAL = (None, True, False, 0, 1, "")
"""Values a class field may share with a default constant of its name: a task spec's own ``seed: int = 0`` is not
the bootstrap's seed. A function parameter gets no such leave (``seed: int = 0`` in the API was the copy)."""


def _class_fields(cls: ast.ClassDef) -> Iterator[tuple[str, ast.expr]]:
    """(name, default) of each field of a class body (a dataclass's, a pydantic model's) but trivial ones."""
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            if not any(_same(_literal(node.value), t) for t in TRIVIAL):
                yield node.target.id, node.value


def _literal_uses(tree: ast.AST) -> Iterator[tuple[str, ast.expr, object, str]]:
    """(parameter name, node, value, what it is) of each literal given to a named parameter: a default (of a
    function's parameter or a class's field), a keyword argument, or an argument beside a name in a call
    (``max(resamples, 2000)``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            pairs = _class_fields(node) if isinstance(node, ast.ClassDef) else _params(node)
            for name, default in pairs:
                if (value := _literal(default)) is not _UNKNOWN:
                    yield name, default, value, f"the default of {name!r}"
        elif isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg is not None and (value := _literal(kw.value)) is not _UNKNOWN:
                    yield kw.arg, kw.value, value, f"the argument {kw.arg}="
            literals = [(a, v) for a in node.args if (v := _literal(a)) is not _UNKNOWN]
            for name in (a.id for a in node.args if isinstance(a, ast.Name)):
                what = f"a literal beside {name!r} in {ast.unparse(node.func)}()"
                yield from ((name, a, v, what) for a, v in literals)


def _defined_twice(sources: list[Source]) -> list[str]:
    homes: dict[str, list[Constant]] = defaultdict(list)
    for c in module_constants(sources):
        if GUARDED.match(c.name) and c.alias_of is None:
            homes[c.name].append(c)
    return [
        f"{name} is defined in {len(consts)} modules ({', '.join(f'{c.path}:{c.line}' for c in consts)}): one home, "
        "imported by the others"
        for name, consts in sorted(homes.items())
        if len(consts) > 1
    ]


def default_literals(sources: Iterable[Source]) -> list[str]:
    """``path:line: ...`` for each default constant spelled again: its value as the literal default of a parameter
    it is the default of elsewhere, as a literal keyword argument of that name, beside such a name in a call; and
    each guarded constant defined in two modules."""
    sources = list(sources)
    params = _default_constants(sources)
    found = []
    for path, text in sources:
        for key, literal, value, what in _literal_uses(parse(path, text)):
            same = [c for c in params.get(_param_key(key), []) if _same(value, c.value)]
            if same:
                names = " or ".join(c.name for c in same)
                homes = ", ".join(f"{c.name}: {c.path}" for c in same)
                where = f"{path}:{literal.lineno}"
                found.append(f"{where}: {what} spells the value {value!r} of {names} ({homes}): use it")
    return found + _defined_twice(sources)


# ---- the guards ---------------------------------------------------------------------------------------------------
def test_no_tie_policy_is_spelled_outside_ranking() -> None:
    found = tie_name_literals(package_sources())
    assert not found, "\n".join(found)


def test_no_tie_weight_is_written_outside_ranking() -> None:
    found = tie_weight_formulas(package_sources())
    assert not found, "\n".join(found)


def test_no_default_constant_is_spelled_again() -> None:
    found = default_literals(package_sources())
    assert not found, "\n".join(found)


def test_no_two_module_constants_share_a_name_with_different_values() -> None:
    found = constants_sharing_a_name(package_sources())
    assert not found, "\n".join(found)


def test_the_guards_read_the_modules_they_guard() -> None:
    """The guards find what they guard by walking the package: the homes and their constants are among what they
    read (a walk that found nothing would pass every check)."""
    sources = package_sources()
    paths = {p for p, _ in sources}
    assert RANKING in paths and "evalfarm/api.py" in paths and len(paths) > 100
    names = {c.name for c in module_constants(sources)}
    assert {"BOARD_TIES", "PAPER_TIES", "INTERVAL_RESAMPLES", "COMPARISON_RESAMPLES", "BOOTSTRAP_SEED"} <= names
    params = _default_constants(sources)
    assert {c.name for c in params["resamples"]} >= {"INTERVAL_RESAMPLES", "COMPARISON_RESAMPLES"}
    assert {c.name for c in params["seed"]} >= {"BOOTSTRAP_SEED"}


# ---- tests of the tests: a planted copy makes each guard fail ----------------------------------------------------
def planted(tmp_path: Path, text: str, name: str = "planted.py") -> list[Source]:
    """The real package plus one planted module (written to a temp file and read back like the others)."""
    path = tmp_path / "evalfarm" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return [*package_sources(), (f"evalfarm/{name}", path.read_text(encoding="utf-8"))]


def test_a_planted_tie_literal_fails_the_guard(tmp_path: Path) -> None:
    text = '"""Docstrings may say realistic."""\n\n\ndef board(ties: str = "realistic") -> str:\n    return ties\n'
    assert tie_name_literals(planted(tmp_path, text)) == [
        "evalfarm/planted.py:4: the tie policy 'realistic' spelled as a string (use evalfarm.ranking: BOARD_TIES, "
        "PAPER_TIES, TIES)"
    ]
    assert tie_name_literals(planted(tmp_path, '"""optimistic"""\nX = f"{1} optimistic ties"\n')) == []
    sql = "BOARD = \"SELECT * FROM evalrank WHERE ties = 'realistic'\"\n"
    assert tie_name_literals(planted(tmp_path, sql)) == [
        "evalfarm/planted.py:1: the tie policy 'realistic' spelled in SQL (use board_ties(), paper_ties() or "
        "tie_rank(rank, tied, ties))"
    ]


def test_a_planted_tie_weight_fails_the_guard(tmp_path: Path) -> None:
    text = (
        "def reciprocal(rank, tied, ties):\n"
        "    if ties == TIES[1]:\n"
        "        return 1.0 / (rank + tied)\n"
        "    return 1.0 / (rank + tied / 2.0)\n"
        "\n"
        "SQL = 'SELECT r.rank + r.tied * 0.5 FROM ranks r'\n"
    )
    found = tie_weight_formulas(planted(tmp_path, text))
    assert [f.split(": ", 1)[0] for f in found] == [
        "evalfarm/planted.py:3",
        "evalfarm/planted.py:4",
        "evalfarm/planted.py:6",
    ]
    counting = "def count(tied, excluded):\n    tied -= excluded\n    return (tied > 0).mean(), tied.sum()\n"
    assert tie_weight_formulas(planted(tmp_path, counting)) == []


def test_a_planted_default_literal_fails_the_guard(tmp_path: Path) -> None:
    text = (
        "def table(*, resamples: int = 1000, seed: int = 0) -> int:\n"
        "    return refresh(n_resamples=2000) + max(resamples, 2000)\n"
    )
    found = default_literals(planted(tmp_path, text))
    assert [f.split(" (")[0] for f in found] == [
        "evalfarm/planted.py:1: the default of 'resamples' spells the value 1000 of INTERVAL_RESAMPLES or "
        "ITEM_RESAMPLES",
        "evalfarm/planted.py:1: the default of 'seed' spells the value 0 of BOOTSTRAP_SEED",
        "evalfarm/planted.py:2: the argument n_resamples= spells the value 2000 of COMPARISON_RESAMPLES",
        "evalfarm/planted.py:2: a literal beside 'resamples' in max() spells the value 2000 of COMPARISON_RESAMPLES",
    ]
    field = "class Options:\n    hits: tuple[int, ...] = (1, 3, 10)\n    seed: int = 0\n"
    found = default_literals(planted(tmp_path, field))  # a field's trivial value (a task's own seed: 0) is its own
    assert len(found) == 1, found
    assert found[0].startswith(
        "evalfarm/planted.py:2: the default of 'hits' spells the value (1, 3, 10) of DEFAULT_HITS"
    )
    copy = default_literals(planted(tmp_path, "INTERVAL_RESAMPLES = 1000\n"))
    assert len(copy) == 1 and copy[0].startswith("INTERVAL_RESAMPLES is defined in 2 modules (")
    assert "evalfarm/planted.py:1" in copy[0]
    assert (
        default_literals(planted(tmp_path, "def other(*, seed: int = 7, verbose: int = 0) -> int:\n    return 0\n"))
        == []
    )


def test_a_planted_constant_of_another_value_fails_the_guard(tmp_path: Path) -> None:
    found = constants_sharing_a_name(planted(tmp_path, "MAX_RANK_ROWS = 2048\n"))
    assert len(found) == 1 and found[0].startswith("MAX_RANK_ROWS has different values (")
    assert "evalfarm/planted.py:1 = 2048" in found[0] and "evalfarm/quality.py" in found[0]
    aliased = "from evalfarm.analysis_defaults import COMPARISON_RESAMPLES as INTERVAL_RESAMPLES\n"
    found = constants_sharing_a_name(planted(tmp_path, aliased))
    assert len(found) == 1 and found[0].startswith("INTERVAL_RESAMPLES has different values (")
    assert constants_sharing_a_name(planted(tmp_path, "MAX_RANK_ROWS = 1024\n_CHUNK = 3\n")) == []
