#!/usr/bin/env bash
# lpsgd against PyTorch on this machine, side by side: the same data
# (data/fashion-mnist.h5), models (the MLP 784-512-256-10, LeNet and
# ResNet-20 with batch norm), batch and optimizer (SGD, momentum 0.9, weight
# decay 1e-4), one thread per
# process on both sides. Runs are interleaved (lpsgd, PyTorch, next case, ...)
# and repeated; prints the median samples/s of each and their ratio, and
# writes every run as JSON. PyTorch comes from Debian's python3-torch, for
# measuring only (jobs/local/torch_train.py); 2 PyTorch ranks are DDP over gloo.
#
#   jobs/local/vs-pytorch.sh [--repeat R] [--mlp-steps N] [--cnn-steps N] [--out FILE.json]
#                            [--cases LIST]   (LIST: mlp1,cnn1,cnn2,mlp2,resnet1,resnet2;
#                                              default mlp1,cnn1,cnn2,mlp2)
# ResNet-20 runs --cnn-steps steps, without augmentation on either side.
set -euo pipefail
cd "$(dirname "$0")/../.."
# LPSGD_MPI=mpich (or LPSGD_BUILD=DIR): the MPICH build, build-mpich/.
# shellcheck source=tools/mpi.sh
. tools/mpi.sh
build=$(lpsgd_build_dir)

repeat=3 mlp_steps=600 cnn_steps=60 out=runs/vs-pytorch.json cases=mlp1,cnn1,cnn2,mlp2
while (($#)); do
  case $1 in
    --repeat) repeat=$2; shift 2 ;;
    --mlp-steps) mlp_steps=$2; shift 2 ;;
    --cnn-steps) cnn_steps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "vs-pytorch.sh: error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x $build/bin/lpsgd ]] || { echo "vs-pytorch.sh: error: $build/bin/lpsgd missing (run tools/setup.sh)" >&2; exit 2; }
/usr/bin/python3 -c "import torch" 2>/dev/null ||
  { echo "vs-pytorch.sh: error: PyTorch missing: apt-get install python3-torch (for measuring only)" >&2; exit 2; }
[[ -f data/fashion-mnist.h5 ]] || datasets/fashion-mnist.sh --lpsgd "$build/bin/lpsgd"
# MPIRUN: oversubscribed, as root too, and unbound like the PyTorch processes
# beside it, so that the two compare alike (the main job binds: docs/training.md).
LPSGD_BIND=none lpsgd_mpi_launcher "$build"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$out")"

# case -> "model ranks batch"
declare -A spec=([mlp1]="mlp 1 128" [cnn1]="cnn 1 64" [cnn2]="cnn 2 64" [mlp2]="mlp 2 64"
                 [resnet1]="resnet20 1 64" [resnet2]="resnet20 2 64")
IFS=, read -r -a todo <<<"$cases"
for c in "${todo[@]}"; do
  [[ -n ${spec[$c]:-} ]] || { echo "vs-pytorch.sh: error: unknown case '$c' (use mlp1, cnn1, cnn2, mlp2, resnet1, resnet2)" >&2; exit 2; }
done

run_lpsgd() {  # model ranks batch steps file
  local no_aug=()
  [[ $1 == resnet20 ]] && no_aug=(--augment none)  # the recipe's augmentation: not in PyTorch's loop
  "${MPIRUN[@]}" -n "$2" "$build/bin/lpsgd" train \
    --config "jobs/configs/fmnist-$1.ini" --batch "$3" --max-steps "$4" --eval-every 0 \
    --progress off --metrics "$5.jsonl" "${no_aug[@]}" </dev/null >"$5.out" 2>&1 ||
    { echo "vs-pytorch.sh: error: lpsgd $1 P=$2 failed:" >&2; tail -3 "$5.out" >&2; exit 1; }
  tail -1 "$5.jsonl" | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["samples_per_s"])'
}

run_torch() {  # model ranks batch steps file
  local port=$((20000 + RANDOM % 20000)) pids=() r
  for ((r = 0; r < $2; r++)); do
    WORLD_SIZE=$2 RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      /usr/bin/python3 jobs/local/torch_train.py --model "$1" --batch "$3" \
      --steps "$4" >"$5.r$r.out" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}" || { echo "vs-pytorch.sh: error: PyTorch $1 P=$2 rank $r failed:" >&2; tail -3 "$5.r$r.out" >&2; exit 1; }
  done
  tail -1 "$5.r0.out" | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["samples_per_s"])'
}

for ((i = 0; i < repeat; i++)); do
  for c in "${todo[@]}"; do
    read -r model ranks batch <<<"${spec[$c]}"
    steps=$mlp_steps
    [[ $model != mlp ]] && steps=$cnn_steps
    echo "vs-pytorch.sh: round $((i + 1))/$repeat: $c ($model, $ranks rank(s), batch $batch, $steps steps)" >&2
    echo "$c lpsgd $(run_lpsgd "$model" "$ranks" "$batch" "$steps" "$tmp/$c-l$i")" >>"$tmp/results"
    echo "$c pytorch $(run_torch "$model" "$ranks" "$batch" "$steps" "$tmp/$c-t$i")" >>"$tmp/results"
  done
done

/usr/bin/python3 - "$tmp/results" "$out" "$cases" <<'PY'
import json, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
names = {"mlp1": "1 rank, MLP, batch 128", "cnn1": "1 rank, cnn:lenet, batch 64",
         "cnn2": "2 ranks, cnn:lenet, batch 64 each", "mlp2": "2 ranks, MLP, batch 64 each",
         "resnet1": "1 rank, cnn:resnet20, batch 64", "resnet2": "2 ranks, cnn:resnet20, batch 64 each"}
out = []
print("| case | lpsgd samples/s | PyTorch samples/s | lpsgd / PyTorch |\n|---|---|---|---|")
for c in sys.argv[3].split(","):
    l = [float(r[2]) for r in rows if r[0] == c and r[1] == "lpsgd"]
    t = [float(r[2]) for r in rows if r[0] == c and r[1] == "pytorch"]
    ml, mt = statistics.median(l), statistics.median(t)
    print(f"| {names[c]} | {ml:,.0f} | {mt:,.0f} | {ml / mt:.2f}x |")
    out.append(dict(case=c, name=names[c], lpsgd=l, pytorch=t, lpsgd_median=ml, pytorch_median=mt,
                    ratio=ml / mt))
with open(sys.argv[2], "w") as f:
    json.dump(out, f, indent=1)
print(f"(medians of {len(l)} interleaved runs; every run in {sys.argv[2]})")
PY
