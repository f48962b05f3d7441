#!/usr/bin/env bash
# A rehearsal of tests/gpu/device-check.sh without a GPU, in a minimal root
# that has none of this machine's MPI, HDF5, Boost, BLAS, GoogleTest, xxHash
# or oneDNN: only what the GPU machine has (a compiler, CMake and ninja from
# pip, Python, the CUDA toolkit bind-mounted from here). A fresh clone of this
# repository (HEAD; uncommitted changes do not travel) and the kit go in; every
# step that needs no GPU must pass and the GPU steps must say "no GPU". That
# the check passes there is the proof that the kit is complete.
#
#   tests/gpu/rehearse.sh [--kit DIR] [--root DIR] [--keep]
#     --kit   the kit (default gpu-kit; made with tools/gpu-kit.sh when missing)
#     --root  where the minimal root lives (default build-rehearse/root; made
#             with debootstrap once, about 2 minutes, then reused)
#     --keep  leave the clone and the results in the root
#
# Needs root (chroot, mounts) and Debian's mirror; takes 5-8 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD

kit=gpu-kit root=build-rehearse/root keep=0
while (($#)); do
  case $1 in
    --kit) kit=$2; shift 2 ;;
    --root) root=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "rehearse.sh: error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "rehearse.sh: error: needs root (chroot and bind mounts)" >&2; exit 2; }
cuda=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")
[[ -x $cuda/bin/nvcc ]] || { echo "rehearse.sh: error: no CUDA toolkit found (nvcc)" >&2; exit 2; }
[[ -f $kit/kit.tar.xz ]] || tools/gpu-kit.sh --out "$kit"

# ---- the minimal root, made once -----------------------------------------------------
if [[ ! -x $root/usr/bin/g++ || ! -x $root/usr/local/bin/cmake ]]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
  mirror=${mirror:-http://deb.debian.org/debian}
  rm -rf "$root" && mkdir -p "$root"
  echo "rehearse.sh: debootstrap bookworm into $root ($mirror)" >&2
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 ||
    { tail -n 20 "$root.log"; exit 1; }
  # What the GPU machine has besides CUDA: a compiler, Python, git, xz; CMake
  # and ninja from pip (their wheels fetched here, with this machine's pip
  # settings, and installed offline in the root).
  python3 -m pip download -q --only-binary=:all: --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$root/tmp/wheels" cmake ninja >>"$root.log" 2>&1 ||
    { tail -n 20 "$root.log"; exit 1; }
  chroot "$root" /bin/sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends g++ make python3 python3-pip git xz-utils \
    ca-certificates procps >/dev/null && pip3 install -q --break-system-packages --no-index \
    --find-links /tmp/wheels cmake ninja" >>"$root.log" 2>&1 || { tail -n 20 "$root.log"; exit 1; }
fi

# ---- mounts, cleaned up whatever happens -----------------------------------------------
mounts=()
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[$i]}" 2>/dev/null || true; done
  ((keep)) || rm -rf "$root/work"
}
trap cleanup EXIT
bind() {  # bind SRC DST [ro]
  mkdir -p "$2"
  mount --bind "$1" "$2"
  mounts+=("$2")
  [[ ${3:-} == ro ]] && mount -o remount,bind,ro "$2"
  return 0
}
bind "$cuda" "$root/usr/local/cuda" ro
mount -t proc proc "$root/proc" && mounts+=("$root/proc")
bind /dev "$root/dev"
bind /dev/shm "$root/dev/shm"
bind /sys "$root/sys" ro

# ---- the clone and the kit ---------------------------------------------------------------
rm -rf "$root/work" && mkdir -p "$root/work"
git clone -q --no-hardlinks "$REPO" "$root/work/lpsgd"
cp -r "$kit" "$root/work/lpsgd/gpu-kit"
echo "rehearse.sh: clone of $(git -C "$REPO" rev-parse --short HEAD); kit $(du -sh "$kit/kit.tar.xz" | cut -f1)" >&2

# Nothing of this machine's libraries is in the root.
for probe in /usr/bin/mpirun /usr/include/hdf5 /usr/include/boost /usr/include/cblas.h \
             /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/gtest /usr/include/xxhash.h \
             /usr/include/dnnl.hpp /usr/include/oneapi; do
  [[ ! -e $root$probe ]] || { echo "rehearse.sh: error: the root has $probe" >&2; exit 1; }
done

echo "rehearse.sh: running tests/gpu/device-check.sh --kit gpu-kit in the root" >&2
set +e
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/local/cuda/bin:/usr/bin:/bin \
  /bin/bash -c "cd /work/lpsgd && tests/gpu/device-check.sh --kit gpu-kit --out /work/dc --budget 2400" \
  2>&1 | tee "$root.check.log"
rc=${PIPESTATUS[0]}
set -e

# ---- verdict ---------------------------------------------------------------------------
fails=0
check() { if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
steps=$root/work/dc/steps.tsv
check "device-check.sh exits 0 (rc $rc)" test "$rc" -eq 0
check "steps were recorded" test -s "$steps"
check "no step failed" bash -c "! grep -q $'\tFAILED' '$steps'"
for s in gpu gpu-tests memory bench-p2-ipc bench-p4-mpi layers-gpu train-gpu-mlp-p2; do
  check "$s: no GPU" grep -q "^$s"$'\t'"no GPU" "$steps"
done
for s in kit configure build data train-cpu-mlp-p1 train-cpu-mlp-p8; do
  check "$s: ok" grep -q "^$s"$'\t'"ok" "$steps"
done
check "the build used the kit's Open MPI 5" grep -q "mpi: Open MPI v5" "$root.check.log"
check "oneDNN and cuDNN were found" grep -q "LPSGD_HAVE_ONEDNN=1 LPSGD_HAVE_CUDNN=1" "$root.check.log"
((fails)) && { echo "rehearse.sh: $fails check(s) failed (log: $root.check.log)"; exit 1; }
echo "rehearse.sh: the rehearsal passed: every step that needs no GPU ran from the kit alone"
