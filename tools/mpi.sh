# shellcheck shell=bash
# Sourced by lpsgd's scripts: which MPI launcher goes with a build, and the
# options it needs to run lpsgd's jobs on one machine. Open MPI's mpirun must
# be told to oversubscribe, not to bind and (as root) to run as root; MPICH's
# Hydra does all three as it is and rejects Open MPI's options.
#
#   lpsgd_build_dir
#     prints $LPSGD_BUILD, else the build tools/setup.sh makes for $LPSGD_MPI
#     (build/ for openmpi, the default; build-mpich/ for mpich)
#   lpsgd_mpi_launcher [BUILD_DIR]
#     MPI_LAUNCHER  $MPIEXEC, else the build's MPIEXEC_EXECUTABLE (CMakeCache),
#                   else mpirun
#     MPI_FLAVOUR   openmpi, mpich or other (from the launcher's --version)
#     MPIRUN        array: the launcher and its options for this machine
#                   (oversubscribe, no binding, root allowed)

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

lpsgd_mpi_launcher() {
  local build=${1:-build} exe=""
  if [[ -f $build/CMakeCache.txt ]]; then
    exe=$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
  fi
  MPI_LAUNCHER=${MPIEXEC:-${exe:-mpirun}}
  MPI_FLAVOUR=$(lpsgd_mpi_flavour "$MPI_LAUNCHER")
  MPIRUN=("$MPI_LAUNCHER")
  case $MPI_FLAVOUR in
    openmpi)
      MPIRUN+=(--oversubscribe --bind-to none)
      if [[ $(id -u) -eq 0 ]]; then MPIRUN+=(--allow-run-as-root); fi
      ;;
    mpich) MPIRUN+=(-bind-to none) ;;
  esac
  export MPI_LAUNCHER MPI_FLAVOUR
}
