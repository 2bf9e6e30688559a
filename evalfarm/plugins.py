"""The plug-in layer: one :class:`Registry` shape for each extension axis — model kinds and task kinds.

This is the lowest layer of evalfarm that knows about kinds: it imports nothing of evalfarm, not even for type
annotations (the layer contract in ``pyproject.toml`` and ``tests/test_layers.py`` check that, ``TYPE_CHECKING``
imports included). The contract a plug-in meets is written here as Protocols: :class:`TaskKind` (what evalfarm
reads of a task kind's scorer: :class:`evalfarm.scorers.base.Scorer` implements it), :class:`ModelSpecLike` (what
every model spec has: :class:`evalfarm.catalog.specs.ModelSpec` is one) and :class:`ModelKind`. The catalog
validates against these registries, the loader and the scheduler read model kinds from them, the executor and the
warehouse read task kinds from them.

Where kinds come from, in order:

1. **Built-in modules**, found by scanning ``evalfarm.encoders`` (model kinds) and ``evalfarm.scorers`` (task kinds)
   the first time a registry is asked: each module registers what it defines (``model_kinds.register(KIND)`` at
   its bottom, or the ``@task_kinds.register`` class decorator). Adding a built-in kind is adding one module.
2. **Installed plug-ins**, through entry points (``importlib.metadata``): another package declares

   .. code-block:: toml

       [project.entry-points."evalfarm.model_kinds"]
       my-kind = "my_package.my_module:KIND"          # a ModelKind

       [project.entry-points."evalfarm.task_kinds"]
       my-task = "my_package.my_scorer:MyScorer"      # a Scorer subclass (or instance)

   and ``evalfarm run`` finds ``kind: my-kind`` in a catalog without anything living in ``evalfarm/``. An entry
   point is loaded only when its kind is used (lm-evaluation-harness's lazy placeholders): a broken plug-in
   package fails the catalogs that name it, with its name in the message, and nothing else.

A name is registered once: a second, different object under one name is an error naming both (as MTEB refuses
duplicate task names). Tests use :meth:`Registry.snapshot` / :meth:`Registry.restore` to leave the registry as
they found it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import pkgutil
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypedDict, TypeVar, cast, overload

if TYPE_CHECKING:  # types of libraries only: the plug-in layer imports nothing of evalfarm
    from collections.abc import Mapping, Sequence

    from pydantic import TypeAdapter

T = TypeVar("T")
Obj = TypeVar("Obj")  # what register() is given, handed back unchanged

Level = Literal["word", "sentence"]
Role = Literal["intrinsic", "downstream", "diagnostic"]
"""What a task kind's numbers are for (``Scorer.role``), read by the views, the correlations and the report:
``intrinsic`` (an evaluator of the embedding space itself: EvalRank, word similarity, STS), ``downstream`` (a task the
intrinsic evaluators are meant to predict: the SentEval-style classifiers, MTEB results; the correlations' columns),
``diagnostic`` (a probe of the space shown on request: geometry, AG2016, HEROS, DefSent)."""
ROLES: tuple[Role, ...] = ("intrinsic", "downstream", "diagnostic")
DEFAULT_ROLE: Role = "intrinsic"
"""The role of a ``Scorer`` subclass that declares none, and of a scorer no longer registered (the views)."""


class RegistryError(ValueError):
    """An unknown kind, two different kinds under one name, or a plug-in that does not load."""


class _Lazy:
    """A placeholder for an object not imported yet: ``"package.module:attribute"`` or an entry point."""

    def __init__(self, ref: str, loader: Callable[[], Any], origin: str) -> None:
        self.ref, self.loader, self.origin = ref, loader, origin

    def __repr__(self) -> str:
        return f"<lazy {self.ref} from {self.origin}>"


def _import_ref(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


class RegistryState(TypedDict, Generic[T]):
    """What :meth:`Registry.snapshot` saves and :meth:`Registry.restore` puts back."""

    entries: dict[str, T | _Lazy]
    origins: dict[str, str]


class Registry(Generic[T]):
    """Name → plug-in object for one extension axis (``model kind``, ``task kind``).

    ``builtin_packages``: packages whose modules are imported on first use (each registers its own kinds);
    ``group``: the entry-point group of installed plug-ins; ``check``: validates an object before it is registered
    (returns the object to store, e.g. an instance for a class) and raises ``TypeError`` with the reason otherwise;
    ``key``: the name an object registers under when none is given.
    """

    def __init__(
        self,
        axis: str,
        *,
        group: str,
        builtin_packages: tuple[str, ...] = (),
        check: Callable[[Any], T] | None = None,
        key: Callable[[T], str] | None = None,
    ) -> None:
        self.axis = axis
        self.group = group
        self.builtin_packages = builtin_packages
        self._check = check
        self._key = key
        self._entries: dict[str, T | _Lazy] = {}
        self._origins: dict[str, str] = {}
        self._discovered = False
        self._lock = threading.RLock()
        self._listeners: list[Callable[[], None]] = []

    # -- registering --------------------------------------------------------------------------------------------
    @overload
    def register(
        self, obj: None = None, *, name: str | None = None, origin: str | None = None
    ) -> Callable[[Obj], Obj]: ...
    @overload
    def register(self, obj: Obj, *, name: str | None = None, origin: str | None = None) -> Obj: ...
    def register(self, obj: Any = None, *, name: str | None = None, origin: str | None = None) -> Any:
        """Register ``obj`` (an object, or a ``"module:attr"`` string loaded on first use) under ``name``.

        Used bare as a class decorator (``@task_kinds.register``) it registers the class and returns it unchanged.
        """
        if obj is None:  # @registry.register(name=...)
            return lambda o: self.register(o, name=name, origin=origin)
        if isinstance(obj, str):
            if name is None:
                raise RegistryError(f"a lazy {self.axis} {obj!r} needs a name")
            self._put(name, _Lazy(obj, lambda: _import_ref(obj), origin or obj), origin or obj)
            return obj
        if origin is None:  # an instance (a ModelKind) comes from the module that registers it
            caller = sys._getframe(1).f_globals.get("__name__", "?")
            origin = _origin_of(obj) if isinstance(obj, type) else str(caller)
        stored = self._checked(obj, origin)
        self._put(name or self._name_of(stored), stored, origin)
        return obj

    def _checked(self, obj: Any, origin: str) -> T:
        if self._check is None:  # no check: the object is taken as it is
            return cast(T, obj)
        try:
            return self._check(obj)
        except TypeError as exc:
            raise RegistryError(f"{origin}: not a {self.axis}: {exc}") from None

    def _name_of(self, obj: T) -> str:
        if self._key is None:
            raise RegistryError(f"a {self.axis} needs a name")
        return self._key(obj)

    def _put(self, name: str, obj: T | _Lazy, origin: str) -> None:
        with self._lock:
            old = self._entries.get(name)
            if old is not None and not _same(old, obj):
                raise RegistryError(
                    f"two {self.axis}s are named {name!r}: {self._origins[name]} and {origin}; rename one"
                )
            if old is None or isinstance(old, _Lazy):
                self._entries[name] = obj
                self._origins[name] = origin
            for listener in self._listeners:
                listener()

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever a kind is registered (caches built from the registry clear themselves)."""
        self._listeners.append(listener)

    # -- finding ------------------------------------------------------------------------------------------------
    def discover(self) -> None:
        """Import the built-in modules and declare the installed entry points (once; cheap afterwards)."""
        if self._discovered:
            return
        with self._lock:
            if self._discovered:
                return
            self._discovered = True  # set first: a module that registers during the scan must not re-enter
            for package in self.builtin_packages:
                pkg = importlib.import_module(package)
                for mod in pkgutil.iter_modules(pkg.__path__):
                    if not mod.name.startswith("_"):
                        importlib.import_module(f"{package}.{mod.name}")
            for ep in importlib.metadata.entry_points(group=self.group):
                if ep.name not in self._entries:
                    dist = getattr(ep.dist, "name", None) or "an installed package"
                    self._entries[ep.name] = _Lazy(ep.value, ep.load, f"entry point {ep.name!r} of {dist}")
                    self._origins[ep.name] = f"entry point {ep.name!r} ({ep.value}) of {dist}"

    def names(self) -> list[str]:
        """Every registered name, sorted (plug-ins included, without importing them)."""
        self.discover()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self.discover()
        return name in self._entries

    def get(self, name: str) -> T:
        """The plug-in registered as ``name``, imported on first use."""
        self.discover()
        try:
            entry = self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "none"
            raise RegistryError(f"unknown {self.axis} {name!r} (known: {known})") from None
        if isinstance(entry, _Lazy):
            try:
                loaded = entry.loader()
            except Exception as exc:
                raise RegistryError(
                    f"{self.axis} {name!r} ({entry.origin}) does not load: {type(exc).__name__}: {exc}"
                ) from exc
            stored = self._checked(loaded, entry.origin)
            with self._lock:
                if isinstance(self._entries.get(name), _Lazy):
                    self._entries[name] = stored
            entry = self._entries[name]
        return entry  # type: ignore[return-value]  # no longer a _Lazy: the loaded entry replaced it above

    def origin(self, name: str) -> str:
        """Where ``name`` was registered from (a module, or an installed package's entry point)."""
        self.discover()
        return self._origins[name]

    def items(self) -> Iterator[tuple[str, T]]:
        """Every (name, plug-in), loading each one."""
        for name in self.names():
            yield name, self.get(name)

    # -- tests --------------------------------------------------------------------------------------------------
    def snapshot(self) -> RegistryState[T]:
        """The registry's state, for :meth:`restore` (a test fixture registers kinds and puts things back)."""
        self.discover()
        return {"entries": dict(self._entries), "origins": dict(self._origins)}

    def restore(self, state: RegistryState[T]) -> None:
        with self._lock:
            self._entries = dict(state["entries"])
            self._origins = dict(state["origins"])
            for listener in self._listeners:
                listener()


def _origin_of(obj: Any) -> str:
    mod = getattr(obj, "__module__", None) or type(obj).__module__
    name = getattr(obj, "__qualname__", None) or getattr(obj, "name", None) or type(obj).__qualname__
    return f"{mod}.{name}"


def _same(a: Any, b: Any) -> bool:
    """One plug-in registered twice (a module imported again, a lazy placeholder meeting its object)."""
    if isinstance(a, _Lazy) or isinstance(b, _Lazy):
        return True
    if a is b or a == b:
        return True
    ta, tb = (x if isinstance(x, type) else type(x) for x in (a, b))
    return ta is tb or (ta.__module__, ta.__qualname__) == (tb.__module__, tb.__qualname__)


# -- the model-kind axis ------------------------------------------------------------------------------------------
class ModelSpecLike(Protocol):
    """What every model spec has, whatever its kind (:class:`evalfarm.catalog.specs.ModelSpec` is one): a kind's
    ``load`` and ``check`` receive the validated spec, with the fields its kind declares (``ModelKind.fields``)."""

    @property
    def id(self) -> str: ...
    @property
    def level(self) -> str: ...
    @property
    def kind(self) -> str | None: ...


SpecT = TypeVar("SpecT", bound=ModelSpecLike)

Loader = Callable[[SpecT, "LoadContext"], tuple[Any, dict[str, Any]]]
"""Load a model of the kind (``ModelKind.load``): the spec and the :class:`LoadContext` -> the encoder and its
provenance."""


@dataclass(frozen=True)
class LoadContext:
    """What a kind's loader gets besides the spec.

    - ``location``: where the spec's ``source`` is — a ``pathlib.Path`` of a local file or folder, or a ``str``: a
      hub id — for a kind that loads a source (``needs_source``); None for one that does not.
    - ``base_dir``: the catalog's folder (relative ``path`` sources resolve against it).
    - ``resolve``: ``source -> location``, as for ``location``, for another source a model names (an ONNX model's
      tokenizer: a ``Source`` of its spec, :class:`evalfarm.catalog.specs.Source`).
    - ``base``: the loaded base encoder, for a kind built over a base model (``ModelKind.base_levels``: bow).
    - ``libraries``: distributions the model uses besides the kind's declared ``libraries`` (a loader adds them with
      :meth:`uses`; their versions go into the model's provenance with the declared ones).
    """

    location: Path | str | None = None
    base_dir: Path | None = None
    resolve: Callable[[Any], Path | str] | None = None  # takes one of the spec's sources
    base: Any = None  # whatever the base's kind loads (a word model for bow)
    libraries: list[str] = field(default_factory=list)

    @property
    def is_hub(self) -> bool:
        """The source is a hub id (downloaded by its library), not a local file or folder."""
        return isinstance(self.location, str)

    @property
    def local_path(self) -> Path:
        """``location`` as a path, for a loader that has ruled out a hub id (``is_hub``)."""
        if self.location is None:
            raise TypeError("this model has no source location (its kind loads none: needs_source=False)")
        return Path(self.location)

    def uses(self, *names: str) -> None:
        """Record distributions this model needs beyond its kind's ``libraries`` (their versions are provenance)."""
        self.libraries.extend(names)


@dataclass(frozen=True)
class ModelKind(Generic[SpecT]):
    """A model family (``kind:`` in a catalog): how a spec of it is checked, loaded and scheduled.

    - ``load``: ``load(spec, ctx) -> (encoder, provenance)`` (None: the kind is catalogued but cannot run yet;
      ``unsupported`` says what is missing, and loading raises ``NotSupportedYet`` before any source is resolved).
      The generic loader adds the source's identity, the libraries' versions, post-processing and lineage.
    - ``check``: the kind's own spec rules, run when a catalog is validated (raise ``ValueError``); the generic rules
      (level in ``levels``, ``source`` / ``base`` / ``postprocess`` / ``allow_pickle``) read the attributes below.
    - ``levels``: the levels a model of the kind may have.
    - ``libraries``: the distributions whose versions a model's provenance records.
    - ``cost``: the relative cost of embedding a task's texts (units of one EvalRank sentence-pool rank pass:
      order and ETA only; a big model must not start last).
    - ``gpu``: the kind runs faster on a GPU, so its embed jobs wait for GPU workers when a run has them (and an
      autoscaled cluster asks for GPU workers for them).
    - ``small``: loads in seconds in little memory; a run of only small models needs no big workers.
    - ``needs_source``: a model of the kind without a ``base`` must have a ``source`` (the loader resolves it into
      ``ctx.location``).
    - ``base_levels``: a model of the kind is built over a base model of one of these levels (bow over word
      vectors): it names a ``base`` instead of a ``source``, the loader loads the base and passes it as
      ``ctx.base``, and it is post-processed in its own entry.
    - ``pickle``: a model of the kind may hold a pickle: ``allow_pickle: true`` admits it.
    - ``unsupported``: what this project lacks to run the kind (None: it runs).
    - ``fields``: the ModelSpec fields the kind reads beyond the generic ones (docs; a spec may set ``dim`` only for
      a kind that lists it).
    - ``options``: the kind's own options, a pydantic model (a ``evalfarm.catalog.specs.KindOptions`` subclass in the
      kind's module): its fields are top-level keys of a model entry of the kind, validated by it (unknown or bad
      values are errors naming the model and the option); the loader reads them as ``spec.options``. An option at
      its default stays out of the spec hash, and a derived model may override its base's options.
    - ``forward_key``: ``forward_key(spec) -> dict | None``: what one forward pass of a model of the kind depends on;
      models of the kind with equal keys differ only in how the pass is pooled, so one pass embeds them all (the
      leader's encoder has ``encode_poolings``). None (the default): every model embeds on its own.
    - ``checkpoint``: the format of checkpoint the kind loads from its source (``"hf"``: a Hugging Face model
      folder); a derived model may switch its kind to another kind that declares the same format (same folder,
      other loader). None (the default): a derived model keeps its base's kind.
    """

    name: str
    description: str
    levels: tuple[Level, ...]
    load: Loader[SpecT] | None = None
    check: Callable[[SpecT], None] | None = None
    libraries: tuple[str, ...] = ()
    cost: float = 5.0
    gpu: bool = False
    small: bool = False
    needs_source: bool = True
    base_levels: tuple[Level, ...] = ()
    pickle: bool = False
    unsupported: str | None = None
    fields: tuple[str, ...] = field(default=())
    options: type[Any] | None = None  # a pydantic model (KindOptions subclass)
    forward_key: Callable[[SpecT], Mapping[str, Any] | None] | None = None
    checkpoint: str | None = None


def _model_kind(obj: Any) -> ModelKind[Any]:
    if not isinstance(obj, ModelKind):
        raise TypeError(f"expected an evalfarm.plugins.ModelKind, got {type(obj).__name__}")
    if obj.load is None and obj.unsupported is None:
        raise TypeError(f"model kind {obj.name!r} has no loader and does not say why ('unsupported')")
    if obj.options is not None and not isinstance(getattr(obj.options, "model_fields", None), dict):
        raise TypeError(f"model kind {obj.name!r}: 'options' is a pydantic model (a KindOptions subclass)")
    return obj


model_kinds: Registry[ModelKind[Any]] = Registry(
    "model kind",
    group="evalfarm.model_kinds",
    builtin_packages=("evalfarm.encoders",),
    check=_model_kind,
    key=lambda k: k.name,
)
"""Every model kind: evalfarm's encoders and installed plug-ins (entry-point group ``evalfarm.model_kinds``)."""


# -- the task-kind axis -------------------------------------------------------------------------------------------
class TaskKind(Protocol):
    """What evalfarm reads of a task kind's scorer below the scorer layer (the catalog, the warehouse, the views,
    the correlations): :class:`evalfarm.scorers.base.Scorer` implements it and documents each member. The one
    contract of a task kind: registration checks that a scorer has every member written here
    (:data:`TASK_KIND_MEMBERS`, read from this class), so an out-of-tree scorer may duck-type it, though subclassing
    ``Scorer`` gives the defaults. The executor and the planner read the whole ``Scorer`` interface (``params``,
    ``evaluate``, ``thin`` ...)."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def task_spec(self) -> type[Any]: ...  # a pydantic model: a TaskSpec subclass with ``kind: Literal[...]``
    @property
    def task_kind(self) -> str: ...
    @property
    def primary_metric(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def role(self) -> Role: ...
    @property
    def declared_metrics(self) -> Mapping[str, Any]: ...  # name -> evalfarm.metrics.MetricInfo
    @property
    def detail_schemas(self) -> Mapping[str, Any]: ...  # table -> pyarrow.Schema
    @property
    def views(self) -> str: ...

    def load(self, task: Any) -> Any: ...
    def texts(self, data: Any) -> Sequence[str]: ...
    def variant_label(self, variant: str) -> str: ...
    def score(
        self, task: Any, data: Any, vectors: Any, params: dict[str, Any], *, device: str | None = None
    ) -> Any: ...


def protocol_members(protocol: type) -> tuple[str, ...]:
    """The members a Protocol class declares itself (annotated attributes, properties, methods), in the order
    written; private names and the Protocol machinery's are not members."""
    names = [*vars(protocol).get("__annotations__", {}), *vars(protocol)]
    return tuple(dict.fromkeys(n for n in names if not n.startswith("_")))


TASK_KIND_MEMBERS: tuple[str, ...] = protocol_members(TaskKind)
"""What registration checks a task kind's scorer has: the members of :class:`TaskKind`, read from it (one contract)."""


def _task_kind(obj: Any) -> TaskKind:
    scorer = obj() if isinstance(obj, type) else obj
    missing = [a for a in TASK_KIND_MEMBERS if not hasattr(scorer, a)]
    if missing:
        raise TypeError(
            f"a scorer lacks {', '.join(missing)} of the TaskKind contract (evalfarm.plugins.TaskKind; subclass "
            "evalfarm.scorers.base.Scorer for its defaults)"
        )
    kind = scorer.task_spec.model_fields["kind"].default
    if scorer.name != kind:  # one name per kind: the catalog's ``kind:`` is the warehouse's ``scorer``
        raise TypeError(
            f"scorer {scorer.name!r} scores task kind {kind!r}: a scorer's name is its kind's (rename one of them; "
            "a renamed kind lists its old names in its spec's former_kinds)"
        )
    role = scorer.role
    if role not in ROLES:
        raise TypeError(f"scorer {scorer.name!r} declares role {role!r}; a role is one of {', '.join(ROLES)}")
    return cast(TaskKind, scorer)  # duck-typed: an out-of-tree scorer need not subclass Scorer


task_kinds: Registry[TaskKind] = Registry(
    "task kind",
    group="evalfarm.task_kinds",
    builtin_packages=("evalfarm.scorers",),
    check=_task_kind,
    key=lambda s: s.task_kind,
)
"""Every task kind, by ``kind:``: its scorer (a :class:`TaskKind`: spec model, data reader, scorer,
detail tables, views). Built-in scorers and installed plug-ins (entry-point group ``evalfarm.task_kinds``)."""


@functools.cache
def task_spec_adapter() -> TypeAdapter[Any]:
    """A pydantic adapter validating a task entry as the discriminated union (by ``kind``) of every task kind's spec
    model (rebuilt when a kind is registered)."""
    from typing import Annotated, Union

    from pydantic import Field, TypeAdapter

    specs = tuple(scorer.task_spec for _, scorer in task_kinds.items())
    if not specs:
        raise RegistryError("no task kind is registered")
    # built at run time, so a value (Any) to a type checker, not a type it can read
    union: Any = specs[0] if len(specs) == 1 else Annotated[Union[specs], Field(discriminator="kind")]  # noqa: UP007
    return TypeAdapter(union)


task_kinds.on_change(task_spec_adapter.cache_clear)


def role_of(scorer: TaskKind) -> Role:
    """A registered scorer's declared role (:data:`Role`: registration checked it)."""
    return scorer.role


def scorer_roles() -> dict[str, Role]:
    """Every registered scorer's name and role (what the ``scorer_roles`` view, the correlations and the report
    read: nothing names a scorer to know what its numbers are for)."""
    return {scorer.name: role_of(scorer) for _, scorer in task_kinds.items()}


def model_kind(name: str) -> ModelKind[Any]:
    """The model kind ``name`` (``RegistryError`` naming the known ones otherwise)."""
    return model_kinds.get(name)


__all__ = [
    "DEFAULT_ROLE",
    "ROLES",
    "LoadContext",
    "ModelKind",
    "ModelSpecLike",
    "Registry",
    "RegistryError",
    "Role",
    "TASK_KIND_MEMBERS",
    "TaskKind",
    "model_kind",
    "model_kinds",
    "protocol_members",
    "role_of",
    "scorer_roles",
    "task_kinds",
    "task_spec_adapter",
]
