#!/usr/bin/env bash
# Simulated-cluster sweep of `lpsgd bench` under SimGrid SMPI: one smpirun per
# (P, collective) timing each algorithm once, rows merged into
# DIR/results.json, time-vs-P plots drawn by jobs/plot/bench.py into DIR/.
#
#   jobs/smpi/sweep.sh [--ranks 2,4,...,1024] [--bytes 64M[,...]] [--op bcast,reduce,allreduce]
#                      [--algo lp,tree,mst,be,ring,auto] [--platform FILE] [--out DIR]
#                      [--gamma S_PER_BYTE] [--build DIR] [--no-plot]
#
# Defaults: P = 2, 4, ..., 1024, 64 MiB float sum, all three collectives, every
# algorithm and auto, jobs/smpi/cluster-10g.xml, out runs/smpi-<platform>/.
# The grid of docs/simulation.md (docs/simulation.md gives the time it took):
#   jobs/smpi/sweep.sh --ranks 2,8,64,256,1024,4096 --bytes 64K,1M,16M,64M \
#                      --op bcast,allreduce --algo lp,tree,be,ring,auto
#
# How it simulates (why each setting: SIMGRID.md-style notes in README.md):
#  - SMPI's calibrated TCP factors and ack cross-traffic off, so a message of
#    n bytes costs exactly alpha + n*beta: the platform's own numbers.
#  - simulate-computation off: times repeat exactly. Reductions are charged
#    --gamma seconds per byte (default 0: the network alone, the alpha-beta
#    model); copies cost nothing.
#  - smpi/test:0 (polling costs nothing; idle ranks block instead of polling)
#    and every send a rendezvous (send-is-detached-thresh:0): SMPI 3.32 never
#    forgets an eager ("detached") send, and the growing list makes a long
#    pipeline quadratic in wall time; the simulated times agree within 1e-5.
#    MPI's own collectives (start-up, and the barrier and max between timed
#    iterations) use Open MPI's algorithms, whose requests SMPI does forget.
#  - the algorithms of one collective share a simulation: each starts after a
#    barrier on an idle network, so its time is the same as alone (checked at
#    P = 64: identical to the nanosecond), and start-up is paid once.
#  - smpi/bcast:binomial_tree: SMPI gives every new communicator an id by a
#    broadcast, and the one it ran from P = 256 on (MVAPICH2's intra-node
#    k-nomial, seen in a profile) first maps ranks to hosts by a ring allgather,
#    P^2 messages per communicator: start-up took 28 s at P = 256 and ~20 min
#    at P = 1024, 0.5 s and 4 s with the binomial tree. lpsgd's collectives do
#    not use MPI_Bcast; the simulated times are the same to the nanosecond.
#  - LP with one block in flight per link (--window 1): concurrent messages on
#    a simulated link share its bandwidth instead of queueing as on a real one.
#  - block size from the cost model, whose alpha and beta are set to the
#    platform's (a calibration file written here), so the model's prediction
#    is printed beside every measurement.
#  - shared buffers (one copy per simulation, SMPI_SHARED_MALLOC): 1024 ranks of
#    64 MiB fit in memory; results are not checked here (tests/e2e/smpi.sh does).
# A finished configuration is kept in DIR/rows/ and skipped when the sweep is
# run again with the same DIR, so an interrupted sweep resumes.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ranks=2,4,8,16,32,64,128,256,512,1024
bytes=64M
ops=bcast,reduce,allreduce
algos=lp,tree,mst,be,ring,auto
platform=$root/jobs/smpi/cluster-10g.xml
out=""
gamma=0
build=$root/build-smpi
plot=1

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "sweep.sh: error: $*" >&2; exit 2; }
while (($#)); do
  case $1 in
    --ranks) ranks=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    --op) ops=$2; shift 2 ;;
    --algo) algos=$2; shift 2 ;;
    --platform) platform=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --gamma) gamma=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --no-plot) plot=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ -f $platform ]] || die "platform file '$platform' not found"
platform=$(cd "$(dirname "$platform")" && pwd)/$(basename "$platform")
[[ -n $out ]] || out=$root/runs/smpi-$(basename "$platform" .xml)
mkdir -p "$out/rows" "$out/logs"
command -v smpirun >/dev/null || die "smpirun not found; install libsimgrid-dev (tools/setup.sh --no-build)"

# alpha and beta of one message between two hosts of the platform's cluster:
# two private links (plus the backbone's latency, if any).
read -r alpha beta hosts neighbour < <(/usr/bin/python3 - "$platform" "$out/hostfile" <<'PY'
import re, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
def num(text, units):
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2) not in units:
        sys.exit(f"sweep.sh: error: cannot read '{text}' (units: {', '.join(u for u in units if u)})")
    return float(m.group(1)) * units[m.group(2)]
pre = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
bw_units = {p + "bps": v / 8 for p, v in pre.items()} | {p + "Bps": v for p, v in pre.items()}
lat_units = {"": 1, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12}
c = root.find(".//cluster")
if c is not None:
    # A switch: a message crosses the sender's and the receiver's private links.
    lat = 2 * num(c.get("lat"), lat_units) + num(c.get("bb_lat", "0"), lat_units)
    beta = 1 / num(c.get("bw"), bw_units)
    names = []
    for part in c.get("radical").split(","):
        lo, _, hi = part.partition("-")
        names += [f"{c.get('prefix', '')}{i}{c.get('suffix', '')}" for i in range(int(lo), int(hi or lo) + 1)]
    neighbour = 0
