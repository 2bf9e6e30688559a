#!/usr/bin/env bash
# Start a single-node Ray head on this workstation for `evalfarm submit` / `evalfarm run --address HOST:PORT`.
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
# Every port the head opens is chosen here: the GCS (EVALFARM_GCS_PORT, 6379) and the job API
# (EVALFARM_DASHBOARD_PORT, 8265) are pinned; every other server gets EVALFARM_<NAME>_PORT (CLIENT, NODE_MANAGER,
# OBJECT_MANAGER, AGENT_HTTP, AGENT_GRPC, RUNTIME_ENV, METRICS, AUTOSCALER_METRICS, DASHBOARD_METRICS) or a free
# port picked at start (Ray's fixed defaults would collide with another head on this machine); workers listen in
# EVALFARM_MIN_WORKER_PORT..EVALFARM_MAX_WORKER_PORT (10002..19999). The head gets a Ray temp dir of its own
# (<private>/ray, where <private> is a fresh /tmp/evalfarm-head-XXXXXX or EVALFARM_RAY_TEMP_DIR, mode 0700: Ray
# makes its temp and session dirs 0777, and only the private folder above them keeps other local users from
# reading the logs or replacing a cached working_dir package) and a process session of its own; what it started
# (session id, temp and session dirs, GCS address, ports, the pids of its processes) is written to
# "$EVALFARM_RAY_DIR/head", which stop.sh reads to stop exactly this head and no other Ray on the machine. Ports
# and the temp dir go through these variables, never as extra arguments, so that the record stays true.
#
#   cluster/local/start-head.sh                 # head on 127.0.0.1, job API at http://127.0.0.1:8265
#   EVALFARM_NUM_CPUS=8 cluster/local/start-head.sh
#   cluster/local/start-head.sh --block         # extra arguments go to `ray start`
#   cluster/local/stop.sh                       # stops this head (only it)
set -euo pipefail

DASHBOARD_HOST="${EVALFARM_DASHBOARD_HOST:-127.0.0.1}"
NODE_IP="${EVALFARM_NODE_IP:-127.0.0.1}"
GCS_PORT="${EVALFARM_GCS_PORT:-6379}"
DASHBOARD_PORT="${EVALFARM_DASHBOARD_PORT:-8265}"
MIN_WORKER_PORT="${EVALFARM_MIN_WORKER_PORT:-10002}"
MAX_WORKER_PORT="${EVALFARM_MAX_WORKER_PORT:-19999}"
NUM_CPUS="${EVALFARM_NUM_CPUS:-}"
NUM_GPUS="${EVALFARM_NUM_GPUS:-}"
RAY_DIR="${EVALFARM_RAY_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/evalfarm/ray}"
RECORD="$RAY_DIR/head"

export RAY_USAGE_STATS_ENABLED=0

if ! command -v ray >/dev/null 2>&1; then
  echo "error: 'ray' is not on PATH; activate the evalfarm environment first (. .venv/bin/activate)" >&2
  exit 2
fi
PYTHON="$(command -v python3 || command -v python || true)"
if [[ -z "$PYTHON" ]]; then
  echo "error: no python on PATH (to pick free ports); activate the evalfarm environment first" >&2
  exit 2
fi
if ! command -v evalfarm >/dev/null 2>&1; then
  echo "warning: 'evalfarm' is not on PATH here: jobs started by this head will not find it" >&2
fi
if [[ -n "${RAY_AUTH_MODE:-}" && "$RAY_AUTH_MODE" != "token" ]]; then
  echo "error: RAY_AUTH_MODE=$RAY_AUTH_MODE: this head always uses token authentication (unset it)" >&2
  exit 2
fi
for arg in "$@"; do
  case "$arg" in
    --port | --port=* | --*-port | --*-port=* | --worker-port-list* | --temp-dir*)
      echo "error: $arg: set ports and the temp dir with EVALFARM_*_PORT / EVALFARM_RAY_TEMP_DIR (see the top of" \
        "$0), so that $RECORD says what this head opened and stop.sh stops exactly it" >&2
      exit 2
      ;;
  esac
done
if [[ -e "$RECORD" ]]; then
  echo "error: $RECORD records a head this script started: stop it first with cluster/local/stop.sh (which also" \
    "clears the record of a head that is gone), or give this head another EVALFARM_RAY_DIR" >&2
  exit 2
fi
# No note about EVALFARM_DATA here: the head does not need it. `evalfarm submit` sends the submitter's data folder
# (EVALFARM_DATA, else its config file's `data`) with each job, and `evalfarm run --address ...` sends its own to the
# workers; a note from this shell's environment contradicted both (the end of the script says so instead).

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

