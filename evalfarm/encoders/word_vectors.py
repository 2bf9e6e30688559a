"""Word-vector models: a vocabulary index over a matrix, in every format the catalog names.

The model is a ``word -> row`` index plus a ``(rows, dim)`` matrix. For most formats every word has its own row;
spaCy vectors share rows between many keys (en_core_web_md: 685k keys over 20k rows), so the index and the
matrix are kept apart instead of copying shared rows into a gensim ``KeyedVectors``.
:meth:`WordVectors.to_keyed_vectors` builds one when gensim's API is wanted.

Bad input never becomes a number. Every loader checks that every vector is finite (NaN or inf in any word, in a
pool or not, would poison the vocabulary mean that fills OOV words) and the errors name the file and the line
(text formats) or the row and word (binary formats).

Text formats (``word2vec-text``, ``glove-text``) are parsed here rather than by gensim's
``load_word2vec_format``: gensim's errors carry no line number, with ``no_header=True`` it turns duplicate words
into a ``None`` key with a zero row, and it takes the dimension from line 1 alone. Here the dimension is the one
that fits most of the first :data:`SAMPLE_LINES` vector lines (or the header's / the caller's declared ``dim``,
checked against those lines), and every line that does not fit is reported. Files of
:data:`~evalfarm.encoders.vector_cache.CACHE_MIN_BYTES` or more are streamed once into a memory-mapped cache
(:mod:`evalfarm.encoders.vector_cache`). Duplicate words keep their **first** occurrence in every format (the
word2vec convention); later duplicates are dropped from the matrix.

Formats that execute code when loaded are refused unless the spec opts in: ``gensim-kv`` is a pickle
(``allow_pickle: true``). ``.npy`` files are loaded with ``allow_pickle=False``; spaCy vectors are read from the
pipeline's ``vocab/`` folder (JSON, msgpack and ``.npy`` data) without resolving its ``config.cfg``.
"""

from __future__ import annotations

import itertools
import pickle
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Literal, get_args

import numpy as np

from evalfarm.catalog.specs import PICKLE_FORMATS, ModelSpec, WordFormat
from evalfarm.encoders.protocol import ModelLoadError, NotSupportedYet
from evalfarm.encoders.vector_cache import (
    CACHE_MIN_BYTES,
    CachedMatrix,
    FileStats,
    NpyWriter,
    VocabStats,
    cached_vectors,
    vocab_statistics,
)
from evalfarm.encoders.vocab_index import DictIndex, VocabIndex
from evalfarm.plugins import LoadContext, ModelKind, model_kinds

__all__ = [
    "KIND",
    "PICKLE_FORMATS",
    "TEXT_FORMATS",
    "NonFiniteVectors",
    "TextVectorReader",
    "WordVectors",
    "check_finite_rows",
    "read_text_vectors",
    "save_numpy_vocab",
]

TEXT_FORMATS = ("word2vec-text", "glove-text")

SAMPLE_LINES = 1000
"""Vector lines whose field counts decide a text file's dimension."""

MAX_DIM = 1 << 20
"""A dimension above this is refused whatever the file: no real word-vector model comes near it, and a forged one
would size the vocabulary mean (and every lookup) before a single row is read."""

_CHUNK_LINES = 20_000
_CHECK_ROWS = 65536
_MAX_EXAMPLES = 5
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)", re.IGNORECASE)


class NonFiniteVectors(ModelLoadError, ValueError):
    """Vectors (or a fitted transform) holding NaN or inf; the message names where."""


