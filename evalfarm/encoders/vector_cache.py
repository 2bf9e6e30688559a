"""Large word-vector files, read once: a memory-mapped binary cache, and vocabulary statistics in streaming passes.

A ``glove.840B.300d``-sized text file (2.2 M words x 300, 5.6 GB) cannot be held in RAM on a worker just to look
up a few tens of thousands of words. :func:`cached_vectors` streams the file once through the text reader into
``<EVALFARM_CACHE>/vectors/<key>/``:

- ``matrix.npy``: float32 ``(rows, dim)``, opened memory-mapped afterwards (``np.load(..., mmap_mode="r")``,
  never unpickled);
- ``vocab.txt``: the words, UTF-8, one per line (a word of a text vector file never holds ``\\n``);
- ``vocab-*.npy``: the vocabulary index (:class:`~evalfarm.encoders.vocab_index.MappedIndex`: line offsets and
  sorted 64-bit hashes of the exact and the lower-cased keys, first occurrence wins), written once after the
  words, so opening the cache reads no word and builds no dict: lookups binary-search the memory-mapped hashes and
  check each hit against the real word;
- ``meta.json``: the source file's fingerprint, shape, the vocabulary mean accumulated in float64 on the fly, and
  the index's record (version, hash, counts).

The key covers the file's size, mtime and the sha256 of its first and last MiB (a cheap fingerprint: no full
hash of 5 GB on every open) plus the reader options and :data:`READER_VERSION`, so an edited file, or a cache
written by an older layout (version 1 had no index), is read again into a new folder. The folder appears
atomically (built in a temp folder, renamed into place), so an interrupted build or a parse error leaves nothing
that looks like a cache; a lock file (``flock``) makes a second worker opening the same file wait for the first
one's build instead of parsing the file again.

:func:`vocab_statistics` computes the EvalRank protocol's vocabulary statistics over a (memory-mapped) matrix and
a row selection in two float64 passes; :func:`lowercase_first_rows` (for a list of words in RAM) and
``MappedIndex.lower_first`` (for a cached vocabulary) give the selection "the lower-cased vocabulary, first
occurrence of a lower-cased key wins".

Everything read back is data: ``np.load(..., allow_pickle=False)``, JSON and UTF-8 text. A missing, truncated or
inconsistent piece (index files included) makes the folder inconsistent, and it is rebuilt.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from evalfarm import atomic
from evalfarm.cache import cache_dir
from evalfarm.encoders.vocab_index import MappedIndex, lowercase_first_rows, write_mapped_index
from evalfarm.vocab import VocabStats, vocab_statistics  # re-exported: they live below both layers

__all__ = [
    "CACHE_MIN_BYTES",
    "CachedMatrix",
    "FileStats",
    "NpyWriter",
    "VocabStats",
    "cached_vectors",
    "file_fingerprint",
    "lowercase_first_rows",
    "vocab_statistics",
]

READER_VERSION = "2"
"""Bump when the text reader or the cache layout changes what it produces: every cached matrix is then read again
(2: the memory-mapped vocabulary index, ``vocab-*.npy``)."""

CACHE_MIN_BYTES = 32 << 20
"""Text vector files at least this large go through the binary cache by default (smaller ones are parsed in RAM)."""

_EDGE = 1 << 20
_NPY_HEADER = 128


# -- the cache --------------------------------------------------------------------------------------------------
def file_fingerprint(path: Path) -> dict[str, Any]:
    """Size, mtime and the sha256 of the first and last MiB: enough to notice an edited or replaced file."""
    st = path.stat()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(_EDGE))
        if st.st_size > 2 * _EDGE:
            f.seek(st.st_size - _EDGE)
            h.update(f.read(_EDGE))
        elif st.st_size > _EDGE:
            h.update(f.read())
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "edges_sha256": h.hexdigest()}


class NpyWriter:
    """Append float32 rows to a ``.npy`` file whose row count is known only at the end.

    The v1.0 header is written with a fixed 128-byte length and rewritten in place on :meth:`close`, so the data
    is written once, in order, and the file is a plain ``.npy`` that ``np.load(mmap_mode="r")`` opens.
    """

    def __init__(self, path: Path, dim: int) -> None:
        self.path = Path(path)
        self.dim = int(dim)
        self.rows = 0
        self._f: IO[bytes] = open(self.path, "wb")  # closed by close() / abort()
        self._f.write(self._header(0))

    def _header(self, rows: int) -> bytes:
        d = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {self.dim}), }}"
        body = d.encode("latin1")
        pad = _NPY_HEADER - 10 - len(body) - 1
        if pad < 0:  # pragma: no cover - needs a shape with ~90 digits
            raise ValueError(f"matrix shape ({rows}, {self.dim}) does not fit a {_NPY_HEADER}-byte .npy header")
        body += b" " * pad + b"\n"
        return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body

    def write(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype="<f4")
        if block.ndim != 2 or block.shape[1] != self.dim:
            raise ValueError(f"{self.path}: expected rows of width {self.dim}, got shape {block.shape}")
        self._f.write(block.tobytes())
        self.rows += block.shape[0]

    def close(self) -> None:
        self._f.seek(0)
        self._f.write(self._header(self.rows))
        self._f.close()

    def abort(self) -> None:
        self._f.close()


@dataclass
class CachedMatrix:
    """A cached vector file: its folder, vocabulary index, memory-mapped float32 matrix and metadata."""

    folder: Path
    index: MappedIndex
    matrix: np.ndarray
    meta: dict[str, Any]

    @property
    def words(self) -> Sequence[str]:
        """The vocabulary, read lazily from ``vocab.txt`` (iterating it materialises the list)."""
        return self.index.words

    @property
    def mean(self) -> np.ndarray:
        """Mean of every row, accumulated in float64 while the file was read."""
        return np.asarray(self.meta["mean"], dtype=np.float64)

    def stats(self, name: str, compute: Callable[[], VocabStats]) -> VocabStats:
        """Statistics ``name`` (e.g. ``lower-first``) computed once and kept beside the matrix."""
        return _kept_stats(self.folder / f"stats-{name}.json", compute)


def _kept_stats(path: Path, compute: Callable[[], VocabStats]) -> VocabStats:
    if path.is_file():
        try:
            return VocabStats.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError):
            pass  # unreadable: recompute and rewrite
    st = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, json.dumps(st.to_json()) + "\n")
    except OSError:
        pass  # a read-only cache: computed, just not kept
    return st


STATS_VERSION = "1"
"""Bump when :func:`vocab_statistics` or the row selections change what they compute for the same files."""


@dataclass(frozen=True)
class FileStats:
    """Vocabulary statistics of a model read from files as they are (a ``.npy`` matrix + its vocabulary), kept under
    ``<EVALFARM_CACHE>/vectors/stats/`` and keyed by the files' fingerprints (size, mtime, first and last MiB) and
    the reading options: a numpy-vocab model's second load reads them instead of two float64 passes over the
    matrix."""

    files: tuple[Path, ...]
    options: dict[str, Any]

    def stats(self, name: str, compute: Callable[[], VocabStats]) -> VocabStats:
        payload = {
            "files": [file_fingerprint(Path(f)) for f in self.files],
            "options": self.options,
            "stats": STATS_VERSION,
            "name": name,
        }
        key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]
        return _kept_stats(cache_dir() / "vectors" / "stats" / f"{key}.json", compute)


def _write_atomic(path: Path, text: str) -> None:
    atomic.write_text(path, text)


BuildFn = Callable[[Callable[[int], NpyWriter], IO[bytes]], dict[str, Any]]
"""``build(open_matrix, vocab_file) -> meta``: ``open_matrix(dim)`` starts the ``.npy`` once the reader knows the
dimension; the words go to ``vocab_file`` as UTF-8 lines; the returned meta must hold ``rows``, ``dim`` and
``mean`` (a float64 list)."""


def cached_vectors(
    path: Path, *, options: dict[str, Any], build: BuildFn, root: Path | None = None
) -> tuple[CachedMatrix, bool]:
    """Open the cache of ``path`` read with ``options``, building it with ``build`` first when missing.

    Returns ``(cache, built_now)``. Errors raised by ``build`` (bad lines, NaN) propagate and leave no folder.
    """
    path = Path(path)
    fp = file_fingerprint(path)
    key_payload = {"file": fp, "options": options, "reader": READER_VERSION}
    key = hashlib.sha256(json.dumps(key_payload, sort_keys=True).encode()).hexdigest()[:20]
    folder = (root if root is not None else cache_dir() / "vectors") / key
    if folder.is_dir():
        cached = _open(folder)
        if cached is not None:
            return cached, False
    folder.parent.mkdir(parents=True, exist_ok=True)
    # one builder per file: a second process (or thread) opening the same file waits here, then reuses the result
    with open(folder.parent / f".{key}.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if folder.is_dir():
                cached = _open(folder)
                if cached is not None:
                    return cached, False
                shutil.rmtree(folder, ignore_errors=True)  # inconsistent (should not happen: folders appear whole)
            return _build(path, folder, key, fp, options, build), True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(
    path: Path, folder: Path, key: str, fp: dict[str, Any], options: dict[str, Any], build: BuildFn
) -> CachedMatrix:
    writer: list[NpyWriter] = []

    def fill(tmp: Path) -> None:
        def open_matrix(dim: int) -> NpyWriter:
            writer.append(NpyWriter(tmp / "matrix.npy", dim))
            return writer[0]

        with open(tmp / "vocab.txt", "wb") as vocab:
            meta = build(open_matrix, vocab)
        if not writer:
            raise RuntimeError(f"{path}: the reader produced no matrix")  # pragma: no cover - build raises first
        writer[0].close()
        index = write_mapped_index(tmp)
        meta = {**meta, "source": str(path.resolve()), "fingerprint": fp, "options": options, "index": index}
        meta["reader"] = READER_VERSION
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")

    try:
        atomic.publish_dir(folder, fill)  # another process that finished the same cache first wins
    except BaseException:
        if writer:
            writer[0].abort()
        raise
    cached = _open(folder)
    if cached is None:  # pragma: no cover - just built
        raise RuntimeError(f"vector cache {folder} is inconsistent right after building it")
    return cached


def _open(folder: Path) -> CachedMatrix | None:
    """The cache in ``folder``, or None when a piece is missing or inconsistent.

    Constant work whatever the vocabulary's size: headers and a few values are read, the rest is memory-mapped.
    """
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        if not isinstance(meta, dict) or meta.get("reader") != READER_VERSION:
            return None
        matrix = np.load(folder / "matrix.npy", mmap_mode="r", allow_pickle=False)
        if matrix.shape != (meta["rows"], meta["dim"]) or matrix.dtype != np.float32:
            return None
        index = MappedIndex(folder, int(meta["rows"]), meta.get("index"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return CachedMatrix(folder, index, matrix, meta)
