"""Catalogs by name or path: YAML files under ``catalog/``, merged, checked, with derived models resolved.

Names are looked up on a search path: the folders of ``EVALFARM_CATALOG_PATH`` (user catalogs), then the catalogs
evalfarm ships (``catalog/`` in a checkout, the ``evalfarm._catalogs`` data package in an installed wheel).

Errors name the file and the entry (``catalog/zoo.yaml: models[3] (id 'glove-abtt'): pooling: ...``) because a
catalog of a hundred entries is unreadable otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from evalfarm.catalog.specs import (
    DEFAULT_SENTENCE_FIT_TASK,
    LINEAGE,
    CatalogFile,
    ModelSpec,
    PostProcess,
    TaskSpec,
    spec_hash,
)


class CatalogError(ValueError):
    """A catalog that cannot be used: the message names the file and the entry."""


CATALOG_PATH_ENV = "EVALFARM_CATALOG_PATH"
"""A search path of folders of user catalogs (``os.pathsep``-separated, like ``PATH``), searched in order before
the shipped catalogs: ``--catalog my-zoo`` finds ``my-zoo.yaml`` in the first folder that has it."""

CATALOG_DIR_ENV = "EVALFARM_CATALOG_DIR"
"""One folder that replaces the shipped catalogs (older setting; ``EVALFARM_CATALOG_PATH`` adds folders instead)."""


def shipped_catalog_dir() -> Path:
    """The catalogs that ship with evalfarm: the checkout's ``catalog/``, or the installed package's copy."""
    from evalfarm._resources import shipped_dir

    return shipped_dir("evalfarm._catalogs", "catalog")


def catalog_dir() -> Path:
    """The shipped catalogs' folder, or ``EVALFARM_CATALOG_DIR`` in its place (``zoo build`` writes here)."""
    env = os.environ.get(CATALOG_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return shipped_catalog_dir()


@dataclass(frozen=True)
class CatalogTarget:
    """Where a generated catalog (``evalfarm zoo build``'s ``zoo-local.yaml``) is written by default, and why."""

    path: Path
    why: str
    on_search_path: bool  # ``--catalog <name>`` finds it


def generated_catalog_target(filename: str) -> CatalogTarget:
    """``EVALFARM_CATALOG_DIR`` when set; else the shipped catalogs when they are a writable source checkout's
    ``catalog/`` (the repository's file is regenerated in place); else, for an installed package (whose catalogs sit
    in site-packages), the first ``EVALFARM_CATALOG_PATH`` folder, or ``<cache>/catalogs`` without one."""
    from evalfarm._resources import source_checkout
    from evalfarm.cache import cache_dir

    if os.environ.get(CATALOG_DIR_ENV):
        return CatalogTarget(catalog_dir() / filename, f"{CATALOG_DIR_ENV} replaces the shipped catalogs", True)
    shipped = shipped_catalog_dir()
    checkout = source_checkout()
    if checkout is not None and shipped == checkout / "catalog" and os.access(shipped, os.W_OK):
        return CatalogTarget(shipped / filename, "the source checkout's catalogs", True)
    why = "the shipped catalogs are an installed package's" if checkout is None else f"{shipped} is not writable"
    extra = [p for p in os.environ.get(CATALOG_PATH_ENV, "").split(os.pathsep) if p.strip()]
    if extra:
        return CatalogTarget(
            Path(extra[0]).expanduser() / filename, f"{why}: the first {CATALOG_PATH_ENV} folder", True
        )
    return CatalogTarget(cache_dir() / "catalogs" / filename, f"{why} and {CATALOG_PATH_ENV} is not set", False)


def catalog_search_path() -> list[Path]:
    """Where catalog names are looked up, first match wins: ``EVALFARM_CATALOG_PATH``'s folders, then
    :func:`catalog_dir`. Empty entries are skipped."""
    extra = [Path(p).expanduser() for p in os.environ.get(CATALOG_PATH_ENV, "").split(os.pathsep) if p.strip()]
    return [*extra, catalog_dir()]


def resolve_catalog_path(name_or_path: str | os.PathLike[str]) -> Path:
    """A catalog file: a path as given (``.yaml`` / ``.yml`` or an existing file), else a name on the search path."""
    p = Path(name_or_path).expanduser()
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise CatalogError(f"catalog file not found: {p}")
        return p.resolve()
    for folder in catalog_search_path():
        for ext in (".yaml", ".yml"):
            cand = folder / f"{name_or_path}{ext}"
            if cand.is_file():
                return cand.resolve()
    known = ", ".join(available_catalogs()) or "(none)"
    where = os.pathsep.join(str(d) for d in catalog_search_path())
    raise CatalogError(
        f"unknown catalog {str(name_or_path)!r}: not a file, and not a name on the catalog search path {where} "
        f"(known: {known}); pass a path, or add its folder to {CATALOG_PATH_ENV}"
    )


def available_catalogs() -> list[str]:
    """The catalog names the search path offers (each once, whichever folder has it first)."""
    names: set[str] = set()
    for folder in catalog_search_path():
        if folder.is_dir():
            names.update(p.stem for p in folder.glob("*.y*ml") if p.suffix in (".yaml", ".yml") and p.is_file())
    return sorted(names)


def _describe_loc(raw: dict, loc: tuple) -> str:
    parts: list[str] = []
    for i, key in enumerate(loc):
        if isinstance(key, int) and i > 0 and isinstance(loc[i - 1], str):
            entry = raw.get(loc[i - 1], [])
            ident = entry[key].get("id") if key < len(entry) and isinstance(entry[key], dict) else None
            parts[-1] = f"{parts[-1]}[{key}]" + (f" (id {ident!r})" if ident else "")
        else:
            parts.append(str(key))
    return ".".join(parts)


def _read_text(path: Path) -> str:
    """A catalog file's text, or a one-line CatalogError naming it (a folder, bytes that are not UTF-8, no access)."""
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise CatalogError(f"{path}: is a directory, not a catalog file: pass a .yaml file") from None
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read the catalog: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise CatalogError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save the catalog as "
            "UTF-8"
        ) from None


