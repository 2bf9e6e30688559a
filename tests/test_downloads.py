"""Downloads through pooch (issue 24): retried, verified, atomic, and no redirect to a scheme evalfarm refuses.

The loopback server speaks plain http, so these tests set the documented opt-in ``EVALFARM_ALLOW_HTTP=1``; an
https -> http downgrade is checked on the redirect hook itself (no TLS server here).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import requests

from evalfarm import cache
from evalfarm.cache import ChecksumMismatch, UnsafeLocation, download
from tests.support.http_files import requests_of, serve

BODY = b"a\tb\nc\td\n"
SHA = hashlib.sha256(BODY).hexdigest()


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "served"
    folder.mkdir()
    (folder / "pairs.txt").write_bytes(BODY)
    monkeypatch.setenv("EVALFARM_ALLOW_HTTP", "1")
    return folder


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*")) if folder.exists() else []


def test_a_failed_request_is_retried(served, tmp_path, monkeypatch):
    dest = tmp_path / "cache" / "pairs.txt"
    with serve(served, failures=1) as base:  # the first GET answers 503, the retry (after 1 s) the file
        assert download(f"{base}/pairs.txt", dest, SHA) == SHA
        assert requests_of(base) == ["/pairs.txt", "/pairs.txt"]
    assert dest.read_bytes() == BODY and _files(dest.parent) == ["pairs.txt"]
    monkeypatch.setattr(cache, "DOWNLOAD_RETRIES", 0)
    with serve(served, failures=1) as base, pytest.raises(OSError, match="503"):
        download(f"{base}/pairs.txt", tmp_path / "once" / "pairs.txt", SHA)
    assert _files(tmp_path / "once") == []  # nothing half-written is left


def test_a_checksum_mismatch_names_the_url_and_both_hashes_and_keeps_nothing(served, tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "DOWNLOAD_RETRIES", 0)  # a mismatch is retried too (1 s, 2 s): one answer is enough
    dest = tmp_path / "cache" / "pairs.txt"
    with serve(served) as base:
        url = f"{base}/pairs.txt"
        with pytest.raises(ChecksumMismatch) as err:
            download(url, dest, "0" * 64)
    said = str(err.value)
    assert url in said and SHA in said and "0" * 64 in said, said
    assert _files(dest.parent) == []


@pytest.mark.parametrize("target", ["file", "ftp://127.0.0.1:9/secret.txt", "gopher://127.0.0.1:9/x"])
def test_a_redirect_to_a_refused_scheme_is_not_followed(served, tmp_path, target):
    """A server evalfarm may fetch from answers 302 to file://, ftp://: refused before any request, not retried."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET\n")
    location = secret.as_uri() if target == "file" else target
    dest = tmp_path / "cache" / "pairs.txt"
    with serve(served, redirects={"/pairs.txt": location}) as base:
        with pytest.raises(UnsafeLocation, match="redirects to") as err:
            download(f"{base}/pairs.txt", dest, hashlib.sha256(secret.read_bytes()).hexdigest())
        assert requests_of(base) == ["/pairs.txt"]  # no retry of a refusal
    assert "only https" in str(err.value)
    assert _files(dest.parent) == []


def test_an_allowed_redirect_is_followed(served, tmp_path):
    dest = tmp_path / "cache" / "moved.txt"
    with serve(served, redirects={"/moved.txt": "/pairs.txt"}) as base:
        assert download(f"{base}/moved.txt", dest) == SHA  # no checksum given: the bytes' hash is returned
        assert requests_of(base) == ["/moved.txt", "/pairs.txt"]
    assert dest.read_bytes() == BODY


def _redirect(url: str, location: str) -> requests.Response:
    r = requests.Response()
    r.status_code = 302
    r.url = url
    r.headers["location"] = location
    return r


def test_an_https_to_http_redirect_is_refused_without_the_opt_in(monkeypatch):
    """The downgrade: requests calls the hook on the 302 before following it (the live tests above show it runs)."""
    monkeypatch.delenv("EVALFARM_ALLOW_HTTP", raising=False)
    hook = cache.check_redirect
    with pytest.raises(Exception, match="redirects to 'http://evil.example/x'") as err:
        hook(_redirect("https://data.example/a", "http://evil.example/x"))
    assert isinstance(err.value.error, UnsafeLocation)  # re-raised as this by download
    for ok in ("/b", "https://mirror.example/a", "//mirror.example/a"):
        assert hook(_redirect("https://data.example/a", ok)).status_code == 302
    with pytest.raises(Exception, match="redirects to 'http://mirror.example/a'"):  # scheme-relative from http
        hook(_redirect("http://data.example/a", "//mirror.example/a"))
    monkeypatch.setenv("EVALFARM_ALLOW_HTTP", "1")
    assert hook(_redirect("https://data.example/a", "http://mirror.example/x")).status_code == 302
