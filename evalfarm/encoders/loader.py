"""Turn a model's spec lineage into a loaded :class:`~evalfarm.encoders.protocol.Encoder`.

``chain`` is the model's spec followed by its bases, nearest first (``Catalog.lineage(id)``). Derivations:

- ``kind: bow`` over a word model: :class:`~evalfarm.encoders.bow.BagOfWords` of the loaded base.
- ``base`` + ``postprocess``, word level: :class:`~evalfarm.encoders.postprocess.PostProcessedWordVectors`,
  fitted once on the base's whole vocabulary matrix.
- ``base`` + ``postprocess``, sentence level: :class:`SentencePostProcessed`; the transform is fitted on the
  pool's embedded texts by the embed stage (``fit_and_encode``), never silently on something else.

A derived spec may also override loading fields of its base (``pooling``, ``max_length``, ``batch_size``,
``dtype``, ...); only fields set explicitly in the derived spec override. Its kind may switch between
``transformers`` and ``sentence-transformers`` (same checkpoint folder, different pooling).

Heavy libraries (torch, transformers, onnxruntime, spaCy) are imported only when a model needs them. Every
returned encoder carries ``spec_id`` and ``provenance`` (library versions, source identity, device, dtype).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from evalfarm.catalog.specs import UNSUPPORTED_KINDS, ModelSpec, PostProcess
from evalfarm.encoders.postprocess import FittedTransform, PostProcessedWordVectors, fit_postprocess
from evalfarm.encoders.protocol import Encoder, ModelLoadError, NotSupportedYet
from evalfarm.encoders.sources import resolve_source, source_provenance

__all__ = ["SentencePostProcessed", "library_versions", "load_encoder"]

_LIBS: dict[str, tuple[str, ...]] = {
    "word-vectors": ("numpy", "gensim"),
    "bow": ("numpy", "scipy"),
    "transformers": ("torch", "transformers", "tokenizers"),
    "sentence-transformers": ("torch", "transformers", "sentence-transformers"),
    "onnx": ("onnxruntime", "tokenizers"),
    "static": ("tokenlearn-static-model",),
    "spacy-tok2vec": ("spacy",),
}
_OVERRIDABLE = (
    "pooling",
    "batch_size",
    "max_length",
    "dtype",
    "lowercase",
    "onnx_output",
    "tokenizer",
    "trust_remote_code",
    "revision",
    "format",
    "vocab",
)
_SWITCHABLE_KINDS = {"transformers", "sentence-transformers"}


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
        self.dim = int(pp.d) if pp.method == "whitening" and pp.d else int(base.dim)
        self.transform: FittedTransform | None = None
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        return f"SentencePostProcessed({self.base!r}, {self.postprocess.method}, d={self.postprocess.d})"

    def fit(self, X: np.ndarray) -> FittedTransform:
        """Fit the transform on base embeddings ``X`` (rows = the pool's texts)."""
        self.transform = fit_postprocess(X, self.postprocess)
        return self.transform

    def fit_and_encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode ``texts`` with the base model, fit the transform on them, and return them transformed."""
        X = self.base.encode(texts)
        return self.fit(X).apply(X)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self.transform is None:
            raise RuntimeError(
                f"model {self.spec_id!r}: {self.postprocess.method} post-processing is fitted on "
                "the evaluated texts; call fit_and_encode(texts) (or fit(base embeddings)) first"
            )
        return self.transform.apply(self.base.encode(texts))


def load_encoder(chain: Sequence[ModelSpec], *, base_dir: Path | None = None) -> Encoder:
    """Load the model ``chain[0]``, deriving it from ``chain[1:]`` (its bases, nearest first) as needed.

    ``base_dir`` is the catalog file's folder, against which relative ``path`` sources resolve.
    Raises :class:`NotSupportedYet` for kinds this project cannot run, :class:`ModelLoadError` otherwise;
    both name the model id.
    """
    if not chain:
        raise ValueError("load_encoder needs at least one spec")
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
    enc.spec_id = spec.id  # type: ignore[attr-defined]
    enc.provenance = {  # type: ignore[attr-defined]
        "model": spec.id,
        "kind": _kind(chain),
        "level": spec.level,
        "lineage": [s.id for s in chain],
        **prov,
    }
    return enc


def _load(chain: list[ModelSpec], base_dir: Path | None) -> tuple[Any, dict[str, Any]]:
    spec = chain[0]
    if spec.kind == "bow" and chain[1].level == "word":
        from evalfarm.encoders.bow import BagOfWords

        base = load_encoder(chain[1:], base_dir=base_dir)
        if not hasattr(base, "lookup"):
            raise ModelLoadError(f"model {spec.id!r}: bow needs a word-vectors base; {chain[1].id!r} is not one")
        lowercase = spec.lowercase or bool(getattr(base, "lowercase", False))
        enc: Any = BagOfWords(base, lowercase=lowercase)
        prov: dict[str, Any] = {
            "libraries": library_versions(*_LIBS["bow"]),
            "lowercase": lowercase,
            "tokenizer": r"\w+|[^\w\s]",
            "base": getattr(base, "provenance", {}),
        }
        return enc, prov
    if spec.base is not None and spec.source is None:
        if spec.postprocess is None:
            raise ModelLoadError(f"model {spec.id!r}: a derived model needs 'postprocess' or its own 'source'")
        base = load_encoder([_overlay(chain[1], spec), *chain[2:]], base_dir=base_dir)
        prov = {"postprocess": spec.postprocess.model_dump(), "base": getattr(base, "provenance", {})}
        return _wrap_postprocess(spec, base), prov
    enc, prov = _load_leaf(spec, base_dir)
    if spec.postprocess is not None:
        enc = _wrap_postprocess(spec, enc)
        prov["postprocess"] = spec.postprocess.model_dump()
    return enc, prov


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
    update = {f: getattr(derived, f) for f in _OVERRIDABLE if f in derived.model_fields_set}
    if derived.kind is not None and derived.kind != base.kind:
        if {derived.kind, base.kind} <= _SWITCHABLE_KINDS:
            update["kind"] = derived.kind
        else:
            raise ModelLoadError(
                f"model {derived.id!r}: kind {derived.kind!r} cannot derive from {base.id!r} of kind {base.kind!r}"
            )
    if not update:
        return base
    merged = base.model_copy(update=update)
    if merged.kind == "transformers" and merged.pooling is None:
        raise ModelLoadError(f"model {derived.id!r}: kind transformers needs 'pooling'")
    return merged


def _load_leaf(spec: ModelSpec, base_dir: Path | None) -> tuple[Any, dict[str, Any]]:
    """Load a model that has its own source; returns the encoder and its provenance."""
    if spec.kind in UNSUPPORTED_KINDS:  # before resolving the source: nothing is downloaded for nothing
        raise NotSupportedYet(
            f"model {spec.id!r}: kind {spec.kind!r} is not supported yet: this project lacks "
            f"{UNSUPPORTED_KINDS[spec.kind]}. The catalog lists it so results stay comparable with the paper; "
            "leave it out of runs (--models) until an encoder for it exists"
        )
    if spec.kind == "python":
        raise ModelLoadError(
            f"model {spec.id!r}: kind 'python' is an in-memory encoder object: evaluate it with "
            "evalfarm.evaluate(encoder, name=...) in the process that holds it"
        )
    if spec.source is None:
        raise ModelLoadError(f"model {spec.id!r}: no 'source' to load")
    libs = list(_LIBS.get(spec.kind, ()))
    prov: dict[str, Any] = {"source": source_provenance(spec.source, revision=spec.revision)}
    loc = resolve_source(spec.source, base_dir=base_dir)
    is_hub = isinstance(loc, str)
    revision = spec.revision if is_hub else None

    if spec.kind == "word-vectors":
        from evalfarm.encoders.word_vectors import WordVectors

        if is_hub:
            raise NotSupportedYet(
                f"model {spec.id!r}: word vectors from the Hugging Face hub are not supported "
                "yet; download the file and use a path/url source"
            )
        assert spec.format is not None
        if spec.format == "spacy":
            libs.append("spacy")
        enc: Any = WordVectors.load(
            Path(loc),
            spec.format,
            vocab=spec.vocab,
            lowercase=spec.lowercase,
            dim=spec.dim,
            allow_pickle=spec.allow_pickle,
        )
        prov.update(
            format=spec.format, lowercase=spec.lowercase, vocab_size=enc.vocab_size(), rows=int(enc.vectors.shape[0])
        )
    elif spec.kind == "transformers":
        from evalfarm.encoders.hf_transformers import HFTransformersEncoder

        assert spec.pooling is not None
        enc = HFTransformersEncoder(
            str(loc),
            pooling=spec.pooling,
            revision=revision,
            max_length=spec.max_length,
            batch_size=spec.batch_size,
            dtype=spec.dtype,
            trust_remote_code=spec.trust_remote_code,
        )
        prov.update(pooling=spec.pooling, device=enc.device, dtype=enc.dtype, max_length=spec.max_length)
    elif spec.kind == "sentence-transformers":
        from evalfarm.encoders.sentence_transformers import SentenceTransformerEncoder

        if spec.pooling is not None:
            raise ModelLoadError(
                f"model {spec.id!r}: sentence-transformers models pool by their own config; "
                "use kind 'transformers' to choose a pooling"
            )
        enc = SentenceTransformerEncoder(
            str(loc),
            revision=revision,
            max_length=spec.max_length,
            batch_size=spec.batch_size,
            dtype=spec.dtype,
            trust_remote_code=spec.trust_remote_code,
        )
        prov.update(device=enc.device, dtype=enc.dtype, max_length=spec.max_length, normalized_by_model=enc.normalized)
    elif spec.kind == "onnx":
        from evalfarm.encoders.onnx import OnnxEncoder

        if is_hub:
            raise NotSupportedYet(
                f"model {spec.id!r}: ONNX graphs from the hub are not supported yet; use a path/package/url source"
            )
        model_path = _single_onnx(Path(loc))
        tok_path = None
        if spec.tokenizer is not None:
            tok_loc = resolve_source(spec.tokenizer, base_dir=base_dir)
            if isinstance(tok_loc, str):
                raise NotSupportedYet(f"model {spec.id!r}: hub tokenizers for ONNX models are not supported yet")
            tok_path = tok_loc
            prov["tokenizer"] = source_provenance(spec.tokenizer)
        enc = OnnxEncoder(
            model_path, tok_path, output=spec.onnx_output, max_length=spec.max_length, batch_size=spec.batch_size
        )
        prov.update(providers=enc.providers, output=enc.output_name, max_length=spec.max_length)
    elif spec.kind == "static":
        from evalfarm.encoders.static import StaticModelEncoder

        enc = StaticModelEncoder(batch_size=spec.batch_size)
    elif spec.kind == "spacy-tok2vec":
        from evalfarm.encoders.spacy_tok2vec import SpacyTok2Vec

        if is_hub:
            raise NotSupportedYet(f"model {spec.id!r}: spaCy pipelines from the hub are not supported yet")
        target: str | Path = Path(loc)
        if spec.source.type == "package" and not spec.source.path:  # an installed spaCy pipeline package
            target = spec.source.ref.replace("-", "_")
        enc = SpacyTok2Vec(target, batch_size=spec.batch_size, allow_pickle=spec.allow_pickle)
    else:
        raise NotSupportedYet(f"model {spec.id!r}: kind {spec.kind!r} is not supported yet")
    prov["libraries"] = library_versions(*dict.fromkeys(libs))
    return enc, prov


def _single_onnx(path: Path) -> Path:
    if path.is_file():
        return path
    found = sorted(path.glob("*.onnx"))
    if len(found) != 1:
        raise ModelLoadError(
            f"{path}: expected one .onnx file in the folder, found {[p.name for p in found]}; "
            "point the source path at the graph"
        )
    return found[0]


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
