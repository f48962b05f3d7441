#!/usr/bin/env bash
# A Slurm cluster on this machine for trying jobs/slurm/*.sbatch and for the
# e2e tests: munged, slurmctld and slurmd. Everything it writes lives under one
# directory; no file in /etc is read or touched.
#
#   jobs/local/slurm-cluster.sh start    # up (idempotent), waits until the nodes are idle
#   eval "$(jobs/local/slurm-cluster.sh env)"   # point sbatch, squeue, ... at it
#   jobs/local/slurm-cluster.sh status   # daemons, sinfo, squeue; exit 3 when not up
#   jobs/local/slurm-cluster.sh stop     # cancel jobs, shut down, verify nothing is left
#   jobs/local/slurm-cluster.sh exec CMD...   # a Slurm command (sbatch, squeue, ...) run
#                                             # where it reaches this cluster
#
# One node (the default): localhost, every daemon on this machine's network.
# --netns (before the command): one node per network namespace of the cluster
# jobs/local/netns-cluster.sh brought up, each with its own slurmd at its own
# address, so `sbatch --nodes=4` spans namespaces and its ranks talk over the
# shaped links. Each daemon runs in its node's namespace under the node's host
# name, with the cluster's hosts file and a private TmpFS (node-local /tmp of a
# real cluster); slurmctld runs in node 0. Clients must run where they reach
# it: `slurm-cluster.sh --netns exec sbatch ...` (from the host namespace,
# sbatch cannot reach node 0).
#
# LPSGD_SLURM_DIR   where it lives (default /tmp/lpsgd-slurm, /tmp/lpsgd-slurm-netns
#                   with --netns); a directory is one kind of cluster for good
# LPSGD_SLURM_PORT  slurmctld port, slurmd takes the next one (default: the first
#                   free pair from 6817); read only when the config is first written
# LPSGD_SLURM_TIMEOUT  seconds start and stop wait (default 30)
# LPSGD_NETNS_PREFIX   which netns cluster --netns uses (default lpsgd, as netns-cluster.sh)
# Needs root: slurmd launches the jobs' processes.
set -euo pipefail

NETNS=0
if [[ ${1:-} == --netns ]]; then NETNS=1; shift; fi
if ((NETNS)); then DIR=${LPSGD_SLURM_DIR:-/tmp/lpsgd-slurm-netns}; else DIR=${LPSGD_SLURM_DIR:-/tmp/lpsgd-slurm}; fi
TIMEOUT=${LPSGD_SLURM_TIMEOUT:-30}
CONF=$DIR/etc/slurm.conf
MUNGE_SOCKET=$DIR/munge-run/munge.socket
# Slurm's clients and daemons started from here read this cluster's config only.
export SLURM_CONF=$CONF
# A directory made for namespaces stays one (its config names their nodes).
if [[ -s $DIR/etc/netns ]]; then
  NETNS=1
elif [[ -s $CONF ]] && ((NETNS)); then
  echo "slurm-cluster: error: $DIR holds a one-node cluster; give --netns another LPSGD_SLURM_DIR" >&2
  exit 2
fi
die() { echo "slurm-cluster: error: $*" >&2; exit 1; }
say() { echo "slurm-cluster: $*"; }

# The nodes and their addresses.
NODES=(localhost) ADDRS=(127.0.0.1)
if ((NETNS)); then
  NETNS_PREFIX=${LPSGD_NETNS_PREFIX:-lpsgd}
  # As the config was written (its hosts file), else as netns-cluster.sh has them.
  if [[ -s $DIR/etc/netns ]]; then
    NETNS_PREFIX=$(sed -n 's/^prefix=//p' "$DIR/etc/netns")
    hosts=$(grep -v ' localhost$' "$DIR/etc/hosts" 2>/dev/null || true)
  else
    hosts=$(LPSGD_NETNS_PREFIX=$NETNS_PREFIX "$(dirname "$0")/netns-cluster.sh" hosts 2>/dev/null || true)
  fi
  NODES=() ADDRS=()
  while read -r addr name; do
    [[ -n $name ]] && NODES+=("$name") ADDRS+=("$addr")
  done <<<"$hosts"
fi

# in_node NODE CMD...: CMD on NODE. With --netns: in the node's network
# namespace, under its host name (a UTS namespace), seeing the cluster's hosts
# file as /etc/hosts and its own directory as TmpFS (a mount namespace, so
# nothing changes outside); its children (slurmstepd, the job) inherit all three.
# nsenter rather than `ip netns exec`, which remounts /sys and so hides
# /sys/fs/cgroup, without which slurmd does not start.
in_node() {
  local node=$1
  shift
  if ((!NETNS)); then "$@"; return; fi
  # shellcheck disable=SC2016  # expanded by the inner shell
  nsenter --net="/run/netns/$node" unshare --uts --mount /bin/sh -c \
    'hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3" "$4" && shift 4 && exec "$@"' \
    in_node "$node" "$DIR/etc/hosts" "$DIR/node-tmp/$node" "$DIR/tmp" "$@"
}
# A Slurm client command where it reaches slurmctld (node 0).
client() { in_node "${NODES[0]}" "$@"; }

