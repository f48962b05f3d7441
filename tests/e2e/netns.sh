#!/usr/bin/env bash
# lpsgd across a real network stack: 4 nodes as network namespaces on this
# machine (jobs/local/netns-cluster.sh, prefix lpsgdt so a user's cluster is
# left alone), shaped veth links, Open MPI over TCP between them.
#   - MPI sees 4 hosts: lpsgd's chain has 4 nodes, so no two ranks of
#     different namespaces share a memory window;
#   - every collective and algorithm, --check: 0 wrong;
#   - calibration tells a switch (one port per node) from a chain of links;
#   - training: 4 nodes x 1 rank and 2 nodes x 2 ranks end bitwise equal to the
#     same P and chain with pretend nodes on one host (--ranks-per-node);
#   - a link down for 2 s mid-run, and a link whose rate drops tenfold mid-run:
#     bitwise equal to the clean run, only slower;
#   - a link taken down and left down mid-collective: every rank ends with an
#     error naming the neighbour it waits for, within --comm-timeout, and no
#     lpsgd process is left behind.
# Skips where network namespaces cannot be made (not root, no iproute2), and
# under MPICH (the cluster launches through Open MPI's mpirun).
set -u
LPSGD=$1
here=$(dirname "$0")
# shellcheck source=lib.sh
source "$here/lib.sh"
root=$(cd "$here/../.." && pwd)
export LPSGD_NETNS_PREFIX=lpsgdt
C=$root/jobs/local/netns-cluster.sh
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
tmp=$(mktemp -d)
trap '$C down >/dev/null 2>&1; rm -rf "$tmp"' EXIT

# The cluster is an Open MPI job: mpirun starts its daemons in the namespaces
# through an rsh agent, and the cut-link case relies on its daemons' TCP
# keepalives (--mca oob_tcp_keepalive_*). MPICH's Hydra has no counterpart set
# up here, so an MPICH build skips.
if [[ ${LPSGD_MPI_FLAVOUR:-openmpi} != openmpi ]] || [[ $(ldd "$LPSGD" 2>/dev/null) == *libmpich* ]]; then
  echo "SKIP: the netns cluster runs Open MPI jobs (mpirun's rsh agent and TCP keepalives); this build uses ${LPSGD_MPI_FLAVOUR:-MPICH}"
  exit 0
fi

# What the cluster needs of the kernel: namespaces, veth pairs, tbf.
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null ||
   ! ip netns add lpsgdt-probe 2>/dev/null; then
  echo "SKIP: network namespaces cannot be made here (needs root and iproute2)"
  exit 0
fi
if ! ip netns exec lpsgdt-probe ip link add pa type veth peer name pb 2>/dev/null ||
   ! ip netns exec lpsgdt-probe tc qdisc add dev pa root tbf rate 1gbit burst 32k latency 100ms 2>/dev/null; then
  ip netns del lpsgdt-probe
  echo "SKIP: this kernel cannot make veth links or tbf queues in a namespace"
  exit 0
fi
ip netns del lpsgdt-probe

# The cluster's own lpsgd is this build's (run maps "lpsgd" to build/bin/lpsgd;
# the test may be given another build).
run() { "$C" run --timeout 240 "$@"; }

$C up --nodes 4 --rate 1gbit --topology switch >/dev/null || { echo "FAIL: netns-cluster.sh up"; exit 1; }

# ---- every collective and algorithm, 4 nodes ----------------------------------------
run -- "$LPSGD" bench --op bcast,reduce,allreduce --algo lp,mst,be,ring,mpi -b 100K -e 1M -f 10 \
  -n 2 -w 1 --check --block 64K --comm-timeout 60 </dev/null >"$tmp/bench.out" 2>&1
rc=$?
if ((rc == 0)) && grep -q "nodes=4: \[0\] \[1\] \[2\] \[3\]" "$tmp/bench.out" &&
   grep -q "wrong elements in total: 0" "$tmp/bench.out"; then
  echo "ok: 4 namespaces are 4 nodes to MPI and lpsgd; every collective and algorithm right"
  echo "    $(head -n 1 "$tmp/bench.out")"
else
  echo "FAIL: bench across namespaces (exit $rc):"; tail -n 15 "$tmp/bench.out"; fails=$((fails + 1))
fi

