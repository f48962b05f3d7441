#!/usr/bin/env bash
# lpsgd bench end to end: every algorithm and collective validated (--check)
# on a mixed chain, JSON and CSV written with the documented keys, bad options
# rejected. Nothing here is timed.
set -u
LPSGD=$1
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() { "${MPIEXEC:-mpiexec}" -n "$1" "${MPI_FLAGS[@]}" "$LPSGD" bench "${@:2}" </dev/null; }

if run 5 --op bcast,reduce,allreduce --algo lp,mst,be,ring,mpi,auto -b 1000 -e 300K -f 400 \
     -n 2 -w 1 --root 3 --ranks-per-node 2 --block 4K --check --json "$tmp/r.json" \
     --csv "$tmp/r.csv" >"$tmp/out" 2>&1; then
  echo "ok: bench --check on a mixed chain of 5 ranks"
else
  echo "FAIL: bench --check exited non-zero:"; cat "$tmp/out"; fails=$((fails + 1))
fi
grep -q "wrong elements in total: 0" "$tmp/out" || { echo "FAIL: no zero-wrong summary"; cat "$tmp/out"; fails=$((fails + 1)); }
rows=$(wc -l <"$tmp/r.json")
# 2 sizes x (bcast 5 algos + reduce 5 + allreduce 6)
if [[ $rows -ne 32 ]]; then echo "FAIL: $rows JSON rows, want 32"; fails=$((fails + 1)); else echo "ok: 32 JSON rows"; fi
for key in op algo dtype bytes count root ranks block time_us algbw_gbs busbw_gbs predicted_us wrong; do
  grep -q "\"$key\": " "$tmp/r.json" || { echo "FAIL: JSON lacks $key"; fails=$((fails + 1)); }
done
head -1 "$tmp/r.csv" | grep -q '^op,algo,dtype,bytes,count,root,ranks,block,time_us,algbw_gbs,busbw_gbs,predicted_us,wrong$' \
  || { echo "FAIL: CSV header"; fails=$((fails + 1)); }

# The plot script turns the JSON into one PNG per collective.
plot="$(dirname "$0")/../../jobs/plot/bench.py"
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  if "$plot" "$tmp/r.json" --out "$tmp/png" >"$tmp/plot.out" 2>&1 &&
     [[ -s $tmp/png/allreduce_busbw_vs_size.png && -s $tmp/png/bcast_busbw_vs_size.png && -s $tmp/png/reduce_busbw_vs_size.png ]]; then
    echo "ok: jobs/plot/bench.py wrote the PNGs"
  else
    echo "FAIL: jobs/plot/bench.py:"; cat "$tmp/plot.out"; fails=$((fails + 1))
  fi
  if "$plot" "$tmp/r.json" --table >"$tmp/table.md" 2>&1 && grep -q '^| 5 | .*[0-9]' "$tmp/table.md"; then
    echo "ok: jobs/plot/bench.py --table"
  else
    echo "FAIL: jobs/plot/bench.py --table:"; cat "$tmp/table.md"; fails=$((fails + 1))
  fi
else
  echo "skip: no matplotlib for /usr/bin/python3"
fi

expect_error 2 "unknown algorithm 'fast'" -- "$LPSGD" bench --algo fast
expect_error 2 "unknown collective 'gather'" -- "$LPSGD" bench --op gather
expect_error 2 "exceeds --maxbytes" -- "$LPSGD" bench -b 2M -e 1M
expect_error 2 "root must be in" -- "$LPSGD" bench --root 3
expect_error 2 "unknown device 'tpu'" -- "$LPSGD" bench --device tpu
# --device cuda: without a GPU (or without CUDA in the build) one clear line, on every rank.
version=$("$LPSGD" --version </dev/null)
if [[ $version == *"GPUs visible: 0"* ]]; then
  expect_error 2 "no usable GPU" -- "${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}" "$LPSGD" bench --device cuda
elif [[ $version != *cuda* ]]; then
  expect_error 2 "built without CUDA" -- "$LPSGD" bench --device cuda
else
  echo "skip: --device cuda errors (a GPU is visible)"
fi
expect_error 2 "calibrate measures the CPU" -- "$LPSGD" bench --device cuda --calibrate
expect_error 2 "needs the SimGrid build" -- "$LPSGD" bench --shared-buffers
finish