# Every other server's port: EVALFARM_<NAME>_PORT, or a port free on the node's address right now, never one already
# pinned (the GCS, the job API, any EVALFARM_*_PORT) nor one in the worker range: a port another process has just
# released (a caller that probed GCS_PORT free) can come back from bind(0), and Ray refuses two components on one.
free_ports=()
read -r -a free_ports <<<"$("$PYTHON" -c '
import socket, sys
host, want, low, high = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
taken = {int(p) for p in sys.argv[5:] if p}
socks, ports = [], []
while len(ports) < want and len(socks) < 1000:
    s = socket.socket()
    s.bind((host, 0))
    socks.append(s)  # held until all are picked: no port twice
    port = s.getsockname()[1]
    if port not in taken and not low <= port <= high:
        ports.append(port)
if len(ports) < want:
    sys.exit("no free ports on " + host)
print(" ".join(map(str, ports)))
' "$NODE_IP" 9 "$MIN_WORKER_PORT" "$MAX_WORKER_PORT" "$GCS_PORT" "$DASHBOARD_PORT" "${EVALFARM_CLIENT_PORT:-}" \
  "${EVALFARM_NODE_MANAGER_PORT:-}" "${EVALFARM_OBJECT_MANAGER_PORT:-}" "${EVALFARM_AGENT_HTTP_PORT:-}" \
  "${EVALFARM_AGENT_GRPC_PORT:-}" "${EVALFARM_RUNTIME_ENV_PORT:-}" "${EVALFARM_METRICS_PORT:-}" \
  "${EVALFARM_AUTOSCALER_METRICS_PORT:-}" "${EVALFARM_DASHBOARD_METRICS_PORT:-}")"
