#!/usr/bin/env bash
# jobs/slurm/*.sbatch on a real Slurm cluster: jobs/local/slurm-cluster.sh starts
# munged, slurmctld and slurmd on this machine in a fresh directory, then
#  - bench.sbatch on 2 tasks (srun --mpi=pmix, and the mpirun fallback) writes
#    its JSON rows, validated (--check), and PNGs next to the job output;
#  - train.sbatch with a config lpsgd cannot use ends FAILED with lpsgd's error
#    in the output and is not requeued;
#  - train.sbatch on 2 tasks gets USR1 mid-run (as from --signal=B:USR1@...):
#    lpsgd checkpoints, the job requeues itself, resumes, and ends with the
#    same parameters (checkpoint checksum) as the same run straight through;
#  - train.sbatch (srun) with one task killed (SIGKILL): every rank gone
#    within 10 s, the job FAILED and not requeued, srun's line and rank 0's
#    error name the lost task;
#  - the cluster stops with no daemon left, also when a check fails.
# Exits 77 (skipped) where the cluster cannot run: not root, Slurm or munge missing.
set -u
LPSGD=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
cluster=$root/jobs/local/slurm-cluster.sh

skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "the local Slurm cluster needs root (slurmd starts the jobs)"
for b in munged slurmctld slurmd sbatch scontrol squeue scancel; do
  command -v "$b" >/dev/null || skip "$b not installed (Debian: apt-get install slurm-wlm munge)"
done

# Nothing from an enclosing Slurm job may leak into the jobs submitted here.
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM|SBATCH|SRUN|SALLOC)_')
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"

tmp=$(mktemp -d /tmp/lpsgd-e2e-slurm.XXXXXX)
export LPSGD_SLURM_DIR=$tmp/cluster
jobdir=$tmp/jobs
mkdir -p "$jobdir"
chmod 0755 "$tmp"  # munged serves its socket only where everyone may reach it
daemon_pids=()
stopped=1

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
# check WHAT CMD...: ok when CMD succeeds.
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }

# Timing of each phase, printed when the next starts.
phase_name="" phase_t0=0
phase() {
  local now=${EPOCHREALTIME/./}
  [[ -n $phase_name ]] && printf 'time: %-34s %6.1f s\n' "$phase_name" "$(((now - phase_t0) / 100000))e-1"
  phase_name=$1 phase_t0=$now
}

stop_cluster() {
  ((stopped)) && return 0
  stopped=1
  phase "cluster stop"
  "$cluster" stop || fail "slurm-cluster.sh stop"
  local p comm state
  for p in "${daemon_pids[@]}"; do
    # Gone, or a zombie (exited, not yet reaped by init).
    read -r _ comm state _ 2>/dev/null <"/proc/$p/stat" || continue
    [[ $state == Z ]] || fail "daemon pid $p $comm still runs"
  done
  local rc=0
  "$cluster" status >/dev/null || rc=$?
  check "no daemon left (pids ${daemon_pids[*]} gone), status says stopped" test $rc -eq 3
  phase ""
}
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  stop_cluster
  if ((fails)); then echo "(kept $tmp for inspection)"; else rm -rf "$tmp"; fi
  ((fails == 0)) || exit 1
}
# The end of a successful path: stop the cluster (a check of its own), then report.
end() {
  stop_cluster
  finish
  exit 0
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Prints the job's output file and the daemons' last log lines.
dump() {
  local out
  out=$(job_field "$1" StdOut)
  echo "---- job $1: $(scontrol show job -o "$1" 2>&1 | head -c 600)"
  [[ -n $out && -r $out ]] && { echo "---- $out"; cat "$out"; }
  for out in "$LPSGD_SLURM_DIR"/log/slurm*.log; do echo "---- tail $out"; tail -n 20 "$out"; done
}
job_field() { scontrol show job -o "$1" 2>/dev/null | grep -o "\b$2=[^ ]*" | head -n 1 | cut -d= -f2-; }
# wait_job ID SECONDS: waits until the job has ended; prints its final state.
wait_job() {
  local id=$1 deadline=$((SECONDS + $2)) state
  while ((SECONDS < deadline)); do
    state=$(job_field "$id" JobState)
    case $state in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED)
        echo "$state"; return 0 ;;
    esac
    sleep 0.3
  done
  echo "still ${state:-unknown} after $2 s"
}
submit() { sbatch --parsable --chdir="$jobdir" "$@"; }

# ---- cluster --------------------------------------------------------------------
phase "cluster start"
stopped=0
if ! "$cluster" start; then
  fail "slurm-cluster.sh start"
  exit 1
