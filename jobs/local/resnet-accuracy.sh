#!/usr/bin/env bash
# Test accuracy of lpsgd's ResNet-20 recipe (jobs/configs/fmnist-resnet20.ini:
# Fashion-MNIST, batch 64 on each of 2 ranks, SGD momentum 0.9, weight decay
# 5e-4, cosine schedule with warm-up, crop:2,flip) against its PyTorch twin
# (jobs/local/resnet_twin.py: the same model, initial parameters, data scaling,
# augmentation, batch slicing, optimizer and LR schedule; DDP over gloo). Both
# start from `lpsgd export` of the recipe's initial model. Runs alternate,
# never at once: lpsgd, PyTorch, lpsgd, ... each on 2 ranks, one thread per
# process. Prints a Markdown table (final and per-epoch test accuracy, wall
# time of every run, the medians' difference) and writes every run's JSON
# lines, logs and the table under --out.
#
#   jobs/local/resnet-accuracy.sh [--epochs 12] [--repeat 1] [--out runs/resnet-accuracy]
#                                 [--max-steps N] [--bn-stats ddp|average] [--seed S]
# --seed S: another seed than the config's, for both sides (initial parameters,
# data order and augmentation draws): runs with the same seed repeat exactly.
# --max-steps N: both sides stop after N steps (quick checks; the schedule still
# spans --epochs). --bn-stats: the twin's batch-norm running statistics, DDP's
# broadcast from rank 0 (default) or lpsgd's average over the ranks.
# LPSGD_BIND=none runs lpsgd's ranks unbound, as the PyTorch processes are.
set -euo pipefail
cd "$(dirname "$0")/../.."
# LPSGD_MPI=mpich (or LPSGD_BUILD=DIR): the MPICH build, build-mpich/.
# shellcheck source=tools/mpi.sh
. tools/mpi.sh
build=$(lpsgd_build_dir)
me=resnet-accuracy.sh
config=jobs/configs/fmnist-resnet20.ini

epochs=12 repeat=1 out=runs/resnet-accuracy max_steps="" bn_stats=ddp seed_arg=""
while (($#)); do
  case $1 in
    --epochs) epochs=${2:-}; shift 2 ;;
    --repeat) repeat=${2:-}; shift 2 ;;
    --out) out=${2:-}; shift 2 ;;
    --max-steps) max_steps=${2:-}; shift 2 ;;
    --bn-stats) bn_stats=${2:-}; shift 2 ;;
    --seed) seed_arg=${2:-}; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "$me: error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $epochs =~ ^[1-9][0-9]*$ ]] || { echo "$me: error: --epochs must be a positive integer, got '$epochs'" >&2; exit 2; }
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "$me: error: --repeat must be a positive integer, got '$repeat'" >&2; exit 2; }
[[ -z $max_steps || $max_steps =~ ^[1-9][0-9]*$ ]] ||
  { echo "$me: error: --max-steps must be a positive integer, got '$max_steps'" >&2; exit 2; }
[[ $bn_stats == ddp || $bn_stats == average ]] ||
  { echo "$me: error: --bn-stats must be ddp or average, got '$bn_stats'" >&2; exit 2; }
[[ -z $seed_arg || $seed_arg =~ ^[0-9]+$ ]] ||
  { echo "$me: error: --seed must be a non-negative integer, got '$seed_arg'" >&2; exit 2; }
[[ -n $out ]] || { echo "$me: error: --out needs a directory" >&2; exit 2; }
[[ -x $build/bin/lpsgd ]] || { echo "$me: error: $build/bin/lpsgd missing (run tools/setup.sh)" >&2; exit 2; }
/usr/bin/python3 -c "import torch, h5py, onnx" 2>/dev/null ||
  { echo "$me: error: PyTorch, h5py or onnx missing: apt-get install python3-torch python3-h5py python3-onnx" >&2; exit 2; }

