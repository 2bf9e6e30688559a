"""The environment variables that travel: the one list of what workers and jobs get from the driver's environment.

- :data:`WORKER_ENV`: what a worker actor on another node needs to do the driver's work: where the evaluation data
  and the cache live, the folders ``path`` model sources may read, the limits of an unpacked model archive, and the
  modes (hub offline, plain-http opt-in). ``evalfarm run`` forwards the ones set in its
  environment to its workers (a job's own env vars already reach every task of the job: then nothing is sent again).
- :data:`SUBMIT_ENV`: the variables ``evalfarm submit`` forwards from the submitting machine's environment to the
  job: modes only. The data folder is sent on its own terms (the resolved setting, by default, said in the plan:
  evalfarm.submit); ``EVALFARM_CACHE`` is a path on the submitter's machine and is never sent.
"""

from __future__ import annotations

import os

MODE_ENV: tuple[str, ...] = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "EVALFARM_ALLOW_HTTP")
"""Modes, not paths: the hub's offline switches, and the opt-in to plain-http downloads (evalfarm.cache.check_url),
which must hold where the catalog is validated and the files are fetched, on the workers and in a submitted job."""
LIMIT_ENV: tuple[str, ...] = (
    "EVALFARM_ARCHIVE_MAX_SIZE",
    "EVALFARM_ARCHIVE_MAX_RATIO",
    "EVALFARM_ARCHIVE_MAX_MEMBERS",
)
"""The limits of an unpacked model archive (evalfarm.encoders.archives): they hold wherever a model is loaded."""
WORKER_ENV: tuple[str, ...] = (
    "EVALFARM_DATA",
    "EVALFARM_CACHE",
    "EVALFARM_MODEL_PATHS",
    "HF_HOME",
    *LIMIT_ENV,
    *MODE_ENV,
)
SUBMIT_ENV: tuple[str, ...] = MODE_ENV


def forwarded(names: tuple[str, ...]) -> dict[str, str]:
    """The variables of ``names`` that are set (non-empty) in this process's environment."""
    return {k: os.environ[k] for k in names if os.environ.get(k)}


QUIET_BARS_ENV: dict[str, str] = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}
"""Third-party progress bars off (the hub's and transformers' ``Loading weights``, every tqdm): in a log they are
carriage returns and noise; a run shows its own progress. Set only where the user has not set them."""


def quiet_third_party_bars() -> None:
    """Turn the third-party progress bars off in this process and those it starts (a local Ray's workers inherit
    its environment): :data:`QUIET_BARS_ENV` where unset, and the libraries' own switches when they are imported
    already (they read the variables once, at import)."""
    import sys

    for key, value in QUIET_BARS_ENV.items():
        os.environ.setdefault(key, value)
    if os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS") != "1":
        return
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
