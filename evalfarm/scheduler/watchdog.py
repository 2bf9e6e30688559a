"""The watchdog of a driver that started its own local Ray: when the driver dies, its Ray's leftovers go too.

A driver killed with SIGKILL runs no ``atexit`` handler: its GCS and raylet die with it (Ray shares their fate with
the driver), but Ray's dashboard and runtime-env agents live on, re-parented to init, and its private token folder
stays in the temp folder. :func:`evalfarm.scheduler.ray_executor.connect` therefore starts this small process (in a
session of its own, so that a Ctrl-C or a kill of the driver's process group does not reach it) with a pipe whose
only write end the driver holds. The pipe reads end-of-file when the driver is gone, however it ended; the watchdog
then kills every process of this user whose environment carries the driver's token path (every process the driver's
Ray started inherits ``RAY_AUTH_TOKEN_PATH``, which is unique to that driver), and removes the token folder. After a
normal exit there is nothing left to kill (``ray.shutdown`` ran), and the folder is already gone.

    python -m evalfarm.scheduler.watchdog <token folder> <token path>    # stdin: the driver's pipe
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time

KILL_FOR_S = 10.0
"""How long the watchdog keeps looking for the Ray's processes after the driver's death: the raylet may still start
a worker, or take a moment to notice its GCS is gone."""
QUIET_S = 1.0
"""The watchdog is done once it has seen none of them for this long."""


def marked(marker: bytes) -> list[int]:
    """The pids of this user's processes (not this one) whose environment holds ``marker`` (Linux ``/proc``)."""
    me, uid = os.getpid(), os.getuid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read()
        except OSError:  # gone, or not ours to read
            continue
        if marker in env.split(b"\0"):
            found.append(int(name))
    return found


def clean_up(folder: str, token_path: str) -> list[int]:
    """Kill what is left of the dead driver's Ray (SIGKILL: it has no driver to serve), then remove its token
    folder; returns the pids killed."""
    marker = f"RAY_AUTH_TOKEN_PATH={token_path}".encode()
    killed: list[int] = []
    deadline = time.monotonic() + KILL_FOR_S
    quiet_since: float | None = None
    while time.monotonic() < deadline:
        pids = marked(marker)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
        now = time.monotonic()
        if pids:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= QUIET_S:
            break
        time.sleep(0.2)
    shutil.rmtree(folder, ignore_errors=True)
    return killed


def main(argv: list[str]) -> int:
    folder, token_path = argv[1], argv[2]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the driver's to handle
    while sys.stdin.buffer.read(1 << 12):  # blocks; b"" once the driver, the only writer, is gone
        pass
    clean_up(folder, token_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
