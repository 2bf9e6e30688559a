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
# the head's token (start-head.sh makes a new one for the next head)
RAY_DIR="${EVALFARM_RAY_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/evalfarm/ray}"
rm -f "$RAY_DIR/auth_token" "$RAY_DIR/env"
