#!/usr/bin/env bash
# Start a single-node Ray head on this workstation for `evalfarm submit` / `evalfarm run --address auto`.
#
# The dashboard and its job API EXECUTE ARBITRARY CODE for anyone who can reach them, and Ray has no
# authentication by default: this script binds them (and the node) to 127.0.0.1. To expose them, set
# EVALFARM_DASHBOARD_HOST (and EVALFARM_NODE_IP for the node) deliberately, behind a firewall, ideally with
# RAY_AUTH_MODE=token. See cluster/README.md.
#
#   cluster/local/start-head.sh                 # head on 127.0.0.1, job API at http://127.0.0.1:8265
#   EVALFARM_NUM_CPUS=8 cluster/local/start-head.sh
#   cluster/local/stop.sh
set -euo pipefail

DASHBOARD_HOST="${EVALFARM_DASHBOARD_HOST:-127.0.0.1}"
NODE_IP="${EVALFARM_NODE_IP:-127.0.0.1}"
GCS_PORT="${EVALFARM_GCS_PORT:-6379}"
DASHBOARD_PORT="${EVALFARM_DASHBOARD_PORT:-8265}"
NUM_CPUS="${EVALFARM_NUM_CPUS:-}"
NUM_GPUS="${EVALFARM_NUM_GPUS:-}"

export RAY_USAGE_STATS_ENABLED=0
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"

if ! command -v ray >/dev/null 2>&1; then
  echo "error: 'ray' is not on PATH; activate the evalfarm environment first (. .venv/bin/activate)" >&2
  exit 2
fi
if ! command -v evalfarm >/dev/null 2>&1; then
  echo "warning: 'evalfarm' is not on PATH here: jobs started by this head will not find it" >&2
fi
if [[ "$DASHBOARD_HOST" != "127.0.0.1" && "$DASHBOARD_HOST" != "localhost" ]]; then
  echo "WARNING: binding the Ray dashboard / job API to $DASHBOARD_HOST: anyone who can reach" \
       "$DASHBOARD_HOST:$DASHBOARD_PORT can run arbitrary code as $(id -un). Firewall it, or use" \
       "RAY_AUTH_MODE=token (currently: $RAY_AUTH_MODE)." >&2
fi
if [[ -z "${EVALFARM_DATA:-}" ]]; then
  echo "note: EVALFARM_DATA is not set; pools will be downloaded into the cache on first use" >&2
fi

args=(start --head
  --node-ip-address="$NODE_IP"
  --port="$GCS_PORT"
  --dashboard-host="$DASHBOARD_HOST"
  --dashboard-port="$DASHBOARD_PORT"
  --include-dashboard=true
  --disable-usage-stats)
[[ -n "$NUM_CPUS" ]] && args+=(--num-cpus="$NUM_CPUS")
[[ -n "$NUM_GPUS" ]] && args+=(--num-gpus="$NUM_GPUS")

ray "${args[@]}" "$@"

echo
echo "Ray head up. Submit a model with:"
echo "  evalfarm submit my-model.yaml --address http://$DASHBOARD_HOST:$DASHBOARD_PORT --warehouse \$PWD/warehouse"
echo "Stop it with: cluster/local/stop.sh"
