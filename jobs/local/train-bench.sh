#!/usr/bin/env bash
# Training throughput side by side: P = 1 (batch 128) against P = 2 (batch 64
# each) on the MLP config, overlap on/off, LP against the MPI library's
# allreduce. Runs are interleaved (drift hits all alike) and repeated; prints
# the median samples/s and the time split of each, and writes the rows as JSON.
#
#   jobs/local/train-bench.sh [--steps N] [--repeat R] [--config FILE] [--out FILE.json]
set -euo pipefail
cd "$(dirname "$0")/../.."
# LPSGD_MPI=mpich (or LPSGD_BUILD=DIR): the MPICH build, build-mpich/.
# shellcheck source=tools/mpi.sh
. tools/mpi.sh
build=$(lpsgd_build_dir)

steps=600 repeat=3 config=jobs/configs/fmnist-mlp.ini out=runs/train-bench.json
while (($#)); do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "train-bench.sh: error: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ -x $build/bin/lpsgd ]] || { echo "train-bench.sh: error: $build/bin/lpsgd missing (run tools/setup.sh)" >&2; exit 2; }
[[ -f data/fashion-mnist.h5 ]] || datasets/fashion-mnist.sh --lpsgd "$build/bin/lpsgd"

# name|ranks|options
cases=(
  "P=1 batch 128|1|--batch 128"
  "P=2 batch 64, lp, overlap on|2|--batch 64 --algo lp --overlap on"
  "P=2 batch 64, lp, overlap off|2|--batch 64 --algo lp --overlap off"
  "P=2 batch 64, mpi, overlap on|2|--batch 64 --algo mpi --overlap on"
  "P=2 batch 64, mpi, overlap off|2|--batch 64 --algo mpi --overlap off"
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$out")"
for ((r = 0; r < repeat; r++)); do
  for i in "${!cases[@]}"; do
    IFS='|' read -r name np opts <<<"${cases[$i]}"
    echo "train-bench.sh: round $((r + 1))/$repeat: $name" >&2
    lpsgd_mpi_launcher "$build" "$np"  # MPIRUN: the main job's launch for np ranks
    # shellcheck disable=SC2086  # opts is a list of options
    "${MPIRUN[@]}" -n "$np" "$build/bin/lpsgd" train --config "$config" \
      --max-steps "$steps" --eval-every 0 --progress off $opts \
      --metrics "$tmp/$i-$r.jsonl" </dev/null >"$tmp/$i-$r.out" 2>&1 ||
      { echo "train-bench.sh: error: $name failed:" >&2; tail -3 "$tmp/$i-$r.out" >&2; exit 1; }
  done
done

python3 - "$tmp" "$repeat" "$out" "${cases[@]}" <<'PY'
import json, statistics, sys
tmp, repeat, out, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
rows = []
for i, c in enumerate(cases):
    name, np_, _ = c.split("|")
    finals = [json.loads(open(f"{tmp}/{i}-{r}.jsonl").read().strip().splitlines()[-1]) for r in range(repeat)]
    med = lambda k: statistics.median(f[k] for f in finals)
    step = med("train_s") / finals[0]["step"]
    rows.append(dict(case=name, ranks=int(np_), samples_per_s=med("samples_per_s"),
                     all_samples_per_s=[round(f["samples_per_s"]) for f in finals],
                     step_ms=1e3 * step,
                     compute_share=med("compute_s") / med("train_s"),
                     comm_wait_share=med("comm_wait_s") / med("train_s"),
                     comm_share=med("comm_s") / med("train_s"),
                     data_share=med("data_s") / med("train_s"),
                     # compute time per sample a rank processes
                     compute_us_per_sample=1e6 * med("compute_s") / med("samples") * int(np_)))
base = rows[0]["samples_per_s"]
base_compute = rows[0]["compute_us_per_sample"]
print(f"{'case':34} {'samples/s':>10} {'vs P=1':>7} {'step ms':>8} {'compute':>8} {'comm wait':>9} "
      f"{'comm busy':>9} {'data':>6} {'us/sample':>9} {'ceiling':>8}")
for r in rows:
    r["speedup_vs_p1"] = r["samples_per_s"] / base
    # The speed-up with communication free: P ranks, each computing a sample
    # as fast as it does here (ranks that share a machine share its memory).
    r["ceiling_vs_p1"] = r["ranks"] * base_compute / r["compute_us_per_sample"]
    print(f"{r['case']:34} {r['samples_per_s']:10.0f} {r['speedup_vs_p1']:6.2f}x {r['step_ms']:8.2f} "
          f"{100 * r['compute_share']:7.1f}% {100 * r['comm_wait_share']:8.1f}% {100 * r['comm_share']:8.1f}% "
          f"{100 * r['data_share']:5.1f}% {r['compute_us_per_sample']:9.1f} {r['ceiling_vs_p1']:7.2f}x")
with open(out, "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
print(f"(median of {repeat} interleaved runs each; all runs' samples/s in {out}; ceiling: the speed-up\n"
      f" if communication were free, from each case's compute time per sample against P=1's)")
PY
