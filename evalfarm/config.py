"""Where evalfarm's settings come from, resolved in one place for the CLI and the Python API alike.

The settings: the evaluation data folder, the warehouse, the catalog, the four limits of a read-only SQL query
(time, memory, rows and bytes of its result), the end-of-run hook (``notify``), the folders ``path`` model sources may
read, and the three limits of an unpacked model archive. Each is the first of:

1. a command-line option or an API keyword (``--warehouse``, ``evalfarm.run(warehouse=...)``, ``data=...``,
   ``evalfarm sql --timeout``, ``evalfarm.query(memory_limit=...)``, ``evalfarm sql --max-rows``),
2. the environment (:data:`ENV_VARS`): ``EVALFARM_DATA``, ``EVALFARM_WAREHOUSE``, ``EVALFARM_CATALOG``,
   ``EVALFARM_SQL_TIMEOUT``, ``EVALFARM_SQL_MEMORY_LIMIT``, ``EVALFARM_SQL_MAX_ROWS``, ``EVALFARM_SQL_MAX_BYTES``,
   ``EVALFARM_MODEL_PATHS``, ``EVALFARM_ARCHIVE_MAX_SIZE``, ``EVALFARM_ARCHIVE_MAX_RATIO``,
   ``EVALFARM_ARCHIVE_MAX_MEMBERS``,
3. the config file (below),
4. the default (:data:`DEFAULTS`): no data folder (tasks download into the cache), ``warehouse`` (in the current
   folder), ``zoo-starter``, 300 s, ``4GB``, 1,000,000 rows, ``1GB``, no model folder, ``20GB``, 200, 100,000.

:func:`resolve_settings` does it and returns a :class:`Settings`; every CLI command and every function of
:mod:`evalfarm.api` uses it, so ``evalfarm sql``, ``evalfarm report`` and ``evalfarm.query(...)`` read the same
warehouse from any folder below the file.

``make run`` writes the file (``evalfarm config set data=… warehouse=… catalog=…``) as ``.evalfarm.toml`` in the
checkout, so the commands the README shows next work in a fresh shell, without ``EVALFARM_DATA`` or
``--warehouse``. The file that applies is the first of:

1. ``$EVALFARM_CONFIG`` (a path; empty: no file at all),
2. ``.evalfarm.toml`` in the current folder or the nearest parent that has one (like ``pyproject.toml``),
3. the user-level file, for every folder: ``config.toml`` in the user config folder (platformdirs:
   ``$XDG_CONFIG_HOME/evalfarm/config.toml``, default ``~/.config/evalfarm/config.toml``; :func:`user_config_path`),
   written by ``evalfarm config set --user``.

Keys (all optional; relative paths, a catalog file's included, are relative to the file's folder, so the file
works from any subfolder):

- ``data``: the evaluation data folder; an empty string means "download the tasks into the cache", as an empty
  ``EVALFARM_DATA`` does. The data folder reaches the code that reads task files (and the Ray workers) as
  ``EVALFARM_DATA``: the CLI exports it for the whole command, the API for the duration of the call.
- ``warehouse``: the default of ``--warehouse`` for ``run``, ``sql``, ``report``, ``correlations`` (and the API).
- ``catalog``: the default of ``--catalog`` for ``run``, ``catalog list`` and ``catalog validate`` (and the API).
- ``sql_timeout``: how long one ``evalfarm sql`` / ``evalfarm.query`` may run, in seconds (a number; 0: no limit).
- ``sql_memory_limit``: DuckDB's memory cap for the same queries, a size such as ``"16GB"``.
- ``notify``: a shell command ``evalfarm run`` runs at its end with the run's summary as JSON on stdin
  (:mod:`evalfarm.notify`; ``--notify`` and ``EVALFARM_NOTIFY`` too).
- ``sql_max_rows`` / ``sql_max_bytes``: the most rows / Arrow bytes such a query may return (0: no limit); the result
  is fetched in batches under the timeout and the query stops at the batch that passes either.
- ``model_paths``: the folders (separated by ``:``) that ``path`` model sources may read besides the data folder and
  the cache. A catalog names files; only the user names where they may be (never the catalog itself).
- ``archive_max_size``, ``archive_max_ratio``, ``archive_max_members``: the most a model archive may unpack to (a
  size), its unpacked size over its own, and its member count: a 1 KB archive that would unpack to 1 GB is refused.

The worker-side settings (``data``, ``model_paths`` and the archive limits) reach the code that reads files (and the
Ray workers) as their environment variables: the CLI exports them for the whole command, the API for the duration of
the call.

``evalfarm config show`` prints each setting, its value and where it came from.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from evalfarm import atomic

log = logging.getLogger(__name__)
_WARNED: set[str] = set()

ENV = "EVALFARM_CONFIG"
FILE_NAME = ".evalfarm.toml"
KEYS = {
    "data": "evaluation data folder, used when EVALFARM_DATA is unset ('' = download into the cache)",
    "warehouse": "default --warehouse of `run`, `sql`, `report` and `correlations`",
    "catalog": "default --catalog of `run`, `catalog list` and `catalog validate`",
    "sql_timeout": "seconds one `evalfarm sql` / evalfarm.query may run (0: no limit)",
    "sql_memory_limit": "DuckDB's memory cap for `evalfarm sql` / evalfarm.query, e.g. 16GB",
    "notify": "a command `evalfarm run` runs at the end with the run's summary as JSON on stdin ('' = none)",
    "sql_max_rows": "the most rows `evalfarm sql` / evalfarm.query may return (0: no limit)",
    "sql_max_bytes": "the most bytes (Arrow) `evalfarm sql` / evalfarm.query may return, e.g. 1GB (0: no limit)",
    "model_paths": "folders (':'-separated) `path` model sources may read, besides the data folder and the cache",
    "archive_max_size": "the most a model archive may unpack to, e.g. 20GB",
    "archive_max_ratio": "the most a model archive may unpack to, as a multiple of its own size",
    "archive_max_members": "the most members (files, folders) a model archive may hold",
}
PATH_KEYS = ("data", "warehouse")
PATH_LIST_KEYS = ("model_paths",)
"""Keys holding several paths, separated by ``os.pathsep``; each is made absolute against the file's folder."""
ENV_VARS = {
    "data": "EVALFARM_DATA",
    "warehouse": "EVALFARM_WAREHOUSE",
    "catalog": "EVALFARM_CATALOG",
    "sql_timeout": "EVALFARM_SQL_TIMEOUT",
    "sql_memory_limit": "EVALFARM_SQL_MEMORY_LIMIT",
    "notify": "EVALFARM_NOTIFY",
    "sql_max_rows": "EVALFARM_SQL_MAX_ROWS",
    "sql_max_bytes": "EVALFARM_SQL_MAX_BYTES",
    "model_paths": "EVALFARM_MODEL_PATHS",
    "archive_max_size": "EVALFARM_ARCHIVE_MAX_SIZE",
    "archive_max_ratio": "EVALFARM_ARCHIVE_MAX_RATIO",
    "archive_max_members": "EVALFARM_ARCHIVE_MAX_MEMBERS",
}
"""The environment variable of each setting: it wins over the file, an option wins over it."""
EXPORTED = ("data", "model_paths", "archive_max_size", "archive_max_ratio", "archive_max_members")
"""The settings read where files are read (the task and model readers, on the Ray workers too): exported to the
environment (:meth:`Settings.export_data`) rather than passed down."""
DEFAULT_WAREHOUSE = "warehouse"
DEFAULT_CATALOG = "zoo-starter"
DEFAULT_SQL_TIMEOUT_S = 300.0
"""How long one read-only query may run by default: a cross join over the views otherwise runs for hours."""
DEFAULT_SQL_MEMORY_LIMIT = "4GB"
"""DuckDB's memory cap for a read-only query by default (DuckDB's own is 80 % of the machine's memory)."""
DEFAULT_SQL_MAX_ROWS = 1_000_000
"""The most rows a read-only query returns by default: `evalfarm sql` prints them, and each becomes Python objects
(tens of bytes a value) after DuckDB's memory cap no longer applies."""
DEFAULT_SQL_MAX_BYTES = "1GB"
"""The most Arrow bytes a read-only query returns by default (the result lives outside DuckDB's memory cap)."""
DEFAULT_ARCHIVE_MAX_SIZE = "20GB"
"""The most a model archive unpacks to by default (the largest public word-vector archives unpack to under 8 GB)."""
DEFAULT_ARCHIVE_MAX_RATIO = 200.0
"""The most a model archive unpacks to by default, over its own size (vectors and weights compress 1-4x; a
bzip2 of zeros, 10^6x)."""
DEFAULT_ARCHIVE_MAX_MEMBERS = 100_000
"""The most members a model archive holds by default (a model folder holds tens of files)."""
DEFAULTS = {
    "data": "",
    "warehouse": DEFAULT_WAREHOUSE,
    "catalog": DEFAULT_CATALOG,
    "sql_timeout": f"{DEFAULT_SQL_TIMEOUT_S:g}",
    "sql_memory_limit": DEFAULT_SQL_MEMORY_LIMIT,
    "notify": "",
    "sql_max_rows": str(DEFAULT_SQL_MAX_ROWS),
    "sql_max_bytes": DEFAULT_SQL_MAX_BYTES,
    "model_paths": "",
    "archive_max_size": DEFAULT_ARCHIVE_MAX_SIZE,
    "archive_max_ratio": f"{DEFAULT_ARCHIVE_MAX_RATIO:g}",
    "archive_max_members": str(DEFAULT_ARCHIVE_MAX_MEMBERS),
}
_SIZE = re.compile(r"\d+(\.\d+)?\s*[A-Za-z]*")
_UNITS = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip
"""DuckDB's units: KB is 1000 bytes, KiB 1024."""


