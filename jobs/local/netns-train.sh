#!/usr/bin/env bash
# Training across the network-namespace cluster (jobs/local/netns-cluster.sh),
# lpsgd and PyTorch DDP side by side on the same nodes, links, model, batch and
# optimizer (SGD, momentum 0.9, --lr, --weight-decay): for each topology, queue
# and N the cluster is brought up (N nodes, every link shaped to --rate with a
# --queue deep tbf queue) and, --repeat times (interleaved), `lpsgd train` runs
# with each algorithm of --algos, then DDP over gloo in fp32 and with
# fp16_compress_hook (jobs/local/torch_train.py, one process per rank started
# with ip netns exec in its node, GLOO_SOCKET_IFNAME the node's interface).
# Both train on synthetic data of --shape (lpsgd from DIR/data.h5, made by
# `lpsgd data synth`; DDP makes its own in memory), one thread per rank.
# Needs root and, for DDP, Debian's python3-torch.
#
#   jobs/local/netns-train.sh [--topology switch[,chain]] [--nodes 2,4,8] [--ranks-per-node 1]
#       [--rate 500mbit] [--queue 100ms[,2ms]] [--model mlp:784-2048-2048-10|cnn:alexnet|cnn:resnet18]
#       [--batch 32] [--steps 30] [--warmup 5] [--repeat 3] [--algos lp,ring,be,auto]
#       [--tools lpsgd,ddp,ddp-fp16] [--lr 0.05] [--weight-decay 0] [--ddp-bucket-mb 25]
#       [--lpsgd-args 'ARGS'] [--calibration FILE] [--shape 1,28,28] [--classes 10]
#       [--timeout 900] [--out runs/netns-train]
#
# --batch is per rank; --lpsgd-args go to every lpsgd train as they are (e.g.
# '--bucket-mb 4 --window 8'); --ddp-bucket-mb is DDP's bucket_cap_mb. lpsgd's
# cost model (auto's choices, LP's block size) comes from a calibration of the
# cluster's MPI links (lpsgd bench --calibrate on 2 nodes of 1 rank, once per
# topology and queue, DIR/calibration-<topology>-<queue>.ini) unless
# --calibration FILE is given.
#
# Warm-up: every run takes --warmup + --steps steps and the first --warmup are
# left out of every per-step number. lpsgd's come from its --step-trace (rank
# 0's step = data + compute + apply; compute = forward+backward, the mean over
# ranks of each rank's median), DDP's from torch_train.py --warmup (rank 0's
# clock; compute = forward+backward without any exchange, probed with no_sync()
# before training, all ranks at once). The measured window (the first measured
# step's start to the last one's end, CLOCK_MONOTONIC) is what samples/s, link
# utilisation and CPU are taken over. With lpsgd's --overlap on a step ends
# when its exchange has started and the next forward completes it, so a step
# lasts from one step's backward end to the next's: the window holds whole
# steps once the launch plan (made after step 2) is in force and step 3's
# exchange has been waited for, hence --warmup of at least 3 (a warning says
# so otherwise). lpsgd's --metrics (whole run, warm-up
# included) are kept beside them (samples_per_s_run, m_compute_s, m_comm_s,
# m_comm_wait_s per step).
# Links: tc's counters of every shaped interface (both ends: the switch's ports
# too) are read before and after each run (tc_bytes, tc_dropped), and the
# interfaces' transmit counters every 0.1 s from the host (/proc/PID/net/dev of
# a process parked in each namespace; ~1% of a core), interpolated at the
# window's ends: link_util = bytes sent / (rate x window) per link and
# direction, its max and mean, and link_bytes_per_step_max (in units of n,
# below, it tells how much each algorithm moves over the busiest link). CPU:
# utime+stime of the ranks' processes (cpu_ranks) and the machine's busy and
# softirq time (/proc/stat: cpu_busy, cpu_softirq; the network stack's work and
# other jobs on the machine count there), in cores over the window.
#
# Writes DIR/results.json (JSON lines, one row per run: tool lpsgd|ddp|ddp-fp16,
# algo (gloo for DDP), topology, nodes, ranks_per_node, rate, queue, model,
# batch, params, repeat, samples_per_s (global, the window), step_s (median),
# compute_s, exposed_comm_s (step_s - compute_s), link_util_max/mean, cpu_ranks,
# cpu_busy, bound_step_s, bound_samples_per_s, ...; started afresh), DIR/logs/
# (every run's output, metrics, step traces, link samples, tc counters),
# DIR/data.h5, DIR/netns_train_*.png and DIR/table.md, the Markdown table of
# medians it prints (jobs/plot/netns_train.py). The physical bound per step:
# the bytes each node must move at the link rate, 2n(N-1)/N on a switch and n
# on a chain, n = 4 bytes x parameters (2 with fp16 gradients); as samples/s,
# N x ranks per node x batch / that time.
# LPSGD_NETNS_PREFIX names the cluster (as for netns-cluster.sh); a cluster
# already up under it is refused, never taken down. On exit, Ctrl-C included,
# the cluster is taken down and every process this started is ended. Besides
# DIR it writes only the cluster's own state (/run/PREFIX-netns) and Open MPI's
# session files.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

