#!/usr/bin/env bash
# Stops the test Slurm cluster that scripts/slurm-up.sh started under DIR: exactly the daemons
# named by its pid files (slurmd, slurmctld, munged), and any job steps still running on it
# (scancel first). Tolerates a half-started or already stopped cluster. Removes nothing outside
# DIR; keeps DIR's logs (pass --purge as a second argument to delete DIR's contents too).
#
# Usage: scripts/slurm-down.sh DIR [--purge]
set -uo pipefail

if [[ $# -lt 1 || $# -gt 2 || ($# -eq 2 && $2 != --purge) ]]; then
  echo "usage: $0 DIR [--purge]" >&2
  exit 2
fi
if [[ ! -d $1 ]]; then
  echo "slurm-down: $1 does not exist: nothing to stop" >&2
  exit 0
fi
DIR=$(cd "$1" && pwd)
CONF="$DIR/etc/slurm.conf"

log() { echo "slurm-down: $*" >&2; }

# PIDFILE NAME -> the pid when it is a live process whose command name is NAME.
live_pid() {
  local pid comm
  [[ -s $1 ]] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/stat ]] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [[ $comm == "$2" ]] || return 1
  [[ $(sed 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f1) != Z ]] || return 1
  echo "$pid"
}

# PIDFILE NAME: SIGTERM, wait up to 10 s, then SIGKILL.
stop() {
  local pid i
  if ! pid=$(live_pid "$1" "$2"); then
    rm -f "$1"
    return 0
  fi
  log "stopping $2 (pid $pid)"
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < 100; i++)); do
    live_pid "$1" "$2" >/dev/null || break
    sleep 0.1
  done
  if live_pid "$1" "$2" >/dev/null; then
    log "$2 (pid $pid) ignored SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$1"
}

# Cancel what still runs, so no job step outlives its slurmd.
if [[ -f $CONF ]] && live_pid "$DIR/run/slurmctld.pid" slurmctld >/dev/null; then
  SLURM_CONF="$CONF" timeout 10 scancel --full --quiet --user=root 2>/dev/null
  for ((i = 0; i < 50; i++)); do
    [[ -z $(SLURM_CONF="$CONF" timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
    sleep 0.1
  done
fi

for f in "$DIR"/run/slurmd-*.pid; do
  [[ -e $f ]] || continue
  stop "$f" slurmd
done
stop "$DIR/run/slurmctld.pid" slurmctld
stop "$DIR/run/munged.pid" munged

if [[ ${2:-} == --purge ]]; then
  log "removing the contents of $DIR"
  find "$DIR" -mindepth 1 -delete
fi
log "down"
exit 0
