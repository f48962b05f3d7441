#!/usr/bin/env bash
# lpsgd data: synth, import-idx, info and bench-loader on small files made here;
# datasets/fashion-mnist.sh where Debian's Fashion-MNIST is installed; and a
# one-line error with exit 2 for every kind of bad input file.
set -u
LPSGD=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
MPIRUN=("${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check_info F.h5 PATTERN...: one `lpsgd data info` run whose output has every pattern.
check_info() {
  local file=$1 out p; shift
  out=$("$LPSGD" data info "$file" 2>&1) || {
    echo "FAIL: 'lpsgd data info $file' exited $?: $out"; fails=$((fails + 1)); return; }
  for p in "$@"; do
    if [[ $out =~ $p ]]; then echo "ok: info $file has /$p/"
    else echo "FAIL: info $file lacks /$p/: $out"; fails=$((fails + 1)); fi
  done
}

# ---- synthetic data -------------------------------------------------------------
expect_output 'wrote' -- "$LPSGD" data synth --out "$tmp/s.h5" --samples 300 --test-samples 50 \
  --shape 2,5,4 --classes 3 --seed 1 --noise 0.3
check_info "$tmp/s.h5" 'train: x \[300,2,5,4\] uint8' 'test: x \[50,2,5,4\] uint8' \
  'classes: 3' 'class counts: 0:[0-9]+ 1:[0-9]+ 2:[0-9]+' \
  'attributes: mean, num_classes, source, std'
expect_output 'wrote' -- "$LPSGD" data synth --out "$tmp/f.h5" --samples 64 --shape 1,4,4 \
  --classes 2 --seed 2 --dtype float32 --gzip 1
check_info "$tmp/f.h5" 'train: x \[64,1,4,4\] float32' 
expect_output 'mode cached batch 16 ranks 1' -- "$LPSGD" data bench-loader "$tmp/s.h5" --batch 16
expect_output 'mode streaming batch 16 ranks 1' -- "$LPSGD" data bench-loader "$tmp/s.h5" \
  --batch 16 --data-cache-mb 0
expect_output 'mode cached batch 8 ranks 2' -- "${MPIRUN[@]}" "$LPSGD" data bench-loader \
  "$tmp/s.h5" --batch 8 --split test

# ---- IDX import -----------------------------------------------------------------
python3 - "$tmp" <<'PY'
import gzip, struct, sys
d = sys.argv[1]
def idx(name, dims, data, gz=False, magic=None, cut=0):
    b = struct.pack('>I', 0x800 | len(dims) if magic is None else magic)
    b += b''.join(struct.pack('>I', n) for n in dims) + bytes(data)
    with (gzip.open if gz else open)(d + '/' + name, 'wb') as f:
        f.write(b[:len(b) - cut])
px = lambda n: [i * 7 % 256 for i in range(n)]
idx('tri.gz', [20, 4, 4], px(320), gz=True)
idx('trl', [20], [i % 10 for i in range(20)])
idx('tei', [10, 4, 4], px(160))
idx('tel.gz', [10], [i % 10 for i in range(10)], gz=True)
idx('trunc.gz', [20, 4, 4], px(320), gz=True, cut=5)
idx('trunc', [20, 4, 4], px(320), cut=5)
idx('magic', [20, 4, 4], px(320), magic=0x00000801)
PY
import=("$LPSGD" data import-idx --train-images "$tmp/tri.gz" --train-labels "$tmp/trl"
        --test-images "$tmp/tei" --test-labels "$tmp/tel.gz")
expect_output 'wrote' -- "${import[@]}" --out "$tmp/i.h5" --class-names "a,b b,c,d,e,f,g,h,i,j"
check_info "$tmp/i.h5" 'train: x \[20,1,4,4\] uint8' 'classes: 10 \(a, b b, c' \
  'class counts: 0:2 1:2 2:2 3:2 4:2 5:2 6:2 7:2 8:2 9:2' 

# ---- bad input: one line, exit 2 ------------------------------------------------
bad_import() {  # bad_import PATTERN TRAIN-IMAGES TRAIN-LABELS TEST-IMAGES TEST-LABELS [ARGS...]
  local pattern=$1
  expect_error 2 "$pattern" -- "$LPSGD" data import-idx --train-images "$tmp/$2" \
    --train-labels "$tmp/$3" --test-images "$tmp/$4" --test-labels "$tmp/$5" \
    --out "$tmp/bad.h5" "${@:6}"
}
bad_import "trunc.gz: truncated IDX file" trunc.gz trl tei tel.gz
bad_import "trunc: truncated IDX file \(315 of 320" trunc trl tei tel.gz
bad_import "magic: wrong magic 0x00000801, expected 0x00000803" magic trl tei tel.gz
bad_import "nosuch: no such file" tri.gz trl tei nosuch
bad_import "tel.gz: 10 labels but .*tri.gz has 20 images" tri.gz tel.gz tei tel.gz
bad_import "trl: label 2 at index 2 out of range \[0, 2\)" tri.gz trl tei tel.gz --class-names a,b
[[ ! -e $tmp/bad.h5 ]] || { echo "FAIL: a failed import left $tmp/bad.h5"; fails=$((fails + 1)); }
compgen -G "$tmp/*bad.h5?tmp*" >/dev/null && { echo "FAIL: a failed import left a temporary file"; fails=$((fails + 1)); }

echo "not hdf5" > "$tmp/text.h5"
expect_error 2 "nosuch.h5: no such file" -- "$LPSGD" data info "$tmp/nosuch.h5"
expect_error 2 "text.h5: not an HDF5 file" -- "$LPSGD" data info "$tmp/text.h5"
expect_error 2 "text.h5: not an HDF5 file" -- "$LPSGD" data bench-loader "$tmp/text.h5"
expect_error 2 "f.h5: missing split /test" -- "$LPSGD" data bench-loader "$tmp/f.h5" --split test
expect_error 2 "fewer than one global batch" -- "$LPSGD" data bench-loader "$tmp/f.h5" --batch 100
expect_error 2 "nosuch.h5: no such file" -- "${MPIRUN[@]}" "$LPSGD" data bench-loader "$tmp/nosuch.h5"
expect_error 2 "run it on one rank" -- "${MPIRUN[@]}" "$LPSGD" data synth --out "$tmp/m.h5" --samples 4
expect_error 2 "--shape must be C,H,W" -- "$LPSGD" data synth --out "$tmp/x.h5" --samples 4 --shape 1,2
expect_error 2 "--shape: 'a' is not an integer" -- "$LPSGD" data synth --out "$tmp/x.h5" --samples 4 --shape a,2,2
expect_error 2 "unknown data subcommand 'frob'" -- "$LPSGD" data frob

# Malformed HDF5 layouts, written with h5py where Debian's python3-h5py is installed.
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  /usr/bin/python3 - "$tmp" <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
def make(name, x=None, y=None, classes=10):
    with h5py.File(f'{d}/{name}.h5', 'w') as f:
        if x is not None: f['train/x'] = x
        if y is not None: f['train/y'] = y
        f.attrs['num_classes'] = classes
x4 = np.zeros((6, 1, 2, 2), np.uint8)
make('noy', x=x4)
make('rank', x=np.zeros((6, 4), np.uint8), y=np.arange(6))
make('len', x=x4, y=np.arange(5))
make('label', x=x4, y=np.array([0, 1, 2, 3, 4, 12]))
make('dtype', x=x4.astype(np.float64), y=np.arange(6))
PY
  expect_error 2 "noy.h5: /train/y: missing dataset" -- "$LPSGD" data info "$tmp/noy.h5"
  expect_error 2 "rank.h5: /train/x: wrong rank 2, expected 4" -- "$LPSGD" data info "$tmp/rank.h5"
  expect_error 2 "len.h5: /train/y: length mismatch, 5 labels but x has 6" -- "$LPSGD" data info "$tmp/len.h5"
  expect_error 2 "label.h5: /train/y: label 12 at index 5 out of range \[0, 10\)" -- "$LPSGD" data bench-loader "$tmp/label.h5" --batch 2
  expect_error 2 "dtype.h5: /train/x: element type must be uint8 or float32" -- "$LPSGD" data info "$tmp/dtype.h5"
else
  echo "note: no h5py; malformed-layout cases are covered by test_io_loader"
fi

# ---- Fashion-MNIST recipe (where Debian's package is installed; never installs here)
if [[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  recipe=("$here/../../datasets/fashion-mnist.sh" --out "$tmp/fm.h5" --lpsgd "$LPSGD")
  expect_output 'wrote' -- "${recipe[@]}"
  expect_output 'is up to date' -- "${recipe[@]}"
  check_info "$tmp/fm.h5" 'train: x \[60000,1,28,28\] uint8' 'test: x \[10000,1,28,28\] uint8' \
    '0:6000 1:6000 2:6000 3:6000 4:6000 5:6000 6:6000 7:6000 8:6000 9:6000' \
    'T-shirt/top, Trouser, .*Ankle boot' 
else
  echo "note: dataset-fashion-mnist not installed; recipe not run"
fi
finish