class WordVectors:
    """A :class:`~evalfarm.encoders.protocol.WordEncoder` over an in-memory (or memory-mapped) matrix.

    ``vectors`` is the ``(rows, dim)`` matrix and :attr:`index` the vocabulary
    (:class:`~evalfarm.encoders.vocab_index.VocabIndex`): ``words`` and ``word_rows`` build a
    :class:`~evalfarm.encoders.vocab_index.DictIndex` (``word_rows[i]`` is the row of ``words[i]``, ``arange``
    unless rows are shared); a cached text file passes its memory-mapped index instead (``words=None``), so
    opening it does no per-word work. The first occurrence of a word wins. ``lowercase`` lowercases query words,
    not the vocabulary. The matrix must be finite: ``check_finite=False`` only where the caller has checked it.
    """

    level: Literal["word"] = "word"

    def __init__(
        self,
        words: Sequence[str] | None,
        vectors: np.ndarray,
        *,
        word_rows: np.ndarray | None = None,
        index: VocabIndex | None = None,
        lowercase: bool = False,
        name: str = "",
        check_finite: bool = True,
    ) -> None:
        label = name or "word vectors"
        if vectors.ndim != 2:
            raise ValueError(f"{label}: matrix must be 2-D, got shape {vectors.shape}")
        if index is None:
            if words is None:
                raise ValueError(f"{label}: needs words or an index")
            try:
                index = DictIndex(words, word_rows)
            except ValueError as exc:
                raise ValueError(f"{label}: {exc}") from None
        elif words is not None or word_rows is not None:
            raise ValueError(f"{label}: pass words (and word_rows) or an index, not both")
        self.index = index
        self.vectors = vectors
        if check_finite:
            check_finite_rows(vectors, label, lambda r: _words_of_row(self, r))
        self.lowercase = lowercase
        self.name = name
        self.dim = int(vectors.shape[1])
        self._mean: np.ndarray | None = None
        self._stats: dict[str, VocabStats] = {}
        self._cache: CachedMatrix | FileStats | None = None  # where vocabulary statistics are kept
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        return f"WordVectors({self.name!r}, words={len(self.words)}, rows={self.vectors.shape[0]}, dim={self.dim})"

    @property
    def words(self) -> Sequence[str]:
        """The vocabulary in file order (a lazy sequence for a cached file: iterating it reads every word)."""
        return self.index.words

    @property
    def word_rows(self) -> np.ndarray:
        """int64: the row of each word of :attr:`words` in :attr:`vectors`."""
        return self.index.word_rows

    # -- the WordEncoder protocol -------------------------------------------------------------------------------
    def rows(self, words: Iterable[str]) -> np.ndarray:
        """Row of each word in :attr:`vectors`, ``-1`` for out-of-vocabulary words."""
        keys = [w.lower() for w in words] if self.lowercase else list(words)
        return self.index.rows(keys)

    def lookup(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(vectors, oov)``: float32 ``(n, dim)`` with zero rows where the boolean ``oov`` mask is true."""
        rows = self.rows(words)
        oov = rows < 0
        out = np.zeros((len(rows), self.dim), dtype=np.float32)
        if (~oov).any():
            out[~oov] = self.vectors[rows[~oov]]
        return out, oov

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Each text is one word; OOV words get zero vectors (use :meth:`lookup` to see which)."""
        return self.lookup(texts)[0]

    def vocab_mean(self) -> np.ndarray:
        """Mean over the rows of the matrix (float64 accumulation); shared rows count once."""
        if self._mean is None:
            acc = np.zeros(self.dim, dtype=np.float64)
            for start in range(0, self.vectors.shape[0], _CHECK_ROWS):
                acc += self.vectors[start : start + _CHECK_ROWS].sum(axis=0, dtype=np.float64)
            self._mean = (acc / max(self.vectors.shape[0], 1)).astype(np.float32)
        return self._mean

    def vocab_size(self) -> int:
        """Number of words (keys); may exceed the number of matrix rows when rows are shared."""
        return len(self.index)

    def lower_first(self) -> np.ndarray:
        """Positions in :attr:`words` of each lower-cased key's first occurrence (computed once per model, or read
        from a cached file's index; the word protocol's view and its vocabulary statistics both use it)."""
        return self.index.lower_first()

    def vocab_statistics(self, *, lowercase_first: bool = True) -> VocabStats:
        """The EvalRank protocol's vocabulary statistics (:class:`~evalfarm.encoders.vector_cache.VocabStats`).

        ``lowercase_first``: over the lower-cased vocabulary, the first occurrence of a lower-cased key wins (each
        key counts once); otherwise over every matrix row once. Computed once per model, in float64; for a cached
        text file, kept beside the cached matrix.
        """
        name = "lower-first" if lowercase_first else "all-rows"
        if name not in self._stats:

            def compute() -> VocabStats:
                rows = self.index.rows_of(self.lower_first()) if lowercase_first else None
                return vocab_statistics(self.vectors, rows)

            self._stats[name] = self._cache.stats(name, compute) if self._cache is not None else compute()
        return self._stats[name]

    def __contains__(self, word: str) -> bool:
        return bool(self.rows([word])[0] >= 0)

    def to_keyed_vectors(self):  # -> gensim.models.KeyedVectors
        """A gensim ``KeyedVectors`` copy (one row per word; shared rows are duplicated)."""
        from gensim.models import KeyedVectors

        kv = KeyedVectors(self.dim, count=0, dtype=np.float32)
        kv.add_vectors(list(self.words), np.asarray(self.vectors[self.word_rows], dtype=np.float32))
        return kv

    # -- loading ------------------------------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: Path,
        fmt: str,
        *,
        vocab: str | None = None,
        lowercase: bool = False,
        dim: int | None = None,
        allow_pickle: bool = False,
        cache: bool | None = None,
    ) -> WordVectors:
        """Load ``path`` in format ``fmt`` (see :data:`evalfarm.catalog.specs.WordFormat`).

        ``dim``: the declared dimension (checked against the file; text formats use it instead of the consensus
        of lines). ``allow_pickle``: load formats that unpickle (:data:`PICKLE_FORMATS`); only for trusted files.
        ``cache``: stream a text file into the binary cache (default: files of ``CACHE_MIN_BYTES`` or more).
        """
        path = Path(path)
        if not path.exists():
            raise ModelLoadError(f"word vectors file not found: {path}")
        if fmt in PICKLE_FORMATS and not allow_pickle:
            raise ModelLoadError(_pickle_refusal(path, fmt))
        if fmt in TEXT_FORMATS:
            enc = cls._load_text(path, fmt, dim=dim, lowercase=lowercase, cache=cache)
        elif fmt in ("word2vec-binary", "gensim-kv"):
            enc = cls.from_keyed_vectors(_gensim_vectors(path, fmt), lowercase=lowercase, name=str(path))
        elif fmt == "numpy-vocab":
            enc = cls._load_numpy_vocab(path, vocab, lowercase=lowercase)
        elif fmt == "spacy":
            enc = cls._load_spacy(path, lowercase=lowercase)
        else:
            raise ModelLoadError(f"unknown word-vector format {fmt!r}")
        if dim is not None and enc.dim != dim and fmt not in TEXT_FORMATS:
            raise ModelLoadError(f"{path}: the spec declares dimension {dim} but the {fmt} matrix has {enc.dim}")
        return enc

    @classmethod
    def _load_text(cls, path: Path, fmt: str, *, dim: int | None, lowercase: bool, cache: bool | None) -> WordVectors:
        header = fmt == "word2vec-text"
        if cache is None:
            cache = path.stat().st_size >= CACHE_MIN_BYTES
        if not cache:
            words, matrix = read_text_vectors(path, header=header, dim=dim)
            return cls(words, matrix, lowercase=lowercase, name=str(path), check_finite=False)  # checked per line

        def build(open_matrix: Callable[[int], NpyWriter], vocab_file: IO[bytes]) -> dict[str, Any]:
            reader = TextVectorReader(path, header=header, dim=dim)
            writer: NpyWriter | None = None
            for words, block in reader:
                if writer is None:
                    writer = open_matrix(block.shape[1])
                writer.write(block)
                vocab_file.write(("\n".join(words) + "\n").encode("utf-8"))
            assert reader.dim is not None
            return {"rows": reader.rows, "dim": reader.dim, "lines": reader.lines, "mean": reader.mean().tolist()}

        cached, _ = cached_vectors(path, options={"format": fmt, "dim": dim}, build=build)
        enc = cls(None, cached.matrix, index=cached.index, lowercase=lowercase, name=str(path), check_finite=False)
        enc._mean = cached.mean.astype(np.float32)
        enc._cache = cached
        return enc

    @classmethod
    def from_keyed_vectors(cls, kv, *, lowercase: bool = False, name: str = "") -> WordVectors:
        return cls(list(kv.index_to_key), kv.vectors, lowercase=lowercase, name=name)

    @classmethod
    def _load_numpy_vocab(cls, path: Path, vocab: str | None, *, lowercase: bool) -> WordVectors:
        """A ``.npy`` matrix + a vocabulary: ``.parquet`` (column ``index``) or a text file, one word per line.

        ``path`` is the ``.npy`` file, or a folder holding exactly one; ``vocab`` is relative to the folder.
        """
        matrix_path, vocab_path = _numpy_vocab_paths(path, vocab)
        matrix = _load_matrix(matrix_path)
        words = _read_vocab(vocab_path, matrix_path, matrix.shape[0])
        if len(words) != matrix.shape[0]:
            raise ModelLoadError(f"{vocab_path}: {len(words)} words but {matrix_path} has {matrix.shape[0]} rows")
        check_finite_rows(matrix, str(matrix_path), lambda r: repr(words[r]))
        index: dict[str, int] = dict(zip(reversed(words), range(len(words) - 1, -1, -1), strict=True))
        if len(index) != len(words):  # duplicates: keep the first occurrence, drop the other rows
            keep = np.fromiter(sorted(index.values()), dtype=np.int64)
            words = [words[i] for i in keep]
            matrix = np.ascontiguousarray(matrix[keep])
            exact = None
        else:
            exact = index  # {word: its position}, built once
        if matrix.dtype != np.float32:
            matrix = matrix.astype(np.float32)
        enc = cls(
            None, matrix, index=DictIndex(words, exact=exact), lowercase=lowercase, name=str(matrix_path),
            check_finite=False,
        )  # fmt: skip
        enc._cache = FileStats((matrix_path, vocab_path), {"format": "numpy-vocab", "reader": "1"})
        return enc

    @classmethod
    def _load_spacy(cls, path: Path, *, lowercase: bool) -> WordVectors:
        """spaCy vectors: every key whose string is known maps to its (possibly shared) row.

        Only the pipeline's ``vocab/`` folder is read (``strings.json``, ``key2row`` msgpack, ``vectors`` .npy
        through numpy without pickle, ``vectors.cfg``): ``config.cfg`` is never resolved, so no registered
        function, sourced component or package import named by the folder runs.
        """
        from spacy.vocab import Vocab

        folder = Path(path) / "vocab"
        if not (folder / "vectors").is_file() or not (folder / "strings.json").is_file():
            raise ModelLoadError(
                f"{path}: not a spaCy pipeline folder with vectors (expected vocab/vectors and vocab/strings.json)"
            )
        _check_spacy_arrays(folder)
        try:
            vocab = Vocab().from_disk(folder, exclude=["lookups"])
        except ValueError as exc:
            if "allow_pickle" in str(exc) or "Python objects" in str(exc):
                raise ModelLoadError(
                    f"{folder / 'vectors'}: holds Python objects (a pickled array), which are never loaded"
                ) from None
            raise ModelLoadError(f"{path}: cannot read the spaCy vectors: {exc}") from exc
        except Exception as exc:
            raise ModelLoadError(f"{path}: cannot read the spaCy vectors: {type(exc).__name__}: {exc}") from exc
        vectors = vocab.vectors
        if vectors.mode != "default":
            raise ModelLoadError(f"{path}: spaCy vectors in {vectors.mode!r} mode are not supported (only 'default')")
        if vectors.shape[0] == 0 or vectors.shape[1] == 0:
            raise ModelLoadError(f"{path}: the spaCy pipeline has no word vectors")
        strings = vocab.strings
        words: list[str] = []
        rows: list[int] = []
        for key, row in vectors.key2row.items():
            if key in strings:
                words.append(strings[key])
                rows.append(row)
        matrix = np.asarray(vectors.data, dtype=np.float32)
        if matrix.ndim != 2:
            raise ModelLoadError(f"{folder / 'vectors'}: expected a 2-D matrix, got shape {matrix.shape}")
        word_rows = np.asarray(rows, dtype=np.int64)
        if len(word_rows) and (word_rows.min() < 0 or word_rows.max() >= matrix.shape[0]):
            raise ModelLoadError(f"{folder / 'key2row'}: rows outside the {matrix.shape[0]}-row matrix")
        return cls(words, matrix, word_rows=word_rows, lowercase=lowercase, name=str(path))


