#!/usr/bin/env bash
# A throwaway single-node Slurm on this machine, to try the cluster path (launcher=slurm) on a
# laptop or in CI. Debian/Ubuntu, as root:  scripts/slurm-local.sh install | start | stop | env
#   eval "$(scripts/slurm-local.sh env)"   # SLURM_CONF for sbatch/sinfo (and submitit) in this shell
# Everything lives under $SLURM_LOCAL_DIR (default /tmp/harness-slurm); `stop` ends the daemons.
set -euo pipefail
DIR=${SLURM_LOCAL_DIR:-/tmp/harness-slurm}
CONF=$DIR/slurm.conf
HOST=$(hostname -s)

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
     && command -v munged >/dev/null; then return 0; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
}

write_conf() {
  mkdir -p "$DIR"/{state,spool,log}
  local mem cpus
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  cat > "$CONF" <<CONF
ClusterName=harness
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
NodeName=$HOST CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
}

start() {
  install
  write_conf
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge && dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge /run/munge /var/log/munge /var/lib/munge
  # munge must answer, not merely have a process (one that is exiting leaves no socket)
  if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    pkill -x munged 2>/dev/null || true
    for _ in $(seq 20); do pgrep -x munged >/dev/null || break; sleep 0.5; done
    runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 20); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
  fi
  stop >/dev/null  # daemons of an earlier start would hold the ports
  SLURM_CONF=$CONF slurmctld -f "$CONF"
  SLURM_CONF=$CONF slurmd -f "$CONF"
  for _ in $(seq 120); do
    if SLURM_CONF=$CONF sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
      echo "slurm: node $HOST up (SLURM_CONF=$CONF)"; return 0
    fi
    sleep 1
  done
  echo "slurm: the node did not come up; see $DIR/log" >&2
  return 1
}

stop() {
  local pid
  for f in "$DIR/slurmd.pid" "$DIR/slurmctld.pid"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    rm -f "$f"
  done
  echo "slurm: stopped"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 install|start|stop|env" >&2; exit 2 ;;
esac
