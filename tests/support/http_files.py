"""A folder served over plain http on 127.0.0.1, for tests of downloads (evalfarm fetches only http(s) URLs).

``serve(folder)`` yields the base URL (``http://127.0.0.1:<port>``); the server thread stops on exit. Plain http is
refused unless ``EVALFARM_ALLOW_HTTP=1``: the tests that download set it (monkeypatch), which is the documented
opt-in, not a way around the check. ``serve(folder, failures=n, redirects={...})`` answers the first ``n`` GETs with
503 (a flaky server: retries) and the listed paths with a 302 (redirect attacks); ``requests_of(base)`` lists the
paths each server was asked for.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_SEEN: dict[str, list[str]] = {}


class _Quiet(SimpleHTTPRequestHandler):
    failures = 0
    redirects: dict[str, str] = {}
    seen: list[str] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(self.path)
        if len(self.seen) <= self.failures:
            self.send_error(503, "try again")
        elif self.path in self.redirects:
            self.send_response(302)
            self.send_header("Location", self.redirects[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            super().do_GET()


@contextmanager
def serve(folder: Path, *, failures: int = 0, redirects: dict[str, str] | None = None) -> Iterator[str]:
    """Serve ``folder`` read-only on a free loopback port; yields ``http://127.0.0.1:<port>``. The first
    ``failures`` GETs get a 503; a GET of a path in ``redirects`` (``/name``) a 302 to its value."""
    seen: list[str] = []
    cls = type("_Handler", (_Quiet,), {"failures": failures, "redirects": dict(redirects or {}), "seen": seen})
    handler = functools.partial(cls, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    _SEEN[base] = seen
    try:
        yield base
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        _SEEN.pop(base, None)


def requests_of(base: str) -> list[str]:
    """The paths the server at ``base`` was asked for so far (GETs, in order), while it serves."""
    return list(_SEEN[base])


def url_of(base: str, folder: Path, path: Path) -> str:
    """The URL of ``path`` (a file inside the served ``folder``)."""
    return f"{base}/{path.relative_to(folder).as_posix()}"
