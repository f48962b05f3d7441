#!/usr/bin/env bash
# The device check's table (tests/gpu/summary.py) read from real output made
# here on the CPU: lpsgd bench --floor --json at P = 2 over peer links and over
# MPI links, and a training run's --metrics. Every LP bus bandwidth, every copy
# beside it and the samples/s must appear in the table as they are in the
# files; steps without results read as their status.
set -u
LPSGD=$1
here=$(dirname "$0")
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
mpi=("${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}")
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT

bench=(bench --op allreduce --algo lp -b 64M -e 256M -f 4 -n 3 -w 1 --floor --check)
"${mpi[@]}" "$LPSGD" "${bench[@]}" --json "$d/bench-p2-ipc.json" </dev/null >"$d/ipc.out" 2>&1 ||
  { echo "FAIL: bench (peer links)"; tail -5 "$d/ipc.out"; exit 1; }
"${mpi[@]}" "$LPSGD" "${bench[@]}" --links mpi --json "$d/bench-p2-mpi.json" </dev/null >"$d/mpi.out" 2>&1 ||
  { echo "FAIL: bench (MPI links)"; tail -5 "$d/mpi.out"; exit 1; }
"$LPSGD" data synth --out "$d/synth.h5" --samples 1024 --test-samples 64 --shape 1,28,28 \
  --classes 10 --seed 1 >/dev/null || { echo "FAIL: data synth"; exit 1; }
"${mpi[@]}" "$LPSGD" train --data "$d/synth.h5" --model mlp:784-512-256-10 --batch 32 --max-steps 20 \
  --eval-every 0 --progress off --metrics "$d/train-cpu-mlp-p2.jsonl" </dev/null >"$d/train.out" 2>&1 ||
  { echo "FAIL: train"; tail -5 "$d/train.out"; exit 1; }
printf 'gpu\tno GPU\tnvidia-smi: not found\nmemory\tno GPU\t\nbench-p4-ipc\tFAILED\texit 1\n' >"$d/steps.tsv"

table=$("$here/../gpu/summary.py" "$d") || { echo "FAIL: summary.py exited $?"; exit 1; }
printf '%s\n' "$table"
if [[ -f $d/summary.md ]]; then echo "ok: summary.md written"; else echo "FAIL: no summary.md"; fails=$((fails + 1)); fi

# want TEXT: the table has a line holding every argument
want() {
  local line
  line=$(printf '%s\n' "$table" | grep -F -- "$1")
  for s in "${@:2}"; do
    line=$(printf '%s\n' "$line" | grep -F -- "$s")
  done
  if [[ -n $line ]]; then echo "ok: $*"; else echo "FAIL: no table line with: $*"; fails=$((fails + 1)); fi
}
for tag in ipc mpi; do
  what="2 ranks, CUDA IPC"
  [[ $tag == mpi ]] && what="2 ranks, staged MPI links"
  while read -r size lp copy; do
    want "LP allreduce busbw, $what, $size MiB, GB/s | $lp |" "copy in the same run $copy GB/s"
  done < <(python3 - "$d/bench-p2-$tag.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for size in (64, 256):
    lp = [r for r in rows if r["algo"] == "lp" and r["bytes"] == size << 20][0]
    cp = [r for r in rows if r["algo"] == "copy" and r["bytes"] == size << 20][0]
    print(size, f"{lp['busbw_gbs']:,.1f}", f"{cp['busbw_gbs']:.1f}")
PY
)
done
sps=$(python3 -c 'import json, sys
last = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(format(last["samples_per_s"], ",.0f"))' "$d/train-cpu-mlp-p2.jsonl")
want "MLP 784-512-256-10 on the CPU, P=2, samples/s | $sps |"
want "device-to-device copy, 256 MiB, GB/s (read + write) | no GPU |"
want "LP allreduce busbw, 4 ranks, CUDA IPC, 64 MiB, GB/s | FAILED |"
want "FAILED: bench-p4-ipc"
finish