topos=switch nodes=2,4,8 rpn=1 rate=500mbit queues=100ms model=mlp:784-2048-2048-10 batch=32
steps=30 warmup=5 repeat=3 algos=lp,ring,be,auto tools=lpsgd,ddp,ddp-fp16 lr=0.05 wd=0
ddp_bucket=25 lpsgd_args="" timeout_s=900 out=runs/netns-train shape=1,28,28 classes=10 calibration=""
die() { echo "netns-train.sh: error: $*" >&2; exit 2; }
while (($#)); do
  case $1 in
    --topology) topos=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --ranks-per-node) rpn=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --queue) queues=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    --tools) tools=$2; shift 2 ;;
    --lr) lr=$2; shift 2 ;;
    --weight-decay) wd=$2; shift 2 ;;
    --ddp-bucket-mb) ddp_bucket=$2; shift 2 ;;
    --lpsgd-args) lpsgd_args=$2; shift 2 ;;
    --calibration) calibration=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --classes) classes=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces)"
IFS=, read -r -a Ts <<<"$topos"
IFS=, read -r -a Qs <<<"$queues"
IFS=, read -r -a Ns <<<"$nodes"
IFS=, read -r -a As <<<"$algos"
IFS=, read -r -a Us <<<"$tools"
for t in "${Ts[@]}"; do [[ $t == switch || $t == chain ]] || die "--topology: switch or chain, got '$t'"; done
for n in "${Ns[@]}"; do
  [[ $n =~ ^[0-9]+$ ]] || die "--nodes: numbers 2..64, got '$n'"
  ((n >= 2 && n <= 64)) || die "--nodes: numbers 2..64, got '$n'"
done
for u in "${Us[@]}"; do [[ $u == lpsgd || $u == ddp || $u == ddp-fp16 ]] || die "--tools: lpsgd, ddp or ddp-fp16, got '$u'"; done
for v in rpn batch steps repeat timeout_s; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v//_/-}: a positive number, got '${!v}'"
done
[[ $warmup =~ ^[0-9]+$ ]] || die "--warmup: a number, got '$warmup'"
if ((warmup < 3)) && [[ ,$tools, == *,lpsgd,* && " $lpsgd_args " != *" --overlap "* ]]; then
  echo "netns-train: warning: --warmup $warmup: lpsgd's first 3 steps include its launch plan's start (--overlap on); measure from step 4 (--warmup 3)" >&2
fi
if [[ -n $calibration ]]; then
  [[ -f $calibration ]] || die "--calibration: no file '$calibration'"
  calibration=$(cd "$(dirname "$calibration")" && pwd)/$(basename "$calibration")
fi
case $model in
  mlp:*|cnn:alexnet|cnn:lenet|cnn:resnet18|cnn:resnet34|cnn:resnet[0-9]*) ;;
  *) die "--model: mlp:IN-...-OUT, cnn:alexnet, cnn:lenet or cnn:resnetN, got '$model'" ;;
