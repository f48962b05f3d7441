#!/usr/bin/env bash
# Collective soak: N random cases, each checked against the MPI library's
# result (tests/soak/soak_collectives.cpp, with the oracle of the collective
# tests). Case i has seed SEED+i, which fixes everything about it (P 1-8,
# pretend nodes, links, window, slot, staging, collective, algorithm, dtype,
# op, root, size 0-10 MiB, block, in place, shared buffers), so
#   tests/soak/collectives.sh 1 S     replays the case of seed S.
# The cases of one P run in one launch (LPSGD_LP_PAIR cases of P=2 in another);
# a launch that makes no progress for SOAK_CASE_TIMEOUT seconds (default 180)
# is killed and reported as a hang with the seed in flight, and the launch
# goes on after a case that failed or hung.
#
# usage: tests/soak/collectives.sh N [SEED]     (SEED: random when omitted)
# env:   LPSGD_BUILD      build directory (default build/)
#        SOAK_DRIVER      the driver (default $LPSGD_BUILD/tests/soak_collectives)
#        MPIEXEC, MPIEXEC_FLAGS   launcher and its options (default: the
#                         build's launcher with tools/mpi.sh's options)
#        SOAK_CASE_TIMEOUT  seconds without progress that count as a hang
# Exit status: 0 when every case was right, 1 otherwise, 2 on a usage error.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tools/mpi.sh
. "$ROOT/tools/mpi.sh"

usage() { echo "usage: $0 N [SEED]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 && $1 =~ ^[0-9]+$ ]] || usage
N=$1
SEED=${2:-$((RANDOM << 30 | RANDOM << 15 | RANDOM))}
[[ $SEED =~ ^[0-9]+$ ]] || usage
BUILD=${LPSGD_BUILD:-$ROOT/build}
DRIVER=${SOAK_DRIVER:-$BUILD/tests/soak_collectives}
STALL=${SOAK_CASE_TIMEOUT:-180}
[[ -x $DRIVER ]] || { echo "soak: error: no driver at $DRIVER (build the tests, or set SOAK_DRIVER)" >&2; exit 2; }

if [[ -n ${MPIEXEC_FLAGS+x} && -n ${MPIEXEC:-} ]]; then
  read -r -a flags <<<"$MPIEXEC_FLAGS"
  MPIRUN=("$MPIEXEC" "${flags[@]}")
else
  lpsgd_mpi_launcher "$BUILD"
fi
# Open MPI as root, oversubscribed, whichever way it was started.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
unset LPSGD_RANKS_PER_NODE LPSGD_LP_PAIR  # every case sets its own

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "soak: $N cases, seeds $SEED..$((SEED + N - 1)), launcher ${MPIRUN[*]}"
t0=$SECONDS
"$DRIVER" --plan "$SEED" "$N" >"$tmp/plan"

ok=0 wrong=() errors=() hangs=()
# run_group P PAIR SEED...: runs the cases, relaunching after a case that
# aborted or hung, until every one has run.
run_group() {
  local P=$1 pair=$2
  shift 2
  local todo=("$@") launch=0
  while ((${#todo[@]})); do
    launch=$((launch + 1))
    local prog="$tmp/progress.$P.$pair.$launch" log="$tmp/log.$P.$pair.$launch"
    : >"$prog"
    local env=(env)
    ((pair)) && env+=(LPSGD_LP_PAIR=1)
    # Its own process group, so that a hang can be killed with every rank.
    setsid "${env[@]}" "${MPIRUN[@]}" -n "$P" "$DRIVER" --progress "$prog" "${todo[@]}" \
      >"$log" 2>&1 </dev/null &
    local pid=$! last_size=-1 still=0 hung=0
    while kill -0 "$pid" 2>/dev/null; do
      sleep 1
      local size
      size=$(stat -c %s "$prog")
      if [[ $size != "$last_size" ]]; then last_size=$size still=0; else still=$((still + 1)); fi
      if ((still >= STALL)); then
        hung=1
        kill -TERM -- "-$pid" 2>/dev/null || true
        sleep 3
        kill -KILL -- "-$pid" 2>/dev/null || true
        break
      fi
    done
    local rc=0
    wait "$pid" || rc=$?
    # What finished, and what was in flight.
    local s what desc inflight="" inflight_desc=""
    declare -A finished=()
    while read -r what s desc; do
      case $what in
        start) inflight=$s inflight_desc=$desc ;;
        ok) ok=$((ok + 1)); finished[$s]=1; inflight="" ;;
        wrong) wrong+=("$s"); finished[$s]=1; inflight="" ;;
        error) errors+=("$s"); finished[$s]=1; inflight="" ;;
      esac
    done <"$prog"
    if ((hung)); then
      # Not even started: the launch itself hung (start-up), with the first case.
      [[ -n $inflight ]] || inflight=${todo[0]}
      hangs+=("$inflight")
      finished[$inflight]=1
      echo "soak: HANG seed=$inflight (P=$P: no progress for ${STALL}s; replay: $0 1 $inflight)"
      echo "soak:   in flight: ${inflight_desc:-launch start-up}"
      tail -n 20 "$log" | sed 's/^/  | /'
    elif ((rc != 0)) && [[ -n $inflight ]]; then
      errors+=("$inflight")
      finished[$inflight]=1
      echo "soak: launch P=$P died (exit $rc) in seed=$inflight: $inflight_desc"
    elif ((rc != 0 && ${#finished[@]} == 0)); then
      echo "soak: launch P=$P failed (exit $rc) before its first case:"
      tail -n 20 "$log" | sed 's/^/  | /'
      errors+=("${todo[@]}")
      return
    fi
    grep -E '^(WRONG|ERROR) ' "$log" | head -n 20 | sed 's/^/soak: /' || true
    local rest=()
    for s in "${todo[@]}"; do [[ -n ${finished[$s]:-} ]] || rest+=("$s"); done
    todo=("${rest[@]}")
    unset finished
  done
}

for P in 1 2 3 4 5 6 7 8; do
  for pair in 0 1; do
    mapfile -t seeds < <(awk -v p="$P" -v q="$pair" '$2 == p && $3 == q {print $1}' "$tmp/plan")
    ((${#seeds[@]})) || continue
    g0=$SECONDS
    run_group "$P" "$pair" "${seeds[@]}"
    echo "soak: P=$P$( ((pair)) && echo ' lp-pair'): ${#seeds[@]} cases in $((SECONDS - g0)) s"
  done
done

bad=$(( ${#wrong[@]} + ${#errors[@]} + ${#hangs[@]} ))
echo "soak: $N cases: $ok right, ${#wrong[@]} wrong, ${#errors[@]} errors, ${#hangs[@]} hangs" \
     "in $((SECONDS - t0)) s (seeds $SEED..$((SEED + N - 1)))"
if ((bad)); then
  for s in "${wrong[@]}" "${errors[@]}" "${hangs[@]}"; do echo "soak: failed: seed=$s  (replay: $0 1 $s)"; done
  exit 1
fi