def _pickle_refusal(path: Path, fmt: str) -> str:
    return (
        f"{path}: format {fmt!r} is a Python pickle (gensim KeyedVectors.save), and unpickling runs whatever code "
        "the file carries, so a catalog entry cannot load one by default. Convert it once, where you trust the "
        "file, to a format that holds only data: "
        f"`python -c \"from gensim.models import KeyedVectors as K; K.load('{path}').save_word2vec_format("
        "'vectors.bin', binary=True)\"` and use format word2vec-binary (or np.save the matrix + a vocab.txt: "
        "format numpy-vocab). Only if you trust this file and where it came from, set `allow_pickle: true` in "
        "its spec"
    )


def _words_of_row(wv: WordVectors, row: int) -> str:
    hits = np.flatnonzero(wv.word_rows == row)[:3]
    return ", ".join(repr(wv.words[i]) for i in hits) if len(hits) else "no word"


def check_finite_rows(matrix: np.ndarray, source: str, describe: Callable[[int], str]) -> None:
    """Raise :class:`NonFiniteVectors` naming the first rows (and their words) that hold NaN or inf.

    Scans in row chunks so a memory-mapped matrix is never copied whole.
    """
    if matrix.dtype.kind not in "fc":
        return
    bad: list[int] = []
    n_bad = 0
    for start in range(0, matrix.shape[0], _CHECK_ROWS):
        ok = np.isfinite(matrix[start : start + _CHECK_ROWS]).all(axis=1)
        if not ok.all():
            idx = np.flatnonzero(~ok) + start
            n_bad += len(idx)
            bad.extend(idx[: _MAX_EXAMPLES - len(bad)].tolist())
    if n_bad:
        shown = "; ".join(f"row {r} ({describe(r)})" for r in bad)
        raise NonFiniteVectors(
            f"{source}: {n_bad} of {matrix.shape[0]} vectors {'holds' if n_bad == 1 else 'hold'} NaN or inf: {shown}"
            f"{' ...' if n_bad > len(bad) else ''}. A corrupt or badly exported file: re-export it (every vector "
            "must be finite; one NaN anywhere would make the vocabulary mean, and every OOV word, NaN)"
        )


