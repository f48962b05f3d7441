#!/usr/bin/env bash
# The SimGrid SMPI build of the bench, end to end: builds lpsgd-bench-smpi
# (incrementally, into BUILD_DIR) and runs it under smpirun at small P with
# real buffers and --check, every algorithm and collective, odd sizes, two
# roots, W = 1 and 4: every result must be exact. Nothing here is timed.
#   smpi.sh BUILD_DIR
set -u
BUILD=$1
source "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v smpirun >/dev/null || ! command -v smpicxx >/dev/null; then
  echo "skip: SimGrid (libsimgrid-dev) is not installed"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! bench=$(JOBS=${JOBS:-2} "$root/jobs/smpi/build.sh" "$BUILD" 2>"$tmp/build.err" | tail -1); then
  echo "FAIL: jobs/smpi/build.sh:"; cat "$tmp/build.err"; exit 1
fi
echo "ok: built $bench"

sim() {
  local np=$1; shift
  smpirun -np "$np" -platform "$root/jobs/smpi/cluster-10g.xml" \
    --cfg=smpi/bw-factor:0:1 --cfg=smpi/lat-factor:0:1 --cfg=network/crosstraffic:0 \
    --cfg=smpi/simulate-computation:no --cfg=smpi/test:0 --cfg=smpi/send-is-detached-thresh:0 \
    --log=root.thres:warning \
    --log=smpi_kernel.thres:error \
    "$bench" "$@" </dev/null
}

check_run() {  # NAME ROWS NP bench-args...: exits 0, no wrong element, ROWS checked rows
  local name=$1 rows=$2; shift 2
  if ! sim "$@" --check --json "$tmp/$name.json" >"$tmp/$name.out" 2>&1; then
    echo "FAIL: $name exited non-zero:"; cat "$tmp/$name.out"; fails=$((fails + 1)); return
  fi
  local n bad
  n=$(grep -c '"wrong": 0}' "$tmp/$name.json")
  bad=$(grep -vc '"wrong": 0}' "$tmp/$name.json")
  if [[ $n -ne $rows || $bad -ne 0 ]] || ! grep -q "wrong elements in total: 0" "$tmp/$name.out"; then
    echo "FAIL: $name: $n exact rows of $rows, $bad not:"; cat "$tmp/$name.out"; fails=$((fails + 1)); return
  fi
  echo "ok: $name: $rows rows, every result exact"
}

# 4 sizes (1000 B to 300 KiB) x (bcast 4 + reduce 4 + allreduce 5 algorithms).
check_run p4-w1 52 4 --op bcast,reduce,allreduce --algo lp,tree,mst,be,ring -b 1000 -e 300K -f 17 \
  -n 2 -w 1 --window 1 --root 0
# Non-power-of-two P, a root inside the chain, small blocks, several in flight.
check_run p5-w4 52 5 --op bcast,reduce,allreduce --algo lp,tree,mst,be,ring -b 1000 -e 300K -f 17 \
  -n 2 -w 1 --window 4 --block 4K --root 2
# The simulated clock is read: 1 MiB at 10 Gb/s takes about 0.84 ms of simulated time.
if sim 2 --op bcast --algo lp -b 1M -e 1M -n 1 -w 0 >"$tmp/t.out" 2>&1 &&
   awk '$1 == "1M" && $8 > 800 && $8 < 2000 { ok = 1 } END { exit !ok }' "$tmp/t.out"; then
  echo "ok: 1 MiB broadcast on 2 simulated ranks takes the simulated time (0.8-2 ms)"
else
  echo "FAIL: simulated time of a 1 MiB broadcast:"; cat "$tmp/t.out"; fails=$((fails + 1))
fi
expect_error 2 "shared buffers hold no data" -- sim 2 --shared-buffers --check -b 1K -e 1K
finish
