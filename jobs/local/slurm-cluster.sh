#!/usr/bin/env bash
# A one-machine Slurm cluster (munged + slurmctld + slurmd on localhost) for
# trying jobs/slurm/*.sbatch and for the e2e tests. Everything it writes lives
# under one directory; no file in /etc is read or touched.
#
#   jobs/local/slurm-cluster.sh start    # up (idempotent), waits until the node is idle
#   eval "$(jobs/local/slurm-cluster.sh env)"   # point sbatch, squeue, ... at it
#   jobs/local/slurm-cluster.sh status   # daemons, sinfo, squeue; exit 3 when not up
#   jobs/local/slurm-cluster.sh stop     # cancel jobs, shut down, verify nothing is left
#
# LPSGD_SLURM_DIR   where it lives (default /tmp/lpsgd-slurm)
# LPSGD_SLURM_PORT  slurmctld port, slurmd takes the next one (default: the first
#                   free pair from 6817); read only when the config is first written
# LPSGD_SLURM_TIMEOUT  seconds start and stop wait (default 30)
# Needs root: slurmd launches the jobs' processes.
set -euo pipefail

DIR=${LPSGD_SLURM_DIR:-/tmp/lpsgd-slurm}
TIMEOUT=${LPSGD_SLURM_TIMEOUT:-30}
CONF=$DIR/etc/slurm.conf
MUNGE_SOCKET=$DIR/munge-run/munge.socket
# Slurm's clients and daemons started from here read this cluster's config only.
export SLURM_CONF=$CONF

die() { echo "slurm-cluster: error: $*" >&2; exit 1; }
say() { echo "slurm-cluster: $*"; }

# Pid of a daemon of this cluster from its pid file, if it is alive and still
# that program (a stale pid file may name a reused pid). A zombie waiting for
# init to reap it counts as gone.
daemon_pid() {
  local name=$1 file=$DIR/run/$1.pid pid comm state
  [[ -r $file ]] || return 1
  pid=$(<"$file")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  read -r _ comm state _ 2>/dev/null <"/proc/$pid/stat" || return 1
  [[ $comm == "($name)" && $state != Z ]] || return 1
  echo "$pid"
}

# Every live process of this cluster: the daemons (their command lines name
# files under $DIR), and the slurmstepd and job processes (their environment
# holds this SLURM_CONF; job processes also a SLURM_JOB_ID). Never this script
# or its callers, which may have this SLURM_CONF too.
cluster_pids() {
  local p pid comm state callers=" " q=$$ ppid env
  while ((q > 1)) && read -r _ _ _ ppid _ 2>/dev/null <"/proc/$q/stat"; do
    callers+="$q "
    q=$ppid
  done
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [[ $callers == *" $pid "* ]] && continue
    read -r _ comm state _ 2>/dev/null <"$p/stat" || continue
    [[ $state == Z ]] && continue
    case $comm in
      "(munged)"|"(slurmctld)"|"(slurmd)")
        mapfile -d '' env 2>/dev/null <"$p/cmdline" || continue
        [[ " ${env[*]}" == *" $DIR/"* || " ${env[*]}" == *"=$DIR/"* ]] && echo "$pid" ;;
      *)
        mapfile -d '' env 2>/dev/null <"$p/environ" || continue
        [[ " ${env[*]} " == *" SLURM_CONF=$CONF "* ]] || continue
        [[ $comm == "(slurmstepd)" || " ${env[*]}" == *" SLURM_JOB_ID="* ]] && echo "$pid" ;;
    esac
  done
  return 0
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

