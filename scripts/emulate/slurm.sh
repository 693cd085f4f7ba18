#!/usr/bin/env bash
# A two-node Slurm cluster on this one machine, from Debian's packages: munge, slurmctld, and two slurmd
# (nodes n1 and n2, MULTIPLE_SLURMD: same host, ports 17001/17002). No systemd: daemons are started by hand.
# Idempotent: installs only what is missing, starts only what is not running, waits until both nodes are idle.
# Needs root and apt. Stop the daemons with `scripts/emulate/slurm.sh down`.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then echo "slurm.sh: needs root" >&2; exit 77; fi
CONF=/etc/slurm/slurm.conf
MARK="# written by dlbench scripts/emulate/slurm.sh"


if [ "${1:-up}" = down ]; then
  for pidfile in /run/slurmd-n1.pid /run/slurmd-n2.pid /run/slurmctld.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
   || ! command -v munged >/dev/null; then
  command -v apt-get >/dev/null || { echo "slurm.sh: apt-get is not available" >&2; exit 77; }
  export DEBIAN_FRONTEND=noninteractive
  timeout 300 apt-get update -qq || { echo "slurm.sh: apt-get update failed" >&2; exit 77; }
  timeout 600 apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null \
    || { echo "slurm.sh: apt-get install of slurm failed" >&2; exit 77; }
fi

# munge: a key, its run folder, the daemon.
[ -s /etc/munge/munge.key ] || { mungekey --create 2>/dev/null || create-munge-key -f; }
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
if ! runuser -u munge -- munge -n </dev/null >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
fi

host=$(hostname -s)
if [ ! -f "$CONF" ] || ! grep -qF "$MARK" "$CONF"; then
  [ -f "$CONF" ] && cp "$CONF" "$CONF.before-dlbench"
  mkdir -p /etc/slurm
  cat >"$CONF" <<CONF
$MARK
ClusterName=dlbench
SlurmctldHost=$host(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
# No cgroup set-up here (no systemd): track processes through /proc and bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmctldPidFile=/run/slurmctld.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdSpoolDir=/var/lib/slurm/slurmd/%n
SlurmdPidFile=/run/slurmd-%n.pid
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
TmpFS=/var/lib/slurm/tmp/%n
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
SlurmdParameters=config_overrides
# Two emulated nodes on one host (MULTIPLE_SLURMD): same NodeHostname, their own ports.
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=17001 CPUs=2 RealMemory=2000 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=17002 CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
fi
install -d -o slurm -g slurm /var/lib/slurm/slurmctld /var/log/slurm
for n in n1 n2; do install -d /var/lib/slurm/slurmd/$n /var/lib/slurm/tmp/$n; done

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
pid_alive /run/slurmctld.pid || slurmctld -c
for n in n1 n2; do pid_alive "/run/slurmd-$n.pid" || slurmd -N "$n"; done

# Wait (bounded) until both nodes are up (idle, or busy with an earlier job: new jobs queue behind it);
# resume them if an earlier run left them down or drained.
for _ in $(seq 60); do
  states=$(timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null || true)
  if grep -Eq '^n1 (idle|mix|alloc)' <<<"$states" && grep -Eq '^n2 (idle|mix|alloc)' <<<"$states"; then
    echo "slurm.sh: nodes up: $(tr '\n' ' ' <<<"$states")(partition debug)"; exit 0
  fi
  if grep -Eq 'down|drain' <<<"$states"; then timeout 10 scontrol update nodename=n1,n2 state=resume 2>/dev/null || true; fi
  sleep 1
done
echo "slurm.sh: nodes did not come up within 60 s: $(timeout 10 sinfo -h -N -o '%N %t' 2>&1 | tr '\n' ' ')" >&2
exit 1
