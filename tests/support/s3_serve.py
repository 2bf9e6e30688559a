"""A local S3-compatible server for tests and benchmarks: moto's server mode, with a count of its requests.

Run by :mod:`tests.support.s3_server` under an interpreter that has ``moto[server]`` (never evalfarm's venv:
moto needs botocore, whose python-dateutil bound conflicts with evalfarm's pins), so this file imports nothing
from evalfarm or the tests. It binds 127.0.0.1 on a free port, prints ``PORT <n>`` on one line when it listens,
and serves until SIGTERM. ``GET /_evalfarm/requests`` answers the count of S3 requests by kind (ListObjects,
GetObject, HeadObject, PutObject, …) since start or since the last ``DELETE /_evalfarm/requests``: the object-store
request counts per unit of benchmarks/README.md's capacity model are measured with it.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from typing import Any

from moto.server import DomainDispatcherApplication, create_backend_app  # type: ignore[import-not-found]
from werkzeug.serving import make_server  # type: ignore[import-not-found]

COUNTS: Counter[str] = Counter()
LOCK = threading.Lock()


def kind(environ: dict[str, Any]) -> str:
    """The S3 operation of a request, from its method, path and query (path-style addressing)."""
    method = environ["REQUEST_METHOD"]
    query = environ.get("QUERY_STRING", "")
    path = environ.get("PATH_INFO", "/").strip("/")
    on_object = "/" in path
    if method == "GET":
        if not on_object:
            return "ListObjects" if path else "ListBuckets"
        return "GetObject"
    if method == "HEAD":
        return "HeadObject" if on_object else "HeadBucket"
    if method == "PUT":
        if "partNumber=" in query:
            return "UploadPart"
        if environ.get("HTTP_X_AMZ_COPY_SOURCE"):
            return "CopyObject"
        return "PutObject" if on_object else "CreateBucket"
    if method == "POST":
        if "uploads" in query.split("&"):
            return "CreateMultipartUpload"
        if "uploadId=" in query:
            return "CompleteMultipartUpload"
        return "DeleteObjects" if "delete" in query else "Post"
    if method == "DELETE":
        return "DeleteObject" if on_object else "DeleteBucket"
    return method


def fixed_completion(app: Any, environ: dict[str, Any], start_response: Any) -> Any:
    """Answer CompleteMultipartUpload with the root element S3 uses, ``CompleteMultipartUploadResult``: moto 5.2's
    serializer names it ``…Response``, which the AWS C++ SDK of pyarrow reads as an error embedded in a 200."""
    got: list[Any] = []

    def keep(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        got.append((status, headers))
        return lambda data: None

    body = b"".join(app(environ, keep))
    body = body.replace(b"CompleteMultipartUploadResponse", b"CompleteMultipartUploadResult")
    status, headers = got[0]
    headers = [(k, str(len(body)) if k.lower() == "content-length" else v) for k, v in headers]
    start_response(status, headers)
    return [body]


def counting(app: Any) -> Any:
    def wrapped(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO", "").startswith("/_evalfarm/requests"):
            with LOCK:
                body = json.dumps(dict(COUNTS), sort_keys=True).encode()
                if environ["REQUEST_METHOD"] == "DELETE":
                    COUNTS.clear()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        what = kind(environ)
        with LOCK:
            COUNTS[what] += 1
        if what != "CompleteMultipartUpload":
            return app(environ, start_response)
        return fixed_completion(app, environ, start_response)

    return wrapped


def main() -> None:
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", 0, counting(app), threaded=True)
    print(f"PORT {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
