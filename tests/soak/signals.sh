#!/usr/bin/env bash
# Stop-signal soak: N short `lpsgd train` runs under mpirun, each sent one
# SIGUSR1 or SIGTERM at a random moment to a random rank. Case i has seed
# SEED+i, which fixes everything about it (ranks 2-4, model, batch, length,
# --max-steps, --eval-every, --checkpoint-every, --keep, sync, algorithm,
# overlap, LPSGD_LP_DIRECT/LPSGD_LP_PAIR, the checkpoint directory: local,
# a full tmpfs or one made read-only just before the signal, the signal, its
# rank and its moment, from 0 s: MPI start-up, to past the run's end), so
#   tests/soak/signals.sh 1 S     replays the case of seed S.
# (The moment is a time, so a replay lands near, not on, the same step.)
#
# Each run must end in one of the documented ways (README, "Training"):
#   checkpointed  exit 0, rank 0's `lpsgd: checkpointed at step S after signal
#                 SIGxxx` (the signal sent), `latest` names ckpt-S.h5 and
#                 `lpsgd ckpt verify` passes;
#   finished      exit 0, `lpsgd: done ... steps=S` and its final checkpoint
#                 (the signal came after the last step, or the run was over);
#   refused       (full or read-only directory only) non-zero exit and exactly
#                 one `lpsgd: error: [rank R] ...` line per rank: the signal's
#                 or the final checkpoint not written (No space left on device,
#                 Read-only file system); or, exit 2, rank 0's one line
#                 refusing a directory made read-only before the start-up check;
# and the signal acted on at the next step: by the ranks' step traces
# (--step-trace), no rank began more than one step 0.3 s (times
# SOAK_TIME_SCALE) or later after it;
# and never: a rank dead by a signal, a glibc heap message, a sanitizer
# report, an MPI_Abort banner, an HDF5 error stack, the "again" line of a
# second signal, a temporary (.NAME.tmp.PID) left in the checkpoint directory,
# a process left behind, or a hang (no end within SOAK_RUN_TIMEOUT: the
# ranks' stacks are shown when gdb is there, then every process is killed).
#
# The signal goes to the rank's lpsgd process once it exists and blocks the
# stop signals (ELF preinit, once the dynamic loader has mapped the libraries,
# before their constructors): before that it is a program still being loaded,
# which SIGUSR1 or SIGTERM ends as it would any other.
# The full and read-only cases need a tmpfs (root or CAP_SYS_ADMIN); where
# mount is not permitted they are skipped with a note.
#
# usage: tests/soak/signals.sh N [SEED]     (SEED: random when omitted)
# env:   LPSGD_BUILD        build directory (default build/); a sanitizer build
#                           (LPSGD_SANITIZE in its CMakeCache) gets
#                           tests/sanitize/run.sh's options and suppressions
#        MPIEXEC, MPIEXEC_FLAGS   launcher and its options (default: the
#                           build's launcher with tools/mpi.sh's options)
#        SOAK_RUN_TIMEOUT   seconds a run may take before it counts as a hang
#                           (default 60, times SOAK_TIME_SCALE)
#        SOAK_TIME_SCALE    factor on the signals' moments and the timeout
#                           (default 1; 5 for a sanitizer build)
#        SOAK_LOG_DIR       keep the output of failing runs there
#        SOAK_VERBOSE=1     one line per run
# Exit status: 0 when every run ended in a documented way, 1 otherwise, 2 on a
# usage error.
set -euo pipefail
export LC_ALL=C
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tools/mpi.sh
. "$ROOT/tools/mpi.sh"

usage() { echo "usage: $0 N [SEED]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 && $1 =~ ^[0-9]+$ ]] || usage
N=$1
SEED=${2:-$((RANDOM << 30 | RANDOM << 15 | RANDOM))}
[[ $SEED =~ ^[0-9]+$ ]] || usage
BUILD=${LPSGD_BUILD:-$ROOT/build}
LPSGD=$BUILD/bin/lpsgd
[[ -x $LPSGD ]] || { echo "soak: error: no lpsgd at $LPSGD (build it, or set LPSGD_BUILD)" >&2; exit 2; }
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3

sanitize=$(sed -n 's/^LPSGD_SANITIZE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
if [[ -n $sanitize ]]; then
  # As tests/sanitize/run.sh: reports fail the process, leaks included.
  supp=$ROOT/tests/sanitize
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1:fast_unwind_on_malloc=0}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp/lsan.supp:print_suppressions=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp}
  export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$supp/tsan.supp:halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0}
  SCALE=${SOAK_TIME_SCALE:-5}
