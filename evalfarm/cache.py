"""The local cache (downloaded pools and models, the trained zoo) and the one way a download gets into it.

A download streams into a temp file beside its destination, is hashed on the way, and is renamed into place only
when complete and (when a checksum is known) verified: a cut or corrupt download never looks like a cached file.
"""

from __future__ import annotations

import hashlib
import os
import urllib.parse
import urllib.request
from collections.abc import Mapping
from http.client import HTTPMessage
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import IO

from evalfarm import atomic


class ChecksumMismatch(ValueError):
    """Downloaded bytes whose sha256 is not the expected one (nothing is kept)."""


class UnsafeLocation(ValueError):
    """A catalog-named URL or path that could make evalfarm read or write outside its base (refused, never used)."""


ALLOW_HTTP_ENV = "EVALFARM_ALLOW_HTTP"
"""Set to 1 to let catalogs fetch plain ``http://`` URLs (unencrypted: the sha256 check is then the only guard)."""


def http_allowed() -> bool:
    """Whether the user opted in to plain-http downloads (``EVALFARM_ALLOW_HTTP=1``)."""
    return os.environ.get(ALLOW_HTTP_ENV, "").strip().lower() in ("1", "true", "yes")


def check_url(url: str) -> str:
    """``url`` when evalfarm may fetch it: ``https://`` always, ``http://`` only with ``EVALFARM_ALLOW_HTTP=1``;
    ``file://``, ``ftp://`` and every other scheme never (a catalog must not read local files through a URL)."""
    parsed = urllib.parse.urlsplit(url)
    scheme = parsed.scheme.lower()
    if scheme == "https" and parsed.netloc:
        return url
    if scheme == "http" and parsed.netloc:
        if http_allowed():
            return url
        raise UnsafeLocation(
            f"URL {url!r} is plain http (unencrypted); use https, or set {ALLOW_HTTP_ENV}=1 to allow http downloads"
        )
    raise UnsafeLocation(
        f"URL {url!r}: only https:// URLs are fetched (http:// with {ALLOW_HTTP_ENV}=1); "
        f"scheme {scheme + '://' if scheme else '(none)'} is refused"
    )


def check_relative(rel: str, *, what: str = "path") -> str:
    """``rel`` when it is a plain relative path: no absolute or drive root, no ``..`` segment, no ``~``, no NUL.
    Catalog paths name files inside a base folder (the data folder, the cache); this keeps them there."""
    if not rel or "\0" in rel:
        raise UnsafeLocation(f"{what} {rel!r} is empty or holds a NUL character")
    win = PureWindowsPath(rel)
    if PurePosixPath(rel).is_absolute() or win.drive or win.root or rel.startswith(("/", "\\")):
        raise UnsafeLocation(f"{what} {rel!r} is absolute; give a path relative to its base folder")
    parts = rel.replace("\\", "/").split("/")
    if ".." in parts:
        raise UnsafeLocation(f"{what} {rel!r} holds a '..' segment; give a path inside its base folder")
    if rel.startswith("~"):
        raise UnsafeLocation(f"{what} {rel!r} starts with '~'; give a path relative to its base folder")
    return rel


def confined(base: Path, rel: str, *, what: str = "path") -> Path:
    """``base / rel``, checked to lie inside ``base`` once resolved (symlinks included, in the folders on the way
    and in the file itself); :class:`UnsafeLocation` otherwise. The file need not exist yet (a download target)."""
    check_relative(rel, what=what)
    path = base / rel
    root = base.resolve()
    if not path.resolve().is_relative_to(root):
        raise UnsafeLocation(f"{what} {rel!r} resolves outside {base} (through a symlink); refused")
    return path


ENDPOINT_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
"""Where an ``s3://`` warehouse or data folder lives when it is not AWS (MinIO, Ceph, a local test server): the
standard AWS SDK variables, the S3-specific one first. A URI's own ``?endpoint_override=`` wins."""


def with_endpoint(uri: str, environ: Mapping[str, str] | None = None) -> str:
    """``uri`` with ``endpoint_override`` / ``scheme`` options from ``AWS_ENDPOINT_URL(_S3)`` for an ``s3://`` URI
    that names no endpoint itself. pyarrow's S3 client reads the variable for object requests but not for bucket
    requests (a bucket check then goes to amazonaws.com), so evalfarm passes it explicitly."""
    env = os.environ if environ is None else environ
    if not uri.startswith("s3://") or "endpoint_override=" in uri:
        return uri
    endpoint = next((env[v] for v in ENDPOINT_VARS if env.get(v)), None)
    if endpoint is None:
        return uri
    scheme, _, host = endpoint.partition("://") if "://" in endpoint else ("https", "", endpoint)
    options = urllib.parse.urlencode({"endpoint_override": host.rstrip("/"), "scheme": scheme})
    return f"{uri}{'&' if '?' in uri else '?'}{options}"


def store_copy(uri: str, dest: Path, sha256: str) -> str:
    """Copy the object at ``uri`` (``s3://…``, ``gs://…``: a data folder on an object store) into ``dest``
    atomically, checked against ``sha256`` before it lands (:class:`ChecksumMismatch`); returns the sha256.
    Credentials and endpoint as for an object-store warehouse (the usual environment variables)."""
    import pyarrow.fs as pafs

    fs, key = pafs.FileSystem.from_uri(with_endpoint(uri))
    h = hashlib.sha256()
    with atomic.replacing(dest) as out, fs.open_input_stream(key) as src:
        while block := src.read(1 << 20):
            h.update(block)
            out.write(block)
        got = h.hexdigest()
        if got != sha256.lower():
            raise ChecksumMismatch(f"{uri} has sha256 {got}, expected {sha256.lower()}")
    return got


def cache_dir() -> Path:
    """The evalfarm cache folder: ``EVALFARM_CACHE``, else the platform's user cache folder through platformdirs
    (on Linux ``$XDG_CACHE_HOME/evalfarm``, default ``~/.cache/evalfarm``: the XDG rules, not a hand-written copy)."""
    env = os.environ.get("EVALFARM_CACHE")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_path

    return user_cache_path("evalfarm", appauthor=False)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to a URL :func:`check_url` accepts (no https -> http downgrade without the opt-in)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        check_url(newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_CheckedRedirects)


def download(url: str, dest: Path, sha256: str | None = None, *, timeout: float = 60) -> str:
    """Fetch ``url`` into ``dest`` atomically; returns the sha256 of the bytes.

    With ``sha256`` given, a mismatch raises :class:`ChecksumMismatch` and leaves nothing at ``dest``. Network and
    file errors propagate as :class:`OSError` (``URLError`` is one) for the caller to name its own context. A URL
    :func:`check_url` refuses raises :class:`UnsafeLocation` before anything is opened.
    """
    check_url(url)
    h = hashlib.sha256()
    with atomic.replacing(dest) as out, _OPENER.open(url, timeout=timeout) as resp:
        while block := resp.read(1 << 20):
            h.update(block)
            out.write(block)
        got = h.hexdigest()
        if sha256 is not None and got != sha256.lower():  # raised inside: nothing lands at dest
            raise ChecksumMismatch(f"download of {url} has sha256 {got}, expected {sha256.lower()}")
    return got
