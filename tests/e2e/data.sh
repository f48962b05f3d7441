#!/usr/bin/env bash
# lpsgd data: synth, import-idx, import-cifar, import-npz, info and bench-loader
# (with --augment) on small files made here; datasets/fashion-mnist.sh where
# Debian's Fashion-MNIST is installed; and a one-line error with exit 2 for every
# kind of bad input file.
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

# ---- CIFAR-10 / CIFAR-100 binary files (written here: record = label byte(s) + 3072 pixels)
python3 - "$tmp" <<'PY'
import sys
d = sys.argv[1]
def pixel(f, i, c, y, x): return (f * 101 + i * 37 + c * 59 + y * 7 + x * 3) % 256
def records(f, labels):
    b = bytearray()
    for i, l in enumerate(labels):
        b += bytes(l)
        b += bytes(pixel(f, i, c, y, x) for c in range(3) for y in range(32) for x in range(32))
    return b
def write(name, b): open(d + '/' + name, 'wb').write(b)
write('data_batch_1.bin', records(1, [[k % 10] for k in range(7)]))
write('data_batch_2.bin', records(2, [[k % 10] for k in range(13)]))
write('test_batch.bin', records(3, [[9], [4], [0]]))
write('c100train.bin', records(4, [[k % 20, k % 100] for k in range(6)]))
write('c100test.bin', records(5, [[19, 99], [0, 1]]))
write('cut.bin', records(1, [[1], [2]])[:-5])
write('label10.bin', records(1, [[1], [10], [2]]))
open(d + '/fine.txt', 'w').write(''.join(f'fine{k}\n' for k in range(100)) + '\n')
open(d + '/coarse.txt', 'w').write(''.join(f'coarse{k}\n' for k in range(20)))
PY
cifar=("$LPSGD" data import-cifar --format cifar10 --train "$tmp/data_batch_1.bin" "$tmp/data_batch_2.bin"
       --test "$tmp/test_batch.bin")
expect_output 'wrote .*c10.h5 \(23 samples\)' -- "${cifar[@]}" --out "$tmp/c10.h5"
check_info "$tmp/c10.h5" 'train: x \[20,3,32,32\] uint8' 'test: x \[3,3,32,32\] uint8' \
  'classes: 10 \(airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck\)' \
  'class counts: 0:3 1:3 2:3 3:2 4:2 5:2 6:2 7:1 8:1 9:1' 'source: CIFAR-10 binary import'
expect_output 'wrote' -- "$LPSGD" data import-cifar --format cifar100 --train "$tmp/c100train.bin" \
  --test "$tmp/c100test.bin" --out "$tmp/c100.h5" --names "$tmp/fine.txt"
check_info "$tmp/c100.h5" 'classes: 100 \(fine0, fine1, .*fine99\)' 'train: x \[6,3,32,32\]' \
  'source: CIFAR-100 binary import \(fine labels\)'
expect_output 'wrote' -- "$LPSGD" data import-cifar --format cifar100 --label coarse \
  --train "$tmp/c100train.bin" --out "$tmp/c20.h5" --names "$tmp/coarse.txt"
check_info "$tmp/c20.h5" 'classes: 20 \(coarse0, ' 'class counts: 0:1 1:1 2:1 3:1 4:1 5:1 6:0'
bad_cifar() {  # bad_cifar PATTERN ARGS...
  local pattern=$1; shift
  expect_error 2 "$pattern" -- "$LPSGD" data import-cifar --out "$tmp/bad.h5" "$@"
}
bad_cifar "cut.bin: 6141 bytes is not a whole number of CIFAR-10 records of 3073 bytes \(1 record and 3068 bytes over\); the file is truncated" \
  --format cifar10 --train "$tmp/cut.bin"
bad_cifar "label10.bin: record 1 has label 10, out of range \[0, 10\) for CIFAR-10" \
  --format cifar10 --train "$tmp/data_batch_1.bin" "$tmp/label10.bin"
