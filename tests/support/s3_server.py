"""A local S3-compatible object store for tests and benchmarks (issue 25): moto's server mode on loopback.

``s3_server()`` starts :mod:`tests.support.s3_serve` (moto's S3, bound to 127.0.0.1 on a free port, with a
request count) under an interpreter that has ``moto[server]``: ``$EVALFARM_TEST_S3_PYTHON`` when set, else the
checkout's ``.venv-s3`` (``make test`` and ``make install-dev`` build it from constraints-s3.txt), else the first of
``python3.11`` / ``python3`` on the PATH that imports it. moto cannot live in evalfarm's venv (it needs
botocore, whose python-dateutil bound conflicts with evalfarm's pinned python-dateutil), so it is a separate
process under its own Python, as a real object store is a separate service. Without such an interpreter the
tests that need it skip, naming what to install (``make s3-venv``).

Credentials and endpoint reach evalfarm as they reach any S3 client: ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_REGION`` in the environment (:attr:`S3Server.env`);
the warehouse is then a plain ``s3://bucket/prefix`` URI.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SERVE = Path(__file__).with_name("s3_serve.py")
PYTHON_ENV = "EVALFARM_TEST_S3_PYTHON"
INSTALL_HINT = "an interpreter with moto's server (make s3-venv), or set " + PYTHON_ENV


@functools.cache
def moto_python() -> str | None:
    """The interpreter that runs the server, or None when none on this machine has ``moto[server]``."""
    chosen = os.environ.get(PYTHON_ENV)
    own = Path(__file__).resolve().parents[2] / ".venv-s3" / "bin" / "python"  # `make test` builds it
    candidates = (
        [chosen] if chosen else [str(own), *(shutil.which(n) for n in ("python3.11", "python3", "python3.12"))]
    )
    for exe in filter(None, candidates):
        probe = subprocess.run(
            [exe, "-c", "import moto.server, werkzeug.serving"], capture_output=True, timeout=60, check=False
        )
        if probe.returncode == 0:
            return exe
    return None


@dataclass
class S3Server:
    """A running server: its endpoint, the environment a client needs, and its request counts."""

    endpoint: str
    proc: subprocess.Popen[str]
    env: dict[str, str] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Requests by kind (ListObjects, GetObject, HeadObject, PutObject, …) since start or :meth:`reset`."""
        with urllib.request.urlopen(f"{self.endpoint}/_evalfarm/requests", timeout=10) as r:
            return dict(json.loads(r.read()))

    def reset(self) -> None:
        req = urllib.request.Request(f"{self.endpoint}/_evalfarm/requests", method="DELETE")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name`` (idempotent) and return ``s3://name``."""
        import pyarrow.fs as pafs

        scheme, host = self.endpoint.split("://")
        fs = pafs.S3FileSystem(
            endpoint_override=host,
            scheme=scheme,
            access_key=self.env["AWS_ACCESS_KEY_ID"],
            secret_key=self.env["AWS_SECRET_ACCESS_KEY"],
            region=self.env["AWS_REGION"],
            allow_bucket_creation=True,
        )
        fs.create_dir(name)
        return f"s3://{name}"


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def client_env(endpoint: str) -> dict[str, str]:
    """What a user exports to point evalfarm (pyarrow's S3 client) at the server."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "evalfarm-test",
        "AWS_SECRET_ACCESS_KEY": "evalfarm-test-secret",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@contextlib.contextmanager
def s3_server() -> Iterator[S3Server]:
    """Start the server (a few seconds), yield it, stop it (its own process session only)."""
    exe = moto_python()
    if exe is None:
        raise RuntimeError(f"no S3 test server: needs {INSTALL_HINT}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTHON"))}
    proc = subprocess.Popen(
        [exe, str(SERVE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"the S3 test server did not start (said {line!r})")
        endpoint = f"http://127.0.0.1:{int(line.split()[1])}"
        yield S3Server(endpoint, proc, client_env(endpoint))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