esac
want() { [[ ,$tools, == *,$1,* ]]; }
if want ddp || want ddp-fp16; then
  /usr/bin/python3 -c "import torch" 2>/dev/null || die "DDP needs PyTorch: apt-get install python3-torch (or --tools lpsgd)"
fi

C=jobs/local/netns-cluster.sh
PREFIX=${LPSGD_NETNS_PREFIX:-lpsgd}
if [[ $($C status) != "no cluster is up" ]]; then
  die "a cluster is up under the prefix '$PREFIX' (someone else's?): set LPSGD_NETNS_PREFIX to another name, or take it down ($C down)"
fi
lpsgd_bin=$repo/build/bin/lpsgd
# The binary may be missing for a moment while it is rebuilt: wait for it.
need_lpsgd() {
  local i
  for ((i = 0; i < 120; i++)); do [[ -x $lpsgd_bin ]] && return 0; sleep 1; done
  die "$lpsgd_bin missing (tools/setup.sh)"
}
need_lpsgd

mkdir -p "$out/logs"
out=$(cd "$out" && pwd)
: >"$out/results.json"

# ---- clean-up: every process this started, by its id, and the cluster ---------------------
sampler_pid="" run_pid="" holders=() ddp_pids=()
cleanup() {
  local p
  for p in $sampler_pid $run_pid "${ddp_pids[@]}" "${holders[@]#*=}"; do kill "$p" 2>/dev/null || true; done
  $C down >/dev/null 2>&1 || true   # and whatever is left in the namespaces (kill -9)
}
exec 3>&2   # the script's stderr, for the trap (a run's own is redirected to its log)
trap cleanup EXIT
trap 'echo "netns-train.sh: interrupted" >&3; exit 130' INT TERM
# Runs a command in the background and waits for it: a signal then reaches the
# traps at once. (In the foreground, netns-cluster.sh run would hold Ctrl-C
# until the job ended: its timeout puts the job in a process group of its own,
# which the terminal's SIGINT does not reach.)
waited() {
  local rc=0
  "$@" &
  run_pid=$!
  wait "$run_pid" || rc=$?
  run_pid=""
  return "$rc"
}

# ---- the dataset: synthetic, in DIR, large enough for the largest N without wrapping --------
maxn=0
for n in "${Ns[@]}"; do ((n > maxn)) && maxn=$n; done
samples=$((maxn * rpn * batch * (steps + warmup)))
data=$out/data.h5
stamp="samples=$samples shape=$shape classes=$classes seed=1"
if [[ ! -f $data || $(cat "$out/data.args" 2>/dev/null) != "$stamp" ]]; then
  "$lpsgd_bin" data synth --out "$data" --samples "$samples" --test-samples 256 --shape "$shape" \
    --classes "$classes" --seed 1 >/dev/null
  echo "$stamp" >"$out/data.args"
fi

# ---- measuring helpers ----------------------------------------------------------------------
# Namespaces of the cluster: the nodes, then the switch (if any).
cluster_ns() { $C hosts | awk '{ print $2 }'; ip netns list | awk -v s="$PREFIX-sw" '$1 == s { print $1 }'; }

# tc's counters of every tbf qdisc: "TIME" then "NAMESPACE IFACE SENT_BYTES SENT_PKTS DROPPED".
tc_snapshot() {  # FILE
  local n
  awk 'BEGIN { getline t < "/proc/uptime"; split(t, a, " "); print "uptime", a[1] }' >"$1"
  for n in $(cluster_ns); do
    ip netns exec "$n" tc -s qdisc show | awk -v ns="$n" '
      $1 == "qdisc" && $2 == "tbf" { dev = $5 }
      $1 == "Sent" && dev != "" { d = $7; sub(/,/, "", d); print ns, dev, $2, $4, d; dev = "" }' >>"$1"
  done
}