bad_cifar "c100train.bin: .* use --format cifar100" --format cifar10 --train "$tmp/c100train.bin"
bad_cifar "test_batch.bin: .* use --format cifar10" --format cifar100 --train "$tmp/c100train.bin" \
  --test "$tmp/test_batch.bin"
bad_cifar "fine.txt: 100 class names, but CIFAR-100 coarse labels have 20 classes" --format cifar100 \
  --label coarse --train "$tmp/c100train.bin" --names "$tmp/fine.txt"
bad_cifar "--format must be cifar10 or cifar100, got 'cifar" --format cifar --train "$tmp/cut.bin"
bad_cifar "--label coarse is for CIFAR-100" --format cifar10 --label coarse --train "$tmp/cut.bin"
bad_cifar "nosuch.bin: no such file" --format cifar10 --train "$tmp/nosuch.bin"
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  # Pixels and labels where they belong: sample 9 of train is data_batch_2's record 2.
  if /usr/bin/python3 - "$tmp/c10.h5" <<'PY'
import sys, h5py, numpy as np
def pixel(f, i, c, y, x): return (f * 101 + i * 37 + c * 59 + y * 7 + x * 3) % 256
with h5py.File(sys.argv[1], 'r') as h:
    x, y, tx = h['train/x'][...], h['train/y'][...], h['test/x'][...]
c, yy, xx = np.meshgrid(range(3), range(32), range(32), indexing='ij')
assert (x[9] == pixel(2, 2, c, yy, xx)).all(), 'train sample 9'
assert (x[0] == pixel(1, 0, c, yy, xx)).all(), 'train sample 0'
assert (tx[2] == pixel(3, 2, c, yy, xx)).all(), 'test sample 2'
assert list(y[:9]) == [0, 1, 2, 3, 4, 5, 6, 0, 1] and y[9] == 2, y
assert x[9, 1, 4, 17] == pixel(2, 2, 1, 4, 17)
PY
  then echo "ok: CIFAR pixels and labels read back with h5py"
  else echo "FAIL: CIFAR pixels or labels misplaced"; fails=$((fails + 1)); fi
fi

