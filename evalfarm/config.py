"""Settings the CLI remembers between shells: where the evaluation data is, which warehouse and catalog to use.

``make run`` writes them (``evalfarm config set data=… warehouse=… catalog=…``) into ``.evalfarm.toml`` in the
checkout, so the commands the README shows next work in a fresh shell, without ``EVALFARM_DATA`` or
``--warehouse``. The file that applies is the first of:

1. ``$EVALFARM_CONFIG`` (a path; empty: no file at all),
2. ``.evalfarm.toml`` in the current folder or the nearest parent that has one (like ``pyproject.toml``),
3. ``$XDG_CONFIG_HOME/evalfarm/config.toml`` (default ``~/.config/evalfarm/config.toml``).

Keys (all optional; relative paths are relative to the file's folder):

- ``data``: the evaluation data folder, used when ``EVALFARM_DATA`` is not set (the environment wins); an empty
  string means "download the tasks into the cache", as an empty ``EVALFARM_DATA`` does.
- ``warehouse``: the default of ``--warehouse`` for ``run`` and ``sql``.
- ``catalog``: the default of ``--catalog`` for ``run``, ``catalog list`` and ``catalog validate``.

A command-line option always wins over the file. ``evalfarm config show`` prints which file applies and what it sets.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from evalfarm import atomic

ENV = "EVALFARM_CONFIG"
FILE_NAME = ".evalfarm.toml"
KEYS = {
    "data": "evaluation data folder, used when EVALFARM_DATA is unset ('' = download into the cache)",
    "warehouse": "default --warehouse of `run` and `sql`",
    "catalog": "default --catalog of `run`, `catalog list` and `catalog validate`",
}
PATH_KEYS = ("data", "warehouse")


class ConfigError(ValueError):
    """A config file that cannot be read or holds something evalfarm does not know; the message names the file."""


@dataclass
class Config:
    path: Path | None  # the file that applies (None: none)
    values: dict[str, str] = field(default_factory=dict)


def config_path(cwd: Path | None = None) -> Path | None:
    """The config file that applies (see the module docstring), or None; the file need not exist for 1."""
    env = os.environ.get(ENV)
    if env is not None:
        return Path(env).expanduser() if env else None
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        cand = folder / FILE_NAME
        if cand.is_file():
            return cand
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    cand = Path(xdg).expanduser() / "evalfarm" / "config.toml"
    return cand if cand.is_file() else None


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
    values: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(value, str):
            raise ConfigError(f"{path}: {key} must be a string, got {type(value).__name__}")
        if key in PATH_KEYS and value and "://" not in value:
            value = str((path.parent / Path(value).expanduser()).resolve())
        values[key] = value
    return Config(path, values)


def apply_data_dir(config: Config) -> None:
    """Export the file's ``data`` as ``EVALFARM_DATA`` unless the environment sets it (workers inherit it)."""
    if "data" in config.values and "EVALFARM_DATA" not in os.environ:
        os.environ["EVALFARM_DATA"] = config.values["data"]


def write_config(path: Path, updates: dict[str, str]) -> Config:
    """Set ``updates`` in ``path`` (created if needed, other keys kept); paths are stored absolute."""
    unknown = sorted(set(updates) - set(KEYS))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(KEYS)})")
    current = load_config(path).values if path.exists() else {}
    for key, value in updates.items():
        if key in PATH_KEYS and value and "://" not in value:
            value = str(Path(value).expanduser().resolve())
        current[key] = value
    lines = [
        "# evalfarm settings (written by `evalfarm config set`, e.g. from `make run`); see `evalfarm config --help`",
        *(f"{k} = {json.dumps(current[k])}" for k in KEYS if k in current),
    ]
    atomic.write_text(path, "\n".join(lines) + "\n")
    return load_config(path)
