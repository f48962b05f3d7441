#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/*.cpp) in build-fuzz with clang,
# ASan and UBSan, writes their seed corpora, and runs each harness for SECONDS
# (default 30) one after the other. Prints per harness the inputs run, execs/s,
# coverage (libFuzzer's cov: edges) and the result; exits non-zero when any
# harness found something (crash, sanitizer report, leak, timeout, uncaught
# exception, an HDF5 error stack printed) in lpsgd; a crash inside HDF5 itself
# is reported as HDF5-internal and does not fail the run. Failing inputs are kept in
# build-fuzz/fuzz/findings/HARNESS/, the growing corpus in build-fuzz/fuzz/corpus/.
#
# Usage: tests/fuzz/run.sh [SECONDS] [HARNESS...]   (HARNESS: idx dataset ckpt config onnx;
#        onnx is skipped, with a line saying so, in a build without libonnx-dev)
# Environment: LPSGD_FUZZ_BUILD (build directory, default build-fuzz),
#              LPSGD_FUZZ_ARGS (extra libFuzzer flags), LPSGD_FUZZ_NICE (default 5).
set -euo pipefail
cd "$(dirname "$0")/../.."

secs=${1:-30}
[[ $secs =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS] [HARNESS...]" >&2; exit 2; }
shift $(($# > 0 ? 1 : 0))
harnesses=("$@")
((${#harnesses[@]})) || harnesses=(idx dataset ckpt config onnx)
build=${LPSGD_FUZZ_BUILD:-build-fuzz}
nice_level=${LPSGD_FUZZ_NICE:-5}

# ---- build ----------------------------------------------------------------------
mkdir -p "$build"
if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DLPSGD_FUZZ=ON -DLPSGD_TESTS=OFF -DLPSGD_CUDA=OFF \
    -DLPSGD_ONEDNN=OFF >"$build/cmake.log" 2>&1; then
  cat "$build/cmake.log"
  exit 1
fi
# The harnesses this build has (tests/fuzz/CMakeLists.txt writes the list).
read -r -a built <"$build/fuzz/harnesses"
wanted=("${harnesses[@]}")
harnesses=()
for h in "${wanted[@]}"; do
  if [[ " ${built[*]} " == *" $h "* ]]; then
    harnesses+=("$h")
  else
    echo "fuzz: $h skipped: not in this build (onnx needs Debian's libonnx-dev: tools/setup.sh)"
  fi
done
targets=(fuzz_make_seeds)
for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
nice -n "$nice_level" cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

# ---- seeds ------------------------------------------------------------------------
out=$build/fuzz
rm -rf "$out/seeds"
"$out/fuzz_make_seeds" "$out/seeds"
mkdir -p "$out/seeds/config"
cp tests/fuzz/corpus/config/* jobs/configs/*.ini "$out/seeds/config/"

# ---- run --------------------------------------------------------------------------
# allocator_may_return_null: C malloc of an impossible size returns NULL, as
# glibc's does (HDF5 allocates sizes read from the file and checks for NULL);
# C++ new of one still reports. HDF5's own leaks: see lsan.supp.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
read -r -a extra <<<"${LPSGD_FUZZ_ARGS:-}"

# True when the first report in LOG stops inside HDF5 itself: its first stack
# frame past the sanitizer's and libFuzzer's own is in libhdf5. Such findings
# are HDF5 1.10's bugs or choices below the API lpsgd calls (e.g. a malloc of
# a variable-length string's length as a damaged file states it, past
# libFuzzer's malloc limit): tests/fuzz/hdf5-internal/README.md. Reported,
# their inputs kept, but they do not fail the run.
in_hdf5() {
  awk '/ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|ERROR: libFuzzer: out-of-memory \(malloc/ { on = 1; next }
       on && /^ *#[0-9]+ / && !/__interceptor_|__asan|__sanitizer|__ubsan|libclang_rt|fuzzer::| in (malloc|calloc|realloc) / {
         exit ($0 ~ /libhdf5/ ? 0 : 1) }
       END { if (!on) exit 1 }' "$1"
}
failed=0
rows=()
for h in "${harnesses[@]}"; do
  corpus=$out/corpus/$h findings=$out/findings/$h log=$out/logs/$h.log
  mkdir -p "$corpus" "$findings" "$out/logs"
  echo "fuzz: $h for ${secs}s (log: $log)"
  dirs=("$corpus" "$out/seeds/$h")
  # Inputs that once failed (kept for the unit tests) stay in the corpus too.
  [[ -d tests/fuzz/regressions/$h ]] && dirs+=("tests/fuzz/regressions/$h")
  # -timeout is wall-clock: 30 s, not less, so a starved process on a loaded
  # shared machine is not taken for a hang (inputs take milliseconds).
  flags=(-max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1
         -artifact_prefix="$findings/")
  [[ -f tests/fuzz/$h.dict ]] && flags+=(-dict="tests/fuzz/$h.dict")
  rc=0
  nice -n "$nice_level" "$out/fuzz_$h" "${flags[@]}" "${extra[@]}" "${dirs[@]}" \
    >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1 | cut -d' ' -f2 || true)
  result=ok
  if ((rc != 0)); then
    what=$(grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error:|FUZZ FINDING|terminate called|deadly signal|timeout after' "$log" || true)
    if in_hdf5 "$log"; then
      result="HDF5-internal (exit $rc, not lpsgd's; input in $findings): ${what:-see $log}"
    else
      result="FOUND (exit $rc): ${what:-see $log}"
    fi
  elif grep -q 'HDF5-DIAG' "$log"; then
    result="FOUND: HDF5 printed its error stack (see $log)"
  fi
  [[ $result == ok || $result == HDF5-internal* ]] || failed=1
  rows+=("$(printf '%-8s %10s %8s %7s  %s' "$h" "${runs:-?}" "${eps:-?}" "${cov:-?}" "$result")")
done

printf '%-8s %10s %8s %7s  %s\n' harness runs execs/s cov result
printf '%s\n' "${rows[@]}"
exit "$failed"
