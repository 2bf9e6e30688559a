#!/usr/bin/env bash
# Start a single-node Ray head on this workstation for `evalfarm submit` / `evalfarm run --address auto`.
#
# The job API runs any shell command for whoever can reach it, so this head is closed twice over:
#  - token authentication (RAY_AUTH_MODE=token): a fresh random token for every head, in a 0600 file; every
#    Ray API (job API, GCS / ray.init, Ray Client, the agents) refuses a caller without it;
#  - loopback only: every Ray server listens on 127.0.0.1. Ray rewrites --node-ip-address=127.0.0.1 to the
#    host's routable address unless it runs in its single-node mode (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0),
#    which this script sets; the dashboard is bound with --dashboard-host=127.0.0.1.
# Clients need the token: `. "$EVALFARM_RAY_DIR/env"` (printed at the end) sets RAY_AUTH_MODE and
# RAY_AUTH_TOKEN_PATH. To add nodes, set EVALFARM_NODE_IP to this host's cluster address (the head then
# listens there, still behind the token) and EVALFARM_DASHBOARD_HOST if the job API must be reachable.
#
#   cluster/local/start-head.sh                 # head on 127.0.0.1, job API at http://127.0.0.1:8265
#   EVALFARM_NUM_CPUS=8 cluster/local/start-head.sh
#   cluster/local/start-head.sh --block         # extra arguments go to `ray start`
#   cluster/local/stop.sh
set -euo pipefail

DASHBOARD_HOST="${EVALFARM_DASHBOARD_HOST:-127.0.0.1}"
NODE_IP="${EVALFARM_NODE_IP:-127.0.0.1}"
GCS_PORT="${EVALFARM_GCS_PORT:-6379}"
DASHBOARD_PORT="${EVALFARM_DASHBOARD_PORT:-8265}"
NUM_CPUS="${EVALFARM_NUM_CPUS:-}"
NUM_GPUS="${EVALFARM_NUM_GPUS:-}"
RAY_DIR="${EVALFARM_RAY_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/evalfarm/ray}"

export RAY_USAGE_STATS_ENABLED=0

if ! command -v ray >/dev/null 2>&1; then
  echo "error: 'ray' is not on PATH; activate the evalfarm environment first (. .venv/bin/activate)" >&2
  exit 2
fi
if ! command -v evalfarm >/dev/null 2>&1; then
  echo "warning: 'evalfarm' is not on PATH here: jobs started by this head will not find it" >&2
fi
if [[ -n "${RAY_AUTH_MODE:-}" && "$RAY_AUTH_MODE" != "token" ]]; then
  echo "error: RAY_AUTH_MODE=$RAY_AUTH_MODE: this head always uses token authentication (unset it)" >&2
  exit 2
fi
if [[ -z "${EVALFARM_DATA:-}" ]]; then
  echo "note: EVALFARM_DATA is not set; pools will be downloaded into the cache on first use" >&2
fi

# A new token for this head, readable by this user only (umask before the file exists, not chmod after).
(
  umask 077
  mkdir -p "$RAY_DIR"
  chmod 700 "$RAY_DIR"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$RAY_DIR/auth_token.new"
  mv -f "$RAY_DIR/auth_token.new" "$RAY_DIR/auth_token"
)
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN_PATH="$RAY_DIR/auth_token"
unset RAY_AUTH_TOKEN # it would take precedence over the file

case "$NODE_IP" in
  127.0.0.1 | localhost)
    export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 # Ray's single-node mode: every server binds 127.0.0.1
    ;;
  *)
    echo "note: node address $NODE_IP: Ray listens there (token required); firewall its ports to the cluster" >&2
    ;;
esac
if [[ "$DASHBOARD_HOST" != "127.0.0.1" && "$DASHBOARD_HOST" != "localhost" ]]; then
  echo "WARNING: binding the Ray dashboard / job API to $DASHBOARD_HOST: anyone who can reach" \
    "$DASHBOARD_HOST:$DASHBOARD_PORT and has the token can run arbitrary code as $(id -un)." \
    "The token travels in clear: put TLS in front of it, or keep it on loopback (ssh -L / kubectl port-forward)." >&2
fi

(
  umask 077
  cat >"$RAY_DIR/env" <<EOF
# Source this to talk to the evalfarm Ray head started by cluster/local/start-head.sh
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN_PATH='$RAY_DIR/auth_token'
export RAY_API_SERVER_ADDRESS='http://$DASHBOARD_HOST:$DASHBOARD_PORT'
EOF
  if [[ "${RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER:-}" == "0" ]]; then
    echo "export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0  # or Ray resolves 127.0.0.1 to the routable address" >>"$RAY_DIR/env"
  fi
)

args=(start --head
  --node-ip-address="$NODE_IP"
  --port="$GCS_PORT"
  --dashboard-host="$DASHBOARD_HOST"
  --dashboard-port="$DASHBOARD_PORT"
  --include-dashboard=true
  --disable-usage-stats)
[[ -n "$NUM_CPUS" ]] && args+=(--num-cpus="$NUM_CPUS")
[[ -n "$NUM_GPUS" ]] && args+=(--num-gpus="$NUM_GPUS")

echo "token: $RAY_DIR/auth_token (0600); client settings: . '$RAY_DIR/env'" >&2
ray "${args[@]}" "$@"

echo
echo "Ray head up (token authentication; loopback only unless EVALFARM_NODE_IP / EVALFARM_DASHBOARD_HOST say otherwise)."
echo "In each shell that talks to it:"
echo "  . '$RAY_DIR/env'"
echo "Submit a model with (or run on it: evalfarm run ... --address $NODE_IP:$GCS_PORT):"
echo "  evalfarm submit my-model.yaml --address http://$DASHBOARD_HOST:$DASHBOARD_PORT --warehouse \$PWD/warehouse"
echo "Stop it with: cluster/local/stop.sh"