# Samples, every 0.1 s until killed, one JSON line each: CLOCK_MONOTONIC, the
# transmit bytes of every interface of the cluster (from /proc/PID/net/dev of a
# holder process per namespace), utime+stime (clock ticks) of every rank (an
# lpsgd or python3 process in those namespaces), and the machine's /proc/stat
# cpu line.
sampler() {  # OUT NS=PID...
  exec /usr/bin/python3 - "$@" <<'PY'
import json, os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)          # the script ends it, with SIGTERM
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
out, holders = sys.argv[1], dict(a.split("=") for a in sys.argv[2:])
hpids = set(holders.values())
inode = {os.readlink(f"/proc/{p}/ns/net"): ns for ns, p in holders.items()}
ranks = {}  # pid -> namespace: lpsgd or python3 processes in the cluster (a rank never moves)
with open(out, "w") as f:
    while True:
        t = time.monotonic()
        tx = {}
        for ns, p in holders.items():
            with open(f"/proc/{p}/net/dev") as d:
                for line in list(d)[2:]:
                    name, rest = line.split(":", 1)
                    name = name.strip()
                    if name != "lo":
                        tx[f"{ns}:{name}"] = int(rest.split()[8])
        cpu = {}
        pids = set(p for p in os.listdir("/proc") if p.isdigit()) - hpids
        for p in set(ranks) - pids:
            del ranks[p]
        for p in pids:
            try:
                if p not in ranks:  # checked again every time: ip netns exec enters, then execs
                    ns = inode.get(os.readlink(f"/proc/{p}/ns/net"))
                    if ns is None or open(f"/proc/{p}/comm").read().strip() not in ("lpsgd", "python3"):
                        continue
                    ranks[p] = ns
                fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
                cpu[p] = [ranks[p], int(fields[11]) + int(fields[12])]
            except OSError:
                ranks.pop(p, None)
        with open("/proc/stat") as s:
            stat = [int(v) for v in s.readline().split()[1:]]
        f.write(json.dumps({"t": t, "tx": tx, "cpu": cpu, "stat": stat}) + "\n")
        f.flush()
        time.sleep(max(0.0, 0.1 - (time.monotonic() - t)))
PY
}

# One parked process per namespace, for the sampler's /proc/PID/net/dev.
start_holders() {
  local n
  holders=()
  for n in $(cluster_ns); do
    ip netns exec "$n" sleep 1000000 &
    holders+=("$n=$!")
  done
}
stop_holders() {
  local h
  for h in "${holders[@]}"; do kill "${h#*=}" 2>/dev/null || true; done
  for h in "${holders[@]}"; do wait "${h#*=}" 2>/dev/null || true; done
  holders=()
}
begin_measure() {  # LOG
  tc_snapshot "$1.tc0"
  sampler "$1.samples" "${holders[@]}" &
  sampler_pid=$!
}
end_measure() {  # LOG
  kill "$sampler_pid" 2>/dev/null || true
  wait "$sampler_pid" 2>/dev/null || true
  sampler_pid=""
  tc_snapshot "$1.tc1"
}