# The recipe, from the config, so that the twin follows it if the config changes.
ini() {  # KEY: its value in $config (the last one; comments and spaces stripped)
  sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*//p" "$config" | sed 's/[[:space:]]*[#;].*$//; s/[[:space:]]*$//' | tail -1
}
data=$(ini data) model=$(ini model) batch=$(ini batch) lr=$(ini lr) momentum=$(ini momentum)
wd=$(ini weight-decay) schedule=$(ini schedule) warmup=$(ini warmup-steps) augment=$(ini augment)
seed=${seed_arg:-$(ini seed)} nesterov=$(ini nesterov) min_lr=$(ini min-lr) sync_bn=$(ini sync-bn)
[[ $model == cnn:resnet20 && $schedule == cosine ]] ||
  { echo "$me: error: $config: the twin does cnn:resnet20 with the cosine schedule, not $model with ${schedule:-no} schedule" >&2; exit 2; }
[[ ${nesterov:-false} =~ ^(false|off|0)$ && ${min_lr:-0} =~ ^0*\.?0*$ && ${sync_bn:-false} =~ ^(false|off|0)$ ]] ||
  { echo "$me: error: $config: nesterov, min-lr or sync-bn set; the twin has none of them" >&2; exit 2; }
[[ -f $data ]] || datasets/fashion-mnist.sh --lpsgd "$build/bin/lpsgd"

lpsgd_mpi_launcher "$build" 2  # bound to cores where 2 ranks fit (LPSGD_BIND=none: unbound)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mkdir -p "$out"
steps=()
[[ -n $max_steps ]] && steps=(--max-steps "$max_steps")

"$build/bin/lpsgd" export --model "$model" --data "$data" --seed "$seed" --onnx "$out/init.onnx" \
  >"$out/export.log" 2>&1 || { echo "$me: error: lpsgd export failed: $(tail -1 "$out/export.log")" >&2; exit 1; }

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

run_lpsgd() {  # i
  local t0
  rm -f "$out/lpsgd-$1.jsonl"
  t0=$(now)
  "${MPIRUN[@]}" -n 2 "$build/bin/lpsgd" train --config "$config" --epochs "$epochs" --seed "$seed" "${steps[@]}" \
    --progress-every 60 --metrics "$out/lpsgd-$1.jsonl" </dev/null >"$out/lpsgd-$1.log" 2>&1 ||
    { echo "$me: error: lpsgd run $1 failed ($out/lpsgd-$1.log): $(tail -1 "$out/lpsgd-$1.log")" >&2; exit 1; }
  echo "lpsgd $1 $(since "$t0")" >>"$out/wall.txt"
}

run_twin() {  # i
  local port=$((20000 + RANDOM % 20000)) pids=() r t0
  rm -f "$out/pytorch-$1.jsonl"
  t0=$(now)
  for r in 0 1; do
    WORLD_SIZE=2 RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      /usr/bin/python3 jobs/local/resnet_twin.py --init "$out/init.onnx" --data "$data" \
      --epochs "$epochs" --batch "$batch" --lr "$lr" --momentum "$momentum" --weight-decay "$wd" \
      --warmup-steps "$warmup" --augment "${augment:-none}" --seed "$seed" --bn-stats "$bn_stats" \
      "${steps[@]}" --out "$out/pytorch-$1.jsonl" </dev/null >"$out/pytorch-$1.r$r.log" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}" ||
      { echo "$me: error: PyTorch run $1 rank $r failed ($out/pytorch-$1.r$r.log): $(tail -1 "$out/pytorch-$1.r$r.log")" >&2; exit 1; }
  done
  echo "pytorch $1 $(since "$t0")" >>"$out/wall.txt"
}

: >"$out/wall.txt"
for ((i = 1; i <= repeat; i++)); do
  echo "$me: round $i/$repeat: lpsgd ($epochs epochs${max_steps:+, $max_steps steps})" >&2
  run_lpsgd "$i"
  echo "$me: round $i/$repeat: PyTorch twin" >&2
  run_twin "$i"
done