def parse_size(text: str) -> int:
    """Bytes of a size such as ``1GB``, ``512MiB`` or ``1000`` (DuckDB's units: KB = 1000, KiB = 1024);
    ``ValueError`` naming the text otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size such as 1GB, 512MiB or 1000 (bytes)")
    return int(float(m.group(1)) * _UNITS[unit])


OPTION = "option"
"""``Settings.sources`` of a value given as a command-line option or an API keyword."""
DEFAULT = "default"


class ConfigError(ValueError):
    """A config file that cannot be read or holds something evalfarm does not know; the message names the file."""


@dataclass
class Config:
    path: Path | None  # the file that applies (None: none)
    values: dict[str, str] = field(default_factory=dict)


def _is_path(key: str, value: str) -> bool:
    """Whether ``value`` of ``key`` is a local path (made absolute), not a URI, a catalog name or empty."""
    if not value or "://" in value:
        return False
    if key == "catalog":  # a name (zoo-starter) is looked up on the catalog search path; a file is a path
        return Path(value).suffix in (".yaml", ".yml") or "/" in value or os.sep in value
    return key in PATH_KEYS


_NUMBER_KEYS = ("sql_timeout", "sql_max_rows", "archive_max_ratio", "archive_max_members")
"""Keys a TOML number may give (``sql_timeout = 600`` as well as ``"600"``)."""


def _path_list(value: str, base: Path) -> str:
    """``value``'s folders (``os.pathsep``-separated), each made absolute against ``base``; empty ones dropped."""
    return os.pathsep.join(str((base / Path(v).expanduser()).resolve()) for v in value.split(os.pathsep) if v.strip())


