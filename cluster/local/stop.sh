#!/usr/bin/env bash
# Stop the Ray head that cluster/local/start-head.sh started, and nothing else: never `ray stop`, which kills every
# Ray process of this user on the machine (other projects' clusters too). start-head.sh records in
# "$EVALFARM_RAY_DIR/head" the process session it started the head in, the pids (with start times) of the head's
# processes and its own Ray temp dir; this script signals exactly the processes of this user that are in that
# session, are a recorded pid with its recorded start time, or run from that temp dir. SIGTERM first, SIGKILL to
# what is left after a grace period (EVALFARM_STOP_GRACE seconds, 10; Ray's agents may ignore SIGTERM), then the
# token, the client settings, the record and the head's temp dir go. Without a record it refuses and stops nothing.
#
#   cluster/local/stop.sh              # SIGTERM, SIGKILL after 10 s
#   cluster/local/stop.sh --force      # SIGKILL at once
#   cluster/local/stop.sh --grace 30
set -euo pipefail

RAY_DIR="${EVALFARM_RAY_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/evalfarm/ray}"
RECORD="$RAY_DIR/head"
GRACE="${EVALFARM_STOP_GRACE:-10}"

while (($#)); do
  case "$1" in
    --force) GRACE=0 ;;
    --grace)
      GRACE="${2:?--grace needs a number of seconds}"
      shift
      ;;
    --grace=*) GRACE="${1#--grace=}" ;;
    *)
      echo "usage: $0 [--force | --grace SECONDS]" >&2
      exit 2
      ;;
  esac
  shift
done
if ! [[ "$GRACE" =~ ^[0-9]+$ ]]; then
  echo "error: the grace period must be a whole number of seconds, not '$GRACE'" >&2
  exit 2
fi

if [[ ! -f "$RECORD" ]]; then
  echo "error: no record of a head started by cluster/local/start-head.sh ($RECORD is missing): nothing stopped." >&2
  echo "stop.sh stops only the head that start-head.sh started and recorded (EVALFARM_RAY_DIR picks which);" \
    "it never runs \`ray stop\`, which would stop every Ray of $(id -un) on this machine, other projects' too." >&2
  exit 1
fi

session_id="" temp_dir="" private_dir="" own_temp_dir=0 gcs_address="" pids="" leader="" uid=""
while IFS='=' read -r key value; do
  case "$key" in
    session_id) session_id="$value" ;;
    leader) leader="$value" ;;
    uid) uid="$value" ;;
    temp_dir) temp_dir="$value" ;;
    private_dir) private_dir="$value" ;;
    own_temp_dir) own_temp_dir="$value" ;;
    gcs_address) gcs_address="$value" ;;
    pids) pids="$value" ;;
  esac
done <"$RECORD"
if ! [[ "$session_id" =~ ^[0-9]+$ && -n "$temp_dir" && "$uid" == "$(id -u)" ]]; then
  echo "error: $RECORD is not a record start-head.sh wrote for $(id -un) (no session id, temp dir or uid):" \
    "nothing stopped" >&2
  exit 1
fi

start_time() { # the start time of pid $1 (clock ticks since boot), empty when it is gone
  local stat fields
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 0
  read -r -a fields <<<"${stat##*) }"
  echo "${fields[19]}"
}

# The session is the head's only while its leader is the recorded process or gone (a reused session id is not).
use_session=1
if [[ -n "$leader" && -e "/proc/$session_id" && "$(start_time "$session_id")" != "${leader#*:}" ]]; then
  use_session=0
fi

head_pids() { # the live processes of this user that belong to the recorded head
  local dir pid stat fields cmd
  for dir in /proc/[0-9]*; do
    pid="${dir#/proc/}"
    [[ "$pid" == "$$" || "$pid" == "$BASHPID" ]] && continue
    [[ -O "$dir" ]] || continue # this user's processes only
    stat="$(cat "$dir/stat" 2>/dev/null)" || continue
    read -r -a fields <<<"${stat##*) }"
    [[ "${fields[0]}" == "Z" ]] && continue
    if ((use_session)) && [[ "${fields[3]}" == "$session_id" ]]; then
      echo "$pid"
    elif [[ " $pids " == *" $pid:${fields[19]} "* ]]; then
      echo "$pid"
    else
      cmd="$(tr '\0' ' ' <"$dir/cmdline" 2>/dev/null)" || continue
      if [[ "$cmd" == *"$temp_dir/"* ]]; then echo "$pid"; fi
    fi
  done
  return 0
}

signal_all() { # $1: the signal; the pids on stdin
  local pid
  while read -r pid; do
    kill "-$1" "$pid" 2>/dev/null || true
  done
}

targets="$(head_pids)"
if [[ -z "$targets" ]]; then
  echo "the head recorded in $RECORD (GCS $gcs_address, session $session_id) is not running; clearing its record" >&2
else
  echo "stopping the head recorded in $RECORD (GCS $gcs_address, session $session_id):" \
    "$(wc -w <<<"$targets") processes" >&2
  signal_all TERM <<<"$targets"
  deadline=$((SECONDS + GRACE))
  while [[ -n "$(head_pids)" ]] && ((SECONDS < deadline)); do
    sleep 0.5
  done
  left="$(head_pids)"
  if [[ -n "$left" ]]; then
    echo "SIGKILL to $(wc -w <<<"$left") processes still up after ${GRACE} s" >&2
    signal_all KILL <<<"$left"
    deadline=$((SECONDS + 10))
    while [[ -n "$(head_pids)" ]] && ((SECONDS < deadline)); do
      sleep 0.2
    done
    if [[ -n "$(head_pids)" ]]; then
      echo "error: processes of the head survived SIGKILL: $(head_pids | tr '\n' ' ')" >&2
      exit 1
    fi
  fi
fi

rm -f "$RAY_DIR/auth_token" "$RAY_DIR/env" "$RECORD" # start-head.sh makes a new token for the next head
if [[ "$own_temp_dir" == 1 ]]; then # the private folder start-head.sh made (a record before it: the temp dir)
  own="${private_dir:-$temp_dir}"
  if [[ "$own" == /tmp/evalfarm-head-* ]]; then
    rm -rf -- "$own"
  fi
fi
echo "stopped" >&2