/usr/bin/python3 - "$out" "$repeat" "$MPI_BIND" "$bn_stats" "$config" <<'PY' | tee "$out/summary.md"
import json, os, statistics, sys
import torch
out, repeat, bind, bn_stats, config = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
cpu, flags = "unknown CPU", set()
with open("/proc/cpuinfo") as f:
    for line in f:
        k, _, v = line.partition(":")
        if k.strip() == "model name" and cpu == "unknown CPU":
            cpu = v.strip()
        elif k.strip() == "flags" and not flags:
            flags = set(v.split())
wall = {}
for line in open(os.path.join(out, "wall.txt")):
    side, i, s = line.split()
    wall[side, int(i)] = float(s)

def run(side, i):
    recs = [json.loads(l) for l in open(os.path.join(out, f"{side}-{i}.jsonl")) if l.strip()]
    final = recs[-1]
    if final.get("kind") != "final":
        sys.exit(f"resnet-accuracy.sh: error: {out}/{side}-{i}.jsonl has no final line")
    evals = [r for r in recs[:-1] if r.get("kind") != "final"]
    if not evals or evals[-1]["step"] != final["step"]:
        evals.append(final)  # lpsgd's last evaluation is its final line
    return dict(side=side, run=i, final_acc=final["test_acc"], final_loss=final["test_loss"],
                steps=final["step"], epoch_acc=[r["test_acc"] for r in evals],
                epochs=[r["epoch"] for r in evals], train_s=final.get("train_s"), wall_s=wall[side, i])

runs = [run(side, i) for i in range(1, repeat + 1) for side in ("lpsgd", "pytorch")]
name = {"lpsgd": "lpsgd", "pytorch": "PyTorch twin"}
print(f"CPU: {cpu} ({os.cpu_count()} logical CPUs; avx512f: {'yes' if 'avx512f' in flags else 'no'}); "
      f"PyTorch {torch.__version__}; {config}, 2 ranks, 1 thread each; lpsgd ranks bound: {bind}, "
      f"PyTorch unbound; twin BN running statistics: {bn_stats}\n")
print("| run | final test acc | test loss | steps | wall s | train s | test acc per evaluation |")
print("|---|---|---|---|---|---|---|")
for r in runs:
    per = ", ".join(f"{a:.4f}" for a in r["epoch_acc"])
    ts = f"{r['train_s']:.0f}" if r["train_s"] is not None else "-"
    print(f"| {name[r['side']]} #{r['run']} | {r['final_acc']:.4f} | {r['final_loss']:.4f} | {r['steps']} | "
          f"{r['wall_s']:.0f} | {ts} | {per} |")
med = {s: statistics.median(r["final_acc"] for r in runs if r["side"] == s) for s in name}
wmed = {s: statistics.median(r["wall_s"] for r in runs if r["side"] == s) for s in name}
print(f"\nMedian final test accuracy over {repeat} run(s) each: lpsgd {med['lpsgd']:.4f}, PyTorch "
      f"{med['pytorch']:.4f}; lpsgd - PyTorch = {100 * (med['lpsgd'] - med['pytorch']):+.2f} points. "
      f"Median wall time: lpsgd {wmed['lpsgd']:.0f} s, PyTorch {wmed['pytorch']:.0f} s.")
n = min(len(r["epoch_acc"]) for r in runs)
if n > 1:
    print("\n| evaluation (epoch) | lpsgd median test acc | PyTorch median test acc | difference |\n|---|---|---|---|")
    for k in range(n):
        m = {s: statistics.median(r["epoch_acc"][k] for r in runs if r["side"] == s) for s in name}
        ep = runs[0]["epochs"][k]
        print(f"| {k + 1} ({ep:.2f}) | {m['lpsgd']:.4f} | {m['pytorch']:.4f} | {100 * (m['lpsgd'] - m['pytorch']):+.2f} |")
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(dict(cpu=cpu, avx512f="avx512f" in flags, torch=torch.__version__, config=config,
                   lpsgd_bind=bind, bn_stats=bn_stats, runs=runs, median_final_acc=med,
                   median_wall_s=wmed), f, indent=1)
print(f"\n(every run's JSON lines and logs: {out}/; this table: {out}/summary.md)")
PY