def check_value(key: str, value: str) -> str | None:
    """Why ``value`` is not a valid ``key`` (the SQL limits: a number of seconds >= 0, a size like ``16GB``), else
    None; the other keys take any string."""
    if key == "sql_timeout":
        try:
            ok = float(value) >= 0
        except ValueError:
            ok = False
        return None if ok else f"sql_timeout must be a number of seconds >= 0 (0: no limit), got {value!r}"
    if key == "sql_memory_limit" and not _SIZE.fullmatch(value.strip()):
        return f"sql_memory_limit must be a size such as 4GB or 512MB, got {value!r}"
    if key in ("sql_max_rows", "archive_max_members") and not value.strip().isdigit():
        return f"{key} must be a whole number >= 0 (0: no limit), got {value!r}"
    if key in ("sql_max_bytes", "archive_max_size"):
        try:
            parse_size(value)
        except ValueError:
            return f"{key} must be a size such as 1GB or 512MiB (0: no limit), got {value!r}"
    if key == "archive_max_ratio":
        try:
            ok = float(value) >= 0
        except ValueError:
            ok = False
        return None if ok else f"archive_max_ratio must be a number >= 0 (0: no limit), got {value!r}"
    return None


TRUSTED_ONLY = ("notify", "model_paths", "data")
"""Settings that run a command or widen what evalfarm reads (the end-of-run hook, the folders ``path`` sources may
read, the data folder): taken only from the user's own file (owned by the user, not root), the environment or the
command line; a file of root's (a shared checkout) gives the others."""