else:
    # A ring network (jobs/smpi/ring-platform.py): neighbours share one link of their own.
    names = [h.get("id") for h in root.iter("host")]
    links = root.findall(".//link")
    if not names or not links or len({(l.get("bandwidth"), l.get("latency")) for l in links}) != 1:
        sys.exit(f"sweep.sh: error: {sys.argv[1]}: need a <cluster>, or hosts joined by identical links")
    lat = num(links[0].get("latency"), lat_units)
    beta = 1 / num(links[0].get("bandwidth"), bw_units)
    neighbour = 1
# Rank i runs on the platform's i-th host, so chain neighbours are neighbours there.
with open(sys.argv[2], "w") as f:
    f.write("\n".join(names) + "\n")
print(f"{lat:.6g} {beta:.6g} {len(names)} {neighbour}")
PY
)

bench=$(JOBS=${JOBS:-$(nproc)} "$root/jobs/smpi/build.sh" "$build" | tail -1)
calib=$out/calibration.ini
cat >"$calib" <<EOF2
# α-β of one message on $(basename "$platform"), γ charged per reduced byte
alpha_mpi = $alpha
beta_mpi = $beta
alpha_shm = $alpha
beta_shm = $beta
gamma = $gamma
mpi_neighbour_links = $neighbour
EOF2

IFS=, read -r -a P_list <<<"$ranks"
IFS=, read -r -a op_list <<<"$ops"
IFS=, read -r -a algo_list <<<"$algos"
configs=()
for P in "${P_list[@]}"; do
  [[ $P =~ ^[0-9]+$ && $P -ge 2 ]] || die "--ranks: '$P' is not a rank count >= 2"
  ((P <= hosts)) || die "--ranks: $P exceeds the $hosts hosts of $(basename "$platform")"
  for op in "${op_list[@]}"; do
    list=()
    for algo in "${algo_list[@]}"; do
      [[ $algo == ring && $op != allreduce ]] && continue  # ring is an allreduce only
      list+=("$algo")
    done
    ((${#list[@]})) && configs+=("$P $op $(IFS=,; echo "${list[*]}")")
  done
done
((${#configs[@]})) || die "nothing to run"

echo "# sweep: ${#configs[@]} configurations on $(basename "$platform") (alpha $alpha s, beta $beta s/B," \
     "gamma $gamma s/B), $bytes, into $out"
start=$SECONDS
i=0
for cfg in "${configs[@]}"; do
  read -r P op algo <<<"$cfg"
  i=$((i + 1))
  name=P$P-$op-${algo//,/-}
  row=$out/rows/$name.json
  if [[ -s $row ]]; then
    echo "[$i/${#configs[@]}] P=$P $op $algo: done before, kept"
    continue
  fi
  t0=$SECONDS
  if smpirun -np "$P" -platform "$platform" -hostfile "$out/hostfile" \
       --cfg=smpi/bw-factor:0:1 --cfg=smpi/lat-factor:0:1 --cfg=network/crosstraffic:0 \
       --cfg=smpi/simulate-computation:no --cfg=smpi/test:0 --cfg=smpi/send-is-detached-thresh:0 \
       --cfg=smpi/coll-selector:ompi --cfg=smpi/bcast:binomial_tree \
       --cfg=smpi/shared-malloc-blocksize:67108864 --log=root.thres:warning \
       "$bench" --op "$op" --algo "$algo" --sizes "$bytes" -n 1 -w 0 --window 1 \
       --block auto --shared-buffers --calibration "$calib" --comm-timeout 1e9 \
       --json "$row.tmp" >"$out/logs/$name.log" 2>&1 </dev/null && [[ -s $row.tmp ]]; then
    mv "$row.tmp" "$row"
    t=$(/usr/bin/python3 -c "import json, sys; rows = [json.loads(l) for l in open(sys.argv[1])]; \
print(', '.join('%s %.2f ms (model %.2f)' % (r['algo'], r['time_us'] / 1e3, (r['predicted_us'] or 0) / 1e3) \
for r in rows))" "$row")
    echo "[$i/${#configs[@]}] P=$P $op $algo: $t, $((SECONDS - t0)) s, elapsed $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s"
  else
    rm -f "$row.tmp"
    echo "[$i/${#configs[@]}] P=$P $op $algo: FAILED after $((SECONDS - t0)) s (log: $out/logs/$name.log)"
    tail -5 "$out/logs/$name.log" | sed 's/^/    /'
  fi
done

# Every row kept in DIR/rows, this run's and earlier ones', in P order.
find "$out/rows" -name '*.json' -size +0 | sort -V | xargs cat >"$out/results.json"
echo "# $(wc -l <"$out/results.json") rows in $out/results.json; sweep took $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s"
if ((!plot)); then
  :
elif /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  "$root/jobs/plot/bench.py" "$out/results.json" --out "$out"
  # Best algorithm and auto's time against it over (P, n): grid_<op>.png.
  "$root/jobs/plot/grid.py" "$out" --out "$out" --title "$(basename "$platform" .xml)" >"$out/grid.md"
  echo "# best algorithm per (P, n) in $out/grid.md and $out/grid_*.png"
else
  echo "# no matplotlib for /usr/bin/python3: no plots"
fi
