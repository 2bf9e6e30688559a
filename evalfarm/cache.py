"""The local cache (downloaded pools and models, the trained zoo) and the one way a download gets into it.

A download (pooch over requests, retried) streams into a temp file beside its destination, is hashed on the way,
and is renamed into place only when complete and (when a checksum is known) verified: a cut or corrupt download
never looks like a cached file.
"""

from __future__ import annotations

import hashlib
import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import IO, Any

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


DOWNLOAD_RETRIES = 2
"""Further attempts after a failed download (a cut connection, an HTTP error, bytes that do not hash as expected):
pooch's ``retry_if_failed``, which waits 1 s, then 2 s, ... between attempts."""


class _RefusedRedirect(Exception):
    """A redirect :func:`check_url` refuses, raised from inside requests. Deliberately neither a ValueError nor an
    OSError: pooch retries those, and a refusal must stop the download at once (re-raised as the UnsafeLocation)."""

    def __init__(self, error: UnsafeLocation) -> None:
        super().__init__(str(error))
        self.error = error


def check_redirect(response: Any, *args: Any, **kwargs: Any) -> Any:
    """A requests response hook: a redirect is followed only to a URL :func:`check_url` accepts (no https -> http
    downgrade without the opt-in, never ``file://`` or another scheme). requests calls the hook on every response,
    the 3xx ones included, before it follows them, so a refused target is never requested."""
    if response.is_redirect:
        target = urllib.parse.urljoin(response.url, response.headers["location"])
        try:
            check_url(target)
        except UnsafeLocation as exc:
            raise _RefusedRedirect(UnsafeLocation(f"{response.url} redirects to {target!r}, refused: {exc}")) from None
    return response


class _Hashing:
    """The file pooch's HTTPDownloader writes into: hashes the bytes on the way (the sha256 :func:`download`
    returns, and the one a mismatch error names, without reading the file again) and fsyncs it when closed."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self.sha256 = hashlib.sha256()

    def write(self, block: bytes) -> int:
        self.sha256.update(block)
        return self._f.write(block)

    def flush(self) -> None:
        self._f.flush()


class _Downloader:
    """pooch's HTTPDownloader (requests: streaming, a timeout, no progress bar) with the redirect check and the
    hashing file; ``sha256`` is the hash of the last attempt's bytes."""

    def __init__(self, timeout: float) -> None:
        import pooch

        self._http = pooch.HTTPDownloader(progressbar=False, timeout=timeout, hooks={"response": check_redirect})
        self.sha256: str | None = None

    def __call__(self, url: str, output_file: str, pup: Any, check_only: bool = False) -> None:
        self.sha256 = None
        with open(output_file, "w+b") as f:
            out = _Hashing(f)
            self._http(url, out, pup)
            f.flush()
            os.fsync(f.fileno())  # durable before pooch renames it into place, as atomic.replacing does
        self.sha256 = out.sha256.hexdigest()


def download(url: str, dest: Path, sha256: str | None = None, *, timeout: float = 60) -> str:
    """Fetch ``url`` into ``dest`` atomically through pooch; returns the sha256 of the bytes.

    pooch streams into a temp file beside ``dest``, checks it against ``sha256`` (its ``known_hash``) and renames
    it into place only then; a failed attempt is retried :data:`DOWNLOAD_RETRIES` times. With ``sha256`` given, a
    mismatch raises :class:`ChecksumMismatch` naming the URL and both hashes, and leaves nothing at ``dest`` (an
    existing ``dest`` with that hash is kept, not fetched again). Network and HTTP errors propagate as
    :class:`OSError` (requests' exceptions are) for the caller to name its own context. A URL :func:`check_url`
    refuses raises :class:`UnsafeLocation` before any request, and so does a redirect to one.

    Not resumed: a cut transfer starts again from byte 0 on the next attempt. pooch has no resume, and keeping a
    partial file between attempts or runs (HTTP Range) would mean a half file that outlives its writer in the cache;
    the files are small enough (tasks: kB to MB; vectors: at most a few GB, once) that retries from the start do.
    """
    check_url(url)
    import logging

    import pooch

    exp = None if sha256 is None else sha256.lower()
    pup = pooch.create(
        path=dest.parent,
        base_url="",
        registry={dest.name: None if exp is None else f"sha256:{exp}"},
        urls={dest.name: url},
        retry_if_failed=DOWNLOAD_RETRIES,
    )
    fetcher = _Downloader(timeout)
    logger = pooch.get_logger()
    level = logger.level
    logger.setLevel(logging.WARNING)  # pooch's "Downloading ..." lines bypass evalfarm's --quiet / logging
    try:
        pup.fetch(dest.name, downloader=fetcher, progressbar=False)
    except _RefusedRedirect as exc:
        raise exc.error from None
    except ValueError:
        got = fetcher.sha256
        if exp is not None and got is not None and got != exp:  # raised by pooch before the rename
            raise ChecksumMismatch(f"download of {url} has sha256 {got}, expected {exp}") from None
        raise
    finally:
        logger.setLevel(level)
    return fetcher.sha256 or sha256_file(dest)
