#!/usr/bin/env bash
# Stop the Ray processes this user started on this workstation (`ray stop`: every local Ray node of the user,
# which on a workstation is the head from start-head.sh). Pass --force to SIGKILL stragglers.
set -euo pipefail
export RAY_USAGE_STATS_ENABLED=0
if ! command -v ray >/dev/null 2>&1; then
  echo "error: 'ray' is not on PATH; activate the evalfarm environment first (. .venv/bin/activate)" >&2
  exit 2
fi
ray stop "$@"