# ---- NumPy .npz / .npy (written with Debian's numpy) ------------------------------
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  /usr/bin/python3 - "$tmp" <<'PY'
import sys, numpy as np
d = sys.argv[1] + '/'
n, h, w = 8, 5, 7
x = ((np.arange(n * h * w * 3) * 7) % 251).astype(np.uint8).reshape(n, h, w, 3)  # NHWC
y = (np.arange(n) % 4).astype(np.int64)
np.savez(d + 'nhwc.npz', x=x, y=y, x_test=x[:3], y_test=y[:3].astype(np.int32))
np.savez_compressed(d + 'keras.npz', x_train=x, y_train=y.reshape(n, 1).astype(np.uint8))
np.savez_compressed(d + 'nchw.npz', x=x.transpose(0, 3, 1, 2).astype(np.float32) / 255, y=y)
np.savez(d + 'grey.npz', x=x[..., 0], y=y)
np.save(d + 'x.npy', x); np.save(d + 'y.npy', y)
# Files that lie or that lpsgd cannot take.
np.savez(d + 'count.npz', x=x, y=y[:5])
np.savez(d + 'f64.npz', x=x.astype(np.float64), y=y)
np.savez(d + 'rank5.npz', x=x.reshape(n, 1, h, w, 3), y=y)
np.savez(d + 'yfloat.npz', x=x, y=y.astype(np.float32))
np.savez(d + 'onlyx.npz', x=x)
np.savez(d + 'halftest.npz', x=x, y=y, x_test=x[:2])
np.save(d + 'fortran.npy', np.asfortranarray(x))
b = open(d + 'x.npy', 'rb').read()
open(d + 'short.npy', 'wb').write(b[:-10])
open(d + 'lies.npy', 'wb').write(b.replace(b"(8, 5, 7, 3)", b"(9, 5, 7, 3)"))
z = open(d + 'nhwc.npz', 'rb').read()
open(d + 'cut.npz', 'wb').write(z[:len(z) // 2])
i = z.find(b'NUMPY', z.find(b'x.npy')) + 300  # inside x's data: its CRC no longer matches
open(d + 'crc.npz', 'wb').write(z[:i] + bytes([z[i] ^ 0xff]) + z[i + 1:])
PY
  bad_npz() {  # bad_npz PATTERN ARGS...
    local pattern=$1; shift
    expect_error 2 "$pattern" -- "$LPSGD" data import-npz --out "$tmp/bad.h5" "$@"
  }
  nhwc_out=$("$LPSGD" data import-npz --train "$tmp/nhwc.npz" --out "$tmp/n.h5" 2>&1)
  if [[ $nhwc_out == *"needs libzip"* ]]; then
    echo "note: this lpsgd reads no .npz (built without libzip); .npy only"
  else
    if [[ $nhwc_out =~ wrote.*8\ train,\ 3\ test\ samples\ of\ \[3,5,7\]\ uint8,\ x\ as\ nhwc,\ 4\ classes ]]; then
      echo "ok: import-npz nhwc.npz: $nhwc_out"
    else echo "FAIL: import-npz nhwc.npz: $nhwc_out"; fails=$((fails + 1)); fi
    check_info "$tmp/n.h5" 'train: x \[8,3,5,7\] uint8' 'test: x \[3,3,5,7\] uint8' 'classes: 4' \
      'class counts: 0:2 1:2 2:2 3:2' 'source: NumPy import'
    expect_output 'wrote.*8 train, 3 test samples' -- "$LPSGD" data import-npz --train "$tmp/keras.npz" \
      --test "$tmp/nhwc.npz" --out "$tmp/k.h5" --class-names a,b,c,d,e --classes 5 --source Keras
    check_info "$tmp/k.h5" 'classes: 5 \(a, b, c, d, e\)' 'test: x \[3,3,5,7\] uint8' 'source: Keras'
    expect_output 'x as nchw' -- "$LPSGD" data import-npz --train "$tmp/nchw.npz" --out "$tmp/f.h5"
    check_info "$tmp/f.h5" 'train: x \[8,3,5,7\] float32'
    expect_output 'of \[1,5,7\] uint8' -- "$LPSGD" data import-npz --train "$tmp/grey.npz" --out "$tmp/g.h5"
    if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
      if /usr/bin/python3 - "$tmp" <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1] + '/'
src = np.load(d + 'nhwc.npz')
with h5py.File(d + 'n.h5', 'r') as h:
    x, y, tx = h['train/x'][...], h['train/y'][...], h['test/x'][...]
    assert (x == src['x'].transpose(0, 3, 1, 2)).all(), 'NHWC -> NCHW'
    assert x[5, 2, 4, 6] == src['x'][5, 4, 6, 2]
    assert (y == src['y']).all() and (tx == src['x'][:3].transpose(0, 3, 1, 2)).all()
with h5py.File(d + 'f.h5', 'r') as h:
    assert (h['train/x'][...] == np.load(d + 'nchw.npz')['x']).all(), 'float32 NCHW as is'
with h5py.File(d + 'g.h5', 'r') as h:
    assert (h['train/x'][:, 0] == src['x'][..., 0]).all(), 'grey'
PY
      then echo "ok: .npz pixels and labels read back with h5py (NHWC transposed, NCHW float32 as is)"
      else echo "FAIL: .npz import misplaced pixels or labels"; fails=$((fails + 1)); fi
    fi
    bad_npz "count.npz: y.npy: y has 5 labels but x has 8 samples" --train "$tmp/count.npz"
    bad_npz "f64.npz: x.npy: x has dtype <f8 \(float64\); lpsgd stores uint8 or float32" --train "$tmp/f64.npz"
    bad_npz "rank5.npz: x.npy: x has rank 5" --train "$tmp/rank5.npz"
    bad_npz "yfloat.npz: y.npy: y has dtype <f4 \(float32\); labels must be integers" --train "$tmp/yfloat.npz"
    bad_npz "onlyx.npz: no arrays x/y or x_train/y_train \(it holds x\)" --train "$tmp/onlyx.npz"
    bad_npz "halftest.npz: holds x_test but no y_test" --train "$tmp/halftest.npz"
    bad_npz "cut.npz: not a readable .npz \(zip\) archive" --train "$tmp/cut.npz"
    bad_npz "crc.npz: x.npy: cannot be read \(CRC error\)" --train "$tmp/crc.npz"
    bad_npz "nhwc.npz: y.npy: label 3 at index 3 out of range \[0, 3\)" --train "$tmp/nhwc.npz" --classes 3
    bad_npz "nhwc.npz: an .npz archive, not a .npy array" --train-x "$tmp/nhwc.npz" --train-y "$tmp/y.npy"
  fi
  expect_output 'wrote.*x as nhwc' -- "$LPSGD" data import-npz --train-x "$tmp/x.npy" --train-y "$tmp/y.npy" \
    --out "$tmp/npy.h5"
  check_info "$tmp/npy.h5" 'train: x \[8,3,5,7\] uint8'
  bad_npz "fortran.npy: array is stored in Fortran order" --train-x "$tmp/fortran.npy" --train-y "$tmp/y.npy"
  bad_npz "short.npy: the header says shape \(8, 5, 7, 3\) of \|u1 \(840 bytes of data\) but 830 bytes follow; the array is truncated" \
    --train-x "$tmp/short.npy" --train-y "$tmp/y.npy"
  bad_npz "lies.npy: the header says shape \(9, 5, 7, 3\)" --train-x "$tmp/lies.npy" --train-y "$tmp/y.npy"
  bad_npz "x.npy: a .npy file \(one array\), not an .npz" --train "$tmp/x.npy"
  bad_npz "--layout must be auto, nchw or nhwc" --train-x "$tmp/x.npy" --train-y "$tmp/y.npy" --layout hwc
  bad_npz "give the train split as --train F.npz or as --train-x" --test "$tmp/x.npy"
  [[ ! -e $tmp/bad.h5 ]] || { echo "FAIL: a failed import left $tmp/bad.h5"; fails=$((fails + 1)); }
else
  echo "note: no numpy for /usr/bin/python3; import-npz is covered by test_io_import"
fi

# ---- bench-loader --augment ----------------------------------------------------------
expect_output 'augment crop:1,flip: .* batches/s, .* samples/s' -- "$LPSGD" data bench-loader \
  "$tmp/s.h5" --batch 16 --augment crop:1,flip
expect_output 'mode streaming batch 16 ranks 1 prefetch 2 augment flip' -- "$LPSGD" data bench-loader \
  "$tmp/s.h5" --batch 16 --augment flip --data-cache-mb 0
expect_error 2 "--augment 'crop:x': 'crop:x' needs its padding" -- "$LPSGD" data bench-loader "$tmp/s.h5" --augment crop:x
expect_error 2 "--augment 'blur': unknown augmentation 'blur'" -- "$LPSGD" data bench-loader "$tmp/s.h5" --augment blur
expect_error 2 "s.h5: /train: --augment crop:4 pads by at least the image size 5x4" -- \
  "$LPSGD" data bench-loader "$tmp/s.h5" --batch 16 --augment crop:4
"$LPSGD" data synth --out "$tmp/vec.h5" --samples 64 --shape 1,1,16 --classes 2 2>/dev/null
expect_error 2 "vec.h5: /train: --augment crop:2 needs images, but the samples are 1x16" -- \
  "$LPSGD" data bench-loader "$tmp/vec.h5" --batch 16 --augment crop:2

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