log_tail() {
  local f
  for f in "$DIR"/log/*.log; do
    [[ -s $f ]] || continue
    echo "---- last lines of $f" >&2
    tail -n 15 "$f" >&2
  done
}

write_config() {
  [[ -s $CONF ]] && return 0
  local port=${LPSGD_SLURM_PORT:-} node
  if [[ -z $port ]]; then
    for ((port = 6817; port < 6917; port += 2)); do
      port_free "$port" && port_free $((port + 1)) && break
    done
    ((port < 6917)) || die "no free port pair in 6817-6916; set LPSGD_SLURM_PORT"
  fi
  mkdir -p "$DIR"/{etc,state,spool,run,log,tmp,munge,munge-run}
  # munged refuses a key others can read or a socket directory it cannot publish.
  chmod 0700 "$DIR/munge"
  chmod 0755 "$DIR" "$DIR/munge-run"
  if [[ ! -s $DIR/munge/munge.key ]]; then
    (umask 077 && dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none)
  fi
  # The node is this machine as slurmd sees it, named localhost so that it
  # resolves everywhere.
  node=$(slurmd -C | head -n 1) || die "slurmd -C failed"
  node="NodeName=localhost ${node#NodeName=* }"
  cat >"$CONF.tmp" <<EOF
# Written by jobs/local/slurm-cluster.sh: a one-node cluster on localhost.
ClusterName=lpsgd
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Short credential lifetime: a requeued job may start again within seconds.
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=10
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
TmpFS=$DIR/tmp
# No cgroups: works in containers and needs nothing set up on the host.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# Schedule every 2 s (the default leaves a requeued job pending for minutes).
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=2,sched_interval=2
JobRequeue=1
MailProg=/bin/true
ReturnToService=2
InactiveLimit=0
KillWait=10
MinJobAge=300
$node State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.tmp" "$CONF"
}

node_state() { sinfo -h -n localhost -o %t 2>/dev/null | head -n 1; }

start() {
  [[ $(id -u) -eq 0 ]] || die "needs root (slurmd starts the jobs' processes as their users)"
  local b
  for b in munged slurmctld slurmd sinfo scontrol; do
    command -v "$b" >/dev/null || die "$b not found (Debian: apt-get install slurm-wlm munge)"
  done
  write_config
  # munged publishes its socket only under directories everyone may enter.
  local d=$DIR perm
  while [[ $d != / ]]; do
    d=$(dirname "$d")
    perm=$(stat -c %a "$d")
    ((${perm: -1} & 1)) || die "munged needs $d searchable by all (chmod o+x, or another LPSGD_SLURM_DIR)"
  done
  if ! daemon_pid munged >/dev/null; then
    munged --socket="$MUNGE_SOCKET" --key-file="$DIR/munge/munge.key" \
      --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
      --seed-file="$DIR/munge/munged.seed" || { log_tail; die "munged did not start"; }
  fi
  local restarted=0
  if ! daemon_pid slurmctld >/dev/null; then
    slurmctld -f "$CONF" || { log_tail; die "slurmctld did not start"; }
    restarted=1
  fi
  if ! daemon_pid slurmd >/dev/null; then
    slurmd -f "$CONF" -N localhost || { log_tail; die "slurmd did not start"; }
  fi
  local deadline=$((SECONDS + TIMEOUT)) state="" jobs
  while ((SECONDS < deadline)); do
    state=$(node_state)
    if ((restarted)) && [[ -n $state ]]; then
      # Jobs in the saved state outlived a crash (stop cancels them all); the
      # job ids go on from there, so that no run directory keyed on one is reused.
      jobs=$(squeue -h -o %i | tr '\n' ' ')
      if [[ -n $jobs ]]; then
        say "cancelling jobs left from before: $jobs"
        # shellcheck disable=SC2086  # one id per word
        scancel $jobs || true
      fi
      restarted=0
    fi
    # mix/alloc: slurmctld was up and has jobs running.
    if [[ $state =~ ^(idle|mix|alloc)$ ]] && [[ $state == idle || $(squeue -h -o %i | head -c 1) ]]; then
      say "up in $DIR (node $state, SLURM_CONF=$CONF)"
      return 0
    fi
    sleep 0.2
  done
  log_tail
  die "node not idle after ${TIMEOUT}s (state '${state:-no answer}'); stop with: $0 stop"
}

stop() {
  if [[ ! -s $CONF ]]; then
    say "no cluster in $DIR"
    return 0
  fi
  local deadline pids
  if daemon_pid slurmctld >/dev/null; then
    # Cancel first: a job whose slurmd is gone would leave its slurmstepd
    # behind. Again while any is left: a job may requeue itself on the way out.
    # (Without slurmd no job can end: what is left is killed below.)
    deadline=$((SECONDS + TIMEOUT))
    while ((SECONDS < deadline)) && daemon_pid slurmd >/dev/null &&
          [[ -n $(squeue -h -o %i 2>/dev/null | head -c 1) ]]; do
      scancel --quiet --user="$(id -un)" 2>/dev/null || true
      sleep 0.5
    done
    scontrol shutdown >/dev/null 2>&1 || true
  fi
  deadline=$((SECONDS + TIMEOUT))
  while ((SECONDS < deadline)); do
    daemon_pid slurmctld >/dev/null || daemon_pid slurmd >/dev/null || break
    sleep 0.2
  done
  pids=$(daemon_pid munged || true)
  if [[ -n $pids ]]; then kill "$pids" 2>/dev/null || true; fi
  deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)) && [[ -n $(cluster_pids) ]]; do sleep 0.2; done
  # What is left (a job step that outlived its slurmd, say): TERM, then KILL.
  local sig
  for sig in TERM KILL; do
    pids=$(cluster_pids)
    [[ -n $pids ]] || break
    # shellcheck disable=SC2086  # one pid per word
    echo "slurm-cluster: sending SIG$sig to what did not stop: $(ps -o pid=,comm= -p ${pids//$'\n'/,} | tr '\n' ' ')" >&2
    # shellcheck disable=SC2086
    kill -"$sig" $pids 2>/dev/null || true
    deadline=$((SECONDS + 3))
    while ((SECONDS < deadline)) && [[ -n $(cluster_pids) ]]; do sleep 0.2; done
  done
  pids=$(cluster_pids)
  [[ -z $pids ]] || die "still running after stop: pids ${pids//$'\n'/ }"
  say "stopped (no daemon or job process of $DIR left)"
}

status() {
  local d pid up=1
  for d in munged slurmctld slurmd; do
    if pid=$(daemon_pid $d); then
      echo "$d: running (pid $pid)"
    else
      echo "$d: stopped"; up=0
    fi
  done
  if ((up)); then
    sinfo
    squeue
    return 0
  fi
  return 3
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) printf 'export SLURM_CONF=%q\nexport LPSGD_SLURM_DIR=%q\n' "$CONF" "$DIR" ;;
  *) echo "usage: $0 start|stop|status|env   (cluster in \${LPSGD_SLURM_DIR:-/tmp/lpsgd-slurm})" >&2; exit 2 ;;
esac