if ((${#free_ports[@]} != 9)); then
  echo "error: could not pick 9 free ports on $NODE_IP" >&2
  exit 2
fi
CLIENT_PORT="${EVALFARM_CLIENT_PORT:-${free_ports[0]}}"
NODE_MANAGER_PORT="${EVALFARM_NODE_MANAGER_PORT:-${free_ports[1]}}"
OBJECT_MANAGER_PORT="${EVALFARM_OBJECT_MANAGER_PORT:-${free_ports[2]}}"
AGENT_HTTP_PORT="${EVALFARM_AGENT_HTTP_PORT:-${free_ports[3]}}"
AGENT_GRPC_PORT="${EVALFARM_AGENT_GRPC_PORT:-${free_ports[4]}}"
RUNTIME_ENV_PORT="${EVALFARM_RUNTIME_ENV_PORT:-${free_ports[5]}}"
METRICS_PORT="${EVALFARM_METRICS_PORT:-${free_ports[6]}}"
# Ray reads these two from the environment (fixed 44217 / 44227 otherwise)
export AUTOSCALER_METRIC_PORT="${EVALFARM_AUTOSCALER_METRICS_PORT:-${free_ports[7]}}"
export DASHBOARD_METRIC_PORT="${EVALFARM_DASHBOARD_METRICS_PORT:-${free_ports[8]}}"
unset RAY_GCS_SERVER_PORT # --port decides

# The head's own Ray temp dir, not /tmp/ray (where other people's `ray start` / `ray.init()` look), inside a
# folder only this user can enter: Ray makes its temp dir and each session dir 0777, so without the private parent
# another local user reads every log and replaces a cached working_dir package (the next job with that working dir
# runs it). Short, since Ray's socket paths under it must fit in 108 bytes.
if [[ -n "${EVALFARM_RAY_TEMP_DIR:-}" ]]; then
  PRIVATE_DIR="$EVALFARM_RAY_TEMP_DIR"
  OWN_TEMP_DIR=0
  (umask 077 && mkdir -p "$PRIVATE_DIR")
  if [[ -L "$PRIVATE_DIR" || ! -d "$PRIVATE_DIR" || "$(stat -c %u "$PRIVATE_DIR")" != "$(id -u)" ]]; then
    echo "error: EVALFARM_RAY_TEMP_DIR=$PRIVATE_DIR is not a folder of $(id -un)'s own (another user's, or a" \
      "link): the head's temp dir must sit in a folder only you can enter" >&2
    exit 2
  fi
  chmod 700 "$PRIVATE_DIR"
else
  PRIVATE_DIR="$(mktemp -d /tmp/evalfarm-head-XXXXXX)" # 0700
  OWN_TEMP_DIR=1
fi
TEMP_DIR="$PRIVATE_DIR/ray"

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
  --ray-client-server-port="$CLIENT_PORT"
  --node-manager-port="$NODE_MANAGER_PORT"
  --object-manager-port="$OBJECT_MANAGER_PORT"
  --dashboard-agent-listen-port="$AGENT_HTTP_PORT"
  --dashboard-agent-grpc-port="$AGENT_GRPC_PORT"
  --runtime-env-agent-port="$RUNTIME_ENV_PORT"
  --metrics-export-port="$METRICS_PORT"
  --min-worker-port="$MIN_WORKER_PORT"
  --max-worker-port="$MAX_WORKER_PORT"
  --temp-dir="$TEMP_DIR"
  --disable-usage-stats)
[[ -n "$NUM_CPUS" ]] && args+=(--num-cpus="$NUM_CPUS")
[[ -n "$NUM_GPUS" ]] && args+=(--num-gpus="$NUM_GPUS")
block=0
for arg in "$@"; do
  [[ "$arg" == "--block" ]] && block=1
done

# The head in a process session of its own (this script's, when it already leads one), so that stop.sh can tell
# its processes from any other Ray on the machine: the Ray daemons and everything they start stay in it.
if [[ "$(ps -o sid= -p $$ | tr -d ' ')" == "$$" ]]; then
  SESSION_ID=$$
  launch=()
else
  SESSION_ID=""
  launch=(setsid)
fi

write_record() { # $1: the session dir ("" while unknown). Pids with their start times (stop.sh: against reuse).
  local pids=() stat pid fields
  for pid in $(ps -e -o pid= -o sid= | awk -v s="$SESSION_ID" '$2 == s { print $1 }'); do
    stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || continue
    read -r -a fields <<<"${stat##*) }"
    pids+=("$pid:${fields[19]}")
  done
  (
    umask 077
    {
      echo "# written by cluster/local/start-head.sh, read by cluster/local/stop.sh"
      echo "session_id=$SESSION_ID"
      echo "leader=$LEADER"
      echo "uid=$(id -u)"
      echo "temp_dir=$TEMP_DIR"
      echo "private_dir=$PRIVATE_DIR"
      echo "own_temp_dir=$OWN_TEMP_DIR"
      echo "session_dir=$1"
      echo "gcs_address=$NODE_IP:$GCS_PORT"
      echo "dashboard=http://$DASHBOARD_HOST:$DASHBOARD_PORT"
      echo "ports=$GCS_PORT $DASHBOARD_PORT $CLIENT_PORT $NODE_MANAGER_PORT $OBJECT_MANAGER_PORT $AGENT_HTTP_PORT" \
        "$AGENT_GRPC_PORT $RUNTIME_ENV_PORT $METRICS_PORT $AUTOSCALER_METRIC_PORT $DASHBOARD_METRIC_PORT"
      echo "worker_ports=$MIN_WORKER_PORT-$MAX_WORKER_PORT"
      echo "pids=${pids[*]}"
    } >"$RECORD.new"
    mv -f "$RECORD.new" "$RECORD"
  )
}

echo "token: $RAY_DIR/auth_token (0600); client settings: . '$RAY_DIR/env'" >&2
"${launch[@]}" ray "${args[@]}" "$@" &
ray_pid=$!
[[ -n "$SESSION_ID" ]] || SESSION_ID=$ray_pid # setsid without a fork: `ray start` leads the new session
leader_stat="$(cat "/proc/$SESSION_ID/stat" 2>/dev/null || true)"
read -r -a leader_fields <<<"${leader_stat##*) }"
LEADER="$SESSION_ID:${leader_fields[19]:-}" # stop.sh: a session id whose leader is another process is not ours
trap 'kill -TERM "$ray_pid" 2>/dev/null' INT TERM
write_record "" # from the first moment: stop.sh can stop a head that is still starting
status=0
if ((block)); then
  # `ray start --block` keeps running: record the head's processes once it is up, then wait with it
  for _ in $(seq 240); do
    [[ -e "$TEMP_DIR/ray_current_cluster" ]] && break
    kill -0 "$ray_pid" 2>/dev/null || break
    sleep 0.5
  done
  write_record "$(readlink -f "$TEMP_DIR/session_latest" 2>/dev/null || true)"
  wait "$ray_pid" || status=$?
  exit "$status"
fi
wait "$ray_pid" || status=$?
write_record "$(readlink -f "$TEMP_DIR/session_latest" 2>/dev/null || true)"
if ((status != 0)); then
  echo "error: ray start failed ($status); cluster/local/stop.sh stops what it left" >&2
  exit "$status"
fi

echo
echo "Ray head up (token authentication; loopback only unless EVALFARM_NODE_IP / EVALFARM_DASHBOARD_HOST say otherwise)."
echo "In each shell that talks to it:"
echo "  . '$RAY_DIR/env'"
echo "Submit a model with (or run on it: evalfarm run ... --address $NODE_IP:$GCS_PORT):"
echo "  evalfarm submit my-model.yaml --address http://$DASHBOARD_HOST:$DASHBOARD_PORT --warehouse \$PWD/warehouse"
echo "Data: each job gets the data folder of who submits or runs it (EVALFARM_DATA, else evalfarm's config file)."
echo "Follow a run: evalfarm status --warehouse WAREHOUSE, or the dashboard at http://$DASHBOARD_HOST:$DASHBOARD_PORT"
echo "Stop it (and no other Ray) with: cluster/local/stop.sh   (what it started: $RECORD)"
echo "  not \`ray stop\` as Ray's banner above says: that stops every Ray process of $(id -un) on this machine"