fi
eval "$("$cluster" env)"
for d in munged slurmctld slurmd; do daemon_pids+=("$(<"$LPSGD_SLURM_DIR/run/$d.pid")"); done
if "$cluster" start >/dev/null && [[ $(<"$LPSGD_SLURM_DIR/run/slurmctld.pid") == "${daemon_pids[1]}" ]]; then
  ok "start again: the same daemons, still up"
else
  fail "second start"
fi

# ---- bench.sbatch ----------------------------------------------------------------
# 2 collectives x 2 algorithms x 2 sizes, every result validated.
phase "bench.sbatch srun + mpirun"
bench_args="--op allreduce,bcast --algo lp,mpi -b 4K -e 16K -f 4 -n 3 -w 1 --check"
declare -A bench_id
for l in srun mpirun; do
  bench_id[$l]=$(LPSGD=$LPSGD LAUNCHER=$l BENCH_ARGS=$bench_args submit --nodes=1 --ntasks=2 \
                 --job-name="bench-$l" "$root/jobs/slurm/bench.sbatch") || fail "sbatch bench.sbatch"
done
for l in srun mpirun; do
  id=${bench_id[$l]}
  state=$(wait_job "$id" 90)
  json=$jobdir/bench-$l-$id.json
  if [[ $state != COMPLETED ]]; then fail "bench job ($l) ended $state"; dump "$id"; continue; fi
  ok "bench job ($l) COMPLETED"
  grep -q "^bench.sbatch: .*$l" "$jobdir/bench-$l-$id.out" || fail "bench job did not launch with $l"
  if check=$(/usr/bin/python3 - "$json" 2>&1 <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
got = sorted((r["op"], r["algo"], r["bytes"]) for r in rows)
want = sorted((o, a, b) for o in ("allreduce", "bcast") for a in ("lp", "mpi") for b in (4096, 16384))
assert got == want, f"rows {got}, want {want}"
assert all(r["ranks"] == 2 and r["wrong"] == 0 and r["time_us"] > 0 for r in rows), rows
print(len(rows))
EOF
  ); then ok "$json: $check rows, 2 ranks, none wrong"; else fail "$json: $check"; dump "$id"; fi
  if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    check "PNG next to the JSON" test -s "$jobdir/bench-$l-$id-png/allreduce_busbw_vs_size.png"
  fi
done

# ---- a training job that cannot start ---------------------------------------------
phase "train.sbatch, bad config"
printf 'epochs = -1\n' >"$tmp/bad.ini"
id=$(LPSGD=$LPSGD CONFIG=$tmp/bad.ini RUN_DIR=$tmp/bad submit "$root/jobs/slurm/train.sbatch") \
  || fail "sbatch train.sbatch"
state=$(wait_job "$id" 60)
out=$jobdir/lpsgd-train-$id.out
if [[ $state == FAILED && $(job_field "$id" Restarts) == 0 ]] && grep -q '^lpsgd: error:' "$out" \
   && ! grep -q requeueing "$out"; then
  ok "bad config: FAILED, not requeued, lpsgd's error in the output: $(grep -m1 '^lpsgd: error:' "$out")"
else
  fail "bad config job: state $state, restarts $(job_field "$id" Restarts)"; dump "$id"
fi

# ---- training: USR1 mid-run, requeue, resume --------------------------------------
if ! "$LPSGD" train --help 2>&1 | grep -q -- --checkpoint-dir; then
  echo "SKIP training part: lpsgd train lacks checkpoints"
  end
fi

phase "train: data and straight run"
"$LPSGD" data synth --out "$tmp/d.h5" --samples 2048 --test-samples 256 --shape 1,16,16 \
  --classes 10 --seed 3 >"$tmp/synth.out" 2>&1 || { fail "data synth"; cat "$tmp/synth.out"; }