# One row of results.json from a run's files (LOG.*), printed as a line too.
summarise() {  # LOG TOOL ALGO TOPOLOGY QUEUE N REPEAT
  /usr/bin/python3 - "$@" "$rpn" "$rate" "$model" "$batch" "$steps" "$warmup" "$out/results.json" <<'PY'
import glob, json, os, re, statistics, sys
(log, tool, algo, topo, queue, nodes, rep, rpn, rate, model, batch, steps, warmup,
 results) = sys.argv[1:]
nodes, rep, rpn, batch, steps, warmup = map(int, (nodes, rep, rpn, batch, steps, warmup))
ranks = nodes * rpn
row = dict(tool=tool, algo=algo, topology=topo, nodes=nodes, ranks_per_node=rpn, ranks=ranks,
           rate=rate, queue=queue, model=model, batch=batch, steps=steps, warmup=warmup,
           repeat=rep, tag=os.path.basename(log))

def rate_bytes(r):
    m = re.fullmatch(r"([0-9.]+)([a-z]*)", r.lower())
    mult = {"bit": 1 / 8, "kbit": 125, "mbit": 125e3, "gbit": 125e6, "bps": 1, "kbps": 1e3,
            "mbps": 1e6, "gbps": 1e9}[m.group(2)]
    return float(m.group(1)) * mult

if tool == "lpsgd":
    rec = [json.loads(l) for l in open(log + ".metrics.jsonl") if l.strip()][-1]
    params = int(re.search(r"model \S+: (\d+) parameters", open(log + ".out").read()).group(1))
    traces = {}
    for p in glob.glob(log + ".trace.rank*.tsv"):
        r = int(re.search(r"rank(\d+)\.tsv$", p).group(1))
        rows = [l.rstrip("\n").split("\t") for l in open(p)][1:]
        traces[r] = {int(c[0]): [float(v) for v in c[1:6]] for c in rows if len(c) >= 6}
    meas = [s for s in sorted(traces[0]) if s > warmup]
    t0 = traces[0]
    step = [(t0[s][1] + t0[s][2] + t0[s][3]) / 1e3 for s in meas]
    start, end = t0[meas[0]][0], t0[meas[-1]][0] + (t0[meas[-1]][2] + t0[meas[-1]][3]) / 1e3
    comp = [statistics.median(t[s][2] for s in meas if s in t) / 1e3 for t in traces.values()]
    wait = [statistics.median(t[s][4] for s in meas if s in t) / 1e3 for t in traces.values()]
    ran = rec["step"]
    row.update(params=params, measured_steps=len(meas), step_s=statistics.median(step),
               compute_s=statistics.mean(comp), compute_max_s=max(comp),
               comm_wait_s=statistics.mean(wait),
               samples_per_s_run=rec["samples_per_s"], m_compute_s=rec["compute_s"] / ran,
               m_comm_s=rec["comm_s"] / ran, m_comm_wait_s=rec["comm_wait_s"] / ran)
else:
    rec = [json.loads(l) for l in open(log + ".r0.out") if l.startswith("{")][-1]
    params = rec["params"]
    start, end = rec["t_start_mono"], rec["t_end_mono"]
    row.update(params=params, measured_steps=rec["measured_steps"], step_s=rec["step_s"],
               compute_s=rec["compute_s"], compute_max_s=rec["compute_max_s"],
               update_s=rec["update_s"], samples_per_s_run=rec["samples_per_s"],
               bucket_mb=rec["bucket_mb"])
window = end - start
row.update(samples_per_s=ranks * batch * row["measured_steps"] / window, window_s=window,
           exposed_comm_s=row["step_s"] - row["compute_s"])

# Links: the shaped interfaces (tbf in tc's snapshot), bytes in the window
# from the samples (linear between the two around each end).
def tc(path):
    lines = open(path).read().split("\n")
    t = float(lines[0].split()[1])
    return t, {f"{a[0]}:{a[1]}": (int(a[2]), int(a[4])) for a in (l.split() for l in lines[1:]) if len(a) == 5}
tc0_t, tc0 = tc(log + ".tc0")
tc1_t, tc1 = tc(log + ".tc1")
links = sorted(tc1)
samples = [json.loads(l) for l in open(log + ".samples") if l.strip()]
samples = [s for s in samples if s.get("stat")]

def at(t, get):
    """get(sample) linearly interpolated at time t."""
    for a, b in zip(samples, samples[1:]):
        if a["t"] <= t <= b["t"]:
            va, vb = get(a), get(b)
            return va + (vb - va) * (t - a["t"]) / (b["t"] - a["t"])
    raise ValueError(f"no samples around t={t:.3f} (samples {samples[0]['t']:.3f}..{samples[-1]['t']:.3f})")

bps = rate_bytes(rate)
try:
    sent = {k: at(end, lambda s: s["tx"].get(k, 0)) - at(start, lambda s: s["tx"].get(k, 0)) for k in links}
    util = [v / (bps * window) for v in sent.values()]
    row.update(link_util_max=max(util), link_util_mean=statistics.mean(util),
               link_bytes_per_step_max=max(sent.values()) / row["measured_steps"],
               link_bytes_per_step_mean=statistics.mean(sent.values()) / row["measured_steps"])
    ranks_cpu = lambda s: sum(v[1] for v in s["cpu"].values())
    hz = os.sysconf("SC_CLK_TCK")
    busy = lambda s: sum(s["stat"]) - s["stat"][3] - s["stat"][4]
    row.update(cpu_ranks=(at(end, ranks_cpu) - at(start, ranks_cpu)) / hz / window,
               cpu_busy=(at(end, busy) - at(start, busy)) / hz / window,
               cpu_softirq=(at(end, lambda s: s["stat"][6]) - at(start, lambda s: s["stat"][6])) / hz / window,
               ncpu=os.cpu_count())
except ValueError as e:
    print(f"netns-train.sh: warning: {row['tag']}: {e}", file=sys.stderr)
row.update(tc_bytes=sum(tc1[k][0] - tc0.get(k, (0, 0))[0] for k in links),
           tc_bytes_max_link=max(tc1[k][0] - tc0.get(k, (0, 0))[0] for k in links),
           tc_dropped=sum(tc1[k][1] - tc0.get(k, (0, 0))[1] for k in links),
           wall_s=tc1_t - tc0_t)

# The physical bound: bytes each node moves at the link rate.
n = (2 if tool == "ddp-fp16" else 4) * params
per_node = 2 * n * (nodes - 1) / nodes if topo == "switch" else n
row.update(bound_step_s=per_node / bps, bound_samples_per_s=ranks * batch * bps / per_node)
with open(results, "a") as f:
    f.write(json.dumps(row) + "\n")
g = lambda k, fmt: format(row[k], fmt) if k in row else "?"
print(f"  {row['tag']}: {row['samples_per_s']:.1f} samples/s, step {1e3 * row['step_s']:.0f} ms "
      f"(compute {1e3 * row['compute_s']:.0f}, exposed comm {1e3 * row['exposed_comm_s']:.0f}), "
      f"links max {g('link_util_max', '.0%')} mean {g('link_util_mean', '.0%')}, "
      f"ranks {g('cpu_ranks', '.2f')} / machine {g('cpu_busy', '.2f')} cores busy, "
      f"tc drops {row['tc_dropped']}", file=sys.stderr)
PY
}

