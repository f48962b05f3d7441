#!/usr/bin/env bash
# CI: lpsgd with MPICH instead of Open MPI. Installs MPICH beside Open MPI and
# builds into build-mpich/ (tools/setup.sh --mpi mpich), then runs that build's
# unit and mpi tests. Extra arguments go to ctest (e.g. -L e2e for the rest).
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/setup.sh --mpi mpich
cd build-mpich
if (($#)); then
  ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@"
else
  ctest --output-on-failure --timeout 900 -j "$(nproc)" -L 'unit|mpi'
fi
