# shellcheck shell=bash
# Helpers for the e2e shell tests: sourced, not run.
# expect_error CODE PATTERN -- cmd...: cmd must exit with CODE and print exactly one
# line on stderr (under mpiexec: exactly one line from lpsgd), starting "lpsgd: error:" and matching PATTERN.
fails=0
expect_error() {
  local want=$1 pattern=$2; shift 3
  local err rc
  err=$("$@" 2>&1 >/dev/null); rc=$?
  # Under mpiexec the launcher adds its own banner: count lpsgd's lines only.
  local lines
  if [[ $(basename "$1") == mpi* ]]; then
    err=$(printf '%s\n' "$err" | grep '^lpsgd')
  fi
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [[ $rc -ne $want ]]; then
    echo "FAIL: '$*' exited $rc, want $want; stderr: $err"; fails=$((fails + 1)); return
  fi
  if [[ $lines -ne 1 || ! $err =~ ^lpsgd:\ error:.*$pattern ]]; then
    echo "FAIL: '$*' stderr is not one 'lpsgd: error: ...$pattern' line: $err"
    fails=$((fails + 1)); return
  fi
  echo "ok: $* -> $rc: $err"
}
expect_output() {
  local pattern=$1; shift 2
  local out; out=$("$@" 2>&1) || { echo "FAIL: '$*' exited $?: $out"; fails=$((fails + 1)); return; }
  if [[ ! $out =~ $pattern ]]; then
    echo "FAIL: '$*' output lacks /$pattern/: $out"; fails=$((fails + 1)); return
  fi
  echo "ok: $*"
}
finish() {
  if ((fails)); then echo "$fails check(s) failed"; exit 1; fi
  echo "all checks passed"
}