# ---- the runs ---------------------------------------------------------------------------
run_lpsgd() {  # LOG ALGO CALIBRATION
  need_lpsgd
  local log=$1 algo=$2 calib=$3 extra=()
  # shellcheck disable=SC2206  # --lpsgd-args is split into words on purpose
  [[ -n $lpsgd_args ]] && extra=($lpsgd_args)
  LPSGD_CALIBRATION=$calib waited $C run --ranks-per-node "$rpn" --timeout "$timeout_s" -- \
    lpsgd train --data "$data" --model "$model" --batch "$batch" --max-steps $((steps + warmup)) \
    --eval-every 0 --lr "$lr" --momentum 0.9 --weight-decay "$wd" --algo "$algo" \
    --metrics "$log.metrics.jsonl" --step-trace "$log.trace" --progress off "${extra[@]}" \
    </dev/null >"$log.out" 2>&1
}

port=0
run_ddp() {  # LOG TOPOLOGY N FP16(0|1)
  local log=$1 topo=$2 n=$3 fp16=$4 i j r ifname ns rc=0 fp=()
  ((fp16)) && fp=(--fp16-compress)
  port=$((port + 1))
  ddp_pids=()
  for ((i = 0; i < n; i++)); do
    ns=$PREFIX-n$i
    if [[ $topo == switch ]]; then ifname=eth0; elif ((i + 1 < n)); then ifname=right; else ifname=left; fi
    for ((j = 0; j < rpn; j++)); do
      r=$((i * rpn + j))
      WORLD_SIZE=$((n * rpn)) RANK=$r LOCAL_RANK=$j MASTER_ADDR=198.18.0.1 MASTER_PORT=$((29500 + port % 1000)) \
        GLOO_SOCKET_IFNAME=$ifname OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \
        timeout -k 5 "$timeout_s" ip netns exec "$ns" /usr/bin/python3 jobs/local/torch_train.py \
        --synthetic --shape "$shape" --classes "$classes" --model "$model" --batch "$batch" \
        --steps $((steps + warmup)) --warmup "$warmup" --lr "$lr" --momentum 0.9 --weight-decay "$wd" \
        --bucket-mb "$ddp_bucket" "${fp[@]}" </dev/null >"$log.r$r.out" 2>&1 &
      ddp_pids+=($!)
    done
  done
  for r in "${!ddp_pids[@]}"; do
    wait "${ddp_pids[$r]}" || { ((rc)) || echo "netns-train.sh: rank $r failed" >>"$log.r0.out"; rc=1; }
  done
  ddp_pids=()
  return "$rc"
}

