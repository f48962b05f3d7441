#!/usr/bin/env bash
# Makes data/fashion-mnist.h5 (repository-relative) from Debian's
# dataset-fashion-mnist package, installing the package when it is missing.
#
#   datasets/fashion-mnist.sh [--out F.h5] [--lpsgd PATH]
#
# Idempotent: does nothing when the output is newer than the four IDX files and
# the lpsgd binary. The file is written under a temporary name and renamed, so
# an interrupted run never leaves a partial dataset behind.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$root/data/fashion-mnist.h5
lpsgd=$root/build/bin/lpsgd
while (($#)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    --lpsgd) lpsgd=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "fashion-mnist.sh: unknown argument '$1' (use --out F.h5, --lpsgd PATH)" >&2; exit 2 ;;
  esac
done

src=/usr/share/datasets/fashion-mnist
inputs=("$src/train-images-idx3-ubyte.gz" "$src/train-labels-idx1-ubyte.gz"
        "$src/t10k-images-idx3-ubyte.gz" "$src/t10k-labels-idx1-ubyte.gz")

missing=0
for f in "${inputs[@]}"; do [[ -f $f ]] || missing=1; done
if ((missing)); then
  echo "fashion-mnist.sh: installing Debian package dataset-fashion-mnist" >&2
  sudo=; ((EUID == 0)) || sudo=sudo
  $sudo apt-get update
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y dataset-fashion-mnist
fi
[[ -x $lpsgd ]] || { echo "fashion-mnist.sh: $lpsgd not found: build lpsgd first" >&2; exit 1; }

if [[ -f $out ]]; then
  stale=0
  for f in "${inputs[@]}" "$lpsgd"; do if [[ $f -nt $out ]]; then stale=1; fi; done
  if ((!stale)); then echo "fashion-mnist.sh: $out is up to date"; exit 0; fi
fi

mkdir -p "$(dirname "$out")"
tmp=$out.tmp.$$
trap 'rm -f "$tmp"' EXIT
"$lpsgd" data import-idx \
  --train-images "${inputs[0]}" --train-labels "${inputs[1]}" \
  --test-images "${inputs[2]}" --test-labels "${inputs[3]}" \
  --class-names "T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot" \
  --source "Fashion-MNIST (Xiao, Rasul, Vollgraf 2017), Debian package dataset-fashion-mnist" \
  --out "$tmp"
mv -f "$tmp" "$out"
trap - EXIT
echo "fashion-mnist.sh: wrote $out"
