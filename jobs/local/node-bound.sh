#!/usr/bin/env bash
# One node's bound for P ranks: P independent one-rank runs started together
# (what the machine gives P processes that never talk) against one P-rank
# run, launched in each of the ways given, over the same config and batch per
# rank. Runs are interleaved (drift hits all alike) and repeated; prints the
# median samples/s of each and its ratio to the independent runs' sum.
#
#   jobs/local/node-bound.sh [--config FILE] [--steps N] [--repeat R] [--ranks P]
#                            [--launch default,none,core] [--out FILE.json] [-- train options...]
#
# --launch names how the P-rank run is started: "default" as the README's main
# job (jobs/local/train.sh, tools/mpi.sh: bound to cores where the ranks fit),
# "none" / "core" with that binding forced (Open MPI --bind-to, MPICH
# -bind-to). The independent runs are started unbound (a run bound alone
# would take core 0, all of them the same one).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/mpi.sh
. tools/mpi.sh
build=$(lpsgd_build_dir)

config=jobs/configs/fmnist-mlp.ini steps=2000 repeat=3 ranks=2 launches=default,none,core
out=runs/node-bound.json extra=()
while (($#)); do
  case $1 in
    --config) config=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --launch) launches=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "node-bound.sh: error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x $build/bin/lpsgd ]] || { echo "node-bound.sh: error: $build/bin/lpsgd missing (tools/setup.sh)" >&2; exit 2; }
[[ -f $config ]] || { echo "node-bound.sh: error: no config file '$config'" >&2; exit 2; }
[[ -f data/fashion-mnist.h5 ]] || datasets/fashion-mnist.sh --lpsgd "$build/bin/lpsgd"
IFS=, read -r -a launch_list <<<"$launches"

# The launcher for one way of starting P ranks: the main job's (tools/mpi.sh
# for P ranks), or that with the binding forced.
launcher() {  # LAUNCH RANKS
  if [[ $1 == default ]]; then lpsgd_mpi_launcher "$build" "$2"; else LPSGD_BIND=$1 lpsgd_mpi_launcher "$build" "$2"; fi
  printf '%s\n' "${MPIRUN[@]}"
}
for l in "${launch_list[@]}"; do
  case $l in default|none|core) ;; *) echo "node-bound.sh: error: --launch: '$l' is not default, none or core" >&2; exit 2 ;; esac
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$out")"
train=("$build/bin/lpsgd" train --config "$config" --max-steps "$steps" --eval-every 0 --progress off
       --checkpoint-every 0 "${extra[@]}")
for ((r = 0; r < repeat; r++)); do
  echo "node-bound.sh: round $((r + 1))/$repeat: $ranks independent one-rank runs" >&2
  mapfile -t one < <(launcher none 1)  # unbound: each finds a free core
  pids=()
  for ((q = 0; q < ranks; q++)); do
    "${one[@]}" -n 1 "${train[@]}" --metrics "$tmp/alone-$r-$q.jsonl" </dev/null >"$tmp/alone-$r-$q.out" 2>&1 &
    pids+=($!)
  done
  for q in "${!pids[@]}"; do
    wait "${pids[$q]}" || { echo "node-bound.sh: error: a one-rank run failed:" >&2; tail -3 "$tmp/alone-$r-$q.out" >&2; exit 1; }
  done
  for l in "${launch_list[@]}"; do
    echo "node-bound.sh: round $((r + 1))/$repeat: P=$ranks, launch $l" >&2
    mapfile -t run < <(launcher "$l" "$ranks")
    "${run[@]}" -n "$ranks" "${train[@]}" --metrics "$tmp/$l-$r.jsonl" </dev/null >"$tmp/$l-$r.out" 2>&1 ||
      { echo "node-bound.sh: error: P=$ranks, launch $l failed:" >&2; tail -3 "$tmp/$l-$r.out" >&2; exit 1; }
  done
done

/usr/bin/python3 - "$tmp" "$repeat" "$ranks" "$out" "$config" "$launches" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" <<'PY'
import json, statistics, sys
tmp, repeat, ranks, out, config, launches, cpu = sys.argv[1:8]
repeat, ranks = int(repeat), int(ranks)
last = lambda p: json.loads(open(p).read().strip().splitlines()[-1])
alone = [sum(last(f"{tmp}/alone-{r}-{q}.jsonl")["samples_per_s"] for q in range(ranks)) for r in range(repeat)]
bound = statistics.median(alone)
rows = [dict(config=config, case=f"{ranks} x P=1 together", samples_per_s=bound, all=alone, cpu=cpu)]
print(f"{config}, {cpu}: medians of {repeat} interleaved rounds")
print(f"{'case':28} {'samples/s':>10} {'/ bound':>8}  per round")
print(f"{rows[0]['case']:28} {bound:10.0f} {1:8.3f}  {', '.join(f'{a:.0f}' for a in alone)}")
for l in launches.split(","):
    finals = [last(f"{tmp}/{l}-{r}.jsonl") for r in range(repeat)]
    sps = [f["samples_per_s"] for f in finals]
    ratios = [s / a for s, a in zip(sps, alone)]  # per round, against that round's bound
    med = statistics.median(sps)
    row = dict(config=config, case=f"P={ranks}, launch {l}", samples_per_s=med, all=sps,
               ratio=statistics.median(ratios), ratios=ratios, cpu=cpu,
               comm_wait_share=statistics.median(f["comm_wait_s"] / f["train_s"] for f in finals),
               data_share=statistics.median(f["data_s"] / f["train_s"] for f in finals))
    rows.append(row)
    print(f"{row['case']:28} {med:10.0f} {row['ratio']:8.3f}  {', '.join(f'{s:.0f}' for s in sps)}"
          f"  (comm wait {100 * row['comm_wait_share']:.1f}%, data {100 * row['data_share']:.1f}%)")
with open(out, "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
print(f"(/ bound: the median of each round's ratio to that round's independent runs; rows in {out})")
PY
