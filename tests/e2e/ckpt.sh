#!/usr/bin/env bash
# lpsgd ckpt info / verify on checkpoints written by the make_ckpt test helper:
# intact ones (text and JSON), then the newest damaged by a flipped data byte,
# the next truncated, all damaged, and bad paths; exit codes 0 / 1 / 2.
set -u
LPSGD=$1
MAKE_CKPT=$2
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
MPIRUN=("${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
d=$tmp/run

# check_json EXIT_CODE PYTHON_ASSERTIONS -- cmd...: cmd exits with EXIT_CODE and
# prints one JSON object `j` on stdout for which the assertions hold.
check_json() {
  local want=$1 asserts=$2; shift 3
  local out rc
  out=$("$@" 2>/dev/null); rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL: '$*' exited $rc, want $want"; fails=$((fails + 1)); return
  fi
  if printf '%s' "$out" | python3 -c "import json, sys; j = json.load(sys.stdin); $asserts" 2>"$tmp/py.err"
  then echo "ok: $* -> JSON $asserts"
  else echo "FAIL: '$*' JSON: $(cat "$tmp/py.err") in: $out"; fails=$((fails + 1)); fi
}

# ---- intact checkpoints ---------------------------------------------------------
make=("$MAKE_CKPT" --model mlp:784-16-10 --shapes "16x784,16,10x16,10" --keep 3)
sum30=$("${make[@]}" --dir "$d" --steps 10,20,30 | tail -1)
[[ $sum30 =~ ^[0-9a-f]{16}$ ]] || { echo "FAIL: make_ckpt printed '$sum30'"; exit 1; }
"${make[@]}" --dir "$d" --steps 40 >/dev/null  # keeps 20, 30, 40
again=$("${make[@]}" --dir "$tmp/again" --steps 30 | tail -1)
[[ $again == "$sum30" ]] || { echo "FAIL: same contents, checksums $again vs $sum30"; fails=$((fails + 1)); }
newest=$d/ckpt-000000040.h5
expect_output "checkpoint: $newest \(newest valid checkpoint in $d\).*status: valid.*step: 40.*ranks: 2.*model: mlp:784-16-10.*checksum: [0-9a-f]{16} \(verified\).*config:.*  lr = 0.05" \
  -- "$LPSGD" ckpt info "$d"
check_json 0 "assert j['path'] == '$newest' and j['valid'] is True and j['error'] == '' and j['step'] == 40 and j['epoch'] == 4 and j['samples'] == 5120 and j['ranks'] == 2 and j['batch'] == 64 and j['model'] == 'mlp:784-16-10' and j['version'] == 'test' and len(j['checksum']) == 16 and j['skipped'] == [] and 'lr = 0.05' in j['config']" \
  -- "$LPSGD" ckpt info "$d" --json
check_json 0 "assert j['step'] == 30 and j['checksum'] == '$sum30' and j['valid']" \
  -- "$LPSGD" ckpt info "$d/ckpt-000000030.h5" --json
expect_output "^$newest: valid \(step 40, checksum [0-9a-f]{16}\)$" -- "$LPSGD" ckpt verify "$newest"
expect_output "ckpt-000000020.h5: valid.*ckpt-000000030.h5: valid.*ckpt-000000040.h5: valid" \
  -- "$LPSGD" ckpt verify "$d"
expect_output "^$newest: valid" -- "${MPIRUN[@]}" "$LPSGD" ckpt verify "$newest"
# A stray temporary (a writer killed mid-write) is not a checkpoint.
head -c 3000 "$newest" >"$d/.ckpt-000000050.h5.tmp.4242"
check_json 0 "assert j['step'] == 40 and j['skipped'] == []" -- "$LPSGD" ckpt info "$d" --json

# ---- damage ---------------------------------------------------------------------
"$MAKE_CKPT" --damage "$newest"  # one bit in the middle of the largest tensor's data
expect_error 1 "checkpoint $newest is damaged: checksum mismatch \(stored [0-9a-f]{16}, computed [0-9a-f]{16}\)" \
  -- "$LPSGD" ckpt verify "$newest"
expect_error 1 "$newest is damaged: checksum mismatch" -- "${MPIRUN[@]}" "$LPSGD" ckpt verify "$newest"
expect_error 1 "ckpt-000000040.h5 is damaged: checksum mismatch" -- "$LPSGD" ckpt verify "$d"
check_json 1 "assert j['valid'] is False and j['error'].startswith('checksum mismatch') and j['step'] == 40" \
  -- "$LPSGD" ckpt info "$newest" --json
expect_output "checkpoint: $d/ckpt-000000030.h5 \(newest valid.*status: valid.*skipped: checkpoint $newest is damaged \(checksum mismatch.*falling back to the previous one.*step: 30" \
  -- "$LPSGD" ckpt info "$d"
truncate -s 2000 "$d/ckpt-000000030.h5"
check_json 0 "assert j['step'] == 20 and j['valid'] and len(j['skipped']) == 2 and 'truncated or not an HDF5 file' in j['skipped'][1]" \
  -- "$LPSGD" ckpt info "$d" --json
truncate -s 0 "$d/ckpt-000000020.h5"
out=$("$LPSGD" ckpt info "$d" 2>&1 >/dev/null); rc=$?
if [[ $rc -eq 1 && $out == *"lpsgd: error: $d: no valid checkpoint"* && $(grep -c 'is damaged' <<<"$out") -eq 3 ]]
then echo "ok: info on a directory of damaged checkpoints -> 1"
else echo "FAIL: info on all-damaged dir exited $rc: $out"; fails=$((fails + 1)); fi

# ---- bad paths ------------------------------------------------------------------
expect_error 2 "$tmp/nosuch.h5: no such checkpoint file or directory" -- "$LPSGD" ckpt verify "$tmp/nosuch.h5"
expect_error 2 "$tmp/nosuch: no such checkpoint file or directory" -- "$LPSGD" ckpt info "$tmp/nosuch" --json
mkdir "$tmp/empty"
expect_error 2 "$tmp/empty: no checkpoints \(ckpt-\*.h5\) in this directory" -- "$LPSGD" ckpt info "$tmp/empty"
expect_error 2 "unknown ckpt subcommand 'frobnicate'" -- "$LPSGD" ckpt frobnicate
echo "not hdf5" >"$tmp/text.h5"
expect_error 1 "checkpoint $tmp/text.h5 is damaged: truncated or not an HDF5 file" -- "$LPSGD" ckpt verify "$tmp/text.h5"
finish