def save_numpy_vocab(folder: Path, words: Sequence[str], matrix: np.ndarray, *, stem: str = "model") -> None:
    """Write ``<stem>.npy`` (float32, no pickle) + ``vocab.txt`` (UTF-8, one word per line): format numpy-vocab."""
    bad = [w for w in words if "\n" in w or "\r" in w]
    if bad:
        raise ValueError(f"words with line breaks cannot go into vocab.txt: {bad[:3]}")
    folder = Path(folder)
    np.save(folder / f"{stem}.npy", np.ascontiguousarray(matrix, dtype=np.float32), allow_pickle=False)
    (folder / "vocab.txt").write_bytes(("\n".join(words) + "\n").encode("utf-8") if words else b"")


def _gensim_vectors(path: Path, fmt: str) -> Any:
    """The ``KeyedVectors`` of a word2vec binary file (parsed by gensim with numpy: no pickle) or of a gensim
    ``KeyedVectors.save`` file (a pickle: the caller checked that the spec allows it)."""
    from gensim.models import KeyedVectors

    if fmt == "word2vec-binary":
        _check_binary_header(path)
        try:
            return KeyedVectors.load_word2vec_format(str(path), binary=True)
        except (UnicodeDecodeError, pickle.UnpicklingError) as exc:  # their messages quote the file's bytes
            raise ModelLoadError(f"{path}: not a valid word2vec binary file: {_reason(exc)}") from None
        except Exception as exc:
            raise ModelLoadError(f"{path}: not a valid word2vec binary file: {type(exc).__name__}: {exc}") from exc
    try:
        kv = KeyedVectors.load(str(path), mmap="r")
    except (UnicodeDecodeError, pickle.UnpicklingError) as exc:
        raise ModelLoadError(f"{path}: not a gensim KeyedVectors file (KeyedVectors.save): {_reason(exc)}") from None
    except Exception as exc:
        raise ModelLoadError(
            f"{path}: not a gensim KeyedVectors file (KeyedVectors.save): {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(kv, KeyedVectors):  # e.g. a whole Word2Vec model saved with .save
        kv = getattr(kv, "wv", None)
        if not isinstance(kv, KeyedVectors):
            raise ModelLoadError(f"{path}: loads, but holds no KeyedVectors")
    return kv


def _claim_error(path: Path, claim: str, need: int, size: int) -> ModelLoadError:
    """The error for a header that claims more than its file holds (read before anything is allocated for it)."""
    return ModelLoadError(
        f"{path}: {claim}, which needs at least {need} bytes, but the file holds {size}: a truncated or forged "
        "file (nothing was allocated for it)"
    )


def _check_dim(path: Path, dim: int, source: str) -> None:
    if dim < 1 or dim > MAX_DIM:
        raise ModelLoadError(f"{path}: {source} dimension {dim} is not a vector dimension (1 to {MAX_DIM})")


def _check_binary_header(path: Path) -> None:
    """A word2vec binary header's ``count dim`` against the file's size, before gensim allocates ``count x dim``.

    Every row is at least a one-byte word, a space and ``dim`` float32s."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        first = f.readline(256)
    parts = first.split()
    # gensim reads the header with int(), which also takes "536_870_912", and reads a first line of any length:
    # a header this check cannot read is refused, never left to gensim
    if not first.endswith(b"\n") or len(parts) != 2 or not all(re.fullmatch(rb"\d{1,18}", p) for p in parts):
        raise ModelLoadError(
            f"{path}: not a valid word2vec binary file: the first line must be a header 'count dim' (two decimal "
            f"numbers), got {_shape(first)}"
        )
    count, dim = int(parts[0]), int(parts[1])
    _check_dim(path, dim, "the header's")
    if count < 1:
        raise ModelLoadError(f"{path}: the header claims {count} vectors: no vectors in file")
    need = count * (dim * 4 + 1)
    if need > size - len(first):
        raise _claim_error(path, f"the header claims {count} vectors of dimension {dim}", need, size)


def _check_spacy_arrays(folder: Path) -> None:
    """spaCy reads ``vectors`` and ``keys`` whole (no memory map): their headers are checked first. A pipeline
    without vectors (shape ``(0, 0)``) is left to the caller's "no word vectors" error."""
    for name in ("vectors", "keys"):
        if (folder / name).is_file():
            _check_npy_header(folder / name, matrix=False)


def _check_npy_header(path: Path, *, matrix: bool = True) -> None:
    """A ``.npy`` file's header (shape and dtype) against the file's size, before numpy or spaCy read the data.

    ``matrix``: a word-vector matrix, which needs a row and a dimension of 1 to :data:`MAX_DIM` (otherwise only an
    absurd dimension is refused). Files that are not ``.npy`` (or hold Python objects) are left to the loader, whose
    error says what is wrong."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(f, max_header_size=1 << 16)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(f, max_header_size=1 << 16)
            else:
                return
            offset = f.tell()
    except Exception:  # numpy's header parser raises more than ValueError (tokenize.TokenError, SyntaxError...)
        return  # not a readable .npy header: the loader's own error says so
    if dtype.hasobject:
        return
    if len(shape) == 2 and (matrix or shape[1] > MAX_DIM):
        _check_dim(path, int(shape[1]), "the .npy header's")
        if shape[0] < 1 and matrix:
            raise ModelLoadError(f"{path}: the .npy header claims shape {shape}: no vectors in file")
    need = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if need > size - offset:
        raise _claim_error(path, f"the .npy header claims shape {shape} of {dtype}", need, size)


def _numpy_vocab_paths(path: Path, vocab: str | None) -> tuple[Path, Path]:
    """(the ``.npy`` matrix, the vocabulary file) of a numpy-vocab source: ``path`` is the matrix, or a folder
    holding exactly one; ``vocab`` is relative to the matrix's folder."""
    if path.is_dir():
        npys = sorted(path.glob("*.npy"))
        if len(npys) != 1:
            raise ModelLoadError(
                f"{path}: numpy-vocab source folder must hold exactly one .npy file, "
                f"found {[p.name for p in npys]}; point the source path at the matrix"
            )
        folder, matrix_path = path, npys[0]
    else:
        folder, matrix_path = path.parent, path
    if vocab is None:
        raise ModelLoadError(f"{matrix_path}: numpy-vocab needs the spec field 'vocab' (the vocabulary file)")
    vocab_path = folder / vocab
    if not vocab_path.exists():
        raise ModelLoadError(f"vocabulary file not found: {vocab_path}")
    return matrix_path, vocab_path


def _load_matrix(matrix_path: Path) -> np.ndarray:
    """A 2-D numeric ``.npy`` matrix, memory-mapped; a pickled array is refused, never loaded."""
    _check_npy_header(matrix_path)
    try:
        matrix = np.load(matrix_path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        if "allow_pickle" in str(exc) or "Python objects" in str(exc):
            raise ModelLoadError(
                f"{matrix_path}: holds Python objects (a pickled array), which are never loaded: "
                "save the matrix as a float array (np.save(path, np.asarray(m, dtype=np.float32)))"
            ) from None
        raise ModelLoadError(f"{matrix_path}: not a .npy matrix: {exc}") from exc
    except Exception as exc:
        raise ModelLoadError(f"{matrix_path}: not a .npy matrix: {exc}") from exc
    if matrix.ndim != 2:
        raise ModelLoadError(f"{matrix_path}: expected a 2-D matrix, got shape {matrix.shape}")
    if matrix.dtype.kind not in "fiu":
        raise ModelLoadError(f"{matrix_path}: expected a numeric matrix, got dtype {matrix.dtype}")
    return matrix


def _read_vocab(path: Path, matrix_path: Path, rows: int) -> list[str]:
    """The words of a numpy-vocab model, as many as the matrix's rows (whose size is checked against its file): a text
    vocabulary's lines are counted, a parquet vocabulary's footer read, before any word is built."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            n = pq.ParquetFile(path).metadata.num_rows
            if n != rows:
                raise ModelLoadError(f"{path}: {n} words but {matrix_path} has {rows} rows")
            table = pq.read_table(path)
        except ModelLoadError:
            raise
        except Exception as exc:  # pyarrow raises OSError, ArrowInvalid, ... for a damaged file
            raise ModelLoadError(f"{path}: not a readable parquet vocabulary: {type(exc).__name__}: {exc}") from exc
        if "index" not in table.column_names:
            raise ModelLoadError(f"{path}: vocabulary parquet needs a column 'index' (has {table.column_names})")
        words = table.column("index").to_pylist()
        if any(w is None for w in words):
            raise ModelLoadError(f"{path}: vocabulary column 'index' has null entries")
        return [str(w) for w in words]
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ModelLoadError(f"{path}: vocabulary file is not UTF-8 text: {_reason(exc)}") from None
    n = text.rstrip("\n").count("\n") + 1 if text else 0
    if n != rows:  # counted before a string is built for each line
        raise ModelLoadError(f"{path}: {n} words but {matrix_path} has {rows} rows")
    return text.rstrip("\n").split("\n") if text else []


# -- text formats -----------------------------------------------------------------------------------------------
class _Examples:
    """A count of problems plus the first few, each as ``file:line: what``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self.shown: list[str] = []

    def add(self, lineno: int, what: str) -> None:
        self.count += 1
        if len(self.shown) < _MAX_EXAMPLES:
            self.shown.append(f"{self.path}:{lineno}: {what}")

    def text(self) -> str:
        return "; ".join(self.shown) + (" ..." if self.count > len(self.shown) else "")


class TextVectorReader:
    """Stream a word2vec text file (``header=True``: first line ``count dim``) or a GloVe text file.

    Iterating yields ``(words, float32 block)`` pairs of new (first-occurrence) words. A line is ``word v1 ... vdim``
    separated by single spaces; a word may itself contain spaces (GloVe 840B: ``. . .``), so the last ``dim``
    fields are the vector, unless the word's last piece is a number too: then the line has too many numbers.

    The dimension is ``dim`` when given (else the header's), checked against the first :data:`SAMPLE_LINES` vector
    lines; otherwise the one that fits most of them (ties: the larger). Lines that do not fit, do not parse, or hold
    NaN/inf are collected over the whole file and raised at the end as one :class:`ModelLoadError` naming the file,
    how many, and the first few lines, so a broken file never yields a silently wrong matrix.
    """

    def __init__(self, path: Path, *, header: bool, dim: int | None = None) -> None:
        self.path = Path(path)
        self.header = header
        self.declared = dim
        self.dim: int | None = None
        self.dim_source = ""
        self.lines = 0  # vector lines (non-empty, after the header), duplicates and bad lines included
        self.rows = 0  # rows yielded (first occurrences)
        self._sum: np.ndarray | None = None

    def mean(self) -> np.ndarray:
        """Mean of the yielded rows, accumulated in float64 while reading."""
        if self._sum is None or self.rows == 0:
            raise ValueError(f"{self.path}: no rows read yet")
        return self._sum / self.rows

    def __iter__(self) -> Iterator[tuple[list[str], np.ndarray]]:
        path = self.path
        bad = _Examples(path)
        nonfinite = _Examples(path)
        with open(path, "rb") as f:
            numbered = enumerate(f, 1)
            header_count, header_dim = self._read_header(numbered) if self.header else (None, None)
            sample = self._read_sample(numbered)
            dim = self.dim = self._decide_dim(sample, header_dim)
            seen: set[str] = set()
            words: list[str] = []
            vecs: list[str] = []
            linenos: list[int] = []
            lines = not_utf8 = 0
            for lineno, raw in itertools.chain(sample, numbered):
                try:
                    line = raw.decode("utf-8").rstrip("\r\n ")
                except UnicodeDecodeError as exc:
                    if lineno == 1:
                        _decode_first(path, raw)  # raises with the binary-file hint
                    lines += 1
                    not_utf8 += 1
                    bad.add(lineno, f"not UTF-8 text ({exc.reason} at byte {exc.start})")
                    continue
                if not line:
                    continue
                lines += 1
                n = line.count(" ")
                # the common line inline (this loop runs once per line of a file of millions); the others aside
                sp = line.find(" ") if n == dim else _word_end(line, n, dim, lineno, bad)
                if sp < 0:
                    continue
                word = line[:sp]
                if not word:
                    bad.add(lineno, "empty word (the line starts with a space)")
                    continue
                words.append(word)
                vecs.append(line[sp + 1 :])
                linenos.append(lineno)
                if len(vecs) >= _CHUNK_LINES:
                    out = self._parse(words, vecs, linenos, seen, bad, nonfinite)
                    words, vecs, linenos = [], [], []
                    if out is not None:
                        yield out
            if vecs:
                out = self._parse(words, vecs, linenos, seen, bad, nonfinite)
                if out is not None:
                    yield out
        self.lines = lines
        self._raise_problems(bad, nonfinite, not_utf8, header_count)

    def _read_header(self, numbered: Iterator[tuple[int, bytes]]) -> tuple[int, int]:
        """(count, dim) of a word2vec header line."""
        first = next(numbered, None)
        line = _decode_first(self.path, first[1] if first else b"")
        parts = line.split()
        if len(parts) != 2 or not all(_is_count(p) for p in parts):
            raise ModelLoadError(
                f"{self.path}:1: expected a word2vec header 'count dim', got {_shape(line)} "
                "(a GloVe file without header? use format glove-text)"
            )
        count, dim = int(parts[0]), int(parts[1])
        # nothing is allocated from the count (lines are streamed; a count the file does not hold is reported at the
        # end), but one line of the header's dimension must fit: a word and `dim` numbers, spaces between
        size = self.path.stat().st_size
        need = 2 * dim + 1
        if count > 0 and dim > 0 and (dim > MAX_DIM or need > size - len(first[1] if first else b"")):
            raise _claim_error(self.path, f"the header claims vectors of dimension {dim}", need, size)
        return count, dim

    def _read_sample(self, numbered: Iterator[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        """The first :data:`SAMPLE_LINES` non-empty lines (byte-order mark removed): they decide the dimension."""
        sample: list[tuple[int, bytes]] = []
        for lineno, raw in numbered:
            if raw.strip():
                sample.append((lineno, raw))
                if len(sample) >= SAMPLE_LINES:
                    break
        if not sample:
            raise ModelLoadError(f"{self.path}: no vectors in file")
        if sample[0][0] == 1 and sample[0][1].startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark
            sample[0] = (1, sample[0][1][3:])
        return sample

    def _raise_problems(self, bad: _Examples, nonfinite: _Examples, not_utf8: int, header_count: int | None) -> None:
        """After the whole file: one error for every bad and non-finite line, a header count that does not match, or
        a file without a single vector."""
        path, lines, dim = self.path, self.lines, self.dim
        problems = []
        if bad.count:
            are = "is" if bad.count == 1 else "are"
            binary = " (a binary file? use format word2vec-binary)" if not_utf8 * 2 > lines else ""
            problems.append(
                f"{bad.count} of {lines} vector lines {are} not a word and {dim} numbers "
                f"(dimension {dim}: {self.dim_source}){binary}: {bad.text()}"
            )
        if nonfinite.count:
            hold = "vector holds" if nonfinite.count == 1 else "vectors hold"
            problems.append(f"{nonfinite.count} {hold} NaN or inf: {nonfinite.text()}")
        if problems:
            cls = NonFiniteVectors if not bad.count else ModelLoadError
            raise cls(
                f"{path}: " + ". ".join(problems) + ". Fix or remove these lines: every line must be a word and "
                f"{dim} finite numbers, or the vocabulary (and its mean, which fills OOV words) is silently wrong"
            )
        if header_count is not None and header_count != lines:
            raise ModelLoadError(
                f"{path}: header says {header_count} vectors but the file has {lines} (truncated download?)"
            )
        if self.rows == 0:
            raise ModelLoadError(f"{path}: no vectors in file")

    def _decide_dim(self, sample: list[tuple[int, bytes]], header_dim: int | None) -> int:
        shape, first = _sample_shapes(self.path, sample)

        def fits(d: int) -> int:
            return sum(1 for _, n, trail, num in shape if _fits(d, n, trail, num))

        # every field count and every run of trailing numbers: a multi-word token ("0 :") makes the dimension
        # shorter than the line's field count
        candidates = sorted({n for _, n, _, _ in shape if n >= 1} | {t for _, _, t, _ in shape if t >= 1})
        scores = {d: fits(d) for d in candidates}
        best = max(candidates, key=lambda d: (scores[d], d)) if candidates else None
        if not self.header and first is not None and best is not None:
            self._refuse_a_header(first, best, sample)
        if header_dim is not None and self.declared is not None and header_dim != self.declared:
            raise ModelLoadError(
                f"{self.path}:1: the header says dimension {header_dim} but the spec declares {self.declared}"
            )
        if self.declared is not None or header_dim is not None:
            return self._check_declared(header_dim, shape, scores, best, fits)
        if best is None:
            raise ModelLoadError(f"{self.path}:{sample[0][0]}: expected 'word v1 v2 ...', got {_shape(first or '')}")
        self.dim_source = f"the dimension that fits {scores[best]} of the first {len(shape)} vector lines"
        return best

    def _refuse_a_header(self, first: str, best: int, sample: list[tuple[int, bytes]]) -> None:
        """A glove-text file whose first line reads as a word2vec ``count dim`` header is word2vec-text."""
        parts = first.split(" ")
        if len(parts) == 2 and all(_is_count(p) for p in parts) and (best != 1 or _counts_the_rest(parts, sample)):
            raise ModelLoadError(
                f"{self.path}:1: the first line (two whole numbers) looks like a word2vec 'count dim' header and the "
                "lines after it have "
                f"{best} number{'s' if best != 1 else ''}: this looks like word2vec-text, not glove-text; "
                "declare format word2vec-text"
            )

    def _check_declared(
        self,
        header_dim: int | None,
        shape: list[tuple[int, int, int, list[bool]]],
        scores: dict[int, int],
        best: int | None,
        fits: Callable[[int], int],
    ) -> int:
        """The declared (else the header's) dimension, unless more sample lines fit another one."""
        if self.declared is not None:
            declared, source, suspect = self.declared, "the declared dimension", "the declared dim"
        else:
            assert header_dim is not None
            declared, source, suspect = header_dim, "the header's dimension", "the header"
        self.dim_source = source
        got = fits(declared)
        if best is not None and best != declared and scores[best] > got:
            lineno = next(ln for ln, n, trail, num in shape if not _fits(declared, n, trail, num))
            raise ModelLoadError(
                f"{self.path}:{lineno}: {source} is {declared}, but {scores[best]} of the first {len(shape)} vector "
                f"lines have a word and {best} numbers (only {got} fit {declared}; this line is the first that does "
                f"not): is {suspect} wrong, or the file?"
            )
        if declared < 1 or declared > MAX_DIM:
            raise ModelLoadError(f"{self.path}: dimension {declared} is not a vector dimension")
        return declared

    def _parse(
        self,
        words: list[str],
        vecs: list[str],
        linenos: list[int],
        seen: set[str],
        bad: _Examples,
        nonfinite: _Examples,
    ) -> tuple[list[str], np.ndarray] | None:
        """Parse one chunk; returns its first-occurrence words and rows (None when none are left)."""
        dim = self.dim
        assert dim is not None
        try:
            arr = _loadtxt(vecs)
            ok = np.ones(len(vecs), dtype=bool)
        except ValueError:  # find the lines that do not parse; keep the others
            arr = np.zeros((len(vecs), dim), dtype=np.float32)
            ok = np.zeros(len(vecs), dtype=bool)
            for i, v in enumerate(vecs):
                try:
                    arr[i] = _loadtxt([v])[0]
                    ok[i] = True
                except ValueError:
                    bad.add(linenos[i], _why_not_numbers(v))
        finite = np.isfinite(arr).all(axis=1)
        if not finite.all():
            for i in np.flatnonzero(~finite & ok).tolist():
                nonfinite.add(linenos[i], "a vector with NaN or inf")
            ok &= finite
        keep: list[int] = []
        kept_words: list[str] = []
        for i, w in enumerate(words):  # first occurrence wins (duplicates are still parsed and checked above)
            if ok[i] and w not in seen:
                seen.add(w)
                keep.append(i)
                kept_words.append(w)
        if not keep:
            return None
        block = arr if len(keep) == len(vecs) else arr[keep]
        s = block.sum(axis=0, dtype=np.float64)
        self._sum = s if self._sum is None else self._sum + s
        self.rows += len(keep)
        return kept_words, block


def _word_end(line: str, n: int, dim: int, lineno: int, bad: _Examples) -> int:
    """Where the word of a line with ``n`` spaces ends, for ``n != dim``; -1 (and the line in ``bad``) when the line
    is not a word and ``dim`` numbers. More spaces than ``dim`` make a multi-word token, unless its last piece is a
    number: then the line has too many numbers."""
    if n < dim:
        bad.add(lineno, f"expected a word and {dim} numbers, got {n} fields after the word")
        return -1
    sp = prev = -1
    for _ in range(n - dim + 1):
        prev, sp = sp, line.find(" ", sp + 1)
    if _NUMBER.fullmatch(line, prev + 1, sp):
        bad.add(lineno, f"expected a word and {dim} numbers, got {_trailing_numbers(line)} numbers")
        return -1
    return sp


def _sample_shapes(
    path: Path, sample: list[tuple[int, bytes]]
) -> tuple[list[tuple[int, int, int, list[bool]]], str | None]:
    """Per decodable sample line: (its number, fields after the first, numbers at the end of the line, which fields
    are numbers); and the first such line."""
    shape: list[tuple[int, int, int, list[bool]]] = []
    first: str | None = None
    for lineno, raw in sample:
        try:
            line = raw.decode("utf-8").rstrip("\r\n ")
        except UnicodeDecodeError:
            if lineno == 1:
                _decode_first(path, raw)
            continue
        if first is None:
            first = line
        num = [bool(_NUMBER.fullmatch(fld)) for fld in line.split(" ")]
        trail = 0
        while trail < len(num) - 1 and num[-1 - trail]:
            trail += 1
        shape.append((lineno, len(num) - 1, trail, num))
    return shape, first


def _fits(d: int, n: int, trail: int, num: list[bool]) -> bool:
    """The line reads as a word and ``d`` numbers (a multi-word token's last piece is not a number)."""
    return trail >= d and (n == d or (n > d and not num[n - d]))


def _is_count(field: str) -> bool:
    """A header field: ASCII digits only (``str.isdigit`` also takes ``²``, which ``int`` refuses), at most 18 of
    them (``int`` refuses more than 4300, and no real count comes near 10^18)."""
    return field.isascii() and field.isdigit() and len(field) <= 18


def _counts_the_rest(parts: list[str], sample: list[tuple[int, bytes]]) -> bool:
    """A first line ``count 1`` over lines of one number each reads as a word and a number too: it is a word2vec
    header when ``count`` is the number of vector lines after it (in a file longer than the sample: at least the
    sample's)."""
    rest = len(sample) - 1
    count = int(parts[0])
    return parts[1] == "1" and (count == rest if len(sample) < SAMPLE_LINES else count >= rest)


def _trailing_numbers(line: str) -> int:
    fields = line.split(" ")
    t = 0
    while t < len(fields) - 1 and _NUMBER.fullmatch(fields[-1 - t]):
        t += 1
    return t


def _loadtxt(lines: list[str]) -> np.ndarray:
    return np.loadtxt(lines, dtype=np.float32, delimiter=" ", comments=None, quotechar=None, ndmin=2)


def _why_not_numbers(vec: str) -> str:
    for j, fld in enumerate(vec.split(" "), 1):
        if not _NUMBER.fullmatch(fld):
            shown = "an empty field (two spaces in a row?)" if fld == "" else f"a field of {len(fld)} characters"
            return f"not a number in the vector: {shown} (number {j})"
    return "not a number in the vector"


def _shape(line: str | bytes) -> str:
    """What a line holds, in words: never its text. An error message travels to the warehouse's ``failures``, the
    run's output and the report, and a ``path`` source may name a file that is not vectors at all (a credentials
    file: its one line would be the secret)."""
    if not line.strip():
        return "an empty line"
    fields = line.split()
    return f"a line of {len(fields)} field{'s' if len(fields) != 1 else ''} ({len(line)} characters)"


def _reason(exc: UnicodeDecodeError | pickle.UnpicklingError) -> str:
    """A decoding error without the bytes its message quotes (the file's content)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 at byte {exc.start}"
    return "UnpicklingError (not a pickle it can read)"


def _decode_first(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8").removeprefix("\ufeff").rstrip("\r\n ")
    except UnicodeDecodeError as exc:
        raise ModelLoadError(
            f"{path}:1: not UTF-8 text (a binary file? use format word2vec-binary): {_reason(exc)}"
        ) from None


def read_text_vectors(path: Path, *, header: bool, dim: int | None = None) -> tuple[list[str], np.ndarray]:
    """Parse a whole text vector file into RAM (see :class:`TextVectorReader` for the rules and errors)."""
    reader = TextVectorReader(path, header=header, dim=dim)
    words: list[str] = []
    blocks: list[np.ndarray] = []
    for w, b in reader:
        words.extend(w)
        blocks.append(b)
    return words, (blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=0))


# -- the model kind -------------------------------------------------------------------------------------------------
def check_spec(spec: ModelSpec) -> None:
    """A word-vectors model with its own file names the file's format."""
    if spec.base is None and spec.format is None:
        raise ValueError(f"model {spec.id!r}: word-vectors needs 'format' ({', '.join(get_args(WordFormat))})")


def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[WordVectors, dict[str, Any]]:
    """A word-vector file (local: hub repositories are not read here) in the spec's format."""
    if ctx.is_hub:
        raise NotSupportedYet(
            f"model {spec.id!r}: word vectors from the Hugging Face hub are not supported "
            "yet; download the file and use a path/url source"
        )
    assert spec.format is not None
    if spec.format == "spacy":
        ctx.uses("spacy")
    enc = WordVectors.load(
        ctx.local_path,
        spec.format,
        vocab=spec.vocab,
        lowercase=spec.lowercase,
        dim=spec.dim,
        allow_pickle=spec.allow_pickle,
    )
    prov = {
        "format": spec.format,
        "lowercase": spec.lowercase,
        "vocab_size": enc.vocab_size(),
        "rows": int(enc.vectors.shape[0]),
    }
    return enc, prov


KIND = ModelKind(
    name="word-vectors",
    description="A word -> vector table read from a file (word2vec text or binary, GloVe text, gensim KeyedVectors, "
    "a .npy matrix with a vocabulary, spaCy vectors).",
    levels=("word",),
    load=load_model,
    check=check_spec,
    libraries=("numpy", "gensim"),
    cost=0.02,
    small=True,
    fields=("source", "format", "vocab", "dim", "lowercase", "allow_pickle"),
)
model_kinds.register(KIND)
