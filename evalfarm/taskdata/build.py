"""Generated task data: ``evalfarm data build NAME`` writes a versioned, seeded, deterministic file and its sha256.

Some diagnostics have no released file to download (a HEROS-style minimal-pair set rebuilt from GoEmotions, WordNet
definition -> word pairs): their data is *generated* from real inputs by a recipe. A recipe is a :class:`Builder`:
a name, a version (bumped whenever the recipe's output changes), default parameters (size, seed) and a function
from (inputs, parameters) to the file's text. The same recipe with the same inputs, parameters and resources
(WordNet, the spaCy model, the inflection tables: their versions are written into the file's header) gives the
same bytes on every machine, so a task entry names the file by recipe, parameters and sha256
(:class:`BuildRef`), and a fresh machine (CI) rebuilds it and checks the checksum.

Built files live in the cache (``<EVALFARM_CACHE>/builds/<name>/<version>/<name>-<params>.tsv``) or a folder the
user names (``--out``); never in the evaluation data folder, which evalfarm only reads.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evalfarm import atomic
from evalfarm.cache import cache_dir, sha256_file
from evalfarm.catalog.specs import canonical_json


class BuildError(RuntimeError):
    """A recipe that cannot run here (a missing input or resource), or a built file whose checksum differs."""


@dataclass(frozen=True)
class BuildInput:
    """One input file of a recipe: a path under the evaluation data folder and its sha256."""

    path: str
    sha256: str


@dataclass(frozen=True)
class Builder:
    """A recipe for one generated data file.

    ``make(inputs, params)`` returns the file's text (UTF-8, ``\\n`` line ends); ``inputs`` maps each role of
    ``inputs`` to its verified local path. ``resources()`` names the versions of what the output depends on besides
    the inputs (WordNet, models, libraries): they go into the header, so a different resource shows as a different
    checksum rather than as silently different data."""

    name: str
    version: str
    description: str
    make: Callable[[Mapping[str, Path], Mapping[str, Any]], str]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    inputs: Mapping[str, BuildInput] = field(default_factory=dict)
    resources: Callable[[], Mapping[str, str]] = field(default=lambda: {})

    def params(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The defaults with ``overrides`` applied; an unknown parameter is an error naming the known ones."""
        out = dict(self.defaults)
        for key, value in (overrides or {}).items():
            if key not in out:
                raise BuildError(f"data build {self.name}: unknown parameter {key!r} (known: {', '.join(out)})")
            out[key] = type(out[key])(value) if out[key] is not None else value
        return out


