"""A folder served over plain http on 127.0.0.1, for tests of downloads (evalfarm fetches only http(s) URLs).

``serve(folder)`` yields the base URL (``http://127.0.0.1:<port>``); the server thread stops on exit. Plain http is
refused unless ``EVALFARM_ALLOW_HTTP=1``: the tests that download set it (monkeypatch), which is the documented
opt-in, not a way around the check.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` read-only on a free loopback port; yields ``http://127.0.0.1:<port>``."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def url_of(base: str, folder: Path, path: Path) -> str:
    """The URL of ``path`` (a file inside the served ``folder``)."""
    return f"{base}/{path.relative_to(folder).as_posix()}"