# libyaml's safe loader where PyYAML has it: the same safe subset, parsed in C, and every run parses the tasks file
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.load(_read_text(path), Loader=_YAML_LOADER) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise CatalogError(f"{path}{where}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise CatalogError(f"{path}: a catalog is a mapping with 'models' and 'tasks' keys")
    return raw


Lineage = dict[str, tuple[str | None, str | None]]
"""{model id: (kind, base)}: what validation needs to know of the other models (:data:`LINEAGE`)."""


def lineage_of(models: Iterable[ModelSpec], entries: Any = ()) -> Lineage:
    """The :data:`Lineage` of validated ``models``, then of raw ``entries`` (a catalog file's or a submit spec's:
    the well-formed ones; the others fail their own validation)."""
    out: Lineage = {m.id: (m.kind, m.base) for m in models}
    for e in entries if isinstance(entries, list) else []:
        if isinstance(e, dict) and isinstance(e.get("id"), str):
            out[e["id"]] = (e.get("kind") if isinstance(e.get("kind"), str) else None, e.get("base"))
    return out


def _parse_file(path: Path, raw: dict[str, Any], lineage: Lineage) -> CatalogFile:
    """``raw`` validated; ``lineage`` (the included catalogs' models and this file's) lets an entry without a kind
    set options of the kind its base has."""
    try:
        return CatalogFile.model_validate(raw, context={LINEAGE: lineage})
    except ValidationError as exc:
        msgs = []
        for err in exc.errors():
            # task entries may be names (str): drop the union branch names from the location.
            loc = tuple(x for x in err["loc"] if x not in ("TaskSpec", "str"))
            msgs.append(f"{path}: {_describe_loc(raw, loc)}: {err['msg']}")
        raise CatalogError("\n".join(msgs)) from None


FAMILIES = ("neural", "word-vectors", "bag-of-words", "post-processed")
MAX_BASE_DEPTH = 16
"""The most bases a model derives from (``base:`` of ``base:`` …); the shipped catalogs go 2 deep (a bag of words
over a post-processed word model)."""
"""The zoo's composition (:meth:`Catalog.family`), in the order it is printed."""


def model_family(kind: str, level: str, lineage: list[ModelSpec]) -> str:
    """A model's family from its kind, level and lineage (see :meth:`Catalog.family`)."""
    if any(s.postprocess is not None for s in lineage):
        return "post-processed"
    if kind == "bow":
        return "bag-of-words"
    return "word-vectors" if level == "word" else "neural"


def describe_composition(composition: dict[str, dict[str, int]]) -> str:
    """``sentence: 44 neural, 96 bag-of-words, 40 post-processed (180); word: ...``: one line per zoo."""
    parts = []
    for level, counts in composition.items():
        inner = ", ".join(f"{n} {fam}" for fam, n in counts.items())
        parts.append(f"{level}: {inner} ({sum(counts.values())})")
    return "; ".join(parts)


@dataclass
class Catalog:
    """Models and tasks of one catalog, includes merged; lookups by id."""

    path: Path
    models: dict[str, ModelSpec] = field(default_factory=dict)
    tasks: dict[str, TaskSpec] = field(default_factory=dict)
    default_tasks: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.stem

    def model(self, model_id: str) -> ModelSpec:
        try:
            return self.models[model_id]
        except KeyError:
            raise CatalogError(
                f"unknown model id {model_id!r} in catalog {self.name!r} "
                f"({len(self.models)} models; `evalfarm catalog list` shows them)"
            ) from None

    def task(self, task_id: str) -> TaskSpec:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise CatalogError(f"unknown task id {task_id!r} (known: {', '.join(sorted(self.tasks))})") from None

    def lineage(self, model_id: str) -> list[ModelSpec]:
        """The model and its bases, nearest first (a cycle is an error naming it, never a hang; a chain longer than
        :data:`MAX_BASE_DEPTH` is an error too, in one short line: every layer of a derived model nests a loader,
        and 3,000 of them ended in a RecursionError whose message named each model, 22 KB)."""
        chain = [self.model(model_id)]
        seen = {model_id}
        while chain[-1].base is not None:
            base = chain[-1].base
            if base in seen:
                cycle = " -> ".join([*(s.id for s in chain), base])
                raise CatalogError(f"{self.path}: model {model_id!r}: base cycle {cycle}")
            if len(chain) > MAX_BASE_DEPTH:
                shown = " -> ".join(s.id for s in chain[:3])
                raise CatalogError(
                    f"{self.path}: model {model_id!r}: its base chain ({shown} -> …) is deeper than "
                    f"{MAX_BASE_DEPTH} models; a model derives from at most {MAX_BASE_DEPTH} bases"
                )
            seen.add(base)
            chain.append(self.model(base))
        return chain

    def kind(self, model_id: str) -> str:
        """The model family: its own ``kind`` or, for a post-processed model, its base's."""
        return next(s.kind for s in self.lineage(model_id) if s.kind is not None)

    def family(self, model_id: str) -> str:
        """What the zoo's composition counts a model as: ``post-processed`` (a ``postprocess`` anywhere in its
        lineage, as the ``models`` view's ``postprocessed`` column and the paper's Table 11 say), else
        ``bag-of-words`` (kind ``bow``), else ``word-vectors`` (a word model) or ``neural`` (every other sentence
        encoder: transformers, ONNX, e5, USE, spaCy's CNN, the static model)."""
        return model_family(self.kind(model_id), self.model(model_id).level, self.lineage(model_id))

    def composition(self) -> dict[str, dict[str, int]]:
        """``{level: {family: count}}`` over the catalog's models (:meth:`family`), families in a fixed order."""
        out: dict[str, dict[str, int]] = {}
        for m in self.models.values():
            counts = out.setdefault(m.level, {})
            fam = self.family(m.id)
            counts[fam] = counts.get(fam, 0) + 1
        return {lvl: {f: c[f] for f in FAMILIES if f in c} for lvl, c in sorted(out.items())}

    def spec_hash(self, model_id: str) -> str:
        chain = self.lineage(model_id)
        return spec_hash(chain[0], *chain[1:])

    def tasks_for(self, model_id: str) -> list[TaskSpec]:
        level = self.model(model_id).level
        return [self.tasks[t] for t in self.default_tasks if self.tasks[t].level == level]

    def with_models(self, models: list[ModelSpec], *, source: Path | None = None) -> Catalog:
        """A copy of this catalog with ``models`` added (replacing same ids), checked as a loaded catalog is; their
        ``dims`` and ``precisions`` add the derived models they name (:func:`with_derived`)."""
        merged = Catalog(
            path=source or self.path,
            models={**self.models, **{m.id: m for m in with_derived(source or self.path, models)}},
            tasks=dict(self.tasks),
            default_tasks=list(self.default_tasks),
        )
        _check_references(merged)
        return merged


POOLS_DEPRECATION = "'pools:' is the old name of 'tasks:' and goes in evalfarm 0.3: rename the key"


def warn_pools_key(where: object) -> None:
    """A catalog (or submit spec) still uses the first wave's ``pools:`` key: say so once, naming the file."""
    import warnings

    warnings.warn(f"{where}: {POOLS_DEPRECATION}", FutureWarning, stacklevel=3)


def former_kind_names() -> dict[str, str]:
    """{a task kind's former name: its name} over the registered kinds (``TaskSpec.former_kinds``); kinds that do
    not load are left out (a catalog naming one fails at that entry)."""
    from evalfarm.plugins import RegistryError, task_kinds

    out: dict[str, str] = {}
    for name in task_kinds.names():
        try:
            out.update(dict.fromkeys(task_kinds.get(name).task_spec.former_kinds, name))
        except RegistryError:
            continue
    return out


def _current_kind(path: Path, entry: dict[str, Any], where: str, kinds: list[str]) -> dict[str, Any]:
    """``entry`` with a renamed kind's former name replaced by its name, and a warning naming the file."""
    import warnings

    kind = entry.get("kind")
    if not isinstance(kind, str) or kind in kinds:  # a current name: no other kind is loaded to look it up
        return entry
    renamed = former_kind_names().get(kind)
    if renamed is None:
        return entry
    warnings.warn(
        f"{path}: {where}: task kind {kind!r} is now called {renamed!r}: rename it (the old name goes in evalfarm "
        "0.3; the task's checksum is the same under both, so nothing is recomputed)",
        FutureWarning,
        stacklevel=4,
    )
    return {**entry, "kind": renamed}


def _validate_task(path: Path, entry: dict[str, Any], i: int, key: str) -> TaskSpec:
    from evalfarm.plugins import RegistryError, task_kinds

    kinds = task_kinds.names()
    ident = entry.get("id")
    where = f"{key}[{i}]" + (f" (id {ident!r})" if ident else "")
    entry = _current_kind(path, entry, where, kinds)
    if entry.get("kind") not in kinds:
        raise CatalogError(f"{path}: {where}: unknown task kind {entry.get('kind')!r} (known: {', '.join(kinds)})")
    try:  # only this entry's kind is loaded: a plug-in that does not load fails the catalogs that name it
        spec_model = task_kinds.get(entry["kind"]).task_spec
    except RegistryError as exc:
        raise CatalogError(f"{path}: {where}: {exc}") from None
    try:
        return spec_model.model_validate(entry)
    except ValidationError as exc:
        msgs = [
            f"{path}: {where}: {'.'.join(str(x) for x in err['loc']) or 'kind'}: {err['msg']}" for err in exc.errors()
        ]
        raise CatalogError("\n".join(msgs)) from None


def load_catalog(name_or_path: str | os.PathLike[str], *, _seen: tuple[Path, ...] = ()) -> Catalog:
    """Load a catalog by name (file stem on the catalog search path) or path, with its includes."""
    path = resolve_catalog_path(name_or_path)
    if path in _seen:
        raise CatalogError(f"{path}: include cycle through {' -> '.join(str(p) for p in _seen)}")
    raw = _read_file(path)
    includes = raw.get("include")
    subs = [
        load_catalog(
            inc if not inc.endswith((".yaml", ".yml")) else str((path.parent / inc).resolve()), _seen=(*_seen, path)
        )
        for inc in (includes if isinstance(includes, list) else [])
        if isinstance(inc, str)
    ]  # first: an entry of this file may derive from an included model, and inherit its kind's options
    lineage = lineage_of((m for sub in subs for m in sub.models.values()), raw.get("models"))
    parsed = _parse_file(path, raw, lineage)
    cat = Catalog(path=path)
    for sub in subs:
        _merge_included(cat, sub)
    if parsed.pools:
        warn_pools_key(path)  # here: the warning names load_catalog's caller
    local_default = _add_tasks(cat, path, parsed.task_entries, "tasks" if parsed.tasks else "pools")
    seen_ids: set[str] = set()
    for m in with_derived(path, parsed.models):
        if m.id in seen_ids:
            raise CatalogError(f"{path}: model id {m.id!r} appears twice")
        seen_ids.add(m.id)
        cat.models[m.id] = m
    if local_default:
        cat.default_tasks = local_default
    for t in cat.default_tasks:
        if t not in cat.tasks:
            raise CatalogError(f"{path}: task {t!r} is listed but not defined (known: {', '.join(sorted(cat.tasks))})")
    _check_references(cat)
    return cat


def _merge_included(cat: Catalog, sub: Catalog) -> None:
    """An included catalog's tasks and models, and its default tasks after those already listed."""
    cat.tasks.update(sub.tasks)
    cat.models.update(sub.models)
    for t in sub.default_tasks:
        if t not in cat.default_tasks:
            cat.default_tasks.append(t)


def _add_tasks(cat: Catalog, path: Path, entries: tuple[dict[str, Any] | str, ...], key: str) -> list[str]:
    """Validate and add a file's task definitions; returns the file's task list (definitions and ids, in order)."""
    listed: list[str] = []
    for i, entry in enumerate(entries):
        if isinstance(entry, dict):
            task = _validate_task(path, entry, i, key)
            if task.id in cat.tasks and cat.tasks[task.id] != task:
                raise CatalogError(f"{path}: task {task.id!r} defined twice with different specs")
            cat.tasks[task.id] = task
            listed.append(task.id)
        else:
            listed.append(entry)
    return listed


def with_derived(path: Path, models: Iterable[ModelSpec]) -> list[ModelSpec]:
    """``models``, each followed by the models its ``dims`` and ``precisions`` derive: ``<id>-d<k>`` (postprocess
    truncate to k dimensions, renormalised) and ``<id>-int8`` / ``<id>-binary`` (postprocess int8 / binary), each a
    model of its own (boards, correlations) whose vectors come from the base's stored ones: one forward pass for the
    whole family. An id that does not fit the id rules is a CatalogError naming the file and the model."""
    out: list[ModelSpec] = []
    for m in models:
        out.append(m)
        made: list[tuple[str, PostProcess, str]] = []
        for d in m.dims or ():
            pp = PostProcess(method="truncate", d=d, layer_norm=m.dims_layer_norm)
            how = "layer norm, then " if m.dims_layer_norm else ""
            made.append((f"{m.id}-d{d}", pp, f"{m.id}, Matryoshka: {how}the first {d} dimensions, renormalised"))
        for precision in m.precisions or ():
            what = {"int8": "int8 scalar quantisation calibrated on " + DEFAULT_SENTENCE_FIT_TASK, "binary": "binary"}
            made.append((f"{m.id}-{precision}", PostProcess(method=precision), f"{m.id}, {what[precision]} vectors"))
        for ident, pp, description in made:
            try:
                out.append(
                    ModelSpec(
                        id=ident,
                        level=m.level,
                        base=m.id,
                        postprocess=pp,
                        description=description,
                        licence=m.licence,
                        tags=m.tags,
                    )  # fmt: skip
                )
            except ValidationError as exc:
                msg = "; ".join(e["msg"] for e in exc.errors())
                raise CatalogError(f"{path}: model {m.id!r}: the derived model {ident!r}: {msg}") from None
    return out


def _check_references(cat: Catalog) -> None:
    for m in cat.models.values():
        if m.base is not None and m.base not in cat.models:
            raise CatalogError(f"{cat.path}: model {m.id!r}: base {m.base!r} is not in the catalog")
    for m in cat.models.values():  # a cycle is an error naming it (lineage walks bases)
        cat.lineage(m.id)
    _check_truncation(cat)
    _check_prompt_tasks(cat)
    from evalfarm.plugins import model_kind

    for m in cat.models.values():
        if m.base is None:
            continue
        base = cat.models[m.base]
        over = model_kind(m.kind).base_levels if m.kind is not None else ()  # a kind built over its base (bow)
        if over and base.level not in over:
            raise CatalogError(
                f"{cat.path}: model {m.id!r}: {m.kind} needs a {'- or '.join(over)}-level base, {m.base!r} is "
                f"{base.level}"
            )
        if not over and base.level != m.level:
            raise CatalogError(f"{cat.path}: model {m.id!r}: level {m.level} differs from its base {m.base!r}")
        if m.postprocess is not None and m.level == "sentence" and m.postprocess.fits:
            fit_on = m.postprocess.fit_on or DEFAULT_SENTENCE_FIT_TASK
            if fit_on not in cat.tasks or cat.tasks[fit_on].level != "sentence":
                raise CatalogError(
                    f"{cat.path}: model {m.id!r}: post-processing is fitted on the texts of task {fit_on!r}, which is "
                    f"not a sentence-level task of the catalog (known: {', '.join(sorted(cat.tasks)) or 'none'}); "
                    "include it, or name another with postprocess.fit_on"
                )


def _check_truncation(cat: Catalog) -> None:
    """A truncated model keeps at most its base's width, where the lineage declares it (``dim``)."""
    for m in cat.models.values():
        if m.postprocess is None or m.postprocess.method != "truncate" or m.postprocess.d is None:
            continue
        width = next((s.dim for s in cat.lineage(m.id)[1:] if s.dim is not None), None)
        if width is not None and m.postprocess.d > width:
            raise CatalogError(
                f"{cat.path}: model {m.id!r}: truncate to d={m.postprocess.d} is above the model's width {width} "
                f"(its base's 'dim')"
            )


def _check_prompt_tasks(cat: Catalog) -> None:
    """Per-task prompts name tasks of the catalog; an override with sides, a task kind that has them."""
    from evalfarm.plugins import RegistryError, task_kinds

    for m in cat.models.values():
        if m.prompts is None:
            continue
        for task in m.prompts.task_ids:
            if task not in cat.tasks:
                raise CatalogError(
                    f"{cat.path}: model {m.id!r}: prompts: tasks: {task!r} is not a task of the catalog (known: "
                    f"{', '.join(sorted(cat.tasks)) or 'none'})"
                )
        for task in m.prompts.sided_tasks():
            kind = cat.tasks[task].kind
            try:
                scorer = task_kinds.get(kind)
            except RegistryError:
                continue
            if getattr(scorer, "query_side", False) is not True:
                raise CatalogError(
                    f"{cat.path}: model {m.id!r}: prompts: tasks: {task!r} names query and document prompts, but "
                    f"a {kind} task embeds one kind of text; give it one prompt"
                )