# A run: counters before, the run, counters after, a row. A failed run is
# reported with its log's tail and left out; the sweep goes on.
failed=0
one() {  # TOOL ALGO TOPOLOGY QUEUE N REPEAT CALIBRATION
  local tool=$1 algo=$2 topo=$3 queue=$4 n=$5 rep=$6 calib=$7 log ok=0
  log=$out/logs/$topo-$queue-n$n-$tool${algo:+-$algo}-$rep
  rm -f "$log".*
  begin_measure "$log"
  case $tool in
    lpsgd) run_lpsgd "$log" "$algo" "$calib" || ok=$? ;;
    ddp) run_ddp "$log" "$topo" "$n" 0 || ok=$? ;;
    ddp-fp16) run_ddp "$log" "$topo" "$n" 1 || ok=$? ;;
  esac
  end_measure "$log"
  if ((ok != 0)); then
    failed=$((failed + 1))
    echo "netns-train.sh: error: $(basename "$log") failed (exit $ok):" >&2
    tail -n 5 "$log".*out >&2 || true
    return 0
  fi
  [[ $tool == lpsgd ]] || algo=gloo
  summarise "$log" "$tool" "$algo" "$topo" "$queue" "$n" "$rep" ||
    { failed=$((failed + 1)); echo "netns-train.sh: error: no row from $(basename "$log")" >&2; }
}

for topo in "${Ts[@]}"; do
  for queue in "${Qs[@]}"; do
    calib=${calibration:-$out/calibration-$topo-$queue.ini}
    if want lpsgd && [[ ! -f $calib ]]; then
      # lpsgd's cost model (auto's choices, LP's block size): the MPI links of
      # this cluster, measured on 3 nodes of 1 rank (as jobs/local/netns-sweep.sh):
      # α and β of a link, and whether a node's two neighbours each have a link
      # of their own (a chain) or share its one port (a switch).
      echo "netns-train.sh: calibrating the $topo's links ($rate, queue $queue) for lpsgd's cost model" >&2
      stop_holders
      $C up --nodes 3 --rate "$rate" --topology "$topo" --queue "$queue" >/dev/null
      need_lpsgd
      waited $C run --timeout 600 -- lpsgd bench --calibrate --calibration "$calib.tmp" \
        </dev/null >"$out/logs/calibrate-$topo-$queue.log" 2>&1 ||
        { tail -5 "$out/logs/calibrate-$topo-$queue.log" >&2; die "calibration failed"; }
      mv "$calib.tmp" "$calib"
      grep -E "^(alpha|beta)_mpi|neighbour" "$calib" | tr '\n' ' ' | sed 's/^/  /; s/ $/\n/' >&2
    fi
    for n in "${Ns[@]}"; do
      stop_holders
      $C up --nodes "$n" --rate "$rate" --topology "$topo" --queue "$queue" >/dev/null
      start_holders
      echo "netns-train.sh: $topo, $n nodes x $rpn rank(s), $rate, queue $queue, $model, batch $batch," \
        "$warmup+$steps steps" >&2
      for ((rep = 0; rep < repeat; rep++)); do
        for tool in "${Us[@]}"; do
          if [[ $tool == lpsgd ]]; then
            for algo in "${As[@]}"; do one lpsgd "$algo" "$topo" "$queue" "$n" "$rep" "$calib"; done
          else
            one "$tool" "" "$topo" "$queue" "$n" "$rep" "$calib"
          fi
        done
      done
    done
  done
done
stop_holders
$C down >/dev/null

if [[ -s $out/results.json ]]; then
  /usr/bin/python3 jobs/plot/netns_train.py "$out/results.json" --out "$out"
  /usr/bin/python3 jobs/plot/netns_train.py "$out/results.json" --table | tee "$out/table.md"
fi
((failed == 0)) || { echo "netns-train.sh: $failed run(s) failed (logs in $out/logs)" >&2; exit 1; }