# write_config STEPS [EVAL_EVERY]: a small MLP, checkpoints (and evaluations,
# unless EVAL_EVERY is given) every tenth of the run. max-steps is what ends
# the run: epochs = STEPS can never end it first (an epoch here has 32 steps,
# and at least one anywhere), however many steps the probe below picks; a
# fixed epoch count once capped the run on a faster machine (issue 31). The LR
# schedule is constant, so the epoch count changes nothing else.
write_config() {
  cat >"$tmp/tiny.ini" <<EOF
data = $tmp/d.h5
model = mlp:256-256-10
algo = lp
batch = 32
lr = 0.05
momentum = 0.9
seed = 7
epochs = $1
max-steps = $1
checkpoint-every = $(($1 / 10))
eval-every = ${2:-$(($1 / 10))}
EOF
}
straight() {
  rm -rf "$tmp/straight"
  "${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}" "$LPSGD" train --config "$tmp/tiny.ini" \
    --checkpoint-dir "$tmp/straight/checkpoints" --resume auto \
    --metrics "$tmp/straight/metrics.jsonl" >"$tmp/straight.out" 2>&1 </dev/null
}
# The signal must land mid-run, after the first checkpoint (a tenth of the
# way) and well before the end: size the run to about 6 s of training on 2
# ranks, whatever this machine's speed, from a probe run of 500 steps with the
# same ten evaluations and checkpoints (start-up excluded): its training time
# per step, and the evaluations' and checkpoints' time, which does not grow
# with the steps. The signal reaches the ranks 0.05-0.4 s after the first
# checkpoint is on disk, so a run of a few seconds leaves room on either side,
# and as the probe scales the steps with the machine's speed, the seconds stay:
# here (0.25-0.55 ms a step, with other work on the 2 cores) 10000-25000
# steps, 3x faster 30000-75000, 3x slower 3500-8000. Clamped to 200..300000
# steps: 300000 is 0.02 ms a step, over 15x faster than here (beyond it the run
# is just shorter than 6 s, still seconds long); 200 is 30 ms a step, 60x
# slower than here (beyond it the run is longer than 6 s).
ms() { echo $((${EPOCHREALTIME/./} / 1000)); }
steps=500
write_config "$steps"
straight || { fail "probe run"; cat "$tmp/straight.out"; exit 1; }
read -r steps sizing < <(/usr/bin/python3 - "$tmp/straight/metrics.jsonl" <<'EOF'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][-1]
step_ms = 1e3 * r["train_s"] / r["step"]
events_ms = 1e3 * (r["eval_s"] + r["ckpt_s"])
want = (6000 - events_ms) / max(step_ms, 1e-6)
steps = min(300000, max(200, int(want) // 10 * 10))
print(steps, f"{step_ms:.3f} ms per step of training, {events_ms:.0f} ms of evaluations and checkpoints")
EOF
)
echo "note: sized to $steps steps (probe run: $sizing)"
write_config "$steps"
t0=$(ms)
straight || { fail "straight run"; cat "$tmp/straight.out"; exit 1; }
echo "note: straight run of $steps steps took $(($(ms) - t0)) ms"
grep -q "^lpsgd: done .*steps=$steps " "$tmp/straight.out" || { fail "straight run did not finish $steps steps"; cat "$tmp/straight.out"; }

phase "train.sbatch: run, USR1, requeue, resume"
run=$tmp/run
id=$(LPSGD=$LPSGD CONFIG=$tmp/tiny.ini RUN_DIR=$run submit --nodes=1 --ntasks-per-node=2 \
     --time=15 "$root/jobs/slurm/train.sbatch") || fail "sbatch train.sbatch"
out=$jobdir/lpsgd-train-$id.out
# Mid-run: its first checkpoint (a tenth of the way) is on disk.
deadline=$((SECONDS + 60))
until compgen -G "$run/checkpoints/*.h5" >/dev/null || ((SECONDS > deadline)); do sleep 0.2; done
if ! compgen -G "$run/checkpoints/*.h5" >/dev/null; then fail "no checkpoint after 60 s"; dump "$id"; exit 1; fi
grep -q '^lpsgd: done' "$run/attempt-0.log" && fail "the run ended before the signal: make it longer"
scancel --signal=USR1 --batch "$id"
state=$(wait_job "$id" 150)
check "train job COMPLETED (got $state)" test "$state" = COMPLETED
restarts=$(job_field "$id" Restarts)
check "requeued once (Restarts=$restarts)" test "$restarts" = 1
sig_step=$(sed -n 's/.*lpsgd: checkpointed at step \([0-9]*\) after signal SIGUSR1.*/\1/p' "$out" | head -n 1)
if [[ -n $sig_step ]] && ((sig_step > 0 && sig_step < steps)); then
  ok "checkpointed at step $sig_step of $steps after SIGUSR1"
else
  fail "no 'checkpointed at step S after signal SIGUSR1' mid-run"
fi
check "the script requeued the job" grep -q 'requeueing job' "$out"
check "a second attempt ran (SLURM_RESTART_COUNT=1)" grep -q 'SLURM_RESTART_COUNT=1 ' "$out"
check "the resumed run finished $steps steps" grep -q "^lpsgd: done .*steps=$steps " "$out"

# Same parameters as straight through; metrics of both attempts in one file.
info() { "$LPSGD" ckpt info "$1" --json 2>&1; }
if cmp=$(/usr/bin/python3 - "$(info "$tmp/straight/checkpoints")" "$(info "$run/checkpoints")" \
         "$run/metrics.jsonl" "$steps" "${sig_step:-0}" 2>&1 <<'EOF'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
steps, sig = int(sys.argv[4]), int(sys.argv[5])
for c in (a, b):
    assert c["valid"] and c["step"] == steps, f"checkpoint {c}"
assert a["checksum"] == b["checksum"], f"checksums differ: straight {a['checksum']}, resumed {b['checksum']}"
m = [json.loads(l)["step"] for l in open(sys.argv[3]) if l.strip()]
assert m and m[-1] == steps and m[0] <= sig and m == sorted(m), f"metrics steps {m}"
print(f"checksum {a['checksum']}, metrics steps {m}")
EOF
); then ok "resumed = straight: $cmp"; else fail "$cmp"; fi
((fails)) && dump "$id"

# ---- training: one task killed ------------------------------------------------------
# srun --kill-on-bad-exit (jobs/slurm/lib.sh) ends the step when a task dies.
phase "train.sbatch (srun): a task killed"
# A run far longer than the test (1000000 steps: minutes here, one even 3x
# faster), with its first evaluation at step 5000 (under 2 s here) to tell
# that training is under way.
write_config 1000000 5000
run=$tmp/killed
id=$(LPSGD=$LPSGD CONFIG=$tmp/tiny.ini RUN_DIR=$run LAUNCHER=srun submit --nodes=1 --ntasks-per-node=2 \
     --time=15 "$root/jobs/slurm/train.sbatch") || fail "sbatch train.sbatch"
out=$jobdir/lpsgd-train-$id.out
# rank_pid R: the lpsgd process of task R of the job.
rank_pid() {
  local p env
  for p in /proc/[0-9]*; do
    [[ $(cat "$p/comm" 2>/dev/null) == lpsgd ]] || continue
    mapfile -d '' env 2>/dev/null <"$p/environ" || continue
    [[ " ${env[*]} " == *" SLURM_JOB_ID=$id "* && " ${env[*]} " == *" SLURM_PROCID=$1 "* ]] &&
      { echo "${p#/proc/}"; return 0; }
  done
  return 1
}
# Both ranks up, then training under way: the first evaluation is in the
# metrics file (srun passes the progress lines on only in large pieces, so they
# cannot tell). Not a fixed sleep: start-up takes longer on a slower machine,
# and a kill before training would test MPI's start-up, not lpsgd's collectives.
deadline=$((SECONDS + 60)) p0="" p1=""
while [[ -z $p0 || -z $p1 ]] && ((SECONDS < deadline)); do
  p0=$(rank_pid 0) p1=$(rank_pid 1)
  [[ -n $p0 && -n $p1 ]] || sleep 0.2
done
until [[ -s $run/metrics.jsonl ]] || ((SECONDS > deadline)); do sleep 0.1; done
if [[ -z $p0 || -z $p1 ]] || ! kill -0 "$p0" "$p1" 2>/dev/null; then
  fail "training job: no running ranks found"; dump "$id"
elif [[ ! -s $run/metrics.jsonl ]]; then
  fail "training job: no evaluation (step 5000) within 60 s"; dump "$id"
else
  t0=$(ms)
  kill -KILL "$p1"
  while { kill -0 "$p0" || kill -0 "$p1"; } 2>/dev/null && (($(ms) - t0 < 20000)); do sleep 0.02; done
  gone_ms=$(($(ms) - t0))
  check "every rank gone ${gone_ms} ms after SIGKILL to task 1 (at most 10 s)" test "$gone_ms" -le 10000
  state=$(wait_job "$id" 60)
  check "job ended FAILED (got $state), not requeued (Restarts=$(job_field "$id" Restarts))" \
    test "$state" = FAILED -a "$(job_field "$id" Restarts)" = 0
  if line=$(grep -E -m1 'task 1: Killed' "$out"); then ok "a line names the lost task: $line"
  else fail "no line names task 1 as killed"; dump "$id"; fi
  # Rank 0 itself names it too, a second into its wait (srun's SIGTERM only
  # asks for a checkpoint, which cannot be written without rank 1).
  if line=$(grep -E -m1 '^lpsgd: error: \[rank 0\] .*rank 1 \(right neighbour, pid [0-9]+\) has ended' "$out"); then
    ok "rank 0: $line"
  else
    fail "rank 0 did not name rank 1 as ended"; dump "$id"
  fi
fi

end