@dataclass(frozen=True)
class Discovery:
    """Which config file applies (``path``, None: none) and the files refused on the way (``refused``: one line
    each, naming the file and why), as :func:`find_config` decides."""

    path: Path | None
    refused: tuple[str, ...] = ()


def _owner(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _unsafe(st: os.stat_result, *, folder: bool) -> str | None:
    """Why a file or folder with ``st`` could be written by someone other than this user, else None: owned by
    another user (root's is fine: root can write anything anyway), or writable by every user, or by a group that
    is not this user's own. A folder whose sticky bit is set (``/tmp``) is fine though writable by all: nobody but
    an entry's owner may rename or delete it, so what this user owns in it stays theirs."""
    if st.st_uid not in (os.getuid(), 0):
        return f"is owned by {_owner(st.st_uid)}, not by you or root"
    others = bool(st.st_mode & stat.S_IWOTH) or bool(st.st_mode & stat.S_IWGRP and st.st_gid != os.getgid())
    if others and not (folder and st.st_mode & stat.S_ISVTX):
        return "is writable by other users"
    return None


def _file_problem(path: Path, stop_at: Path | None) -> str | None:
    """Why the config file ``path`` cannot be trusted, else None: the file (and a link's target) and every folder
    above it, up to where the search stops (the user's home, a change of filesystem, a folder owned by root above
    one of the user's), must be the user's or root's and writable by no one else (:func:`_unsafe`)."""
    try:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            if why := _unsafe(st, folder=False):
                return f"the link {why}"
            st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file"
        if why := _unsafe(st, folder=False):
            return why
        folder = path.resolve().parent
        below = None
        for f in (folder, *folder.parents):
            fst = f.stat()
            if below is not None and (fst.st_dev != below.st_dev or (fst.st_uid == 0 != below.st_uid)):
                return None  # the search stops at a change of filesystem, or of owner to root (/home, /tmp)
            if why := _unsafe(fst, folder=True):
                return f"is in {f}, which {why}"
            if stop_at is not None and f == stop_at:
                return None
            below = fst
    except OSError as exc:
        return f"cannot be checked ({exc.strerror or exc})"
    return None


def _home() -> Path | None:
    try:
        return Path.home().resolve()
    except (RuntimeError, OSError):
        return None


def find_config(cwd: Path | None = None) -> Discovery:
    """The config file that applies (see the module docstring) and the ones refused, as git finds its own after
    CVE-2022-24765: ``.evalfarm.toml`` is looked for from the current folder up, stopping after the user's home
    and at a change of filesystem or of owner; the nearest found is used only if it and every folder above it
    (:func:`_file_problem`) are the user's or root's and writable by no one else. A refused file is named (its
    line in ``refused``: a warning, and ``evalfarm config show``), and the search ends there: the user-level file
    (checked the same way) applies instead. ``$EVALFARM_CONFIG`` names a file explicitly and is taken as it is."""
    env = os.environ.get(ENV)
    if env is not None:
        return Discovery(Path(env).expanduser() if env else None)
    here = (cwd or Path.cwd()).resolve()
    home = _home()
    refused: list[str] = []
    below: os.stat_result | None = None
    for folder in (here, *here.parents):
        try:
            st = folder.stat()
        except OSError:
            break
        if below is not None and (st.st_dev != below.st_dev or st.st_uid != below.st_uid):
            break  # a change of filesystem or of owner: no file above it is looked at
        cand = folder / FILE_NAME
        if os.path.lexists(cand):
            why = _file_problem(cand, home)
            if why is None:
                return Discovery(cand)
            refused.append(f"{cand} {why}: refused, its settings are not used")
            break
        if folder == home:
            break
        below = st
    user = user_config_path()
    if user.is_file():
        why = _file_problem(user, home)
        if why is None:
            return Discovery(user, tuple(refused))
        refused.append(f"{user} {why}: refused, its settings are not used")
    return Discovery(None, tuple(refused))


def config_path(cwd: Path | None = None) -> Path | None:
    """The config file that applies (see :func:`find_config`), or None; the file need not exist for 1."""
    return find_config(cwd).path


def owns(path: Path) -> bool:
    """Whether ``path`` (and a link's target) belongs to this user: what lets a file give :data:`TRUSTED_ONLY`
    settings (root's shared file gives the rest)."""
    try:
        return path.lstat().st_uid == os.getuid() and path.stat().st_uid == os.getuid()
    except OSError:
        return False


def user_config_path() -> Path:
    """The user-level config file, for every folder: ``config.toml`` in the platform's user config folder
    (platformdirs: ``$XDG_CONFIG_HOME/evalfarm`` or ``~/.config/evalfarm`` on Linux). ``evalfarm config set --user``
    writes it."""
    from platformdirs import user_config_path as folder

    return folder("evalfarm", appauthor=False) / "config.toml"


def where_looked(key: str = "data", cwd: Path | None = None) -> str:
    """Where a setting was looked for and not found, in the order they count: for an error that says why it is
    missing and how to set it."""
    env = os.environ.get(ENV)
    here = (cwd or Path.cwd()).resolve()
    if env is not None:
        files = f"${ENV}={env or '(empty: no file)'}"
    else:
        files = f"no {FILE_NAME} in {here} or a parent folder, no {user_config_path()}"
    return f"{ENV_VARS[key]} is not set, {files}"


def load_config(path: Path | None = None) -> Config:
    """The settings of ``path`` (default: :func:`config_path`); paths made absolute against the file's folder."""
    path = config_path() if path is None else path
    if path is None or not path.exists():
        return Config(path, {})
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not an evalfarm config file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); a config file is TOML") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)} (known: {', '.join(KEYS)})")
    return Config(path, {key: _file_value(path, key, value) for key, value in raw.items()})


