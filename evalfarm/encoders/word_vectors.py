"""Word-vector models: a vocabulary index over a matrix, in every format the catalog names.

The model is a ``word -> row`` index plus a ``(rows, dim)`` matrix. For most formats every word has its own row;
spaCy vectors share rows between many keys (en_core_web_md: 685k keys over 20k rows), so the index and the
matrix are kept apart instead of copying shared rows into a gensim ``KeyedVectors``.
:meth:`WordVectors.to_keyed_vectors` builds one when gensim's API is wanted.

Text formats (``word2vec-text``, ``glove-text``) are parsed here rather than by gensim's
``load_word2vec_format``: gensim's errors carry no line number, and with ``no_header=True`` it turns duplicate
words into a ``None`` key with a zero row. Duplicate words keep their **first** occurrence in every format
(the word2vec convention); later duplicates are dropped from the matrix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from evalfarm.encoders.protocol import ModelLoadError

_CHUNK_LINES = 20_000


class WordVectors:
    """A :class:`~evalfarm.encoders.protocol.WordEncoder` over an in-memory (or memory-mapped) matrix.

    ``vectors`` is the ``(rows, dim)`` matrix, ``words`` the vocabulary and ``word_rows[i]`` the row of
    ``words[i]`` (``arange`` unless rows are shared). ``lowercase`` lowercases query words, not the vocabulary.
    """

    level: Literal["word"] = "word"

    def __init__(
        self,
        words: Sequence[str],
        vectors: np.ndarray,
        *,
        word_rows: np.ndarray | None = None,
        index: Mapping[str, int] | None = None,
        lowercase: bool = False,
        name: str = "",
    ) -> None:
        if vectors.ndim != 2:
            raise ValueError(f"{name or 'word vectors'}: matrix must be 2-D, got shape {vectors.shape}")
        self.words = list(words)
        self.vectors = vectors
        self.word_rows = np.arange(len(self.words)) if word_rows is None else np.asarray(word_rows, np.int64)
        if index is None:
            index = {}
            for w, r in zip(self.words, self.word_rows.tolist(), strict=True):
                index.setdefault(w, r)
        self._index = index
        self.lowercase = lowercase
        self.name = name
        self.dim = int(vectors.shape[1])
        self._mean: np.ndarray | None = None
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        return f"WordVectors({self.name!r}, words={len(self.words)}, rows={self.vectors.shape[0]}, dim={self.dim})"

    # -- the WordEncoder protocol -------------------------------------------------------------------------------
    def rows(self, words: Iterable[str]) -> np.ndarray:
        """Row of each word in :attr:`vectors`, ``-1`` for out-of-vocabulary words."""
        get = self._index.get
        if self.lowercase:
            return np.fromiter((get(w.lower(), -1) for w in words), dtype=np.int64)
        return np.fromiter((get(w, -1) for w in words), dtype=np.int64)

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
            for start in range(0, self.vectors.shape[0], 65536):
                acc += self.vectors[start : start + 65536].sum(axis=0, dtype=np.float64)
            self._mean = (acc / max(self.vectors.shape[0], 1)).astype(np.float32)
        return self._mean

    def vocab_size(self) -> int:
        """Number of words (keys); may exceed the number of matrix rows when rows are shared."""
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return (word.lower() if self.lowercase else word) in self._index

    def to_keyed_vectors(self):  # -> gensim.models.KeyedVectors
        """A gensim ``KeyedVectors`` copy (one row per word; shared rows are duplicated)."""
        from gensim.models import KeyedVectors

        kv = KeyedVectors(self.dim, count=0, dtype=np.float32)
        kv.add_vectors(self.words, np.asarray(self.vectors[self.word_rows], dtype=np.float32))
        return kv

    # -- loading ------------------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: Path, fmt: str, *, vocab: str | None = None, lowercase: bool = False) -> WordVectors:
        """Load ``path`` in format ``fmt`` (see :data:`evalfarm.catalog.specs.WordFormat`)."""
        path = Path(path)
        if not path.exists():
            raise ModelLoadError(f"word vectors file not found: {path}")
        if fmt in ("word2vec-text", "glove-text"):
            words, matrix = read_text_vectors(path, header=fmt == "word2vec-text")
            return cls(words, matrix, lowercase=lowercase, name=str(path))
        if fmt == "word2vec-binary":
            from gensim.models import KeyedVectors

            try:
                kv = KeyedVectors.load_word2vec_format(str(path), binary=True)
            except Exception as exc:
                raise ModelLoadError(f"{path}: not a valid word2vec binary file: {type(exc).__name__}: {exc}") from exc
            return cls.from_keyed_vectors(kv, lowercase=lowercase, name=str(path))
        if fmt == "gensim-kv":
            from gensim.models import KeyedVectors

            try:
                kv = KeyedVectors.load(str(path), mmap="r")
            except Exception as exc:
                raise ModelLoadError(
                    f"{path}: not a gensim KeyedVectors file (KeyedVectors.save): {type(exc).__name__}: {exc}"
                ) from exc
            if not isinstance(kv, KeyedVectors):  # e.g. a whole Word2Vec model saved with .save
                kv = getattr(kv, "wv", None)
                if not isinstance(kv, KeyedVectors):
                    raise ModelLoadError(f"{path}: loads, but holds no KeyedVectors")
            return cls.from_keyed_vectors(kv, lowercase=lowercase, name=str(path))
        if fmt == "numpy-vocab":
            return cls._load_numpy_vocab(path, vocab, lowercase=lowercase)
        if fmt == "spacy":
            return cls._load_spacy(path, lowercase=lowercase)
        raise ModelLoadError(f"unknown word-vector format {fmt!r}")

    @classmethod
    def from_keyed_vectors(cls, kv, *, lowercase: bool = False, name: str = "") -> WordVectors:
        return cls(list(kv.index_to_key), kv.vectors, lowercase=lowercase, name=name)

    @classmethod
    def _load_numpy_vocab(cls, path: Path, vocab: str | None, *, lowercase: bool) -> WordVectors:
        """A ``.npy`` matrix + a vocabulary: ``.parquet`` (column ``index``) or a text file, one word per line.

        ``path`` is the ``.npy`` file, or a folder holding exactly one; ``vocab`` is relative to the folder.
        """
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
        try:
            matrix = np.load(matrix_path, mmap_mode="r")
        except Exception as exc:
            raise ModelLoadError(f"{matrix_path}: not a .npy matrix: {exc}") from exc
        words = _read_vocab(vocab_path)
        if len(words) != matrix.shape[0]:
            raise ModelLoadError(f"{vocab_path}: {len(words)} words but {matrix_path} has {matrix.shape[0]} rows")
        if matrix.ndim != 2:
            raise ModelLoadError(f"{matrix_path}: expected a 2-D matrix, got shape {matrix.shape}")
        index: dict[str, int] = {}
        for i, w in enumerate(words):
            index.setdefault(w, i)
        if len(index) != len(words):  # duplicates: keep the first occurrence, drop the other rows
            keep = np.fromiter(sorted(index.values()), dtype=np.int64)
            words = [words[i] for i in keep]
            matrix = np.ascontiguousarray(matrix[keep])
        if matrix.dtype != np.float32:
            matrix = matrix.astype(np.float32)
        return cls(words, matrix, lowercase=lowercase, name=str(matrix_path))

    @classmethod
    def _load_spacy(cls, path: Path, *, lowercase: bool) -> WordVectors:
        """spaCy vectors: every key whose string is known maps to its (possibly shared) row."""
        import spacy

        try:
            nlp = spacy.load(path, exclude=_all_pipes(path))
        except Exception as exc:
            raise ModelLoadError(f"{path}: not a loadable spaCy pipeline folder: {exc}") from exc
        vectors = nlp.vocab.vectors
        if vectors.shape[0] == 0 or vectors.shape[1] == 0:
            raise ModelLoadError(f"{path}: the spaCy pipeline has no word vectors")
        strings = nlp.vocab.strings
        words: list[str] = []
        rows: list[int] = []
        for key, row in vectors.key2row.items():
            if key in strings:
                words.append(strings[key])
                rows.append(row)
        matrix = np.asarray(vectors.data, dtype=np.float32)
        return cls(words, matrix, word_rows=np.asarray(rows, dtype=np.int64), lowercase=lowercase, name=str(path))


def _all_pipes(path: Path) -> list[str]:
    """Names of every pipe in a spaCy pipeline folder (read from its meta.json; nothing else is loaded)."""
    import json

    meta = Path(path) / "meta.json"
    if meta.is_file():
        data = json.loads(meta.read_text(encoding="utf-8"))
        return list(dict.fromkeys([*data.get("components", []), *data.get("pipeline", [])]))
    return []


def _read_vocab(path: Path) -> list[str]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        if "index" not in table.column_names:
            raise ModelLoadError(f"{path}: vocabulary parquet needs a column 'index' (has {table.column_names})")
        words = table.column("index").to_pylist()
        if any(w is None for w in words):
            raise ModelLoadError(f"{path}: vocabulary column 'index' has null entries")
        return [str(w) for w in words]
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ModelLoadError(f"{path}: vocabulary file is not UTF-8 text: {exc}") from exc
    return text.rstrip("\n").split("\n") if text else []


def read_text_vectors(path: Path, *, header: bool) -> tuple[list[str], np.ndarray]:
    """Parse a word2vec text file (``header=True``: first line ``count dim``) or a GloVe text file.

    A line is ``word v1 ... vdim`` separated by single spaces; a word may itself contain spaces (GloVe 840B),
    so the last ``dim`` fields are the vector. Errors name the file and line.
    """
    words: list[str] = []
    seen: set[str] = set()
    chunks: list[np.ndarray] = []
    pending: list[str] = []
    pending_lines: list[int] = []
    dim: int | None = None
    expected: int | None = None
    n_lines = 0

    def flush() -> None:
        if not pending:
            return
        try:
            arr = np.array(pending, dtype=np.float32)
        except ValueError:
            for lineno, block in zip(pending_lines, _split(pending, dim), strict=True):
                try:
                    np.array(block, dtype=np.float32)
                except ValueError as exc:
                    raise ModelLoadError(f"{path}:{lineno}: not a number in the vector: {exc}") from None
            raise
        chunks.append(arr.reshape(-1, dim))
        pending.clear()
        pending_lines.clear()

    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n").rstrip(" ")
            except UnicodeDecodeError as exc:
                hint = " (a binary file? use format word2vec-binary)" if lineno == 1 else ""
                raise ModelLoadError(f"{path}:{lineno}: not UTF-8 text{hint}: {exc}") from None
            if lineno == 1 and header:
                parts = line.split()
                if len(parts) != 2 or not all(p.isdigit() for p in parts):
                    raise ModelLoadError(
                        f"{path}:1: expected a word2vec header 'count dim', got {line[:80]!r} "
                        "(a GloVe file without header? use format glove-text)"
                    )
                expected, dim = int(parts[0]), int(parts[1])
                continue
            if not line:
                continue
            parts = line.split(" ")
            if dim is None:
                dim = len(parts) - 1
                if dim < 1:
                    raise ModelLoadError(f"{path}:{lineno}: expected 'word v1 v2 ...', got {line[:80]!r}")
            if len(parts) < dim + 1:
                raise ModelLoadError(
                    f"{path}:{lineno}: expected a word and {dim} numbers, got {len(parts)} fields: {line[:80]!r}"
                )
            n_lines += 1
            word = parts[0] if len(parts) == dim + 1 else " ".join(parts[:-dim])
            if word in seen:  # keep the first occurrence
                continue
            seen.add(word)
            words.append(word)
            pending.extend(parts[-dim:])
            pending_lines.append(lineno)
            if len(pending_lines) >= _CHUNK_LINES:
                flush()
    flush()
    if dim is None or not words:
        raise ModelLoadError(f"{path}: no vectors in file")
    if expected is not None and expected != n_lines:
        raise ModelLoadError(
            f"{path}: header says {expected} vectors but the file has {n_lines} (truncated download?)"
        )
    return words, np.concatenate(chunks, axis=0)


def _split(values: list[str], dim: int | None) -> list[list[str]]:
    assert dim is not None
    return [values[i : i + dim] for i in range(0, len(values), dim)]
