#!/usr/bin/env bash
# Builds lpsgd with sanitizers into a build directory of its own and runs CTest
# there with the sanitizers' options and this folder's suppressions.
#
#   tests/sanitize/run.sh [address,undefined|thread] [ctest arguments...]
#
# address,undefined (default) builds build-asan/ and runs what the arguments
# select (default: the whole CPU suite: unit, mpi and e2e). thread builds
# build-tsan/ and, without arguments, runs the tests of the threaded parts:
# the loader's prefetch thread (test_io_loader, test_io_augment), the progress engine and the
# shared-memory links (test_collectives at 2 and 4 ranks, one node and pretend
# nodes). Any sanitizer report fails its test.
# Environment: LPSGD_SANITIZE_BUILD (build directory), JOBS (build jobs).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=$PWD/tests/sanitize
kind=address,undefined
if (($#)) && [[ $1 != -* ]]; then kind=$1; shift; fi
case $kind in
  address,undefined|undefined,address) kind=address,undefined build="build-asan" ;;
  thread) build="build-tsan" ;;
  *) echo "sanitize: error: unknown sanitizers '$kind' (address,undefined or thread)" >&2; exit 2 ;;
esac
build=${LPSGD_SANITIZE_BUILD:-$build}

# -O1 -g1 (line tables): reports name file and line, and the build is a third
# quicker than RelWithDebInfo's -O2 -g. No CUDA (nothing here runs it).
mkdir -p "$build"
# shellcheck disable=SC2086  # LPSGD_CMAKE_ARGS is a list of arguments
if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -g1" \
     -DCMAKE_C_FLAGS_SANITIZE="-O1" -DLPSGD_SANITIZE="$kind" -DLPSGD_CUDA=OFF \
     ${LPSGD_CMAKE_ARGS:-} >"$build/cmake.log" 2>&1; then
  cat "$build/cmake.log" >&2
  exit 1
fi
cmake --build "$build" -j"${JOBS:-$(nproc)}" >"$build/build.log" 2>&1 ||
  { tail -40 "$build/build.log" >&2; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Reports go to stderr (which CTest keeps) and fail the process: ASan and UBSan
# stop at the first report; LeakSanitizer makes the exit status non-zero.
# allocator_may_return_null: a C malloc of an impossible size returns NULL, as
# glibc's does; HDF5 allocates sizes read from damaged files and checks for
# NULL (test_fuzz_regressions opens such files). C++ new still reports.
# fast_unwind_on_malloc=0: the MPI library and its plugins have no frame
# pointers, so the quick unwinder stops one frame into them and no suppression
# of lsan.supp could match (their plugins are unloaded by the time leaks are
# reported, "<unknown module>"); the full unwinder names the library.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1:fast_unwind_on_malloc=0
export LSAN_OPTIONS=suppressions=$here/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$here/ubsan.supp
export TSAN_OPTIONS=suppressions=$here/tsan.supp:halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0
cd "$build"
if (($#)); then
  args=("$@")
elif [[ $kind == thread ]]; then
  args=(-R '^(test_io_loader|test_io_augment|test_collectives\.p2|test_collectives\.p4|test_collectives\.p4\.rpn2)$')
else
  args=(-LE 'gpu|soak')
fi
ctest --output-on-failure --timeout 1800 -j"$(nproc)" "${args[@]}"
