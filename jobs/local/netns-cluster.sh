#!/usr/bin/env bash
# A cluster of N nodes on this one machine: each node a network namespace with
# its own network stack, joined by veth links whose rate tc shapes (tbf), and
# MPI over TCP between them — so LP's inter-node chain crosses a real network
# stack with limited bandwidth. Needs root.
#
#   netns-cluster.sh up --nodes N [--rate 400mbit] [--topology switch|chain] [--queue 100ms]
#                       [--delay 1ms] [--loss 0.1%]     (only with netem; this kernel has none)
#   netns-cluster.sh run [--ranks-per-node R] [--timeout S] -- lpsgd ARGS...
#   netns-cluster.sh link I down|up|rate RATE           (faults: the link of node I on a
#                                                        switch; between nodes I and I+1 on a chain)
#   netns-cluster.sh status
#   netns-cluster.sh hosts                               (the nodes as hosts-file lines: ADDRESS NAME)
#   netns-cluster.sh down                                (removes everything it made; idempotent)
#
# Nodes are namespaces lpsgd-n0 ... lpsgd-n<N-1> (LPSGD_NETNS_PREFIX changes "lpsgd"),
# at 198.18.0.<i+1> (198.18.0.0/15
# is reserved for network benchmarks; addresses exist only inside these
# namespaces, and no interface, route or setting of the host is touched).
#   switch  every node has one link (eth0) to a bridge in namespace lpsgd-sw,
#           shaped in both directions: a non-blocking switch.
#   chain   node i has a link to node i+1 (its "right", their "left"), shaped in
#           both directions; nodes forward, so any node reaches any other along
#           the chain (a route per node address).
# Every shaped link queues at most --queue of traffic at its rate (tbf's
# latency; default 100ms, a deep buffer: 6 MB at 500mbit; a datacenter
# switch port buffers a few ms, e.g. --queue 2ms); more is dropped.
# `run` starts R ranks in every node under one Open MPI job: mpirun runs in
# lpsgd-n0 and starts its daemons through an rsh agent that enters each
# node's namespace (hostnames = namespace names), TCP between nodes and shared
# memory only inside one (btl tcp,vader,self): lpsgd's chain sees N nodes of R
# ranks, peer links inside a node, MPI links over TCP between nodes. A
# command's "lpsgd" means this checkout's build/bin/lpsgd.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# Two clusters can be up at once under different prefixes (the tests use their own).
PREFIX=${LPSGD_NETNS_PREFIX:-lpsgd}
[[ $PREFIX =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "netns-cluster.sh: error: LPSGD_NETNS_PREFIX must be 1-8 lower-case letters and digits" >&2; exit 2; }
STATE=/run/$PREFIX-netns

die() { echo "netns-cluster.sh: error: $*" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || die "needs root (ip netns, tc)"
command -v ip >/dev/null || die "needs ip (Debian: iproute2)"
command -v tc >/dev/null || die "needs tc (Debian: iproute2)"

ns() { echo "$PREFIX-n$1"; }
inns() { local n=$1; shift; ip netns exec "$n" "$@"; }
node_addr() { echo "198.18.0.$(($1 + 1))"; }

# tbf on one interface: burst of 1 ms at the rate (at least 128 KiB), a queue
# of QUEUE (tc's latency: what waits longer than that at the rate is dropped).
shape() {  # NAMESPACE IFACE RATE QUEUE [change]
  local bytes_per_s burst verb=${5:-add}
  bytes_per_s=$(rate_bytes "$3")
  burst=$((bytes_per_s / 1000))
  ((burst < 131072)) && burst=131072
  inns "$1" tc qdisc "$verb" dev "$2" root tbf rate "$3" burst "$burst" latency "$4"
}
# A tc rate (400mbit, 1gbit, 100mbps, 10kbit ...) in bytes per second.
rate_bytes() {
  local r=${1,,} n unit
  [[ $r =~ ^([0-9.]+)([a-z]*)$ ]] || die "bad rate '$1' (e.g. 400mbit, 1gbit)"
  n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
  case $unit in
    bit) awk -v n="$n" 'BEGIN { printf "%d", n / 8 }' ;;
    kbit) awk -v n="$n" 'BEGIN { printf "%d", n * 125 }' ;;
    mbit) awk -v n="$n" 'BEGIN { printf "%d", n * 125000 }' ;;
    gbit) awk -v n="$n" 'BEGIN { printf "%d", n * 125000000 }' ;;
    bps) awk -v n="$n" 'BEGIN { printf "%d", n }' ;;
    kbps) awk -v n="$n" 'BEGIN { printf "%d", n * 1000 }' ;;
    mbps) awk -v n="$n" 'BEGIN { printf "%d", n * 1000000 }' ;;
    gbps) awk -v n="$n" 'BEGIN { printf "%d", n * 1000000000 }' ;;
    *) die "bad rate unit in '$1' (use bit, kbit, mbit, gbit or bps, kbps, mbps, gbps)" ;;
  esac
}

