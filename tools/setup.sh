#!/usr/bin/env bash
# Installs every Debian package lpsgd needs (idempotent, quick when present),
# then configures and builds.
#   Usage: tools/setup.sh [--mpi openmpi|mpich] [--no-build]
# --mpi openmpi (the default, or $LPSGD_MPI) builds into build/ against Debian's
# default MPI; --mpi mpich installs MPICH beside it and builds into build-mpich/
# with MPICH's compiler wrappers and mpiexec named explicitly (the system's
# mpicc/mpirun alternatives are left alone), so both builds can coexist.
set -euo pipefail
cd "$(dirname "$0")/.."

mpi=${LPSGD_MPI:-openmpi}
do_build=1
while (($#)); do
  case $1 in
    --mpi) [[ $# -ge 2 ]] || { echo "setup: error: --mpi needs openmpi or mpich" >&2; exit 2; }
           mpi=$2; shift 2 ;;
    --mpi=*) mpi=${1#--mpi=}; shift ;;
    --no-build) do_build=0; shift ;;
    *) echo "setup: error: unknown option '$1' (usage: tools/setup.sh [--mpi openmpi|mpich] [--no-build])" >&2
       exit 2 ;;
  esac
done
case $mpi in
  openmpi) MPI_PACKAGES=(libopenmpi-dev openmpi-bin) build=build mpi_args=() ;;
  mpich) MPI_PACKAGES=(libmpich-dev mpich) build=build-mpich
         mpi_args=(-DMPI_C_COMPILER=mpicc.mpich -DMPI_CXX_COMPILER=mpicxx.mpich
                   -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich) ;;
  *) echo "setup: error: --mpi must be openmpi or mpich, got '$mpi'" >&2; exit 2 ;;
esac

PACKAGES=(
  build-essential cmake pkg-config
  "${MPI_PACKAGES[@]}"
  libhdf5-dev hdf5-tools
  libboost-program-options-dev
  libopenblas-dev
  libdnnl-dev
  libgtest-dev googletest
  zlib1g-dev libzip-dev
  libxxhash-dev
  libsimgrid-dev
  slurm-wlm munge
  dataset-fashion-mnist
  python3-h5py python3-matplotlib python3-numpy
  libonnx-dev libprotobuf-dev python3-onnx python3-venv python3-torch python3-torchvision
  shellcheck
  clang clang-14 libclang-rt-14-dev libfuzzer-14-dev
  iproute2 hostname
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

((do_build)) || exit 0

BUILD_TYPE=${LPSGD_BUILD_TYPE:-Release}
mkdir -p "$build"
# shellcheck disable=SC2086  # LPSGD_CMAKE_ARGS is a list of arguments
if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "${mpi_args[@]}" ${LPSGD_CMAKE_ARGS:-} \
    >"$build/cmake.log" 2>&1; then
  cat "$build/cmake.log"
  exit 1
fi
cmake --build "$build" -j"$(nproc)"