else
  SCALE=${SOAK_TIME_SCALE:-1}
fi
[[ $SCALE =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "soak: error: SOAK_TIME_SCALE must be a number" >&2; exit 2; }
# Seconds a rank may take to see a signal (its taking thread's wake-up).
MARGIN=$(awk -v s="$SCALE" 'BEGIN { printf "%.2f", 0.3 * s }')
TIMEOUT=${SOAK_RUN_TIMEOUT:-$(awk -v s="$SCALE" 'BEGIN { printf "%d", 60 * s }')}
[[ $TIMEOUT =~ ^[0-9]+$ ]] || { echo "soak: error: SOAK_RUN_TIMEOUT must be whole seconds" >&2; exit 2; }

if [[ -n ${MPIEXEC_FLAGS+x} && -n ${MPIEXEC:-} ]]; then
  read -r -a flags <<<"$MPIEXEC_FLAGS"
  MPIRUN=("$MPIEXEC" "${flags[@]}")
else
  lpsgd_mpi_launcher "$BUILD"
fi
# Open MPI as root, oversubscribed, whichever way it was started.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
unset LPSGD_LP_DIRECT LPSGD_LP_PAIR LPSGD_RANKS_PER_NODE  # every case sets its own

tmp=$(mktemp -d)
mnt=""
launcher=""
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  set +e
  [[ -n $launcher ]] && kill_session "$launcher"
  if [[ -n $mnt ]]; then
    mount -o remount,rw "$mnt" 2>/dev/null
    umount "$mnt" 2>/dev/null || { sleep 1; umount "$mnt" 2>/dev/null; }
  fi
  rm -rf "$tmp"
}
# kill_session SID: SIGKILL to every process of the session SID, pid by pid:
# the launcher and its ranks (Open MPI gives each rank a process group of its
# own, so the launcher's group is not all of them).
kill_session() {
  local p k live
  for ((k = 0; k < 30; k++)); do
    live=$({ ps -s "$1" -o pid=,stat= 2>/dev/null || true; } | awk '$2 !~ /^Z/ { print $1 }')
    [[ -n $live ]] || return 0
    for p in $live; do kill -KILL "$p" 2>/dev/null || true; done
    sleep 0.1
  done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
# sleep_until MS: until ms() reaches MS.
sleep_until() {
  local d=$(($1 - $(ms)))
  ((d > 0)) && sleep "$(printf '%d.%03d' $((d / 1000)) $((d % 1000)))"
  return 0
}

# The data set: one for every soak, so that a seed replays the same case.
"$LPSGD" data synth --out "$tmp/d.h5" --samples 4096 --test-samples 1024 --shape 1,28,28 \
  --classes 10 --seed 20260101 >/dev/null 2>&1 || { echo "soak: error: lpsgd data synth failed" >&2; exit 1; }

# One tmpfs for the full and read-only cases (64 MiB: --keep 3 LeNet
# checkpoints of 13 MiB and a temporary).
mkdir -p "$tmp/mnt"
if mount -t tmpfs -o size=64m lpsgd-soak "$tmp/mnt" 2>/dev/null; then
  mnt=$tmp/mnt
else
  echo "soak: note: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): the full and read-only cases are skipped"
fi

# The plan: one line per case, everything drawn from its seed. Fields: seed P
# model batch lr epochs max_steps eval_every ckpt_every keep direct pair
# overlap sync algo progress dir signal rank delay_ms ro_lead_ms expect_ms.
# Moments are in ms of this machine's release build, times SCALE.
"$PY" - "$SEED" "$N" "$SCALE" >"$tmp/plan" <<'PY'
import random, sys
seed0, n, scale = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
TRAIN = 4096
# Rough seconds on a 2-core machine: per step, start-up (with the first
# evaluation), one evaluation, one checkpoint.
STEP = {"mlp": {2: 0.0025, 3: 0.006, 4: 0.0065}, "lenet": {2: 0.04, 3: 0.07, 4: 0.1}}
START = {"mlp": {2: 0.5, 3: 0.9, 4: 1.4}, "lenet": {2: 1.2, 3: 2.0, 4: 3.0}}
EVAL = {"mlp": 0.01, "lenet": 0.25}
CKPT = {"mlp": 0.015, "lenet": 0.05}
for s in range(seed0, seed0 + n):
    r = random.Random(s)
    P = r.choices([2, 3, 4], [70, 15, 15])[0]
    kind = "lenet" if r.random() < 0.2 else "mlp"
    model = "cnn:lenet" if kind == "lenet" else "mlp:784-512-256-10"
    batch = 32 if kind == "lenet" else r.choice([32, 64])
    lr = 0.01 if kind == "lenet" else 0.05
    spe = TRAIN // (batch * P)
    sps = STEP[kind][P] * (0.8 if batch == 32 and kind == "mlp" else 1.0)
    eval_every = r.choices([-1, 0, "small"], [60, 10, 30])[0]
    if eval_every == "small":
        eval_every = r.randint(5, 40) if kind == "mlp" else r.randint(4, 12)
    ckpt_every = r.randint(1, 20) if kind == "mlp" and r.random() < 0.3 else 0
    if kind == "lenet" and r.random() < 0.3:
        ckpt_every = r.randint(2, 10)
    if r.random() < 0.25:  # short: the signal lands near or after the end
        epochs, max_steps = 100, r.randint(1, 30 if kind == "mlp" else 8)
    elif kind == "lenet":
        epochs, max_steps = 100, r.randint(10, 40) * 2 // P
    else:
        secs = r.uniform(1.0, 2.5) if P == 2 else r.uniform(0.6, 1.6)
        steps = max(1, int(secs / sps))
        if ckpt_every:  # at most ~40 checkpoints
            steps = min(steps, 40 * ckpt_every)
        if r.random() < 0.3:
            epochs, max_steps = 100, steps
        else:
            epochs, max_steps = max(1, round(steps / spe)), 0
    steps = min(epochs * spe, max_steps) if max_steps else epochs * spe
    if eval_every == -1:
        evals = steps // spe
    elif eval_every == 0:
        evals = 0
    else:
        evals = steps // eval_every
    ckpts = steps // ckpt_every if ckpt_every else 0
    expect = START[kind][P] + steps * sps + (evals + 1) * EVAL[kind] + (ckpts + 1) * CKPT[kind]
    keep = r.choice([1, 2, 3])
    direct = 0 if r.random() < 0.25 else 1
    pair = 1 if r.random() < 0.1 else 0
    overlap = "off" if r.random() < 0.15 else "on"
    sync = "reduce-bcast" if r.random() < 0.15 else "allreduce"
    others = ["tree", "mst", "be", "mpi", "auto"] + (["ring"] if sync == "allreduce" else [])
    algo = "lp" if r.random() < 0.7 else r.choice(others)  # ring: allreduce only
    progress = r.choice(["off", "lines"])
    d = r.random()
    where = "full" if d < 0.1 else "ro" if d < 0.2 else "disk"
    sig = r.choice(["USR1", "TERM"])
    rank = r.randrange(P)
    delay = r.uniform(0, 0.3) if r.random() < 0.2 else r.uniform(0, 1.15 * expect)
    lead = min(delay, r.uniform(0, 0.5))
    print(s, P, model, batch, lr, epochs, max_steps, eval_every, ckpt_every, keep, direct, pair,
          overlap, sync, algo, progress, where, sig, rank, int(1000 * scale * delay),
          int(1000 * scale * lead), int(1000 * scale * expect))
PY

# rank_pid LAUNCHER RANK: the pid of RANK's lpsgd process (a child of the
# launcher, or a grandchild under MPICH's proxies), once it blocks SIGUSR1 and
# SIGTERM (bits 10 and 15 of SigBlk); false while there is none.
rank_pid() {
  local p q blk
  for p in $(pgrep -P "$1" 2>/dev/null) $(for q in $(pgrep -P "$1" 2>/dev/null); do pgrep -P "$q"; done); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == lpsgd ]] || continue
    grep -qzxE "(OMPI_COMM_WORLD_RANK|PMI_RANK)=$2" "/proc/$p/environ" 2>/dev/null || continue
    blk=$(sed -n 's/^SigBlk:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null)
    [[ -n $blk ]] || continue
    (((16#$blk & 0x4200) == 0x4200)) || continue
    echo "$p"
    return 0
  done
  return 1
}

# The live processes of the session LAUNCHER (the launcher leads it), but the
# launcher itself: zombies are dead already (a rank the launcher did not wait
# for, reaped by init a moment later).
session_pids() {
  { ps -s "$1" -o pid=,stat= 2>/dev/null || true; } | awk -v l="$1" '$1 != l && $2 !~ /^Z/ { print $1 }'
}

# stacks LAUNCHER: each rank's threads, as gdb sees them (for a hang).
stacks() {
  command -v gdb >/dev/null || { echo "(no gdb: no stacks)"; return; }
  local p
  for p in $(session_pids "$1"); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == lpsgd ]] || continue
    echo "--- pid $p ($(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
      grep -m1 -E '^(OMPI_COMM_WORLD_RANK|PMI_RANK)=' || true))"
    { timeout 60 gdb -p "$p" -batch -ex 'thread apply all bt 12' 2>/dev/null || true; } |
      grep -E '^(Thread|#)' | sed -E 's/ \(.*\) at / at /' | head -n 40 || true
  done
}

