#!/usr/bin/env bash
# Brings up a throwaway one-host Slurm cluster under DIR for tests: its own munged (own key and
# socket), one slurmctld and three slurmd (logical nodes on this host), each node with two fake
# GPUs:
#   a100-0, a100-1: 2 x gpu:a10080gb each  (catalog name A100-80GB)
#   v100-0:         2 x gpu:v10032gb       (catalog name V100-32GB)
# in one partition "gpu". Everything the cluster writes stays under DIR; ports are picked free.
# Waits until every node is idle, then prints the path of slurm.conf (use it as SLURM_CONF).
# Messages go to stderr; stdout carries only that path.
#
# Usage: scripts/slurm-up.sh DIR        (as root; Slurm 22.05 and munge installed)
# Stop with scripts/slurm-down.sh DIR. Running slurm-up again on a running cluster just prints
# the path; on a half-started one it stops what is left and starts afresh.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
mkdir -p "$1"
DIR=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CONF="$DIR/etc/slurm.conf"
# Two nodes of one type (for runs spanning nodes, sharded across both) and one of another.
NODES=(a100-0 a100-1 v100-0)
TYPES=(a10080gb a10080gb v10032gb)
GPUS_PER_NODE=2

log() { echo "slurm-up: $*" >&2; }
die() {
  log "$*"
  exit 1
}

for tool in munged slurmctld slurmd sinfo; do
  command -v "$tool" >/dev/null || die "'$tool' not found (install munge, slurmctld, slurmd, slurm-client)"
done
[[ $(id -u) -eq 0 ]] || die "must run as root (the daemons run as root here)"

alive() { # PIDFILE -> 0 when the pid in it is a live (non-zombie) process
  local pid state
  [[ -s $1 ]] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/stat ]] || return 1
  state=$(sed 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f1)
  [[ $state != Z && $state != X ]]
}

nodes_idle() {
  local states
  states=$(SLURM_CONF="$CONF" sinfo -h -N -o '%N %T' 2>/dev/null) || return 1
  for n in "${NODES[@]}"; do
    grep -qx "$n idle" <<<"$states" || return 1
  done
}

