#!/usr/bin/env bash
# auto's choices under SimGrid SMPI: a few cells of jobs/smpi/sweep.sh with
# every fixed algorithm and auto, on a switch (cluster-25g: the cell where a
# round's emptied pipe once cost a whole 60 KiB message and auto took the
# tree at 1.50x BE's time, also with the real links' message limit) and on a
# ring network; auto must stay within 1.10 of the best fixed algorithm in
# every cell (jobs/plot/grid.py --max-ratio). Simulated times repeat exactly:
# nothing here depends on this machine's speed.
#   smpi_auto.sh BUILD_DIR
set -u
BUILD=$1
source "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v smpirun >/dev/null || ! command -v smpicxx >/dev/null; then
  echo "skip: SimGrid (libsimgrid-dev) is not installed"
  exit 77
fi
if ! /usr/bin/python3 -c 'import matplotlib, numpy' 2>/dev/null; then
  echo "skip: jobs/plot/grid.py needs matplotlib and numpy for /usr/bin/python3"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

sweep() {  # NAME sweep.sh-options...: the cells, then auto against the best
  local name=$1; shift
  if ! "$root/jobs/smpi/sweep.sh" --build "$BUILD" --no-plot --out "$tmp/$name" "$@" \
       >"$tmp/$name.log" 2>&1; then
    echo "FAIL: $name: sweep.sh:"; tail -20 "$tmp/$name.log"; fails=$((fails + 1)); return
  fi
  if grep -q FAILED "$tmp/$name.log"; then
    echo "FAIL: $name: a configuration failed:"; grep -A5 FAILED "$tmp/$name.log"; fails=$((fails + 1)); return
  fi
  if ! "$root/jobs/plot/grid.py" "$tmp/$name" --out "$tmp/$name" --max-ratio 1.10 >"$tmp/$name.grid" 2>&1; then
    echo "FAIL: $name:"; cat "$tmp/$name.grid"; fails=$((fails + 1)); return
  fi
  echo "ok: $name: $(grep -c . "$tmp/$name/results.json") rows;" \
       "$(grep 'worst auto/best' "$tmp/$name.grid" | tr '\n' ';')"
}

all=lp,tree,be,ring,auto
sweep switch-25g --platform "$root/jobs/smpi/cluster-25g.xml" --ranks 8,64 --bytes 64K,1M \
  --op bcast,allreduce --algo "$all"
sweep switch-25g-p256 --platform "$root/jobs/smpi/cluster-25g.xml" --ranks 256 --bytes 64K \
  --op allreduce --algo "$all"
LPSGD_MPI_MESSAGE_BYTES=61440 sweep switch-25g-p256-60k --platform "$root/jobs/smpi/cluster-25g.xml" \
  --ranks 256 --bytes 64K --op allreduce --algo "$all"
"$root/jobs/smpi/ring-platform.py" --hosts 64 >"$tmp/ring.xml"
sweep ring --platform "$tmp/ring.xml" --ranks 16 --bytes 64K,1M --op bcast,allreduce --algo lp,ring,auto
finish
