#!/usr/bin/env bash
# LP and the baselines on a real network stack: for each topology, a cluster of
# network namespaces (jobs/local/netns-cluster.sh) at N = 2, 4, 8 nodes, one
# rank each; the MPI links calibrated on it (lpsgd bench --calibrate, at N = 2)
# and every algorithm timed with --check, block sizes from that calibration,
# auto beside them. At the largest N the LP broadcast is also timed at half
# the rate: the time must double if the network, not the two cores, is the
# bottleneck.
#
#   jobs/local/netns-sweep.sh [--rate 100mbit] [--nodes 2,4,8] [--topology switch,chain]
#                             [--sizes 64K,16M] [--iters 3] [--out runs/netns]
# Writes DIR/results.json (lpsgd bench's rows plus topology, nodes and rate),
# DIR/calibration-<topology>.ini, DIR/netns_<topology>.png (time against N per
# algorithm, the model dashed), prints a table per topology and, per topology,
# auto's time against the best fixed algorithm of each cell (jobs/plot/grid.py
# on DIR/<topology>/results.json: DIR/<topology>/grid_<op>.png). Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."

rate=100mbit nodes=2,4,8 topos=switch,chain sizes=64K,16M iters=3 out=runs/netns
while (($#)); do
  case $1 in
    --rate) rate=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --topology) topos=$2; shift 2 ;;
    --sizes|--size) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "netns-sweep.sh: error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x build/bin/lpsgd ]] || { echo "netns-sweep.sh: error: build/bin/lpsgd missing (tools/setup.sh)" >&2; exit 2; }
C=jobs/local/netns-cluster.sh
mkdir -p "$out/logs"
: >"$out/results.json"
trap '$C down >/dev/null' EXIT
IFS=, read -r -a Ns <<<"$nodes"
IFS=, read -r -a Ts <<<"$topos"
half=$(awk -v r="${rate//[a-z]/}" 'BEGIN { print r / 2 }')${rate//[0-9.]/}

# bench TOPOLOGY N RATE TAG ARGS...: one lpsgd bench, rows tagged into results.json
bench() {
  local topo=$1 n=$2 r=$3 tag=$4; shift 4
  local json=$out/logs/$tag.json
  echo "netns-sweep.sh: $topo, $n nodes, $r: $*" >&2
  $C run --timeout 1200 -- lpsgd bench --calibration "$out/calibration-$topo.ini" --sizes "$sizes" \
    -n "$iters" -w 1 --check --comm-timeout 120 --json "$json" "$@" </dev/null >"$out/logs/$tag.log" 2>&1 ||
    { echo "netns-sweep.sh: error: $tag failed:" >&2; tail -5 "$out/logs/$tag.log" >&2; exit 1; }
  grep -E "^ " "$out/logs/$tag.log" | sed 's/^/  /' >&2
  python3 -c 'import json, sys
for line in open(sys.argv[1]):
    if line.strip():
        r = json.loads(line); r.update(topology=sys.argv[2], nodes=int(sys.argv[3]), rate=sys.argv[4])
        print(json.dumps(r))' "$json" "$topo" "$n" "$r" >>"$out/results.json"
}

for topo in "${Ts[@]}"; do
  # 3 nodes: α and β of a link, and whether a node's neighbours each have a
  # link of their own (a chain) or share its one port (a switch).
  $C up --nodes 3 --rate "$rate" --topology "$topo" >/dev/null
  echo "netns-sweep.sh: calibrating the MPI links of the $topo at $rate" >&2
  $C run --timeout 600 -- lpsgd bench --calibrate --calibration "$out/calibration-$topo.ini" \
    </dev/null >"$out/logs/calibrate-$topo.log" 2>&1 ||
    { tail -5 "$out/logs/calibrate-$topo.log" >&2; exit 1; }
  grep alpha_mpi "$out/logs/calibrate-$topo.log" >&2
  for n in "${Ns[@]}"; do
    $C up --nodes "$n" --rate "$rate" --topology "$topo" >/dev/null
    bench "$topo" "$n" "$rate" "$topo-n$n-bcast" --op bcast --algo lp,tree,mst,be,auto
    bench "$topo" "$n" "$rate" "$topo-n$n-allreduce" --op allreduce --algo lp,tree,mst,be,ring,auto
  done
  n=${Ns[-1]}
  $C up --nodes "$n" --rate "$half" --topology "$topo" >/dev/null
  bench "$topo" "$n" "$half" "$topo-n$n-half-rate" --op bcast --algo lp
done

jobs/plot/bench.py "$out/results.json" --out "$out" --netns
jobs/plot/bench.py "$out/results.json" --netns --table
for topo in "${Ts[@]}"; do
  mkdir -p "$out/$topo"
  grep "\"topology\": \"$topo\"" "$out/results.json" | grep "\"rate\": \"$rate\"" >"$out/$topo/results.json"
  jobs/plot/grid.py "$out/$topo" --out "$out/$topo" --title "$topo, $rate" | grep -v '^wrote'
done