def _file_value(path: Path, key: str, value: object) -> str:
    """A config file's value of ``key`` as text, checked, its paths absolute against the file's folder."""
    if key in _NUMBER_KEYS and isinstance(value, int | float) and not isinstance(value, bool):
        value = f"{value:g}" if isinstance(value, float) else str(value)  # TOML's number, as well as "600"
    if not isinstance(value, str):
        raise ConfigError(f"{path}: {key} must be a string, got {type(value).__name__}")
    if why := check_value(key, value):
        raise ConfigError(f"{path}: {why}")
    if _is_path(key, value):
        return str((path.parent / Path(value).expanduser()).resolve())
    if key in PATH_LIST_KEYS:
        return _path_list(value, path.parent)
    return value


def write_target(file: str | os.PathLike[str] | None = None, *, user: bool = False) -> Path:
    """The file ``evalfarm config set`` writes: ``file``, else the user-level file (``user``), else
    ``$EVALFARM_CONFIG``, else ``./.evalfarm.toml``."""
    if file is not None:
        return Path(file).expanduser()
    if user:
        return user_config_path()
    return Path(os.environ[ENV]).expanduser() if os.environ.get(ENV) else Path(FILE_NAME)


def write_config(path: Path, updates: dict[str, str]) -> Config:
    """Set ``updates`` in ``path`` (created if needed, other keys kept); paths are stored absolute."""
    unknown = sorted(set(updates) - set(KEYS))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(KEYS)})")
    current = load_config(path).values if path.exists() else {}
    for key, value in updates.items():
        if why := check_value(key, value):
            raise ConfigError(why)
        if _is_path(key, value):
            value = str(Path(value).expanduser().resolve())
        elif key in PATH_LIST_KEYS:
            value = _path_list(value, Path.cwd())
        current[key] = value
    lines = [
        "# evalfarm settings (written by `evalfarm config set`, e.g. from `make run`); see `evalfarm config --help`",
        *(f"{k} = {json.dumps(current[k])}" for k in KEYS if k in current),
    ]
    atomic.write_text(path, "\n".join(lines) + "\n")
    return load_config(path)


PathOrStr = str | os.PathLike[str]


