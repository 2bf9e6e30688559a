"""spaCy ``tok2vec`` as a sentence encoder: the mean of ``doc.tensor`` (the contextual CNN token vectors).

Only the ``tok2vec`` pipe runs (every other pipe is excluded at load); an empty text gets a zero vector.

What loading a pipeline folder may run (spaCy 3.8, thinc 8.3, srsly 2.5; read from their source) and what this
loader does about it — a catalog can point ``path:`` at any folder:

- ``config.cfg`` is resolved: every ``@architectures`` / ``@layers`` / … reference calls a registered function of
  an installed package (spaCy's own, or any package's entry points) with the folder's arguments; a component's
  ``source`` loads another pipeline (a folder, or ``import``s an installed package by name); ``before_creation`` /
  ``after_creation`` / ``after_pipeline_creation`` call registered callbacks (``spacy.copy_from_base_model.v1``
  loads another pipeline). Refused here: ``source``, any callback, a ``tok2vec`` component of another factory than
  spaCy's, and any registered function defined outside spaCy and thinc.
- The weights (``tok2vec/model``) are msgpack, decoded by srsly with numpy (``np.frombuffer``: no pickle, object
  arrays are refused); the vocabulary's vectors are read with ``numpy.load`` (``allow_pickle=False``); strings and
  ``cfg`` files are JSON. None of these runs code.
- Except thinc *shims*, the layers that wrap another framework's model, whose saved state is that framework's own
  serialisation: ``PyTorchShim`` (``torch.load``: a pickle; torch ≥ 2.6 loads it ``weights_only`` unless
  ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` is set, torch 2.4–2.5 — which evalfarm allows — runs any pickle),
  ``TorchScriptShim`` (``torch.jit.load``: a TorchScript program), ``TensorFlowShim``, ``MXNetShim``. spaCy's own
  ``spacy.TorchBiLSTMEncoder.v1`` builds a ``PyTorchShim``. A pipeline with shims is refused before anything is
  read from disk; ``allow_pickle: true`` in the spec admits ``PyTorchShim`` (a pickle, as for ``gensim-kv``), the
  other shims never load.

An installed package name (a ``package`` source without ``path``) goes through ``spacy.load(name)``, which
imports that Python package (its ``__init__`` and its ``load()``, i.e. code pip installed, trusted as such) and then
loads its data folder unchecked; point ``path:`` at the package's data folder to load it through the checks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from evalfarm.catalog.specs import ModelSpec
from evalfarm.encoders.protocol import ModelLoadError, NotSupportedYet
from evalfarm.plugins import LoadContext, ModelKind, model_kinds

OWN_MODULES = ("spacy.", "thinc.", "spacy_legacy.")
"""Registered functions a pipeline folder may name: defined by spaCy or thinc themselves (spacy-legacy holds spaCy's
older architectures). Anything else comes from another installed package's entry points."""
PICKLE_SHIMS = ("PyTorchShim",)
"""Shims whose state is a pickle (``torch.load``): loaded only with ``allow_pickle: true``."""
CALLBACKS = ("before_creation", "after_creation", "after_pipeline_creation")


