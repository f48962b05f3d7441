# shellcheck shell=bash
# Sourced by lpsgd's scripts: which MPI launcher goes with a build, and the
# options it needs to run lpsgd's jobs on one machine. Open MPI's mpirun must
# be told to oversubscribe, not to bind and (as root) to run as root; MPICH's
# Hydra does all three as it is and rejects Open MPI's options.
#
#   lpsgd_build_dir
#     prints $LPSGD_BUILD, else the build tools/setup.sh makes for $LPSGD_MPI
#     (build/ for openmpi, the default; build-mpich/ for mpich)
#   lpsgd_mpi_launcher [BUILD_DIR] [RANKS]
#     MPI_LAUNCHER  $MPIEXEC, else the build's MPIEXEC_EXECUTABLE (CMakeCache),
#                   else mpirun
#     MPI_FLAVOUR   openmpi, mpich or other (from the launcher's --version)
#     MPI_BIND      core or none: $LPSGD_BIND, else core where RANKS is given
#                   and is no more than this machine's physical cores, else none
#     MPIRUN        array: the launcher and its options for this machine
#                   (oversubscribe, binding MPI_BIND, root allowed)
#
# Why core where the ranks fit: a rank pinned to its own core keeps its
# caches and never waits behind the other rank's threads; measured on one
# node with jobs/local/node-bound.sh (docs/training.md), P = 2 unbound gives
# up a few percent more of two independent processes than P = 2 bound to
# cores. Oversubscribed, a binding would stack ranks on the same cores, so
# none is used (and Open MPI refuses to bind more ranks than cores).

lpsgd_build_dir() {
  if [[ -n ${LPSGD_BUILD:-} ]]; then
    echo "$LPSGD_BUILD"
  elif [[ ${LPSGD_MPI:-openmpi} == mpich ]]; then
    echo build-mpich
  else
    echo build
  fi
}

# lpsgd_mpi_flavour LAUNCHER: prints openmpi, mpich or other.
lpsgd_mpi_flavour() {
  local v
  v=$("$1" --version 2>&1 </dev/null || true)
  case $v in
    *"Open MPI"* | *OpenRTE*) echo openmpi ;;
    *HYDRA* | *MPICH*) echo mpich ;;
    *) echo other ;;
  esac
}

# lpsgd_physical_cores: the cores of this machine, SMT siblings counted once.
lpsgd_physical_cores() {
  local n
  n=$(lscpu -p=core,socket 2>/dev/null | grep -v '^#' | sort -u | wc -l)
  ((n > 0)) || n=$(nproc)
  echo "$n"
}

lpsgd_mpi_launcher() {
  local build=${1:-build} ranks=${2:-} exe=""
  if [[ -f $build/CMakeCache.txt ]]; then
    exe=$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
  fi
  MPI_LAUNCHER=${MPIEXEC:-${exe:-mpirun}}
  MPI_FLAVOUR=$(lpsgd_mpi_flavour "$MPI_LAUNCHER")
  MPI_BIND=${LPSGD_BIND:-}
  if [[ -z $MPI_BIND ]]; then
    MPI_BIND=none
    if [[ -n $ranks ]] && ((ranks <= $(lpsgd_physical_cores))); then MPI_BIND=core; fi
  fi
  case $MPI_BIND in
    core | none) ;;
    *) echo "tools/mpi.sh: error: LPSGD_BIND must be core or none, got '$MPI_BIND'" >&2; return 2 ;;
  esac
  MPIRUN=("$MPI_LAUNCHER")
  case $MPI_FLAVOUR in
    openmpi)
      MPIRUN+=(--oversubscribe --bind-to "$MPI_BIND")
      if [[ $MPI_BIND == core ]]; then MPIRUN+=(--map-by core); fi
      if [[ $(id -u) -eq 0 ]]; then MPIRUN+=(--allow-run-as-root); fi
      ;;
    mpich) MPIRUN+=(-bind-to "$MPI_BIND") ;;
  esac
  export MPI_LAUNCHER MPI_FLAVOUR MPI_BIND
}
