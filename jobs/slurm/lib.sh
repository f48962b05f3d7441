# Sourced by jobs/slurm/*.sbatch: how to start one process per Slurm task, and
# how to run that step so that signals sent to the batch shell reach it.
# ME names the sourcing script in messages.
# shellcheck shell=bash

# Sets LAUNCH to the command that starts one process per task of the job.
# LAUNCHER=auto (default) takes srun where Slurm has the plugin the build's MPI
# starts through (Open MPI: --mpi=pmix; MPICH: --mpi=pmi2) and mpirun
# otherwise; srun or mpirun force one. LAUNCHER_ARGS are added to it (split on
# blanks). Which MPI $LPSGD is built with decides which mpirun (Open MPI's,
# or MPICH's Hydra, mpirun.mpich); both read the allocation from Slurm.
# Where GPUs are allocated, every task sees all of its node's GPUs and lpsgd
# picks one by local rank: peer links between GPUs need them all visible.
# srun binds each task to its cores where the cluster can (mpirun binds by
# itself: Open MPI to cores for up to 2 ranks, to sockets beyond).
slurm_launcher() {
  local how=${LAUNCHER:-auto} extra=() plugin=pmix mpirun=mpirun
  if [[ $(ldd "${LPSGD:-}" 2>/dev/null) == *libmpich* ]]; then
    plugin=pmi2 mpirun=mpirun.mpich
  elif command -v mpirun.openmpi >/dev/null; then
    mpirun=mpirun.openmpi
  fi
  if [[ $how == auto ]]; then
    if [[ $(srun --mpi=list 2>&1) == *$plugin* ]]; then how=srun; else how=mpirun; fi
  fi
  case $how in
    srun)
      LAUNCH=(srun "--mpi=$plugin" --kill-on-bad-exit=1)
      # One core per task, as the main job binds on one machine (tools/mpi.sh,
      # measured in docs/training.md), where the cluster has a task plugin
      # that binds; task/none would only warn.
      if [[ $(scontrol show config 2>/dev/null) =~ TaskPlugin[[:space:]]*=[^$'\n']*(affinity|cgroup) ]]; then
        LAUNCH+=(--cpu-bind=cores)
      fi
      if ((${SLURM_GPUS_ON_NODE:-0} > 0)); then LAUNCH+=(--gpu-bind=none); fi
      ;;
    mpirun)
      if [[ $(id -u) -eq 0 ]]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
      fi
      # Open MPI and Hydra read the allocation (nodes, tasks per node) from Slurm.
      LAUNCH=("$mpirun" -np "$SLURM_NTASKS")
      ;;
    *)
      echo "$ME: error: LAUNCHER must be auto, srun or mpirun, got '$how'" >&2
      exit 2
      ;;
  esac
  read -r -a extra <<<"${LAUNCHER_ARGS:-}"
  LAUNCH+=("${extra[@]}")
}

# run_step LOG CMD...: runs CMD in the background with its output in LOG (and,
# as it comes, on this script's output) and returns its exit status. A USR1 or
# TERM sent to the batch shell (sbatch --signal=B:USR1@..., scancel --batch) is
# passed on: bash runs a trap only between foreground commands, so the script
# must sit in `wait`, not in the command itself.
run_step() {
  local log=$1 rc
  shift
  : >"$log"
  "$@" >"$log" 2>&1 </dev/null &
  STEP_PID=$!
  # Slurm's TERM reaches the whole batch process group: the echo keeps going
  # until the step has said its last (its own exit ends it).
  (trap '' TERM && exec tail -n +1 -s 0.2 -f --pid="$STEP_PID" "$log") &
  local tail_pid=$!
  # A signal that came before the step existed.
  [[ -z $STEP_SIGNALS ]] || forward_signal "${STEP_SIGNALS##* }" again
  while :; do
    wait "$STEP_PID" && rc=0 || rc=$?
    # A trap interrupts wait with 128+signal while the step runs on.
    kill -0 "$STEP_PID" 2>/dev/null || break
  done
  wait "$STEP_PID" && rc=0 || rc=$?
  STEP_PID=""
  wait "$tail_pid" || true
  return "$rc"
}

# mpirun passes USR1 on to its processes but answers TERM by killing them,
# which would cut a checkpoint short: it gets USR1 for both. srun passes both on.
# STEP_SIGNALS lists the signals the batch shell got. Trapped from the start:
# a USR1 left to its default would end the script.
STEP_SIGNALS="" STEP_PID=""
forward_signal() {
  local sig=$1
  [[ -n ${2:-} ]] || STEP_SIGNALS+=" $1"
  if [[ -z $STEP_PID ]]; then
    echo "$ME: got SIG$1 while no job step runs"
    return 0
  fi
  [[ ${LAUNCH[0]} == mpirun* ]] && sig=USR1
  echo "$ME: got SIG$1, sending SIG$sig to the job step (pid $STEP_PID)"
  kill -"$sig" "$STEP_PID" 2>/dev/null || true
}
trap 'forward_signal USR1' USR1
trap 'forward_signal TERM' TERM
