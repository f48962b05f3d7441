#!/usr/bin/env bash
# Installs every Debian package lpsgd needs (idempotent, quick when present),
# then configures and builds into build/.  Usage: tools/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config
  libopenmpi-dev openmpi-bin
  libhdf5-dev hdf5-tools
  libboost-program-options-dev
  libopenblas-dev
  libdnnl-dev
  libgtest-dev googletest
  zlib1g-dev
  libxxhash-dev
  libsimgrid-dev
  slurm-wlm munge
  dataset-fashion-mnist
  python3-h5py python3-matplotlib python3-numpy
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

[[ "${1:-}" == "--no-build" ]] && exit 0

BUILD_TYPE=${LPSGD_BUILD_TYPE:-Release}
mkdir -p build
# shellcheck disable=SC2086  # LPSGD_CMAKE_ARGS is a list of arguments
if ! cmake -S . -B build -DCMAKE_BUILD_TYPE="$BUILD_TYPE" ${LPSGD_CMAKE_ARGS:-} >build/cmake.log 2>&1; then
  cat build/cmake.log
  exit 1
fi
cmake --build build -j"$(nproc)"
