"""The local cache (downloaded pools and models, the trained zoo) and the one way a download gets into it.

A download streams into a temp file beside its destination, is hashed on the way, and is renamed into place only
when complete and (when a checksum is known) verified: a cut or corrupt download never looks like a cached file.
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from pathlib import Path

from evalfarm import atomic


class ChecksumMismatch(ValueError):
    """Downloaded bytes whose sha256 is not the expected one (nothing is kept)."""


def cache_dir() -> Path:
    """The evalfarm cache folder: ``EVALFARM_CACHE`` or ``~/.cache/evalfarm``."""
    env = os.environ.get("EVALFARM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "evalfarm"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def download(url: str, dest: Path, sha256: str | None = None, *, timeout: float = 60) -> str:
    """Fetch ``url`` into ``dest`` atomically; returns the sha256 of the bytes.

    With ``sha256`` given, a mismatch raises :class:`ChecksumMismatch` and leaves nothing at ``dest``. Network and
    file errors propagate as :class:`OSError` (``URLError`` is one) for the caller to name its own context.
    """
    h = hashlib.sha256()
    with atomic.replacing(dest) as out, urllib.request.urlopen(url, timeout=timeout) as resp:
        while block := resp.read(1 << 20):
            h.update(block)
            out.write(block)
        got = h.hexdigest()
        if sha256 is not None and got != sha256.lower():  # raised inside: nothing lands at dest
            raise ChecksumMismatch(f"download of {url} has sha256 {got}, expected {sha256.lower()}")
    return got