# ---- calibration knows a switch from a chain --------------------------------------------
# Three nodes at 200 Mbit/s (so that the links, not the two cores, are slow): a
# node streaming to both neighbours at once halves each stream through its one
# port into a switch, and keeps both at the rate on a chain of links.
for topo in switch chain; do
  $C up --nodes 3 --rate 200mbit --topology "$topo" >/dev/null
  run -- "$LPSGD" bench --calibrate --calibration "$tmp/cal-$topo.ini" </dev/null \
    >"$tmp/cal-$topo.out" 2>&1
  rc=$?
  want="one NIC per node"; [[ $topo == chain ]] && want="a link of its own to each chain neighbour"
  if ((rc == 0)) && grep -q "$want" "$tmp/cal-$topo.out"; then
    echo "ok: calibration on a $topo of 3 nodes: $want; $(grep -o 'measured in [0-9.]* s' "$tmp/cal-$topo.out")"
  else
    echo "FAIL: calibration on a $topo of 3 nodes (exit $rc), wanted '$want':"
    tail -n 5 "$tmp/cal-$topo.out"; fails=$((fails + 1))
  fi
done

# ---- training: namespaces against pretend nodes ------------------------------------------
"$LPSGD" data synth --out "$tmp/d.h5" --samples 2048 --test-samples 256 --shape 1,8,8 --classes 4 \
  --seed 3 >/dev/null || { echo "FAIL: data synth"; exit 1; }
steps=120
train_base=(train --algo lp --data "$tmp/d.h5" --model mlp:64-48-32-4 --batch 16 --lr 0.05 --momentum 0.9
            --epochs 100 --seed 7 --progress off --bucket-mb 0.004 --comm-timeout 60)
train_args=("${train_base[@]}" --eval-every 0)
checksum() { sed -n 's/.*final parameters: checksum \([0-9a-f]*\).*/\1/p' "$1" | head -n 1; }
# "N samples/s, comm wait W%" of a run's last progress line
speed() { grep -o '[0-9.]* samples/s, comm wait [0-9.]*%' "$1" | tail -n 1; }
local_run() {  # NAME P RANKS_PER_NODE
  "${MPIEXEC:-mpiexec}" -n "$2" "${MPI_FLAGS[@]}" "$LPSGD" "${train_args[@]}" --max-steps "$steps" \
    --ranks-per-node "$3" </dev/null >"$tmp/$1.out" 2>&1
}
for layout in "4 1" "2 2"; do
  read -r nodes rpn <<<"$layout"
  $C up --nodes "$nodes" --rate 1gbit --topology switch >/dev/null
  run --ranks-per-node "$rpn" -- "$LPSGD" "${train_args[@]}" --max-steps "$steps" </dev/null \
    >"$tmp/ns-$nodes.out" 2>&1
  local_run "local-$nodes" 4 "$rpn"
  a=$(checksum "$tmp/ns-$nodes.out") b=$(checksum "$tmp/local-$nodes.out")
  if [[ -n $a && $a == "$b" ]]; then
    echo "ok: $nodes nodes x $rpn ranks across namespaces == pretend nodes on one host (checksum $a)"
    echo "    namespaces: $(speed "$tmp/ns-$nodes.out"); pretend nodes: $(speed "$tmp/local-$nodes.out")"
  else
    echo "FAIL: $nodes x $rpn: namespaces '$a', pretend nodes '$b'"
    tail -n 5 "$tmp/ns-$nodes.out" "$tmp/local-$nodes.out"; fails=$((fails + 1))
  fi
done

# ---- faults that heal: a link down for 2 s, a rate dropped tenfold -----------------------
$C up --nodes 4 --rate 1gbit --topology switch >/dev/null
SECONDS=0
run -- "$LPSGD" "${train_args[@]}" --max-steps 3000 </dev/null >"$tmp/clean.out" 2>&1
clean_s=$SECONDS clean=$(checksum "$tmp/clean.out")
echo "note: the clean run of 3000 steps took $clean_s s, $(speed "$tmp/clean.out") (checksum $clean)"
# The fault starts a third of the way through the run (step 1000 of 3000), as
# rank 0 writes it to its metrics file (an evaluation every 100 steps, which
# leaves the parameters as they are), not after a time: a sleep sized to this
# machine's run (once half the clean run's seconds, at least 1.5) could land
# after the end of a run on a faster machine, or in the start-up of one on a
# slower machine (issue 31). (Not the progress lines: mpirun passes them on
# here up to seconds late.)
nfault=0
last_step() { sed -n 's/.*"step": \([0-9]*\),.*/\1/p' "$1" 2>/dev/null | tail -n 1; }
fault_run() {  # NAME FAULT...
  local name=$1 m=$tmp/fault$((++nfault)).jsonl; shift
  SECONDS=0
  run -- "$LPSGD" "${train_base[@]}" --eval-every 100 --metrics "$m" --max-steps 3000 \
    </dev/null >"$tmp/$name.out" 2>&1 &
  local pid=$! at=""
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < 120)); do
    at=$(last_step "$m")
    ((${at:-0} >= 1000)) && break
    sleep 0.05
  done
  if ((${at:-0} >= 1000)) && kill -0 "$pid" 2>/dev/null; then
    "$@"
  else
    at=""
  fi
  wait "$pid"
  local rc=$? took=$SECONDS sum
  sum=$(checksum "$tmp/$name.out")
  if [[ -z $at ]]; then
    echo "FAIL: $name: the fault was not made: the run (exit $rc) was not seen running past step 1000"
    tail -n 5 "$tmp/$name.out"; fails=$((fails + 1))
  elif ((rc == 0)) && [[ $sum == "$clean" ]]; then
    echo "ok: $name (from step $at of 3000): same parameters as the clean run, $took s, $(speed "$tmp/$name.out")"
  else
    echo "FAIL: $name: exit $rc, checksum '$sum' (clean '$clean')"; tail -n 5 "$tmp/$name.out"
    fails=$((fails + 1))
  fi
}
fault_run "link 1 down for 2 s" bash -c "'$C' link 1 down >/dev/null; sleep 2; '$C' link 1 up >/dev/null"
fault_run "link 2 at a tenth of its rate" bash -c "'$C' link 2 rate 100mbit >/dev/null"
$C link 2 rate 1gbit >/dev/null