wait_idle() {
  local i
  for ((i = 0; i < 300; i++)); do
    nodes_idle && return 0
    sleep 0.2
  done
  log "nodes did not become idle within 60 s:"
  SLURM_CONF="$CONF" sinfo -N -l >&2 || true
  for f in "$DIR"/log/*.log; do
    [[ -f $f ]] || continue
    log "--- $f"
    tail -n 20 "$f" >&2
  done
  return 1
}

# Already up?
all_slurmd_alive() {
  local n
  for n in "${NODES[@]}"; do
    alive "$DIR/run/slurmd-$n.pid" || return 1
  done
}
if [[ -f $CONF ]] && alive "$DIR/run/munged.pid" && alive "$DIR/run/slurmctld.pid" &&
  all_slurmd_alive; then
  wait_idle || exit 1
  log "already running"
  echo "$CONF"
  exit 0
fi
# Leftovers of a half-started cluster.
if [[ -d $DIR/run ]]; then
  "$HERE/slurm-down.sh" "$DIR" >&2 || true
fi

# Free TCP ports: one for slurmctld, one per slurmd.
port_free() { ! ss -Htan 2>/dev/null | awk '{print $4}' | grep -qE "[:.]$1\$"; }
pick_ports() {
  local base tries p ok
  for ((tries = 0; tries < 50; tries++)); do
    # Below Linux's ephemeral range (32768-60999): a port there can be taken between this
    # check and the bind by any outgoing connection, slurmctld's own to the first slurmd
    # included ("Unable to bind listen port: Address already in use").
    base=$((20000 + (RANDOM % 1200) * 10))
    ok=1
    for ((p = base; p < base + 1 + ${#NODES[@]}; p++)); do
      port_free "$p" || ok=0
    done
    if [[ $ok -eq 1 ]]; then
      echo "$base"
      return 0
    fi
  done
  return 1
}
PORT=$(pick_ports) || die "no free ports found"

mkdir -p "$DIR"/{etc,state,run,log,munge,dev}
chmod 755 "$DIR/munge"
rm -rf "$DIR/state"/* "$DIR/spool"
for n in "${NODES[@]}"; do mkdir -p "$DIR/spool/$n"; done

# munge: a private daemon with its own key and socket (the host's munged, if any, is untouched).
if [[ ! -s $DIR/munge/munge.key ]]; then
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
fi
chmod 400 "$DIR/munge/munge.key"
SOCKET="$DIR/munge/munge.socket.2"

# Fake GPUs: character devices like /dev/nvidiaN (major 195), or links to /dev/null where mknod
# is not allowed. Slurm wants a device file per GPU; it never opens them.
for i in "${!NODES[@]}"; do
  n=${NODES[$i]}
  mkdir -p "$DIR/dev/$n"
  for ((g = 0; g < GPUS_PER_NODE; g++)); do
    dev="$DIR/dev/$n/nvidia$g"
    [[ -e $dev || -L $dev ]] && continue
    mknod "$dev" c 195 "$g" 2>/dev/null || ln -s /dev/null "$dev"
  done
done

HOST=$(hostname -s)
{
  echo "# Test cluster made by slurm-up.sh; everything lives under $DIR."
  echo "ClusterName=frenzytest"
  echo "SlurmctldHost=$HOST(127.0.0.1)"
  echo "SlurmctldPort=$PORT"
  echo "SlurmUser=root"
  echo "SlurmdUser=root"
  echo "AuthType=auth/munge"
  echo "CredType=cred/munge"
  echo "AuthInfo=socket=$SOCKET"
  echo "StateSaveLocation=$DIR/state"
  echo "SlurmdSpoolDir=$DIR/spool/%n"
  echo "SlurmctldPidFile=$DIR/run/slurmctld.pid"
  echo "SlurmdPidFile=$DIR/run/slurmd-%n.pid"
  echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
  echo "SlurmdLogFile=$DIR/log/slurmd-%n.log"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_Core"
  echo "GresTypes=gpu"
  echo "AccountingStorageType=accounting_storage/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "JobCompType=jobcomp/filetxt"
  echo "JobCompLoc=$DIR/log/jobcomp.txt"
  echo "MpiDefault=none"
  echo "MailProg=/bin/true"
  # Heterogeneous jobs (mixed plans) are started by the backfill scheduler only, every
  # bf_interval seconds (30 by default): every second here.
  echo "SchedulerParameters=batch_sched_delay=0,bf_interval=1"
  echo "SlurmdParameters=config_overrides"
  echo "ReturnToService=2"
  echo "SlurmctldTimeout=30"
  echo "SlurmdTimeout=60"
  echo "InactiveLimit=0"
  echo "KillWait=5"
  echo "MinJobAge=300"
  for i in "${!NODES[@]}"; do
    echo "NodeName=${NODES[$i]} NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((PORT + 1 + i))" \
      "CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=4000" \
      "Gres=gpu:${TYPES[$i]}:$GPUS_PER_NODE State=UNKNOWN"
  done
  echo "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} >"$CONF"
{
  echo "AutoDetect=off"
  for i in "${!NODES[@]}"; do
    echo "NodeName=${NODES[$i]} Name=gpu Type=${TYPES[$i]}" \
      "File=$DIR/dev/${NODES[$i]}/nvidia[0-$((GPUS_PER_NODE - 1))]"
  done
} >"$DIR/etc/gres.conf"

log "starting munged"
munged --force --socket="$SOCKET" --key-file="$DIR/munge/munge.key" \
  --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
  --seed-file="$DIR/munge/munged.seed" || die "munged failed (see $DIR/log/munged.log)"

log "starting slurmctld (port $PORT)"
slurmctld -c -f "$CONF" || die "slurmctld failed (see $DIR/log/slurmctld.log)"
for n in "${NODES[@]}"; do
  log "starting slurmd -N $n"
  slurmd -N "$n" -f "$CONF" || die "slurmd -N $n failed (see $DIR/log/slurmd-$n.log)"
done

wait_idle || exit 1
log "up: ${NODES[*]} idle"
echo "$CONF"