# send PID SIG: sends SIGSIG to PID; prints the moment just before, on the
# clock of the ranks' step traces (CLOCK_MONOTONIC); false when PID is gone.
send() {
  "$PY" -c 'import os, signal, sys, time
t = time.monotonic()
os.kill(int(sys.argv[1]), getattr(signal, "SIG" + sys.argv[2]))
print("%.6f" % t)' "$1" "$2" 2>/dev/null
}

fill() { dd if=/dev/zero of="$mnt/filler" bs=1M 2>/dev/null || true; }

declare -A outcome_count=()
failures=() failure_what=()
skipped=0 ran=0 not_sent=0 rank_ms_total=0
t_start=$SECONDS

# fail_case SEED WHY: counts the run as a failure.
fail_case() { failures+=("$1"); failure_what+=("$2"); }

# run_case FIELDS...: one case of the plan.
run_case() {
  local seed=$1 P=$2 model=$3 batch=$4 lr=$5 epochs=$6 max_steps=$7 eval_every=$8 ckpt_every=$9
  local keep=${10} direct=${11} pair=${12} overlap=${13} sync=${14} algo=${15} progress=${16}
  local where=${17} sig=${18} rank=${19} delay=${20} lead=${21} expect=${22}
  local desc="P=$P $model batch=$batch epochs=$epochs max-steps=$max_steps eval-every=$eval_every"
  desc+=" checkpoint-every=$ckpt_every keep=$keep sync=$sync algo=$algo overlap=$overlap"
  desc+=" LPSGD_LP_DIRECT=$direct LPSGD_LP_PAIR=$pair dir=$where SIG$sig to rank $rank at ${delay} ms"
  desc+=" (run ~${expect} ms)"
  if [[ $where != disk && -z $mnt ]]; then
    skipped=$((skipped + 1))
    ((${SOAK_VERBOSE:-0})) && echo "soak: seed=$seed skipped (no tmpfs): $desc"
    return 0
  fi
  ran=$((ran + 1))
  local ck log=$tmp/out.$seed
  if [[ $where == disk ]]; then ck=$tmp/ck.$seed; else ck=$mnt/ck.$seed; fi
  mkdir -p "$ck"
  [[ $where == full ]] && fill
  local opts=(--data "$tmp/d.h5" --model "$model" --batch "$batch" --lr "$lr" --epochs "$epochs"
              --max-steps "$max_steps" --eval-every "$eval_every" --checkpoint-every "$ckpt_every"
              --keep "$keep" --sync "$sync" --algo "$algo" --overlap "$overlap" --seed "$seed"
              --checkpoint-dir "$ck" --progress "$progress" --progress-every 0.2
              --step-trace "$tmp/trace.$seed")
  local t0 rc=0 pid="" sent=0 sent_ms="" sent_mono="" ro=0 hung=0 why=()
  t0=$(ms)
  # Its own session and process group, so that a hang can be killed with
  # every rank and a process left behind can be found.
  setsid env LPSGD_LP_DIRECT="$direct" LPSGD_LP_PAIR="$pair" \
    "${MPIRUN[@]}" -n "$P" "$LPSGD" train "${opts[@]}" </dev/null >"$log" 2>&1 &
  launcher=$!
  local deadline=$((t0 + TIMEOUT * 1000))
  if [[ $where == ro ]]; then
    # Read-only from a moment before the signal (a remount waits while a file
    # is open for writing: tried for a second).
    sleep_until $((t0 + delay - lead))
    local tries=0
    while kill -0 "$launcher" 2>/dev/null && ((tries < 50)); do
      if mount -o remount,ro "$mnt" 2>/dev/null; then ro=1; break; fi
      tries=$((tries + 1))
      sleep 0.02
    done
  fi
  sleep_until $((t0 + delay))
  while kill -0 "$launcher" 2>/dev/null && (($(ms) < deadline)); do
    if pid=$(rank_pid "$launcher" "$rank"); then
      sent_mono=$(send "$pid" "$sig") && sent=1 sent_ms=$(($(ms) - t0))
      break
    fi
    sleep 0.01
  done
  while kill -0 "$launcher" 2>/dev/null; do
    if (($(ms) >= deadline)); then
      hung=1
      stacks "$launcher" >"$log.stacks" 2>&1 || true
      kill_session "$launcher"
      break
    fi
    sleep 0.05
  done
  wait "$launcher" 2>/dev/null || rc=$?
  local dur=$(($(ms) - t0))
  # What outlived the launcher (a rank it did not take with it).
  local left p k
  for ((k = 0; k < 50; k++)); do
    left=$(session_pids "$launcher")
    [[ -n $left ]] || break
    sleep 0.1
  done
  if [[ -n $left ]]; then
    why+=("processes left behind 5 s after the launcher: $(for p in $left; do
      echo -n "$p ($(cat "/proc/$p/comm" 2>/dev/null)) "; done)")
    kill_session "$launcher"
  fi
  launcher=""
  ((ro)) && { mount -o remount,rw "$mnt" || true; }
  [[ $where == full ]] && rm -f "$mnt/filler"
  ((sent)) || not_sent=$((not_sent + 1))
  rank_ms_total=$((rank_ms_total + dur))

  # ---- what must never happen
  local bad
  ((hung)) && why+=("hang: no end within ${TIMEOUT} s (killed)")
  if bad=$(grep -m3 -E 'exited on signal|signal [0-9]+ \(|Segmentation fault|core dumped|Aborted' "$log"); then
    why+=("a process died by a signal: $bad")
  fi
  if bad=$(grep -m3 -E 'corrupted|double free|malloc\(\): |free\(\): |munmap_chunk|realloc\(\): |malloc_consolidate|stack smashing' "$log"); then
    why+=("glibc: $bad")
  fi
  if bad=$(grep -m3 -E 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|UndefinedBehaviorSanitizer|runtime error:' "$log"); then
    why+=("sanitizer: $bad")
  fi
  if bad=$(grep -m3 -E 'MPI_ABORT|HDF5-DIAG' "$log"); then
    why+=("unexpected: $bad")
  fi
  if bad=$(grep -m1 'again: exiting now' "$log"); then
    # The soak sends one signal. Open MPI's mpirun sends SIGTERM to the ranks
    # still running once one has exited non-zero: a second one for the rank
    # the soak signalled, if it is slower to exit than another.
    if ((rc != 0)) && sed -n '/exited with non-zero status\|non-zero exit code\|exited on signal/,$p' "$log" |
       grep -q "\[rank $rank\] SIG[A-Z0-9]* again"; then
      why+=("second signal from the launcher: once a rank had exited non-zero, mpirun's SIGTERM to the ranks still running reached rank $rank after the soak's SIG$sig: $bad")
    else
      why+=("a second signal: $bad")
    fi
  fi
  local temps
  temps=$(find "$ck" -name '.*.tmp.*' 2>/dev/null | tr '\n' ' ')
  [[ -n $temps ]] && why+=("temporaries left: $temps")

  # ---- which documented ending
  local ckline done_line errs nerr r out="" step
  ckline=$(grep -E '^lpsgd: checkpointed at step ' "$log" || true)
  done_line=$(grep -E '^lpsgd: done ' "$log" || true)
  errs=$(grep -E '^lpsgd: error: ' "$log" || true)
  nerr=0; [[ -n $errs ]] && nerr=$(grep -c . <<<"$errs")
  # ckpt_ok STEP: latest names ckpt-STEP.h5, and every checkpoint verifies.
  ckpt_ok() {
    local want latest
    want=$(printf 'ckpt-%09d.h5' "$1")
    latest=$(cat "$ck/latest" 2>/dev/null || true)
    [[ $latest == "$want" ]] || { why+=("latest names '${latest:-nothing}', want $want"); return 1; }
    "$LPSGD" ckpt verify "$ck" >"$tmp/verify" 2>&1 ||
      { why+=("lpsgd ckpt verify: $(tr '\n' ' ' <"$tmp/verify")"); return 1; }
  }
  if ((hung)); then
    out=hang
  elif ((rc == 0)) && [[ -n $ckline && -z $done_line && $nerr == 0 ]]; then
    out=checkpointed
    if [[ $(grep -c . <<<"$ckline") != 1 || ! $ckline =~ ^lpsgd:\ checkpointed\ at\ step\ ([0-9]+)\ after\ signal\ SIG$sig$ ]]; then
      why+=("checkpointed line is not one 'after signal SIG$sig': $ckline")
    else
      step=${BASH_REMATCH[1]}
      ckpt_ok "$step" || true
    fi
    [[ $where == full ]] && why+=("checkpointed on a full disk")
    ((sent)) || why+=("checkpointed without a signal")
  elif ((rc == 0)) && [[ -n $done_line && -z $ckline && $nerr == 0 ]]; then
    out=finished
    if [[ $done_line =~ steps=([0-9]+) ]]; then
      ckpt_ok "${BASH_REMATCH[1]}" || true
    else
      why+=("no steps= in '$done_line'")
    fi
    [[ $where == full ]] && why+=("finished on a full disk")
  elif ((rc == 2 && nerr == 1)) && [[ $errs =~ ^lpsgd:\ error:\ --checkpoint-dir\ .*\ is\ not\ writable:\ Read-only\ file\ system$ ]]; then
    # Refused at the start (a usage error: rank 0's one line).
    out=refused
    [[ $where == ro ]] && ((ro)) || why+=("the directory was refused while writable: $errs")
  elif ((rc != 0)) && ((nerr > 0)); then
    out=refused
    # One line per rank, each naming the directory's fault.
    for ((r = 0; r < P; r++)); do
      local n
      n=$(grep -cE "^lpsgd: error: \[rank $r\] " <<<"$errs" || true)
      ((n == 1)) || why+=("rank $r: $n error lines, want 1")
    done
    ((nerr == P)) || why+=("$nerr error lines for $P ranks")
    if [[ $where == disk ]] || { [[ $where == ro ]] && ((!ro)); }; then
      why+=("the run failed with a writable checkpoint directory")
    elif bad=$(grep -vE '\] checkpoint at step [0-9]+ not written: (No space left on device|Read-only file system)( \([a-z_]+\.cpp:[0-9]+\))?$' <<<"$errs"); then
      why+=("error lines that are not the directory's fault: $(head -n 2 <<<"$bad" | tr '\n' ' ')")
    fi
  else
    out=other
    why+=("no documented ending: exit $rc, $nerr error lines, checkpointed line: ${ckline:-none}, done line: ${done_line:-none}")
  fi
  # Acted on at the next step: no rank began more than one step after the
  # signal (one: the signal came within the agreement before it), give or
  # take the taking thread's wake-up. A checkpointed run ends with the step
  # of its checkpoint; a finished one had no step left when the signal came.
  if ((sent)) && [[ $out == checkpointed || $out == finished ]]; then
    local f last after tr
    for f in "$tmp/trace.$seed".rank*.tsv; do
      [[ -f $f ]] || { why+=("no step trace"); break; }
      tr=${f##*.rank} tr=${tr%.tsv}
      after=$(awk -v t="$sent_mono" -v m="$MARGIN" 'NR > 1 && $2 > t + m { n++ } END { print n + 0 }' "$f")
      ((after <= 1)) ||
        why+=("signal not acted on: rank $tr began $after steps more than ${MARGIN} s after it")
      last=$(awk 'NR > 1 { s = $1 } END { print s + 0 }' "$f")
      [[ $out != checkpointed || -z ${step:-} || $last == "$step" ]] ||
        why+=("rank $tr's last step is $last, the checkpoint's $step")
    done
  fi
  # Periodic checkpoints warn only where they cannot be written.
  if [[ $where == disk ]] && bad=$(grep -m2 '^lpsgd: warning:' "$log"); then
    why+=("warning with a writable directory: $bad")
  fi
  outcome_count[$out]=$((${outcome_count[$out]:-0} + 1))
  local note="$out${ckline:+ (${ckline#lpsgd: })}, exit $rc, ${dur} ms"
  ((sent)) && note+=", signal at ${sent_ms} ms" || note+=", no signal (run over)"
  [[ $where == ro ]] && { ((ro)) && note+=", read-only" || note+=", remount failed"; }
  if ((${#why[@]})); then
    fail_case "$seed" "${why[0]}"
    echo "soak: FAIL seed=$seed: $desc"
    echo "soak:   $note"
    local w
    for w in "${why[@]}"; do echo "soak:   - $w"; done
    echo "soak:   replay: $0 1 $seed"
    grep -v -E '^(epoch [0-9.]+(/| step)|step [0-9]+/)' "$log" | tail -n 30 | sed 's/^/  | /'
    if [[ -f $log.stacks ]]; then
      echo "soak:   the ranks' stacks when it was killed:"
      sed 's/^/  | /' "$log.stacks"
      cat "$log.stacks" >>"$log"
    fi
    if [[ -n ${SOAK_LOG_DIR:-} ]]; then
      mkdir -p "$SOAK_LOG_DIR" && cp "$log" "$SOAK_LOG_DIR/signals.$seed.log" &&
        echo "soak:   output: $SOAK_LOG_DIR/signals.$seed.log"
    fi
  elif ((${SOAK_VERBOSE:-0})); then
    echo "soak: seed=$seed $note: $desc"
  fi
  rm -rf "$ck" "$log" "$log.stacks" "$tmp/trace.$seed".rank*.tsv
}

echo "soak: $N runs, seeds $SEED..$((SEED + N - 1)), $LPSGD${sanitize:+ (sanitizers: $sanitize)}," \
     "time scale $SCALE, timeout ${TIMEOUT} s, launcher ${MPIRUN[*]}"
i=0
while read -r -a c; do
  run_case "${c[@]}"
  i=$((i + 1))
  if ((i % 25 == 0 && i < N)); then
    echo "soak: $i/$N runs, ${#failures[@]} failed, $((SECONDS - t_start)) s"
  fi
done <"$tmp/plan"

summary="$ran runs"
for o in checkpointed finished refused hang other; do summary+=", ${outcome_count[$o]:-0} $o"; done
summary+=" ($not_sent without a signal: the run was over); ${#failures[@]} failed"
((skipped)) && summary+=", $skipped skipped (no tmpfs)"
((ran)) && summary+="; $((rank_ms_total / ran)) ms a run"
echo "soak: $summary in $((SECONDS - t_start)) s (seeds $SEED..$((SEED + N - 1)))"
if ((${#failures[@]})); then
  for ((k = 0; k < ${#failures[@]}; k++)); do
    echo "soak: failed: seed=${failures[k]}  ${failure_what[k]}  (replay: $0 1 ${failures[k]})"
  done
  exit 1
fi
exit 0