def _references(node: Any, where: str) -> Iterator[tuple[str, str, str]]:
    """(registry, function name, config path) of every ``@registry = "name"`` reference below ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and key.startswith("@"):
                yield key[1:], str(value), where
            else:
                yield from _references(value, f"{where}.{key}")
    elif isinstance(node, list | tuple):
        for i, value in enumerate(node):
            yield from _references(value, f"{where}[{i}]")


def check_pipeline_config(config: Any, keep: str, folder: Path) -> None:
    """Refuse what resolving ``config`` (the ``nlp`` section and component ``keep``) could run beyond spaCy's and
    thinc's own functions: sourced components, callbacks, another factory, another package's registered function."""
    from spacy.util import registry

    nlp = config.get("nlp", {})
    components = config.get("components", {})
    if keep not in nlp.get("pipeline", []) or keep not in components:
        raise ModelLoadError(f"{folder}: the spaCy pipeline has no '{keep}' component (pipes: {nlp.get('pipeline')})")
    pipe = components[keep]
    cfg = folder / "config.cfg"
    if "source" in pipe:
        raise ModelLoadError(
            f"{cfg}: component '{keep}' is sourced from {pipe['source']!r} (another pipeline, loaded unchecked, or "
            "an installed package imported by name): refused; give the folder its own tok2vec"
        )
    if pipe.get("factory") != keep:
        raise ModelLoadError(f"{cfg}: component '{keep}' uses factory {pipe.get('factory')!r}, not spaCy's {keep!r}")
    for name in CALLBACKS:
        if nlp.get(name) is not None:
            raise ModelLoadError(f"{cfg}: [nlp] {name} calls {nlp[name]!r} while loading: refused (set it to null)")
    section = {k: v for k, v in nlp.items() if k not in CALLBACKS}
    for reg, name, where in [*_references(section, "nlp"), *_references(pipe, f"components.{keep}")]:
        try:
            func = registry.get(reg, name)
        except Exception as exc:
            raise ModelLoadError(f"{cfg}: {where}: @{reg} = {name!r} is not a registered function ({exc})") from None
        module = getattr(func, "__module__", "") or ""
        if not module.startswith(OWN_MODULES):
            raise ModelLoadError(
                f"{cfg}: {where}: @{reg} = {name!r} is {module or '?'}.{getattr(func, '__name__', '?')}, a function "
                "of another package than spaCy and thinc: refused (a pipeline folder only names spaCy's own)"
            )


def check_shims(nlp: Any, folder: Path, *, allow_pickle: bool) -> None:
    """Refuse components whose thinc model wraps another framework's (a *shim*): their saved state is that
    framework's serialisation, which can run code (``torch.load`` unpickles). ``allow_pickle`` admits PyTorch's."""
    for name, proc in nlp.pipeline:
        model: Any = getattr(proc, "model", None)  # a thinc Model, or None for a component without one
        for node in model.walk() if hasattr(model, "walk") else ():
            for shim in getattr(node, "shims", ()):
                kind = type(shim).__name__
                if kind in PICKLE_SHIMS and allow_pickle:
                    continue
                how = (
                    "its weights are a pickle (torch.load), which runs any code the file carries: only for a "
                    "pipeline you trust, set `allow_pickle: true` in the spec"
                    if kind in PICKLE_SHIMS
                    else "its weights are another framework's program or saved model: never loaded"
                )
                raise ModelLoadError(
                    f"{folder}: component '{name}' wraps a {kind} (layer {node.name!r}); {how}. Use a pipeline "
                    "whose tok2vec is spaCy's own CNN (spacy.Tok2Vec / HashEmbedCNN: en_core_web_sm/md/lg)"
                )


def load_pipeline_folder(folder: Path, *, keep: str = "tok2vec", allow_pickle: bool = False) -> Any:
    """A spaCy pipeline folder with only component ``keep``, loaded as ``spacy.load`` does (meta, config, build,
    ``from_disk``) with the checks of this module between its steps: the config before anything is built, the
    built model before any weight is read."""
    from spacy import util

    folder = Path(folder)
    if not (folder / "config.cfg").is_file():
        raise ModelLoadError(f"{folder}: not a spaCy pipeline folder (no config.cfg)")
    meta = util.get_model_meta(folder)
    config = util.load_config(folder / "config.cfg")
    check_pipeline_config(config, keep, folder)
    exclude = [p for p in config["nlp"]["pipeline"] if p != keep]
    nlp = util.load_model_from_config(config, meta=meta, exclude=exclude)
    check_shims(nlp, folder, allow_pickle=allow_pickle)
    return nlp.from_disk(folder, exclude=exclude)


class SpacyTok2Vec:
    level: Literal["sentence"] = "sentence"

    def __init__(self, name_or_path: str | Path, *, batch_size: int = 64, allow_pickle: bool = False) -> None:
        import spacy

        if Path(str(name_or_path)).is_dir():
            self.nlp = load_pipeline_folder(Path(name_or_path), allow_pickle=allow_pickle)
        else:  # an installed package name: spacy.load imports it (installed code), then drop the other pipes
            self.nlp = spacy.load(name_or_path)
            for p in [p for p in self.nlp.pipe_names if p != "tok2vec"]:
                self.nlp.remove_pipe(p)
        if "tok2vec" not in self.nlp.pipe_names:
            raise ValueError(
                f"{name_or_path}: the spaCy pipeline has no 'tok2vec' component (pipes: {self.nlp.pipe_names})"
            )
        self.batch_size = batch_size
        self.dim = int(self.nlp("a").tensor.shape[1])
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        return f"SpacyTok2Vec({self.nlp.meta.get('name')!r}, dim={self.dim})"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, doc in enumerate(self.nlp.pipe(texts, batch_size=self.batch_size)):
            if len(doc):
                out[i] = np.asarray(doc.tensor, dtype=np.float32).mean(axis=0)
        return out


# -- the model kind -------------------------------------------------------------------------------------------------
def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[SpacyTok2Vec, dict[str, Any]]:
    """A local spaCy pipeline folder (through the checks above), or an installed pipeline package by name."""
    if ctx.is_hub:
        raise NotSupportedYet(f"model {spec.id!r}: spaCy pipelines from the hub are not supported yet")
    assert spec.source is not None
    target: str | Path = ctx.local_path
    if spec.source.type == "package" and not spec.source.path:  # an installed spaCy pipeline package
        target = spec.source.ref.replace("-", "_")
    return SpacyTok2Vec(target, batch_size=spec.batch_size, allow_pickle=spec.allow_pickle), {}


KIND = ModelKind(
    name="spacy-tok2vec",
    description="A spaCy pipeline's tok2vec (contextual CNN) token vectors, mean-pooled; the pipeline is checked "
    "before it loads (no foreign registered functions; a PyTorch layer only with allow_pickle).",
    levels=("sentence",),
    load=load_model,
    libraries=("spacy",),
    cost=2.0,
    pickle=True,
    fields=("source", "batch_size", "allow_pickle"),
)
model_kinds.register(KIND)
