#!/usr/bin/env bash
# The collectives against the memory floor on one node: R paired runs of
# `lpsgd bench --floor`, one with the MPI library's rows (--algo lp,mpi) and
# one without (--algo lp), so that each run shows LP against the fastest
# `copy` of its size and against the MPI library, and each pair shows whether
# the MPI rows disturb the others (which of the two runs first alternates).
# Every result is checked (--check). Prints
# the ratios run by run and their ranges; writes every row as CSV and the
# summary as JSON (jobs/plot/floor.py draws it).
#
#   jobs/local/floor.sh [--repeat R] [--ranks P] [--sizes LIST] [--iters N] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
# LPSGD_MPI=mpich (or LPSGD_BUILD=DIR): the MPICH build, build-mpich/.
# shellcheck source=tools/mpi.sh
. tools/mpi.sh
build=$(lpsgd_build_dir)

repeat=3 ranks=2 sizes=16M,64M iters=9 out=runs/floor
while (($#)); do
  case $1 in
    --repeat) repeat=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "floor.sh: error: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ -x $build/bin/lpsgd ]] || { echo "floor.sh: error: $build/bin/lpsgd missing (run tools/setup.sh)" >&2; exit 2; }
lpsgd_mpi_launcher "$build"  # MPIRUN: oversubscribed, unbound, as root too
mkdir -p "$out"
rm -f "$out"/r*-*.csv

for ((r = 1; r <= repeat; r++)); do
  # Alternate which of the pair runs first, so that drift within a pair
  # does not always favour the same one.
  order=("lp,mpi" lp)
  ((r % 2)) || order=(lp "lp,mpi")
  for algos in "${order[@]}"; do
    echo "floor.sh: run $r/$repeat, --algo $algos" >&2
    "${MPIRUN[@]}" -n "$ranks" "$build/bin/lpsgd" bench --op allreduce,bcast,reduce \
      --algo "$algos" --floor --check --sizes "$sizes" -n "$iters" -w 3 \
      --csv "$out/r$r-${algos/,/_}.csv" >/dev/null
  done
done
jobs/plot/floor.py "$out" --json "$out/summary.json"
