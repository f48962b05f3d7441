#!/usr/bin/env bash
# CI's second part, after tests/run.sh (the README's test command): the short
# versions of the hardening checks, each timed.
#   1. the unit and mpi labels built with AddressSanitizer + UBSan (build-asan/),
#      and the e2e tests of faults, resume and checkpoints in that build
#   2. a collective soak of 200 random cases against the MPI library
#   3. a stop-signal soak: 30 runs with the release build, 30 with build-asan/
#   4. each libFuzzer harness for 30 s (build-fuzz/)
#   5. the unit and mpi labels with MPICH instead of Open MPI (build-mpich/);
#      last, as it installs MPICH
# The long versions (whole suite under sanitizers, ThreadSanitizer, 10,000-case
# soak, 10-minute fuzzing, MPICH's e2e tests) are run by hand; README's
# "Hardening" section says how.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
start=$SECONDS
step() {
  local name=$1; shift
  local t0=$SECONDS
  echo "=== hardening: $name"
  "$@"
  echo "=== hardening: $name passed in $((SECONDS - t0)) s (total $((SECONDS - start)) s)"
}

# Of the e2e tests (also labelled mpi when they launch ranks) those of the
# paths an error or a signal takes run under ASan here (about 4 min); the rest
# pass under ASan by hand (tests/sanitize/run.sh), at 10-20x slower.
step "address+undefined sanitizers, unit and mpi" tests/sanitize/run.sh address,undefined \
  -L 'unit|mpi' -LE 'soak|e2e'
step "address+undefined sanitizers, e2e faults, resume, checkpoints" \
  tests/sanitize/run.sh address,undefined -R '^e2e\.(faults\..*|resume|ckpt)$'
step "collective soak, 200 cases" tests/soak/collectives.sh 200
step "stop-signal soak, 30 runs" tests/soak/signals.sh 30
step "stop-signal soak under ASan, 30 runs" env LPSGD_BUILD=build-asan tests/soak/signals.sh 30
step "fuzzing, 30 s per harness" tests/fuzz/run.sh 30
# Every mpi test, P 1-8. (MPICH's ch4 spins in its blocking calls; the tests'
# oracle waits with yields, without which p8 took 280 s here instead of 33.)
step "MPICH, unit and mpi" env LPSGD_CMAKE_ARGS=-DLPSGD_CUDA=OFF \
  tests/ci/mpich.sh -L 'unit|mpi' -LE 'soak|e2e'
echo "=== hardening: all passed in $((SECONDS - start)) s"
