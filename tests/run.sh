#!/usr/bin/env bash
# Builds lpsgd (installing what it needs) and runs the whole CTest suite.
# Extra arguments go to ctest, e.g. tests/run.sh -L unit  or  -R collectives.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
cd build
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@"