@dataclass(frozen=True)
class Settings:
    """The settings a command or an API call runs with (see the module docstring for the order of precedence).

    ``data``: the evaluation data folder, None for "download the tasks into the cache"; ``warehouse``: a path or a
    pyarrow URI; ``catalog``: a catalog name or path; ``config_file``: the file that applies (None: none);
    ``sources``: where each value came from: :data:`OPTION`, an environment variable's name, the file's path, or
    :data:`DEFAULT`."""

    data: Path | None
    warehouse: str
    catalog: str
    config_file: Path | None = None
    sources: Mapping[str, str] = field(default_factory=dict)
    sql_timeout: str = DEFAULTS["sql_timeout"]
    sql_memory_limit: str = DEFAULT_SQL_MEMORY_LIMIT
    notify: str = ""  # the end-of-run hook (evalfarm.notify): a shell command, '' for none
    sql_max_rows: str = DEFAULTS["sql_max_rows"]
    sql_max_bytes: str = DEFAULT_SQL_MAX_BYTES
    model_paths: str = ""
    archive_max_size: str = DEFAULT_ARCHIVE_MAX_SIZE
    archive_max_ratio: str = DEFAULTS["archive_max_ratio"]
    archive_max_members: str = DEFAULTS["archive_max_members"]
    refused: tuple[str, ...] = ()
    """Config files, or settings of one, not used (:func:`find_config`, :data:`TRUSTED_ONLY`): a line each."""

    def _checked(self, *keys: str) -> None:
        """A malformed value (from the environment: the file's are checked when it is read) is a
        :class:`ConfigError` naming where it came from."""
        for key in keys:
            if why := check_value(key, getattr(self, key)):
                raise ConfigError(f"{self.sources.get(key, DEFAULT)}: {why}")

    def sql_limits(self) -> tuple[float, str]:
        """``(timeout_s, memory_limit)`` of a read-only query (a timeout of 0: none)."""
        self._checked("sql_timeout", "sql_memory_limit")
        return float(self.sql_timeout), self.sql_memory_limit.strip()

    def sql_result_limits(self) -> tuple[int, int]:
        """``(max_rows, max_bytes)`` of a read-only query's result (0: no limit)."""
        self._checked("sql_max_rows", "sql_max_bytes")
        return int(self.sql_max_rows), parse_size(self.sql_max_bytes)

    def _to_export(self) -> dict[str, str]:
        """Environment variable -> value for each setting of :data:`EXPORTED` that needs exporting: not where the
        environment already holds it, and not a default (the readers' own)."""
        out: dict[str, str] = {}
        for key in EXPORTED:
            if self.sources.get(key, DEFAULT) in (DEFAULT, ENV_VARS[key]):
                continue
            if key == "data":
                out[ENV_VARS[key]] = str(self.data) if self.data is not None else ""
            else:
                out[ENV_VARS[key]] = getattr(self, key)
        return out

    def export_data(self) -> None:
        """Set ``EVALFARM_DATA`` and the other worker-side settings (:data:`EXPORTED`) for the rest of this process
        (the CLI: one command per process); the task and model readers and the Ray workers read them there."""
        self._checked(*EXPORTED[2:])
        os.environ.update(self._to_export())

    @contextlib.contextmanager
    def data_exported(self) -> Iterator[None]:
        """``EVALFARM_DATA`` and the other worker-side settings set for the duration of a block (an API call),
        restored after it."""
        self._checked(*EXPORTED[2:])
        values = self._to_export()
        before = {name: os.environ.get(name) for name in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for name, old in before.items():
                if old is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = old

    def rows(self) -> list[dict[str, str]]:
        """One row per setting (``key``, ``value``, ``from``), what ``evalfarm config show`` prints."""
        data = str(self.data) if self.data is not None else ""
        values = {key: getattr(self, key) for key in KEYS} | {"data": data}
        rows = []
        for key in KEYS:
            src = self.sources.get(key, DEFAULT)
            if src == DEFAULT:
                shown = "(not set: tasks download into the cache)" if key == "data" else "(default)"
            elif src == ENV_VARS[key]:
                shown = f"{src} (wins over the file)"
            else:
                shown = src
            rows.append({"key": key, "value": values[key], "from": shown})
        return rows


def _choose(
    given: Mapping[str, PathOrStr | None], file_values: Mapping[str, str], path: Path | None
) -> tuple[dict[str, str], dict[str, str]]:
    """Each key's value and where it came from: ``given`` (not None), its environment variable, the config file
    at ``path`` (``file_values``), the default."""
    chosen: dict[str, str] = {}
    sources: dict[str, str] = {}
    for key in KEYS:
        raw = given.get(key)
        if raw is not None:
            value, source = os.fspath(raw), OPTION
            if key == "data" and value:
                value = str(Path(value).expanduser().resolve())  # absolute: workers may start elsewhere
        elif ENV_VARS[key] in os.environ:
            value, source = os.environ[ENV_VARS[key]], ENV_VARS[key]
        elif key in file_values:
            value, source = file_values[key], str(path)
        else:
            value, source = DEFAULTS[key], DEFAULT
        chosen[key], sources[key] = value, source
    return chosen, sources


def resolve_settings(
    *,
    data: PathOrStr | None = None,
    warehouse: PathOrStr | None = None,
    catalog: PathOrStr | None = None,
    config_file: PathOrStr | None = None,
    cwd: Path | None = None,
    sql_timeout: float | str | None = None,
    sql_memory_limit: str | None = None,
    notify: str | None = None,
    sql_max_rows: int | str | None = None,
    sql_max_bytes: str | None = None,
) -> Settings:
    """The settings: each of ``data``, ``warehouse``, ``catalog``, ``sql_timeout`` (seconds, 0: none),
    ``sql_memory_limit``, ``sql_max_rows`` and ``sql_max_bytes`` (0: none) given here (not None) wins, then its
    environment variable (:data:`ENV_VARS`), then the config file (``config_file``, else :func:`config_path` from
    ``cwd``), then the default. ``data=""`` means "download the tasks into the cache". Raises :class:`ConfigError`
    for a config file that cannot be read."""
    found = Discovery(Path(config_file).expanduser()) if config_file is not None else find_config(cwd)
    path, refused = found.path, list(found.refused)
    file_values = load_config(path).values if path is not None else {}
    if path is not None and path.exists() and not owns(path):
        for key in [k for k in TRUSTED_ONLY if k in file_values]:
            del file_values[key]
            refused.append(
                f"{key} in {path}: refused, the file is not yours ({_owner(path.stat().st_uid)}); {key} is taken "
                f"only from your own file, {ENV_VARS[key]} or the command line"
            )
    for line in refused:
        if line not in _WARNED:  # once a process: a command resolves its settings more than once
            _WARNED.add(line)
            log.warning("%s", line)
    given = {
        "data": data,
        "warehouse": warehouse,
        "catalog": catalog,
        "sql_timeout": f"{sql_timeout:g}" if isinstance(sql_timeout, int | float) else sql_timeout,
        "sql_memory_limit": sql_memory_limit,
        "notify": notify,
        "sql_max_rows": None if sql_max_rows is None else str(sql_max_rows),
        "sql_max_bytes": sql_max_bytes,
    }
    chosen, sources = _choose(given, file_values, path)
    return Settings(
        data=Path(chosen["data"]).expanduser() if chosen["data"] else None,
        warehouse=chosen["warehouse"] or DEFAULT_WAREHOUSE,
        catalog=chosen["catalog"] or DEFAULT_CATALOG,
        config_file=path,
        sources=sources,
        sql_timeout=chosen["sql_timeout"].strip() or DEFAULTS["sql_timeout"],
        sql_memory_limit=chosen["sql_memory_limit"].strip() or DEFAULT_SQL_MEMORY_LIMIT,
        notify=chosen["notify"].strip(),
        sql_max_rows=chosen["sql_max_rows"].strip() or DEFAULTS["sql_max_rows"],
        sql_max_bytes=chosen["sql_max_bytes"].strip() or DEFAULTS["sql_max_bytes"],
        model_paths=chosen["model_paths"].strip(),
        archive_max_size=chosen["archive_max_size"].strip() or DEFAULTS["archive_max_size"],
        archive_max_ratio=chosen["archive_max_ratio"].strip() or DEFAULTS["archive_max_ratio"],
        archive_max_members=chosen["archive_max_members"].strip() or DEFAULTS["archive_max_members"],
        refused=tuple(refused),
    )
