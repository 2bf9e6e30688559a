"""Embed stage: each distinct text a model needs, embedded once and stored once, in the model's text store.

A model's store is a folder of Parquet shards (``text_id``, ``text``, ``embedding``, ``oov``) keyed by its spec hash
and the embed code version (and, for a model with prompts, the prompt: one store per prompt, :func:`store_key`):
every task of the model's level indexes into it by text, so adding STS to a model that already embedded the
EvalRank sentence pool embeds only the STS sentences that are new. A shard holds the texts one part of an embed call
added (``evalfarm.execute.EMBED_SHARD_TEXTS`` texts at most, stored as each part finishes); its
name is a hash of its texts, its metadata holds no run id or time, so its bytes depend on its content only (two runs
that embed the same texts write the same file).

- Sentence texts go to the encoder sorted by length (batches of similar length pad less), then back in order.
- Word models follow EvalRank's word protocol (:mod:`evalfarm.preprocess`): keys lower-cased with the first
  occurrence winning, lookups lower-cased; the raw vectors are stored, OOV words as null rows, and the vocabulary
  statistics (the centring vector, the OOV vectors) travel in every shard's metadata.
- Quality: any NaN/inf value fails the model (nothing is scored). All-zero rows that are not OOV (a bag of words with
  no known word) are stored as OOV and reported (an ``embed-quality`` failure row), never scored as if real.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from evalfarm.catalog.prompts import Prompt, Prompts, TaskPrompts, task_prompts

if TYPE_CHECKING:
    from evalfarm.catalog.specs import TaskSpec
    from evalfarm.encoders.protocol import Encoder
    from evalfarm.scorers.base import TextVectors
    from evalfarm.warehouse import Quarantined, Warehouse

EMBED_VERSION = "3"
"""Bump when stored vectors change for the same model and text (it keys every text store)."""


CHUNK_TEXTS = 512
"""Texts handed to an encoder per call, in length order: the embed stage reports progress after each (a MiniLM-size
encoder on one CPU core takes ~3 s for 512; 2,048 was ~15 s, so a run's first heartbeat could show no text moving).
A multiple of every batch size the catalogs use (32, 64, 128, 256), so the batches, and the vectors, are the same as
with larger calls: all-MiniLM-L6-v2 under sentence-transformers and transformers gave identical bytes with 512 and
2,048 on 1,024 STS-B sentences."""


class EmbeddingQualityError(RuntimeError):
    """Embeddings that must not be scored (NaN/inf, wrong shape)."""


def text_id(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def store_key(spec_hash: str, prompt: str = "") -> str:
    """A model's text store: its spec hash and the embed code version, and for texts embedded under a prompt, the
    prompt (:attr:`evalfarm.catalog.prompts.Prompt.key`): one store per (model, prompt), each holding one vector per
    text, so a text a model embeds under two prompts is two vectors. No prompt keys the store as it always has."""
    base = f"store|{spec_hash}|{EMBED_VERSION}"
    if prompt:
        base += f"|prompt|{prompt}"
    return hashlib.sha256(base.encode()).hexdigest()[:16]


@dataclass
class Encoded:
    """Vectors of some texts: float32 rows (zero where ``oov``), plus model-level metadata (vocabulary stats)."""

    emb: np.ndarray
    oov: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    zero_count: int = 0


def _encode_sorted(
    encode: Callable[[list[str]], np.ndarray], texts: Sequence[str], chunk: int, progress: Callable[[int], None] | None
) -> np.ndarray:
    return _encode_sorted_many(lambda batch: {"": encode(batch)}, texts, chunk, progress)[""]


def _encode_sorted_many(
    encode: Callable[[list[str]], dict[str, np.ndarray]],
    texts: Sequence[str],
    chunk: int,
    progress: Callable[[int], None] | None,
) -> dict[str, np.ndarray]:
    """Feed ``texts`` to ``encode`` in chunks of similar length (little padding); rows come back in input order.
    ``encode`` returns one array per output (one per pooling when several share a forward pass)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    outs: dict[str, np.ndarray] = {}
    for start in range(0, len(order), chunk):
        idx = order[start : start + chunk]
        for name, got in encode([texts[i] for i in idx]).items():
            vecs = np.asarray(got, dtype=np.float32)
            if vecs.ndim != 2 or vecs.shape[0] != len(idx):
                raise EmbeddingQualityError(f"encoder returned shape {vecs.shape} for {len(idx)} texts")
            if name not in outs:
                outs[name] = np.empty((len(texts), vecs.shape[1]), dtype=np.float32)
            outs[name][idx] = vecs
        if progress:
            progress(len(idx))
    if not outs:
        raise EmbeddingQualityError("nothing to encode")
    return outs


def encode_poolings(
    encoder: Any,
    texts: Sequence[str],
    poolings: Sequence[str],
    *,
    chunk: int = CHUNK_TEXTS,
    progress: Callable[[int], None] | None = None,
) -> dict[str, np.ndarray]:
    """One forward pass of a transformer over ``texts``, pooled every way in ``poolings`` (unchecked: each model
    checks its own with :func:`check_quality`, so a bad pooling fails only its model)."""  # fmt: skip
    if not texts:
        raise EmbeddingQualityError("nothing to encode")
    chunk = _chunk(encoder, chunk)
    return _encode_sorted_many(lambda batch: encoder.encode_poolings(batch, poolings), texts, chunk, progress)


def _chunk(encoder: object, default: int) -> int:
    """Texts per encoder call: the encoder's own ``chunk_texts`` when it declares one (a GPU encoder takes
    thousands at a time, ``evalfarm.encoders.batching``), else ``default``."""
    return int(getattr(encoder, "chunk_texts", None) or default)


def lowercased_view(wv: Any) -> Any:
    """The word protocol's view of a word model: keys lower-cased, the first occurrence of a key wins (the toolkit's
    ``read_word_embs``), looked-up words lower-cased. Shares the matrix and the model's index (a cached file's
    memory-mapped one: no per-word work); returns a ``WordVectors``. Here rather than in :mod:`evalfarm.preprocess`,
    which stays below the encoders (pure arithmetic on vectors): embed is the layer that runs them."""
    from evalfarm.encoders.vocab_index import DictIndex, VocabIndex
    from evalfarm.encoders.word_vectors import WordVectors

    index = getattr(wv, "index", None)
    if not isinstance(index, VocabIndex):  # a word model of another kind: its words and rows, indexed here
        index = DictIndex(wv.words, wv.word_rows)
    view = WordVectors(
        None,
        wv.vectors,
        index=index.lowercased(),
        lowercase=True,
        name=f"{getattr(wv, 'name', '')} (lower-cased keys)",
        check_finite=False,  # the model's matrix was checked when it loaded
    )
    view.spec_id = getattr(wv, "spec_id", "")
    view.provenance = getattr(wv, "provenance", {})
    return view


def word_lookup(encoder: Any, words: Sequence[str]) -> Encoded:
    """EvalRank's word protocol lookup: lower-cased keys (first wins), lower-cased words, vocabulary statistics."""
    from evalfarm.preprocess import vocab_stats

    view = lowercased_view(encoder)
    emb, oov = view.lookup(list(words))
    filled = _subword_fill(encoder, words, emb, oov)
    try:
        if hasattr(encoder, "vocab_statistics"):  # computed once per model (kept beside a cached big matrix)
            stats = encoder.vocab_statistics(lowercase_first=True)
            vocab_stats(np.stack([stats.mean, stats.mean_unit, stats.mean_unit_centred]))  # finite?
        else:
            stats = vocab_stats(view.vectors, view.word_rows)
    except ValueError as exc:  # NaN / inf anywhere in the vocabulary, not only in the words looked up
        raise EmbeddingQualityError(f"{exc}; nothing from this model is scored") from None
    meta = {"vocab_stats": stats.to_json(), "vocab_size": int(view.vocab_size())}
    if filled is not None:
        meta["subword_vectors"] = filled
    return Encoded(np.asarray(emb, dtype=np.float32), np.asarray(oov, dtype=bool), meta)


def _subword_fill(encoder: Any, words: Sequence[str], emb: np.ndarray, oov: np.ndarray) -> int | None:
    """A subword model (``oov_vectors``: fastText's n-grams) gives words outside its vocabulary their own vectors,
    in place; returns how many it filled (None for a model without subwords)."""
    fill = getattr(encoder, "oov_vectors", None)
    if fill is None:
        return None
    idx = np.flatnonzero(oov)
    if len(idx) == 0:
        return 0
    vecs, known = fill([words[int(i)].lower() for i in idx])
    emb[idx[known]] = vecs[known]
    oov[idx[known]] = False
    return int(known.sum())


def encode_texts(
    encoder: Encoder, texts: Sequence[str], *, chunk: int = CHUNK_TEXTS, progress: Callable[[int], None] | None = None
) -> Encoded:
    """Embed ``texts`` with a loaded model (word models: the protocol lookup) and check the result."""
    if not texts:
        raise EmbeddingQualityError("nothing to encode")
    if hasattr(encoder, "lookup"):
        out = word_lookup(encoder, texts)
        if progress:
            progress(len(texts))
    else:
        vecs = _encode_sorted(encoder.encode, texts, _chunk(encoder, chunk), progress)
        out = Encoded(vecs, np.zeros(len(texts), dtype=bool))
    return check_quality(texts, out)


def check_quality(texts: Sequence[str], out: Encoded) -> Encoded:
    """NaN/inf fail; all-zero rows that are not OOV become OOV and are counted in ``zero_count``."""
    if out.emb.shape[0] != len(texts):
        raise EmbeddingQualityError(f"{out.emb.shape[0]} vectors for {len(texts)} texts")
    bad = ~np.isfinite(out.emb).all(axis=1)
    if bad.any():
        examples = [texts[i] for i in np.flatnonzero(bad)[:3]]
        raise EmbeddingQualityError(
            f"{int(bad.sum())} of {len(texts)} vectors contain NaN/inf (e.g. {examples}); nothing from this model "
            "is scored"
        )
    zero = (~out.oov) & ~np.any(out.emb != 0, axis=1)
    out.zero_count = int(zero.sum())
    out.oov = out.oov | zero
    return out


# ---- the text store ----------------------------------------------------------------------------------------------
_CACHE: OrderedDict[tuple[str, ...], StoredTexts] = OrderedDict()
_CACHE_SIZE = 4


@dataclass
class StoredTexts:
    """Everything a model's store holds: a text -> row index over one matrix."""

    index: dict[str, int]
    emb: np.ndarray
    oov: np.ndarray
    meta: dict[str, Any]

    def rows(self, texts: Sequence[str]) -> np.ndarray:
        get = self.index.get
        return np.fromiter((get(t, -1) for t in texts), dtype=np.int64, count=len(texts))


class TextStore:
    """One model's text store in a warehouse (see the module docstring)."""

    def __init__(self, warehouse: Warehouse, model: str, key: str) -> None:
        self.wh = warehouse
        self.model = model
        self.key = key
        self.dir = warehouse.store_dir(model, key)
        self.quarantined: list[Quarantined] = []  # shards that could not be read, moved aside

    def shards(self) -> list[str]:
        return self.wh.list_files(self.dir)

    def load(self) -> StoredTexts:
        """Every stored text (the first shard holding a text wins; shards of one store agree anyway)."""
        from evalfarm.warehouse import read_embeddings

        paths = tuple(self.shards())
        cache_key = (self.dir, *paths)
        if cache_key in _CACHE:
            _CACHE.move_to_end(cache_key)
            return _CACHE[cache_key]
        index: dict[str, int] = {}
        embs, oovs = [], []
        meta: dict[str, Any] = {}
        fs = None if self.wh.local else self.wh.fs
        for path in paths:
            try:
                texts, emb, oov, m = read_embeddings(path, filesystem=fs)
            except Exception:
                why = self.wh.file_problem(path)
                if why is None:  # the file is whole: a passing I/O error or a bug, not for quarantine
                    raise
                # a corrupt shard: moved aside, its texts count as missing (the embed stage embeds them again)
                self.quarantined.append(self.wh.quarantine(path, f"unreadable text-store shard: {why}"))
                continue
            meta = meta or m
            kept = [i for i, t in enumerate(texts) if t not in index]
            base = len(index)
            for j, i in enumerate(kept):
                index[texts[i]] = base + j
            embs.append(emb[kept])
            oovs.append(oov[kept])
        if embs:
            stored = StoredTexts(index, np.concatenate(embs), np.concatenate(oovs), meta)
        else:
            stored = StoredTexts({}, np.zeros((0, 0), np.float32), np.zeros(0, bool), {})
        _CACHE[cache_key] = stored
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
        return stored

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The distinct texts of ``texts`` the store does not hold, in first-appearance order."""
        have = self.load().index
        return list(dict.fromkeys(t for t in texts if t not in have))

    def write(self, texts: Sequence[str], out: Encoded, meta: dict[str, Any]) -> str:
        """One new shard with ``texts`` (sorted by text id, so equal content gives equal bytes)."""
        from evalfarm.warehouse import embeddings_table

        ids = [text_id(t) for t in texts]
        order = sorted(range(len(texts)), key=ids.__getitem__)
        name = hashlib.sha256(("|".join([self.key, *sorted(ids)])).encode()).hexdigest()[:16]
        table = embeddings_table(
            [ids[i] for i in order],
            [texts[i] for i in order],
            out.emb[order],
            out.oov[order],
            {**meta, **out.meta, "dim": int(out.emb.shape[1]), "dtype": "float32", "embed_version": EMBED_VERSION},
        )
        return self.wh.write_table(table, f"{self.dir}/{name}.parquet")

    def vectors(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """(float32 rows in the order of ``texts``, OOV mask, store metadata); every text must be stored."""
        stored = self.load()
        rows = stored.rows(texts)
        if (rows < 0).any():
            missing = [texts[i] for i in np.flatnonzero(rows < 0)[:3]]
            raise LookupError(
                f"model {self.model!r}: {int((rows < 0).sum())} of {len(texts)} texts have no stored embedding "
                f"(e.g. {missing}); the embed stage did not finish for them"
            )
        return stored.emb[rows], stored.oov[rows], stored.meta


# ---- a task's texts under a model's prompts -------------------------------------------------------------------------
def scorer_prompts(scorer: object, task: TaskSpec, prompts: Prompts | None) -> TaskPrompts:
    """The prompts of ``task``'s texts under ``prompts``: the scorer's own answer (``Scorer.task_prompts``), or for an
    out-of-tree scorer written before prompts existed (a duck-typed ``TaskKind``), its declared ``prompt_type``
    (default similarity) with one prompt for all its texts."""
    own = getattr(scorer, "task_prompts", None)
    if own is not None:
        result: TaskPrompts = own(task, prompts)
        return result
    kind = getattr(scorer, "prompt_type", "similarity")
    return task_prompts(prompts, task=task.id, task_type=kind, sides=False, asymmetric=False)


def task_texts(scorer: Any, task: TaskSpec, data: object, prompts: Prompts | None) -> list[tuple[Prompt, list[str]]]:
    """What a model with ``prompts`` embeds for one task: (prompt, texts) for each prompt it puts before some of
    them: every text under the document prompt (one entry for a symmetric task, and for a model without prompts
    the empty prompt: the texts as they always were), the query side under the query prompt when it differs."""
    tp = scorer_prompts(scorer, task, prompts)
    out = [(tp.document, list(scorer.texts(data)))]
    if tp.query is not None:
        out.append((tp.query, list(dict.fromkeys(scorer.query_texts(data)))))
    return out


def is_binary(spec: object) -> bool:
    """Whether a model's stored vectors are signs (postprocess ``binary``): EvalRank then adds Hamming ranks. Takes
    a ModelSpec or its JSON dump (the models table's)."""
    post = spec.get("postprocess") if isinstance(spec, dict) else getattr(spec, "postprocess", None)
    method = post.get("method") if isinstance(post, dict) else getattr(post, "method", None)
    return method == "binary"


def task_vectors(
    stores: Callable[[Prompt], TextStore],
    scorer: Any,
    task: TaskSpec,
    data: object,
    prompts: Prompts | None,
    *,
    level: str,
    oov_policy: Any,  # the model spec's oov (a Literal there and in TextVectors)
    binary: bool = False,
) -> TextVectors:
    """A task's stored vectors for a model (a :class:`evalfarm.scorers.base.TextVectors`): its texts from the store
    of their prompt (``stores(prompt)``), and an asymmetric task's query side from its own. What the score stage and
    ``verify --deep`` hand a scorer."""
    from evalfarm.scorers.base import QueryVectors, TextVectors
    from evalfarm.vocab import VocabStats

    tp = scorer_prompts(scorer, task, prompts)
    emb, oov, meta = stores(tp.document).vectors(list(scorer.texts(data)))
    query = None
    if tp.query is not None:
        q_texts = list(dict.fromkeys(scorer.query_texts(data)))
        q_emb, q_oov, _ = stores(tp.query).vectors(q_texts)
        query = QueryVectors(q_texts, q_emb, q_oov)
    return TextVectors(
        level=level,  # type: ignore[arg-type]  # a unit's level: "word" or "sentence" (the catalog's check)
        emb=emb,
        oov=oov,
        vocab=VocabStats.from_json(meta["vocab_stats"]) if "vocab_stats" in meta else None,
        oov_policy=oov_policy,
        query=query,
        binary=binary,
    )
