"""Turn a model's spec lineage into a loaded :class:`~evalfarm.encoders.protocol.Encoder`.

Each model kind loads its own models (``evalfarm.plugins.model_kinds``: ``ModelKind.load``, in the kind's module);
this module holds only what is common to all of them. ``chain`` is the model's spec followed by its bases, nearest
first (``Catalog.lineage(id)``). Derivations:

- a kind built over a base model (``ModelKind.base_levels``; ``kind: bow`` over a word model,
  :class:`~evalfarm.encoders.bow.BagOfWords`): the base is loaded and handed to the kind's loader.
- ``base`` + ``postprocess``, word level: :class:`~evalfarm.encoders.postprocess.PostProcessedWordVectors`,
  fitted once on the base's whole vocabulary matrix.
- ``base`` + ``postprocess``, sentence level: :class:`SentencePostProcessed`; the transform is fitted on the
  pool's embedded texts by the embed stage (``fit_and_encode``), never silently on something else.

A derived spec may also override loading fields of its base (``max_length``, ``batch_size``,
``dtype``, ...) and the options its kind declares (``ModelKind.options``); only fields set explicitly in the derived
spec override. Its kind may switch to
another kind that declares the same checkpoint format (``ModelKind.checkpoint``: ``transformers`` and
``sentence-transformers`` read one Hugging Face folder, pooled differently).

Heavy libraries (torch, transformers, onnxruntime, spaCy) are imported only when a model needs them. Every
returned encoder carries ``spec_id`` and ``provenance`` (library versions, source identity, device, dtype).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from evalfarm.catalog.prompts import Prompt
from evalfarm.catalog.specs import ModelSpec, PostProcess
from evalfarm.encoders.postprocess import PostProcessedWordVectors, Transform, fit_postprocess
from evalfarm.encoders.protocol import Encoder, ModelLoadError, NotSupportedYet
from evalfarm.encoders.sources import resolve_source, source_provenance
from evalfarm.plugins import LoadContext, ModelKind, model_kinds

__all__ = ["SentencePostProcessed", "library_versions", "load_encoder"]

_OVERRIDABLE = (  # the generic loading fields; a kind's own options (ModelKind.options) come from the kind
    "batch_size",
    "max_length",
    "dtype",
    "lowercase",
    "trust_remote_code",
    "revision",
    "format",
    "vocab",
)


def _switchable(a: str, b: str) -> bool:
    """Whether a derived model may switch between kinds ``a`` and ``b``: both declare one checkpoint format
    (``ModelKind.checkpoint``)."""
    fmt = model_kinds.get(a).checkpoint
    return fmt is not None and fmt == model_kinds.get(b).checkpoint


def library_versions(*names: str) -> dict[str, str | None]:
    """Installed versions of the named distributions (``None`` where not installed)."""
    from evalfarm.provenance import package_versions

    return package_versions(names, missing=None)


class SentencePostProcessed:
    """A sentence model plus a post-processing transform that is fitted on the texts being evaluated.

    The embed stage calls :meth:`fit_and_encode` on the pool's texts (or :meth:`fit` on embeddings it already
    has). :meth:`encode` works only after fitting, so a transform is never fitted on an arbitrary batch by
    accident.
    """

    def __init__(self, base: Encoder, pp: PostProcess) -> None:
        self.base = base
        self.postprocess = pp
        self.level: Literal["word", "sentence"] = base.level
        self.dim = int(pp.d) if pp.method in ("whitening", "truncate") and pp.d else int(base.dim)
        self.transform: Transform | None = None
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        return f"SentencePostProcessed({self.base!r}, {self.postprocess.method}, d={self.postprocess.d})"

    def fit(self, X: np.ndarray | None) -> Transform:
        """Fit the transform on base embeddings ``X`` (rows = the pool's texts)."""
        self.transform = fit_postprocess(X, self.postprocess)
        return self.transform

    def fit_and_encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode ``texts`` with the base model, fit the transform on them, and return them transformed."""
        X = self.base.encode(texts)
        return self.fit(X).apply(X)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self._transform().apply(self.base.encode(texts))

    def encode_prompted(self, texts: Sequence[str], prompt: Prompt) -> np.ndarray:
        """``texts`` under ``prompt`` as the base puts it before them, transformed."""
        from evalfarm.encoders.prompts import PromptedEncoder

        return self._transform().apply(PromptedEncoder(self.base, prompt).encode(texts))

    def prompt_text(self, name: str) -> str:
        """The base model's own prompt ``name``."""
        from evalfarm.encoders.prompts import prompt_text

        return prompt_text(self.base, Prompt(name=name))

    def _transform(self) -> Transform:
        if self.transform is None:
            raise RuntimeError(
                f"model {self.spec_id!r}: {self.postprocess.method} post-processing is fitted on "
                "the evaluated texts; call fit_and_encode(texts) (or fit(base embeddings)) first"
            )
        return self.transform


def load_encoder(chain: Sequence[ModelSpec], *, base_dir: Path | None = None) -> Encoder:
    """Load the model ``chain[0]``, deriving it from ``chain[1:]`` (its bases, nearest first) as needed.

    ``base_dir`` is the catalog file's folder, against which relative ``path`` sources resolve.
    Raises :class:`NotSupportedYet` for kinds this project cannot run, :class:`ModelLoadError` otherwise;
    both name the model id.
    """
    if not chain:
        raise ValueError("load_encoder needs at least one spec")
    from evalfarm.environment import quiet_third_party_bars

    quiet_third_party_bars()  # a worker's log gets no `Loading weights` bar (its driver shows the run's progress)
    spec = chain[0]
    if spec.base is not None and (len(chain) < 2 or chain[1].id != spec.base):
        got = chain[1].id if len(chain) > 1 else None
        raise ModelLoadError(
            f"model {spec.id!r}: its base is {spec.base!r} but the chain continues with {got!r}; "
            "pass the full lineage (Catalog.lineage)"
        )
    try:
        enc, prov = _load(list(chain), base_dir)
    except NotSupportedYet:
        raise
    except ModelLoadError as exc:
        if str(exc).startswith(f"model {spec.id!r}"):
            raise
        raise ModelLoadError(f"model {spec.id!r}: {exc}") from exc
    except Exception as exc:
        detail = str(exc).strip().rstrip(".")
        raise ModelLoadError(
            f"model {spec.id!r}: loading {_kind(chain)} model failed: {type(exc).__name__}: {detail}. "
            f"{_hint(spec, exc)}."
        ) from exc
    enc.spec_id = spec.id
    enc.provenance = {
        "model": spec.id,
        "kind": _kind(chain),
        "level": spec.level,
        "lineage": [s.id for s in chain],
        **prov,
    }
    return enc


def _load(chain: list[ModelSpec], base_dir: Path | None) -> tuple[Any, dict[str, Any]]:
    spec = chain[0]
    kind = model_kinds.get(spec.kind) if spec.kind is not None else None
    if kind is not None and kind.base_levels and spec.base is not None and chain[1].level in kind.base_levels:
        base = load_encoder(chain[1:], base_dir=base_dir)
        ctx = _context(base_dir, base=base)
        enc, own = _call(kind, spec, ctx)
        prov: dict[str, Any] = {"libraries": _libraries(kind, ctx), **own, "base": getattr(base, "provenance", {})}
        return enc, prov
    if spec.base is not None and spec.source is None:
        if spec.postprocess is None:
            raise ModelLoadError(f"model {spec.id!r}: a derived model needs 'postprocess' or its own 'source'")
        base = load_encoder([_overlay(chain[1], spec), *chain[2:]], base_dir=base_dir)
        prov = {"postprocess": spec.postprocess.record(), "base": getattr(base, "provenance", {})}
        return _wrap_postprocess(spec, base), prov
    if kind is None:  # a derived spec with its own source names no kind to load it with
        raise NotSupportedYet(f"model {spec.id!r}: kind {spec.kind!r} is not supported yet")
    enc, prov = _load_own(kind, spec, base_dir)
    if spec.postprocess is not None:
        enc = _wrap_postprocess(spec, enc)
        prov["postprocess"] = spec.postprocess.record()
    return enc, prov


def _load_own(kind: ModelKind, spec: ModelSpec, base_dir: Path | None) -> tuple[Any, dict[str, Any]]:
    """Load a model that is not derived from another: the kind's loader, given its resolved source."""
    if kind.unsupported is not None:  # before resolving the source: nothing is downloaded for nothing
        raise NotSupportedYet(
            f"model {spec.id!r}: kind {spec.kind!r} is not supported yet: this project lacks "
            f"{kind.unsupported}. The catalog lists it so results stay comparable with the paper; "
            "leave it out of runs (--models) until an encoder for it exists"
        )
    prov: dict[str, Any] = {}
    ctx = _context(base_dir)
    if kind.needs_source:
        if spec.source is None:
            raise ModelLoadError(f"model {spec.id!r}: no 'source' to load")
        prov["source"] = source_provenance(spec.source, revision=spec.revision)
        ctx = _context(base_dir, location=resolve_source(spec.source, base_dir=base_dir))
    enc, own = _call(kind, spec, ctx)
    if spec.dim is not None and getattr(enc, "dim", spec.dim) != spec.dim:
        raise ModelLoadError(
            f"model {spec.id!r}: the spec declares dim {spec.dim} (the model's width, as its card says) but the model "
            f"gives {enc.dim}-dimensional vectors: fix 'dim' (and any 'dims' above the width)"
        )
    prov.update(own)
    prov["libraries"] = _libraries(kind, ctx)
    return enc, prov


def _context(base_dir: Path | None, *, location: Any = None, base: Any = None) -> LoadContext:
    return LoadContext(
        location=location, base_dir=base_dir, resolve=lambda src: resolve_source(src, base_dir=base_dir), base=base
    )


def _call(kind: ModelKind, spec: ModelSpec, ctx: LoadContext) -> tuple[Any, dict[str, Any]]:
    if kind.load is None:  # a registered kind has a loader or says why not (ModelKind.unsupported)
        raise NotSupportedYet(f"model {spec.id!r}: kind {spec.kind!r} is not supported yet")
    enc, prov = kind.load(spec, ctx)
    return enc, dict(prov)


def _libraries(kind: ModelKind, ctx: LoadContext) -> dict[str, str | None]:
    return library_versions(*dict.fromkeys([*kind.libraries, *ctx.libraries]))


def _kind(chain: Sequence[ModelSpec]) -> str | None:
    """The model family: the spec's own kind, else the nearest base's (derived models inherit it)."""
    return next((s.kind for s in chain if s.kind is not None), None)


def _wrap_postprocess(spec: ModelSpec, base: Any) -> Any:
    assert spec.postprocess is not None
    if spec.level == "word":
        if not hasattr(base, "vectors"):
            raise ModelLoadError(
                f"model {spec.id!r}: word-level post-processing needs a word-vectors base with "
                f"a matrix, got {type(base).__name__}"
            )
        return PostProcessedWordVectors(base, spec.postprocess)
    return SentencePostProcessed(base, spec.postprocess)


def _overlay(base: ModelSpec, derived: ModelSpec) -> ModelSpec:
    """``base`` with the loading fields that ``derived`` sets explicitly."""
    update: dict[str, Any] = {f: getattr(derived, f) for f in _OVERRIDABLE if f in derived.model_fields_set}
    if derived.options is not None:  # options the derived entry sets over its base's (validated by its kind)
        own = derived.options.model_dump(include=derived.options.model_fields_set)
        same = type(base.options) is type(derived.options)
        update["options"] = base.options.model_copy(update=own) if same else derived.options
    if derived.kind is not None and derived.kind != base.kind:
        if base.kind is not None and _switchable(derived.kind, base.kind):
            update["kind"] = derived.kind
        else:
            raise ModelLoadError(
                f"model {derived.id!r}: kind {derived.kind!r} cannot derive from {base.id!r} of kind {base.kind!r}"
            )
    if not update:
        return base
    merged = base.model_copy(update=update)
    kind = model_kinds.get(merged.kind) if merged.kind is not None else None
    if kind is not None and kind.check is not None:  # the merged loading fields obey the kind's rules
        try:
            kind.check(merged.model_copy(update={"id": derived.id}))
        except ValueError as exc:
            raise ModelLoadError(str(exc)) from None
    return merged


def _hint(spec: ModelSpec, exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        name = getattr(exc, "name", None) or "the missing module"
        return f"Install it (pip install {name}) or the extra that provides {spec.kind} models"
    if spec.source is not None and spec.source.type == "hf" and isinstance(exc, OSError):
        return (
            "Hub ids download on first use: this needs network access or a populated Hugging Face cache "
            "(HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE forbid downloads)"
        )
    if isinstance(exc, FileNotFoundError):
        return "Check the spec's source and path"
    if isinstance(exc, MemoryError):
        return "Not enough memory; try a smaller batch_size"
    return "Check the spec's source, kind and format"
