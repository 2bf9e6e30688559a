"""The end-of-run hook: a command that receives a run's end summary as JSON on stdin (``evalfarm run --notify CMD``,
the config key ``notify``, ``EVALFARM_NOTIFY``), so a nightly tells its owner what happened where the team works.

The command runs through the shell (``sh -c``), in the driver's environment plus ``EVALFARM_RUN_ID``,
``EVALFARM_RUN_STATUS`` (``ok`` | ``failed`` | ``interrupted``) and ``EVALFARM_EXIT_CODE`` (what ``evalfarm run``
exits with); its stdin is the summary (:meth:`evalfarm.runner.Run.end_report`), one JSON object. A webhook:

    evalfarm run --notify 'curl -fsS -H "Content-Type: application/json" --data-binary @- "$WEBHOOK_URL"'

A value that is a URL (``https://…``, ``http://…``) is posted to instead, the summary as the JSON body (with a
one-line ``text`` field, which chat webhooks such as Slack's and Mattermost's show): no command to quote in a
manifest, the URL kept in a Secret (cluster/kuberay/rayjob-nightly.yaml).

A hook that fails, or runs past :data:`NOTIFY_TIMEOUT_S`, is a warning: the run's own exit status stays what the run
says (a nightly's failed post must not hide, or fake, the evaluation's result).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any

NOTIFY_TIMEOUT_S = 120.0
"""How long the hook may run before it is stopped (a webhook that hangs must not hold a nightly's pod)."""


@dataclass(frozen=True)
class Notified:
    """What the hook did: its command, exit status (None: stopped at the timeout or could not start), seconds, the
    last lines it printed (stdout and stderr)."""

    command: str
    returncode: int | None
    seconds: float
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        """One line: ``notified: CMD (exit 0, 0.3s)`` or why it did not work."""
        what = "timed out" if self.returncode is None else f"exit {self.returncode}"
        tail = f": {self.output.strip().splitlines()[-1]}" if not self.ok and self.output.strip() else ""
        return f"notify hook {self.command!r}: {what} after {self.seconds:.1f}s{tail}"


def headline(report: dict[str, Any]) -> str:
    """The summary in one line: ``evalfarm run R on HOST: failed · 286 done, 0 skipped, 2 failed in 37m12s``."""
    c = report.get("counts") or {}
    wall = float(report.get("wall_s") or 0.0)
    took = f"{int(wall // 60)}m{int(wall % 60):02d}s" if wall >= 60 else f"{wall:.0f}s"
    return (
        f"evalfarm run {report.get('run_id', '?')} on {report.get('host', '?')}: {report.get('status', '?')} · "
        f"{c.get('done', 0)} done, {c.get('skipped', 0)} skipped, {c.get('failed', 0)} failed in {took}"
    )


def is_url(value: str) -> bool:
    return value.startswith(("https://", "http://")) and not any(ch.isspace() for ch in value)


def post(url: str, report: dict[str, Any], *, timeout: float = NOTIFY_TIMEOUT_S) -> Notified:
    """POST the summary (and its ``text`` headline) as JSON to ``url``."""
    import urllib.error
    import urllib.request

    body = json.dumps({"text": headline(report), **report}, default=str).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # the operator's own URL
            return Notified(url, 0 if 200 <= resp.status < 300 else resp.status, time.monotonic() - t0)
    except urllib.error.HTTPError as exc:
        return Notified(url, exc.code, time.monotonic() - t0, f"HTTP {exc.code} {exc.reason}")
    except (urllib.error.URLError, OSError) as exc:
        return Notified(url, None if isinstance(exc, TimeoutError) else 1, time.monotonic() - t0, str(exc))


def notify(command: str, report: dict[str, Any], *, timeout: float = NOTIFY_TIMEOUT_S) -> Notified:
    """Run ``command`` with ``report`` as JSON on stdin, or post it to ``command`` when that is a URL (see the module
    docstring); never raises for the hook's own failure."""
    if is_url(command):
        return post(command, report, timeout=timeout)
    env = {
        **os.environ,
        "EVALFARM_RUN_ID": str(report.get("run_id", "")),
        "EVALFARM_RUN_STATUS": str(report.get("status", "")),
        "EVALFARM_EXIT_CODE": str(report.get("exit_code", "")),
    }
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            command,
            shell=True,
            input=json.dumps(report, default=str) + "\n",
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        text = out.decode(errors="replace") if isinstance(out, bytes) else str(out)
        return Notified(command, None, time.monotonic() - t0, text[-2000:])
    except OSError as exc:  # no shell, a command that cannot start
        return Notified(command, 127, time.monotonic() - t0, str(exc))
    return Notified(command, proc.returncode, time.monotonic() - t0, (proc.stdout + proc.stderr)[-2000:])
