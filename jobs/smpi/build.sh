#!/usr/bin/env bash
# Builds lpsgd-bench-smpi, `lpsgd bench` for SimGrid's smpirun, with smpicxx
# (Debian's libsimgrid-dev) into its own build directory, incrementally.
#
#   jobs/smpi/build.sh [BUILD_DIR]     default: build-smpi/ at the top of the tree
#
# Prints the path of the program as its last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$root/build-smpi}
if ! command -v smpicxx >/dev/null; then
  echo "build.sh: error: smpicxx not found; install libsimgrid-dev (tools/setup.sh --no-build)" >&2
  exit 1
fi
mkdir -p "$dir"
if [[ ! -f $dir/CMakeCache.txt ]]; then
  if ! cmake -S "$root" -B "$dir" -DLPSGD_SMPI=ON -DCMAKE_CXX_COMPILER=smpicxx \
       -DCMAKE_C_COMPILER=smpicc -DCMAKE_BUILD_TYPE=Release >"$dir/cmake.log" 2>&1; then
    cat "$dir/cmake.log" >&2
    rm -f "$dir/CMakeCache.txt"
    exit 1
  fi
fi
cmake --build "$dir" -j"${JOBS:-$(nproc)}" --target lpsgd-bench-smpi >"$dir/build.log" 2>&1 ||
  { cat "$dir/build.log" >&2; exit 1; }
echo "$dir/bin/lpsgd-bench-smpi"