# Pid of a daemon of this cluster from its pid file, if it is alive and still
# that program (a stale pid file may name a reused pid). A zombie waiting for
# init to reap it counts as gone. A second argument names the pid file NAME-ID.pid.
daemon_pid() {
  local name=$1 file=$DIR/run/$1${2:+-$2}.pid pid comm state
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
  local port=${LPSGD_SLURM_PORT:-} hw i
  if [[ -z $port ]] && ((NETNS)); then
    port=6817  # the namespaces' ports are theirs alone
  elif [[ -z $port ]]; then
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
  # Every node is this machine as slurmd sees it (CPUs, memory), under its own name.
  hw=$(slurmd -C | head -n 1) || die "slurmd -C failed"
  hw=${hw#NodeName=* }
  local ctld=localhost spool=$DIR/spool pidf=$DIR/run/slurmd.pid logf=$DIR/log/slurmd.log
  local nodes="NodeName=localhost $hw State=UNKNOWN" what="a one-node cluster on localhost"
  if ((NETNS)); then
    ctld="${NODES[0]}(${ADDRS[0]})" spool=$DIR/spool/%n pidf=$DIR/run/slurmd-%n.pid
    logf=$DIR/log/slurmd-%n.log nodes="" what="one node per network namespace of $NETNS_PREFIX"
    echo "127.0.0.1 localhost" >"$DIR/etc/hosts"
    for ((i = 0; i < ${#NODES[@]}; i++)); do
      nodes+="NodeName=${NODES[i]} NodeAddr=${ADDRS[i]} $hw State=UNKNOWN"$'\n'
      echo "${ADDRS[i]} ${NODES[i]}" >>"$DIR/etc/hosts"
      mkdir -p "$DIR/spool/${NODES[i]}" "$DIR/node-tmp/${NODES[i]}"
    done
    nodes=${nodes%$'\n'}
    echo "prefix=$NETNS_PREFIX" >"$DIR/etc/netns"  # the nodes: etc/hosts
  fi
  local partition
  partition=$(IFS=,; echo "${NODES[*]}")
  cat >"$CONF.tmp" <<EOF
# Written by jobs/local/slurm-cluster.sh: $what.
ClusterName=lpsgd
SlurmctldHost=$ctld
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Short credential lifetime: a requeued job may start again within seconds.
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=10
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$pidf
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$logf
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
# A node whose slurmd stops answering is down after 10 s (the default waits
# 300): a job that loses a node is requeued onto the others that soon. A node
# that comes back registers and is used again (ReturnToService=2).
SlurmdTimeout=10
ReturnToService=2
InactiveLimit=0
KillWait=10
MinJobAge=300
$nodes
PartitionName=debug Nodes=$partition Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.tmp" "$CONF"
}

# Every node's state as slurmctld sees it, one word per node ("idle idle mix").
node_states() { client sinfo -h -N -o %t 2>/dev/null | tr '\n' ' ' | sed 's/ $//'; }
# Up: every node answers idle, or mix/alloc while jobs run (slurmctld was up with jobs).
nodes_ready() {
  local states=$1 s n=0
  for s in $states; do
    [[ $s =~ ^(idle|mix|alloc)$ ]] || return 1
    n=$((n + 1))
  done
  ((n == ${#NODES[@]})) || return 1
  [[ " $states " != *" "[ma]* ]] || [[ -n $(client squeue -h -o %i | head -c 1) ]]
}
# Pid of NODE's slurmd: its pid file is slurmd.pid for the one local node,
# slurmd-NODE.pid with --netns (SlurmdPidFile's %n).
slurmd_pid() { if ((NETNS)); then daemon_pid slurmd "$1"; else daemon_pid slurmd; fi; }
any_slurmd_up() {
  local node
  for node in "${NODES[@]}"; do slurmd_pid "$node" >/dev/null && return 0; done
  return 1
}

start() {
  [[ $(id -u) -eq 0 ]] || die "needs root (slurmd starts the jobs' processes as their users)"
  local b i
  for b in munged slurmctld slurmd sinfo scontrol; do
    command -v "$b" >/dev/null || die "$b not found (Debian: apt-get install slurm-wlm munge)"
  done
  if ((NETNS)); then
    for b in unshare nsenter; do
      command -v "$b" >/dev/null || die "--netns needs $b (Debian: util-linux)"
    done
    ((${#NODES[@]} >= 1)) || die "--netns: no netns cluster '$NETNS_PREFIX' is up (jobs/local/netns-cluster.sh up --nodes N first)"
    for ((i = 0; i < ${#NODES[@]}; i++)); do
      ip netns list | awk '{print $1}' | grep -qx "${NODES[i]}" ||
        die "--netns: namespace ${NODES[i]} is missing (this cluster was made for ${#NODES[@]} nodes of '$NETNS_PREFIX'; bring that netns cluster up, or stop and remove $DIR)"
    done
  fi
  write_config
  # munged publishes its socket only under directories everyone may enter.
  local d=$DIR perm
  while [[ $d != / ]]; do
    d=$(dirname "$d")
    perm=$(stat -c %a "$d")
    ((${perm: -1} & 1)) || die "munged needs $d searchable by all (chmod o+x, or another LPSGD_SLURM_DIR)"
  done
  # One munged for every node: the nodes reach its socket through the file system.
  if ! daemon_pid munged >/dev/null; then
    munged --socket="$MUNGE_SOCKET" --key-file="$DIR/munge/munge.key" \
      --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
      --seed-file="$DIR/munge/munged.seed" || { log_tail; die "munged did not start"; }
  fi
  local restarted=0
  if ! daemon_pid slurmctld >/dev/null; then
    in_node "${NODES[0]}" slurmctld -f "$CONF" || { log_tail; die "slurmctld did not start"; }
    restarted=1
  fi
  for ((i = 0; i < ${#NODES[@]}; i++)); do
    slurmd_pid "${NODES[i]}" >/dev/null && continue
    in_node "${NODES[i]}" slurmd -f "$CONF" -N "${NODES[i]}" ||
      { log_tail; die "slurmd of ${NODES[i]} did not start"; }
  done
  local deadline=$((SECONDS + TIMEOUT)) states="" jobs
  while ((SECONDS < deadline)); do
    states=$(node_states)
    if ((restarted)) && [[ -n $states ]]; then
      # Jobs in the saved state outlived a crash (stop cancels them all); the
      # job ids go on from there, so that no run directory keyed on one is reused.
      jobs=$(client squeue -h -o %i | tr '\n' ' ')
      if [[ -n $jobs ]]; then
        say "cancelling jobs left from before: $jobs"
        # shellcheck disable=SC2086  # one id per word
        client scancel $jobs || true
      fi
      restarted=0
    fi
    if nodes_ready "$states"; then
      say "up in $DIR (${#NODES[@]} node(s): $states; SLURM_CONF=$CONF)"
      return 0
    fi
    sleep 0.2
  done
  log_tail
  die "nodes not idle after ${TIMEOUT}s (states '${states:-no answer}'); stop with: $0 stop"
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
    while ((SECONDS < deadline)) && any_slurmd_up &&
          [[ -n $(client squeue -h -o %i 2>/dev/null | head -c 1) ]]; do
      client scancel --quiet --user="$(id -un)" 2>/dev/null || true
      sleep 0.5
    done
    client scontrol shutdown >/dev/null 2>&1 || true
  fi
  deadline=$((SECONDS + TIMEOUT))
  while ((SECONDS < deadline)); do
    daemon_pid slurmctld >/dev/null || any_slurmd_up || break
    sleep 0.2
  done
  pids=$(daemon_pid munged || true)
  if [[ -n $pids ]]; then kill "$pids" 2>/dev/null || true; fi
  deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)) && [[ -n $(cluster_pids) ]]; do sleep 0.2; done
  # What is left (a job step that outlived its slurmd, a daemon whose
  # namespace is gone): TERM, then KILL.
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
  local d node pid up=1
  for d in munged slurmctld; do
    if pid=$(daemon_pid $d); then
      echo "$d: running (pid $pid)"
    else
      echo "$d: stopped"; up=0
    fi
  done
  for node in "${NODES[@]}"; do
    d=slurmd
    ((!NETNS)) || d+=" of $node"
    if pid=$(slurmd_pid "$node"); then
      echo "$d: running (pid $pid)"
    else
      echo "$d: stopped"; up=0
    fi
  done
  if ((up)); then
    client sinfo
    client squeue
    return 0
  fi
  return 3
}

usage="usage: $0 [--netns] start|stop|status|env|exec CMD...   (cluster in \${LPSGD_SLURM_DIR:-/tmp/lpsgd-slurm[-netns]})"
case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env)
    printf 'export SLURM_CONF=%q\nexport LPSGD_SLURM_DIR=%q\n' "$CONF" "$DIR"
    ((!NETNS)) || echo "# the cluster's nodes are namespaces: run Slurm commands with $0 --netns exec CMD..." ;;
  exec)
    shift
    (($#)) || die "exec: which command? ($0 exec sbatch ...)"
    [[ -s $CONF ]] || die "no cluster in $DIR (start it first)"
    client "$@" ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
