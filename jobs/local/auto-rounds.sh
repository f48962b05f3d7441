#!/usr/bin/env bash
# Rounds of `--algo auto` against the fixed algorithms, as a new user meets
# them: each round starts from no calibration at all, trains once with auto
# (which calibrates: the fresh run), once more reading what that run kept (the
# read run), then with --algo lp, ring and tree, one after the other, so every
# ratio compares runs of one round. A --beside round makes its calibration
# beside another lpsgd training job on the same node (the normal state of a
# shared node), then stops that job and judges the next quiet run that reads
# the calibration. Writes DIR/rounds.tsv (one line per run) and prints
# DIR/table.md: per round, auto's samples/s over the best fixed algorithm's,
# the algorithms each auto run took (its first choice, and what its check on
# the run's own steps kept) and the calibration's confidence. Runs of one
# configuration differ by up to 20% here (the MLP at lp: 31-38 thousand
# samples/s in six runs on an idle node), so each read run and each fixed
# algorithm runs --repeat times, interleaved, and the table compares medians;
# the fresh run calibrates, so it is one run, shown beside them. --lock FILE
# holds an exclusive flock(1) on FILE through each round (and only then), so
# that other work on the machine waits between rounds, not inside one.
#
#   jobs/local/auto-rounds.sh [--models mlp,lenet,resnet20] [--rounds 5] [--beside 0|1|both]
#       [--np 2] [--cluster switch:4|chain:8 --rate 100mbit --ranks-per-node 2] [--steps N]
#       [--repeat 3] [--lock FILE] [--out DIR]
#
# One node by default (NP ranks bound to cores where they fit, as jobs/local/
# train.sh starts them); with --cluster, the namespace cluster of
# jobs/local/netns-cluster.sh (needs root; brought up here and taken down at
# the end), NODES x RANKS_PER_NODE ranks. Models: the recipes of jobs/configs/
# fmnist-mlp.ini (600 steps), fmnist-cnn.ini (LeNet, 300 steps) and
# fmnist-resnet20.ini (150 steps), on Fashion-MNIST at batch 64 per rank: enough
# steps for auto's check (100 at least) and a steady rate (--steps N sets
# every model's; the check needs 100). The calibration
# is this machine's (or cluster's) own cache file, removed before each round's
# fresh run; the file in force is copied to DIR/cal-MODEL-ROUND.ini.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/mpi.sh
. tools/mpi.sh
build=$(lpsgd_build_dir)
lpsgd=$build/bin/lpsgd

models=mlp,lenet,resnet20 rounds=5 beside=0 np=2 cluster="" rate=100mbit rpn=2 steps="" repeat=3
lock="" out=runs/auto-rounds
die() { echo "auto-rounds.sh: error: $*" >&2; exit 2; }
while (($#)); do
  case $1 in
    --models) models=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --beside) beside=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --cluster) cluster=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --ranks-per-node) rpn=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --lock) lock=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive number"
case $beside in 0) kinds=quiet ;; 1) kinds=beside ;; both) kinds="quiet beside" ;; *) die "--beside must be 0, 1 or both" ;; esac
[[ -x $lpsgd ]] || die "no $lpsgd: build first (tools/setup.sh)"
[[ -f data/fashion-mnist.h5 ]] || datasets/fashion-mnist.sh --lpsgd "$lpsgd" >/dev/null
mkdir -p "$out/logs"
export OMP_NUM_THREADS=1

cal_glob=""
if [[ -n $cluster ]]; then
  topo=${cluster%%:*} nodes=${cluster##*:}
  [[ $topo =~ ^(switch|chain)$ && $nodes =~ ^[2-9][0-9]*$ ]] || die "--cluster must be switch:N or chain:N"
  [[ $beside == 0 ]] || die "--beside is for one node (the other job shares its cores)"
  jobs/local/netns-cluster.sh up --nodes "$nodes" --rate "$rate" --topology "$topo" >/dev/null
  trap 'jobs/local/netns-cluster.sh down >/dev/null 2>&1 || true' EXIT
  launch=(jobs/local/netns-cluster.sh run --ranks-per-node "$rpn" -- "$lpsgd")
  where="$topo of $nodes namespace nodes at $rate, $rpn ranks each"
  cal_glob="$HOME/.cache/lpsgd/calibration-lpsgd-n0+$nodes-*.ini"
else
  lpsgd_mpi_launcher "$build" "$np"
  launch=("${MPIRUN[@]}" -n "$np" "$lpsgd")
  where="one node, $np ranks"
  cal_glob="$HOME/.cache/lpsgd/calibration-$(hostname).ini"
fi
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
fam=$(lscpu | sed -n 's/^CPU family: *//p' | head -1) mod=$(lscpu | sed -n 's/^Model: *//p' | head -1)
isa=$(grep -o -w 'avx512_bf16\|avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "auto-rounds.sh: $where; $cpu (family $fam model $mod; $isa); outputs in $out"

model_args() {  # model_args MODEL: its options, --steps or its own number of steps
  case $1 in
    mlp) echo "--config jobs/configs/fmnist-mlp.ini --max-steps ${steps:-600}" ;;
    lenet) echo "--config jobs/configs/fmnist-cnn.ini --max-steps ${steps:-300}" ;;
    resnet20) echo "--config jobs/configs/fmnist-resnet20.ini --max-steps ${steps:-150}" ;;
    *) die "unknown model '$1' (mlp, lenet or resnet20)" ;;
  esac
}

