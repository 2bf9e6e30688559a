"""The cache folder (issue 24): EVALFARM_CACHE, else the platform's user cache folder, XDG_CACHE_HOME respected."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evalfarm.cache import cache_dir


def test_evalfarm_cache_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "mine"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the XDG rules are Linux's")
def test_xdg_cache_home_is_respected_and_the_default_is_unchanged(tmp_path, monkeypatch):
    monkeypatch.delenv("EVALFARM_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "evalfarm"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "evalfarm"  # where it always was
    assert isinstance(cache_dir(), Path)