state_get() { sed -n "s/^$1=//p" "$STATE/cluster" 2>/dev/null; }
# The links' queue (a cluster made before --queue existed has 100ms).
state_queue() { local q; q=$(state_get queue); echo "${q:-100ms}"; }

# ---- down: everything named lpsgd-n*/lpsgd-sw, whatever state says ---------------------
cmd_down() {
  local n
  for n in $(ip netns list | awk '{print $1}' | grep -E "^$PREFIX-(n[0-9]+|sw)$" || true); do
    ip netns pids "$n" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$n"
  done
  rm -rf "$STATE"
  echo "netns-cluster.sh: down"
}

# ---- up ----------------------------------------------------------------------------------
cmd_up() {
  local nodes=0 rate=400mbit topo=switch queue=100ms delay="" loss=""
  while (($#)); do
    case $1 in
      --nodes) nodes=$2; shift 2 ;;
      --rate) rate=$2; shift 2 ;;
      --topology) topo=$2; shift 2 ;;
      --queue) queue=$2; shift 2 ;;
      --delay) delay=$2; shift 2 ;;
      --loss) loss=$2; shift 2 ;;
      *) die "up: unknown option '$1'" ;;
    esac
  done
  [[ $nodes =~ ^[0-9]+$ ]] || die "up: --nodes must be a number, got '$nodes'"
  ((nodes >= 2 && nodes <= 64)) || die "up: --nodes must be 2..64, got $nodes"
  [[ $topo == switch || $topo == chain ]] || die "up: --topology must be switch or chain, got '$topo'"
  rate_bytes "$rate" >/dev/null
  [[ $queue =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || die "up: --queue must be a time such as 2ms or 100ms, got '$queue'"
  if [[ -n $delay || -n $loss ]]; then
    # netem is the only way to add delay or loss; find out whether this kernel has it.
    ip netns add "$PREFIX-probe" 2>/dev/null || true
    local err
    err=$(inns "$PREFIX-probe" tc qdisc add dev lo root netem delay 1ms 2>&1) || {
      ip netns del "$PREFIX-probe"
      die "--delay and --loss need the netem qdisc, which this kernel lacks (tc: ${err//$'\n'/ })"
    }
    ip netns del "$PREFIX-probe"
  fi
  cmd_down >/dev/null
  trap 'echo "netns-cluster.sh: up failed; removing what it made" >&2; cmd_down >/dev/null' ERR
  mkdir -p "$STATE"
  local i
  for ((i = 0; i < nodes; i++)); do
    ip netns add "$(ns "$i")"
    inns "$(ns "$i")" ip link set lo up
    # A TCP connection over a dead link gives up after 5 retransmissions
    # (about 13 s) instead of Linux's 15 (about 15 min): Open MPI's daemons then
    # see a lost node and end the job, as a cluster's launcher would.
    inns "$(ns "$i")" sysctl -qw net.ipv4.tcp_retries2=5
  done
  if [[ $topo == switch ]]; then
    ip netns add "$PREFIX-sw"
    inns "$PREFIX-sw" ip link add br0 type bridge
    inns "$PREFIX-sw" ip link set br0 up
    for ((i = 0; i < nodes; i++)); do
      ip link add "p$i" netns "$PREFIX-sw" type veth peer name eth0 netns "$(ns "$i")"
      inns "$PREFIX-sw" ip link set "p$i" master br0 up
      inns "$(ns "$i")" ip addr add "$(node_addr "$i")/24" dev eth0
      inns "$(ns "$i")" ip link set eth0 up
      shape "$(ns "$i")" eth0 "$rate" "$queue"    # node -> switch
      shape "$PREFIX-sw" "p$i" "$rate" "$queue"   # switch -> node
    done
  else
    local n j
    # Each link interface carries just its node's address (a /24 without the
    # subnet route: Open MPI selects interfaces by 198.18.0.0/24 and takes one
    # address per interface); a node reaches its neighbours by a route per
    # neighbour on that link, and the others through them.
    for ((i = 0; i + 1 < nodes; i++)); do
      ip link add right netns "$(ns "$i")" type veth peer name left netns "$(ns $((i + 1)))"
      inns "$(ns "$i")" ip addr add "$(node_addr "$i")/24" dev right noprefixroute
      inns "$(ns $((i + 1)))" ip addr add "$(node_addr $((i + 1)))/24" dev left noprefixroute
      inns "$(ns "$i")" ip link set right up
      inns "$(ns $((i + 1)))" ip link set left up
      shape "$(ns "$i")" right "$rate" "$queue"
      shape "$(ns $((i + 1)))" left "$rate" "$queue"
    done
    for ((i = 0; i < nodes; i++)); do
      n=$(ns "$i")
      inns "$n" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
      ((i + 1 < nodes)) && inns "$n" ip route add "$(node_addr $((i + 1)))/32" dev right
      ((i > 0)) && inns "$n" ip route add "$(node_addr $((i - 1)))/32" dev left
      for ((j = 0; j < nodes; j++)); do
        if ((j > i + 1)); then
          inns "$n" ip route add "$(node_addr "$j")/32" via "$(node_addr $((i + 1)))" dev right
        elif ((j < i - 1)); then
          inns "$n" ip route add "$(node_addr "$j")/32" via "$(node_addr $((i - 1)))" dev left
        fi
      done
    done
  fi
  # The rsh agent mpirun uses to start its daemons: it enters the node's namespace.
  # It also gives the node a host name of its own (a UTS namespace): Open MPI
  # names session directories and shared-memory files (its daemons' topology,
  # PMIx's store, shared-memory transport) after the host, and nodes that all
  # had the machine's name collided in /tmp and /dev/shm (daemons crashed,
  # ranks of different nodes were taken for neighbours).
  cat >"$STATE/agent" <<'EOF'
#!/bin/sh
# Open MPI rsh agent: AGENT [options] NODE COMMAND... -> COMMAND in NODE's
# network namespace, under host name NODE.
while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done
node=$1; shift
exec ip netns exec "$node" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$node" "$*"
EOF
  chmod +x "$STATE/agent"
  printf 'nodes=%s\ntopology=%s\nrate=%s\nqueue=%s\n' "$nodes" "$topo" "$rate" "$queue" >"$STATE/cluster"
  trap - ERR
  echo "netns-cluster.sh: up: $nodes nodes, $topo, $rate per link and direction, queue $queue"
}

need_up() { [[ -f $STATE/cluster ]] || die "no cluster is up (netns-cluster.sh up --nodes N)"; }

# ---- run ---------------------------------------------------------------------------------
cmd_run() {
  need_up
  local rpn=1 timeout_s=0
  while (($#)); do
    case $1 in
      --ranks-per-node) rpn=$2; shift 2 ;;
      --timeout) timeout_s=$2; shift 2 ;;
      --) shift; break ;;
      *) die "run: unknown option '$1' (the command goes after --)" ;;
    esac
  done
  (($#)) || die "run: nothing to run (netns-cluster.sh run -- lpsgd bench ...)"
  [[ $rpn =~ ^[1-9][0-9]*$ ]] || die "run: --ranks-per-node must be >= 1, got '$rpn'"
  [[ $1 == lpsgd ]] && set -- "$repo/build/bin/lpsgd" "${@:2}"
  # Open MPI's mpirun by name: the system's mpirun may be another MPI's.
  local mpirun=mpirun
  command -v mpirun.openmpi >/dev/null && mpirun=mpirun.openmpi
  if [[ $(ldd "$(command -v "$1" || echo "$1")" 2>/dev/null) == *libmpich* ]]; then
    die "run: $1 is built with MPICH; the cluster runs Open MPI jobs (build with tools/setup.sh --mpi openmpi)"
  fi
  local nodes i
  nodes=$(state_get nodes)
  : >"$STATE/hosts"
  for ((i = 0; i < nodes; i++)); do echo "$(ns "$i") slots=$rpn" >>"$STATE/hosts"; done
  local t=()
  ((timeout_s > 0)) && t=(timeout -k 5 "$timeout_s")
  # routed=direct: every daemon talks to mpirun itself (the default tree of
  # daemons sometimes failed to wire up here). Keepalives on the daemons'
  # connections: a daemon cut off from mpirun notices in about 11 s, kills its
  # ranks and exits, rather than waiting forever on an idle connection.
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    "${t[@]}" ip netns exec "$(ns 0)" "$mpirun" -n $((nodes * rpn)) --hostfile "$STATE/hosts" \
    --mca plm_rsh_agent "$STATE/agent" --mca routed direct \
    --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 \
    --mca oob_tcp_if_include 198.18.0.0/24 --mca btl_tcp_if_include 198.18.0.0/24 \
    --mca btl tcp,vader,self --bind-to none --oversubscribe "$@"
}

# ---- link faults -------------------------------------------------------------------------
cmd_link() {
  need_up
  local i=${1:-} what=${2:-} nodes topo
  nodes=$(state_get nodes) topo=$(state_get topology)
  [[ $i =~ ^[0-9]+$ ]] || die "link: which link? (a node number)"
  local a b   # "namespace iface" of the two ends
  if [[ $topo == switch ]]; then
    ((i < nodes)) || die "link: no node $i"
    a="$(ns "$i") eth0" b="$PREFIX-sw p$i"
  else
    ((i + 1 < nodes)) || die "link: no link from node $i to node $((i + 1))"
    a="$(ns "$i") right" b="$(ns $((i + 1))) left"
  fi
  local end n d
  case $what in
    # The far end goes down, as a switch port or a neighbour's NIC would: the
    # node's own interface loses its carrier but keeps its address and routes,
    # so packets are lost and TCP retries rather than failing at once.
    down|up) read -r n d <<<"$b"; inns "$n" ip link set "$d" "$what" ;;
    rate)
      [[ -n ${3:-} ]] || die "link: rate needs a value"
      rate_bytes "$3" >/dev/null
      for end in "$a" "$b"; do read -r n d <<<"$end"; shape "$n" "$d" "$3" "$(state_queue)" change; done ;;
    *) die "link: use down, up or rate RATE" ;;
  esac
  echo "netns-cluster.sh: link $i $what ${3:-}"
}

cmd_status() {
  if [[ ! -f $STATE/cluster ]]; then echo "no cluster is up"; return 0; fi
  echo "$(state_get nodes) nodes, $(state_get topology), $(state_get rate) per link and direction, queue $(state_queue)"
  local n
  for n in $(ip netns list | awk '{print $1}' | grep -E "^$PREFIX-" | sort -V); do
    echo "$n:"
    inns "$n" ip -brief addr | grep -v '^lo ' | sed 's/^/  /'
    inns "$n" tc qdisc show | grep tbf | sed 's/^/  /'
  done
}

# The one place that knows the nodes' names and addresses (slurm-cluster.sh asks here).
cmd_hosts() {
  need_up
  local i
  for ((i = 0; i < $(state_get nodes); i++)); do echo "$(node_addr "$i") $(ns "$i")"; done
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  run) shift; cmd_run "$@" ;;
  link) shift; cmd_link "$@" ;;
  status) cmd_status ;;
  hosts) cmd_hosts ;;
  down) cmd_down ;;
  -h|--help|"") awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" ;;
  *) die "unknown command '$1' (use up, run, link, status, hosts or down)" ;;
esac