class BuildRef(BaseModel):
    """How a task entry names a generated file: the recipe, its version and parameters, and the file's sha256.

    ``params`` not given take the recipe's defaults (the file name and the checksum cover the full set)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    params: dict[str, Any] = Field(default_factory=dict)
    sha256: str


_BUILDERS: dict[str, Builder] = {}
"""The current recipe of each name: what ``evalfarm data build NAME`` builds and new task entries name."""
_EARLIER: dict[tuple[str, str], Builder] = {}
"""Earlier versions of a recipe, kept so that a task entry naming one still builds the same bytes (its numbers stay
reproducible): ``(name, version) -> recipe``."""


def _version_key(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (-1, version)


def register_builder(builder: Builder) -> Builder:
    """Add a recipe (each ``build_*`` module of this package registers its own on import). Several versions of one
    name may be registered: the highest is the current one, the others stay buildable by version."""
    known = [b for b in (_BUILDERS.get(builder.name), *_EARLIER.values()) if b is not None and b.name == builder.name]
    same = [b for b in known if b.version == builder.version]
    if same and same[0] is not builder:
        raise BuildError(f"two data builds are named {builder.name!r} version {builder.version}")
    if same:
        return builder
    current = _BUILDERS.get(builder.name)
    if current is None or _version_key(builder.version) > _version_key(current.version):
        if current is not None:
            _EARLIER[(current.name, current.version)] = current
        _BUILDERS[builder.name] = builder
    else:
        _EARLIER[(builder.name, builder.version)] = builder
    return builder


def builders() -> dict[str, Builder]:
    """The current recipe of every name: the ``build_*`` modules of this package register theirs when imported."""
    import importlib
    import pkgutil

    import evalfarm.taskdata as package

    for mod in pkgutil.iter_modules(package.__path__):
        if mod.name.startswith("build_"):
            importlib.import_module(f"{package.__name__}.{mod.name}")
    return dict(sorted(_BUILDERS.items()))


def versions(name: str) -> list[Builder]:
    """Every registered version of recipe ``name``, oldest first."""
    current = builder(name)
    earlier = [b for (n, _), b in _EARLIER.items() if n == name]
    return sorted([*earlier, current], key=lambda b: _version_key(b.version))


def builder(name: str, version: str | None = None) -> Builder:
    """Recipe ``name`` at ``version`` (default: the current one); an unknown name or version is an error naming the
    known ones."""
    known = builders()
    if name not in known:
        raise BuildError(f"unknown data build {name!r} (known: {', '.join(known) or 'none'})")
    current = known[name]
    if version is None or version == current.version:
        return current
    if (name, version) in _EARLIER:
        return _EARLIER[(name, version)]
    have = sorted([current.version, *(v for (n, v) in _EARLIER if n == name)], key=_version_key)
    raise BuildError(
        f"data build {name}: the task names version {version}, this evalfarm builds {', '.join(have)}; "
        "update the task's build entry (`evalfarm data build` prints it)"
    )


def params_key(params: Mapping[str, Any]) -> str:
    """A short stable key of a parameter set (the built file's name)."""
    return hashlib.sha256(canonical_json(dict(params)).encode()).hexdigest()[:12]


def file_name(b: Builder, params: Mapping[str, Any]) -> str:
    return f"{b.name}-{b.version}-{params_key(params)}.tsv"


def default_dir(b: Builder) -> Path:
    """Where built files go unless the user names a folder: ``<cache>/builds/<name>/<version>``."""
    return cache_dir() / "builds" / b.name / b.version


def header(b: Builder, params: Mapping[str, Any], resources: Mapping[str, str]) -> str:
    """The file's first line: ``# evalfarm data build NAME VERSION`` with its parameters and resources (JSON)."""
    meta = {"params": dict(params), "resources": dict(resources)}
    return f"# evalfarm data build {b.name} {b.version} {canonical_json(meta)}\n"


def resolve_inputs(b: Builder, data: Path | None = None) -> dict[str, Path]:
    """Each input of ``b`` under the evaluation data folder (``data`` or ``EVALFARM_DATA``), checked by sha256."""
    from evalfarm.taskdata.data import data_dir

    base = data if data is not None else data_dir()
    if b.inputs and base is None:
        raise BuildError(f"data build {b.name} reads the evaluation data: set EVALFARM_DATA (e.g. ../shared/data)")
    out = {}
    for role, spec in b.inputs.items():
        assert base is not None
        path = base / spec.path
        if not path.is_file():
            raise BuildError(f"data build {b.name}: input {role!r} {path} is missing")
        got = sha256_file(path)
        if got != spec.sha256:
            raise BuildError(f"data build {b.name}: input {path} has sha256 {got[:16]}…, expected {spec.sha256[:16]}…")
        out[role] = path
    return out


@dataclass(frozen=True)
class Built:
    """A built file: where it is, its sha256, and the parameters it was built with."""

    path: Path
    sha256: str
    params: dict[str, Any]
    rebuilt: bool


def build(
    name: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    out_dir: Path | None = None,
    inputs: Mapping[str, Path] | None = None,
    force: bool = False,
    version: str | None = None,
) -> Built:
    """Build the file of recipe ``name`` at ``version`` (default: the current one), or reuse the one already in
    ``out_dir`` (same name = same recipe, version and parameters; ``force`` rebuilds). ``inputs`` replaces the data
    folder's files (tests)."""
    b = builder(name, version)
    params = b.params(overrides)
    dest = _dest(b, params, out_dir)
    if dest.is_file() and not force:
        return Built(dest, sha256_file(dest), params, rebuilt=False)
    paths = dict(inputs) if inputs is not None else resolve_inputs(b)
    text = header(b, params, b.resources()) + b.make(paths, params)
    atomic.write_bytes(dest, text.encode("utf-8"))
    return Built(dest, hashlib.sha256(text.encode("utf-8")).hexdigest(), params, rebuilt=True)


def _dest(b: Builder, params: Mapping[str, Any], out_dir: Path | None) -> Path:
    return (out_dir or default_dir(b)) / file_name(b, params)


def _builds_dir() -> Path | None:
    return Path(os.environ["EVALFARM_BUILDS"]) if os.environ.get("EVALFARM_BUILDS") else None


def is_built(ref: BuildRef) -> bool:
    """Whether the generated file a task entry names is there already (nothing built, nothing hashed): a planner
    that only counts texts leaves a task whose file is not built yet to the workers, which build it."""
    b = builder(ref.name, ref.version)
    return _dest(b, b.params(ref.params), _builds_dir()).is_file()


def built_file(ref: BuildRef, *, inputs: Mapping[str, Path] | None = None) -> Path:
    """The generated file a task entry names, built into the cache on first use and checked against its sha256."""
    b = builder(ref.name, ref.version)
    got = build(ref.name, ref.params, out_dir=_builds_dir(), inputs=inputs, version=ref.version)
    if got.sha256 != ref.sha256:
        raise BuildError(
            f"data build {ref.name} {ref.version} {ref.params or '(defaults)'}: {got.path} has sha256 "
            f"{got.sha256[:16]}…, the task expects {ref.sha256[:16]}… (different inputs or resources: "
            f"{canonical_json(dict(b.resources()))}; delete the file to rebuild it)"
        )
    return got.path


def read_rows(path: Path) -> list[list[str]]:
    """The tab-separated rows of a built file, its ``#`` header line and the column-name line left out."""
    return read_table(path)[1]


def read_table(path: Path) -> tuple[list[str], list[list[str]]]:
    """The column names and the tab-separated rows of a built file (its ``#`` header line left out)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    body = [line for line in lines if not line.startswith("#")]
    if not body:
        return [], []
    return body[0].split("\t"), [line.split("\t") for line in body[1:]]


__all__ = [
    "BuildError",
    "BuildInput",
    "BuildRef",
    "Builder",
    "Built",
    "build",
    "builder",
    "builders",
    "built_file",
    "is_built",
    "read_rows",
    "read_table",
    "register_builder",
    "versions",
]