# ---- a link down for good mid-collective --------------------------------------------------
# Each rank's stderr is also kept in a file on its node: node 1 is cut off, so
# what its rank says cannot reach the launcher.
mkdir -p "$tmp/err"
# shellcheck disable=SC2016  # $@ and the rank expand in the rank's shell
run -- bash -c 'exec "$@" 2> >(tee "'"$tmp"'/err/rank.$OMPI_COMM_WORLD_RANK" >&2)' _ \
  "$LPSGD" bench --op allreduce --algo lp -b 32M -e 32M -n 100000 -w 1 --comm-timeout 5 \
  </dev/null >"$tmp/down.out" 2>&1 &
pid=$!
# Mid-collective: the link goes down a second after the bench has printed its
# table header (its setup done, the collectives started: each 32 MiB allreduce
# takes a few hundred milliseconds, and 100000 of them run far past this
# test). Between two collectives the bench's ranks meet in a barrier and an
# allreduce of the MPI library, which has no timeout: a cut there would leave
# them waiting until the launcher gives up, so the collectives are large
# enough that the cut falls in one (4 MiB ones, 35 ms each, left the barrier
# about a tenth of the time on a loaded machine and the test failed once). Not
# a fixed sleep from the launch (once 4 s): start-up across the namespaces
# takes 1-3 s here, so a slower machine would cut the link during it (issue 31).
SECONDS=0
until grep -q '^# *size' "$tmp/down.out" 2>/dev/null || ! kill -0 "$pid" 2>/dev/null || ((SECONDS > 120)); do
  sleep 0.05
done
grep -q '^# *size' "$tmp/down.out" ||
  { echo "FAIL: the bench did not start within $SECONDS s"; tail -n 10 "$tmp/down.out"; fails=$((fails + 1)); }
echo "note: the bench started its collectives $SECONDS s after its launch"
sleep 1
$C link 1 down >/dev/null
SECONDS=0
wait "$pid"
rc=$? took=$SECONDS
# The cut-off node's daemon gives up on mpirun when TCP does (about 13 s after
# its last unanswered message); wait for it, at most 30 s.
left_in_nodes() {
  for n in $(ip netns list | awk '{print $1}' | grep '^lpsgdt-n'); do ip netns pids "$n"; done |
    xargs -r ps -o stat=,comm= -p 2>/dev/null | grep -vc '^Z'
}
for ((gone = 0; gone < 30; gone++)); do
  left=$(left_in_nodes)
  ((left == 0)) && break
  sleep 1
done
named=0
for r in 0 1 2 3; do
  grep -q "lpsgd: error: .*made no progress for 5 s.*waiting for .*rank [0-9] (\(left\|right\) neighbour)" \
    "$tmp/err/rank.$r" 2>/dev/null && named=$((named + 1))
done
if ((rc != 0)) && ((took <= 5 + 25)) && ((named == 4)) && ((left == 0)); then
  echo "ok: link down for good: exit $rc after $took s, every rank named the neighbour it waited for, no process left $gone s later"
  echo "    rank 1: $(grep -m1 'lpsgd: error:' "$tmp/err/rank.1" | cut -c1-220)"
else
  echo "FAIL: link down for good: exit $rc after $took s, $named of 4 ranks named a neighbour, $left processes left:"
  tail -n 10 "$tmp/down.out"; head -n 3 "$tmp"/err/rank.*; fails=$((fails + 1))
fi
finish