# train LOG MODEL ARGS...: one run; prints "samples/s<TAB>first choice<TAB>final choice<TAB>confidence"
# (of the calibration the run used: "-" for fixed algorithms).
train() {
  local log=$1 model=$2; shift 2
  local margs
  read -r -a margs <<<"$(model_args "$model")"
  "${launch[@]}" train "${margs[@]}" --progress off --eval-every 0 "$@" </dev/null >"$log" 2>&1 \
    || { echo "auto-rounds.sh: a run failed, see $log" >&2; tail -5 "$log" >&2; return 1; }
  local rate first final
  rate=$(sed -n 's/.* samples_per_s=\([0-9.]*\).*/\1/p' "$log" | tail -1)
  first=$(sed -n 's/.*gradient sync: .*wire [a-z0-9]*, \(.*\)$/\1/p' "$log" | head -1 | sed 's/ (auto)//; s/ block [0-9KM]*//g')
  final=$(sed -n 's/.*the choices are final: \(.*\)$/\1/p; s/.*the choices stand: \(.*\)$/\1/p' "$log" | tail -1)
  conf=$(sed -n 's/.*cost model: .*(confidence \([a-z]*\).*/\1/p' "$log" | tail -1)
  printf '%s\t%s\t%s\t%s\n' "$rate" "$first" "${final:--}" "${conf:--}"
}

# another_job: a second lpsgd training job on the node, for as long as it is needed.
other=""
another_job() {
  "${MPIRUN[@]}" -n 2 "$lpsgd" train --config jobs/configs/fmnist-mlp.ini --epochs 1000 --progress off \
    --algo lp --calibration /dev/null </dev/null >"$out/logs/other-job.log" 2>&1 &
  other=$!
  sleep 4  # past its start-up, into its steps
}
stop_other() { [[ -z $other ]] || { kill "$other" 2>/dev/null || true; wait "$other" 2>/dev/null || true; other=""; sleep 1; }; }
trap 'stop_other; [[ -z $cluster ]] || jobs/local/netns-cluster.sh down >/dev/null 2>&1 || true' EXIT

tsv=$out/rounds.tsv
printf 'model\tround\tkind\trun\trepeat\tsamples_per_s\tfirst\tfinal\tconfidence\n' >"$tsv"
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$r" "$kind" "$1" "$2" "$3" >>"$tsv"; }
for model in ${models//,/ }; do
  for kind in $kinds; do
    for ((r = 1; r <= rounds; r++)); do
      # shellcheck disable=SC2086  # the glob is meant to expand
      rm -f $cal_glob
      tag=$model-$kind-$r
      if [[ -n $lock ]]; then exec 9>"$lock" && flock -x 9; fi
      [[ $kind == beside ]] && another_job
      row fresh 1 "$(train "$out/logs/$tag-fresh.log" "$model" --algo auto)"
      stop_other
      for ((k = 1; k <= repeat; k++)); do
        row read "$k" "$(train "$out/logs/$tag-read-$k.log" "$model" --algo auto)"
        for algo in lp ring tree; do
          row "$algo" "$k" "$(train "$out/logs/$tag-$algo-$k.log" "$model" --algo "$algo")"
        done
      done
      for f in $cal_glob; do [[ -f $f ]] && cp "$f" "$out/cal-$tag.ini"; done
      if [[ -n $lock ]]; then flock -u 9 && exec 9>&-; fi
      echo "auto-rounds.sh: $tag done"
    done
  done
done
/usr/bin/python3 - "$tsv" "$where" "$cpu (family $fam model $mod; $isa)" >"$out/table.md" <<'PY'
import csv, statistics, sys
from collections import defaultdict
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print(f"{sys.argv[2]}; {sys.argv[3]}\n")
print("| model | round | calibration made | fresh: confidence, first -> kept | read: confidence, first -> kept"
      " | fresh / best | read / best (median) | best fixed (median samples/s; range of its runs) |")
print("|---|---|---|---|---|---|---|---|")
by = defaultdict(lambda: defaultdict(list))
for r in rows:
    by[(r["model"], r["kind"], int(r["round"]))][r["run"]].append(r)
worst = {}
for (model, kind, rnd), runs in sorted(by.items()):
    rate = lambda rs: statistics.median(float(x["samples_per_s"]) for x in rs)
    fixed = {a: rate(runs[a]) for a in ("lp", "ring", "tree") if runs[a]}
    best_algo = max(fixed, key=fixed.get)
    best = fixed[best_algo]
    spread = [float(x["samples_per_s"]) for x in runs[best_algo]]
    f = runs["fresh"][0]
    ratio_f, ratio_r = float(f["samples_per_s"]) / best, rate(runs["read"]) / best
    judged = [ratio_r] if kind == "beside" else [ratio_f, ratio_r]
    worst[(model, kind)] = min([worst.get((model, kind), 9.0)] + judged)
    choice = lambda x: f"{x['confidence']}, {x['first']} -> {x['final']}"
    reads = "; ".join(sorted(set(choice(x) for x in runs["read"])))
    print(f"| {model} | {rnd} | {kind} | {choice(f)} | {reads} | {ratio_f:.2f}" + (" (beside)" if kind == "beside" else "")
          + f" | {ratio_r:.2f} | {best_algo} {best:,.0f} ({min(spread):,.0f}-{max(spread):,.0f}) |")
print()
for (model, kind), w in sorted(worst.items()):
    print(f"- {model}, calibration made {kind}: auto's worst judged ratio {w:.2f} of the best fixed algorithm")
PY
cat "$out/table.md"
