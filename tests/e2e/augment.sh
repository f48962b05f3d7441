#!/usr/bin/env bash
# lpsgd train --augment (random crop after zero padding, random flip) end to end:
#   2 ranks train with crop:2,flip; the parameters end elsewhere than without it;
#   a run stopped (mid-epoch and at an epoch's end) and resumed ends with the
#     straight run's checksum, bitwise: each sample's draw depends on
#     (seed, epoch, index) alone, so a resumed run draws the same;
#   the config key `augment` equals the option;
#   evaluation is not augmented: the run's last test loss is what lpsgd eval
#     of its final checkpoint computes;
#   bad specs and non-image data: one line, exit 2.
set -u
LPSGD=$1
here=$(dirname "$0")
# shellcheck source=lib.sh
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

data=$tmp/img.h5
"$LPSGD" data synth --out "$data" --samples 384 --test-samples 96 --shape 3,8,8 \
  --classes 10 --seed 5 --noise 0.3 2>/dev/null || { echo "FAIL: data synth"; exit 1; }
"$LPSGD" data synth --out "$tmp/vec.h5" --samples 64 --shape 1,1,16 --classes 2 2>/dev/null \
  || { echo "FAIL: data synth (vectors)"; exit 1; }
# A fixed cost model (resume.sh's), so no measurement can change auto's choices.
cal=$tmp/cal.ini
printf '%s\n' 'alpha_shm = 6.4e-07' 'beta_shm = 8.4e-11' 'alpha_mpi = 2.2e-06' 'beta_mpi = 2.0e-10' \
  'gamma = 1.2e-10' >"$cal"
# 384 samples / (2 ranks x 32) = 6 steps per epoch; 2 epochs = 12 steps.
common=(--data "$data" --model mlp:192-32-10 --batch 32 --lr 0.05 --momentum 0.9 --seed 3
        --epochs 2 --eval-batch 20 --progress off --calibration "$cal")
run() {  # run NP OUTFILE train options...
  local np=$1 out=$2; shift 2
  "${MPIEXEC:-mpiexec}" -n "$np" "${MPI_FLAGS[@]}" "$LPSGD" train "${common[@]}" "$@" \
    </dev/null >"$out" 2>&1
}
ckpt_json() {  # ckpt_json DIR KEY: a field of the newest valid checkpoint in DIR
  "$LPSGD" ckpt info "$1" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d[sys.argv[1]] if d["valid"] else "invalid")' "$2"
}
check() {  # check DESCRIPTION CONDITION-COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
same() { [[ -n $2 && $1 == "$2" ]] || { echo "  got '$1', want '$2'"; return 1; }; }

aug=(--augment "crop:2,flip")
if run 2 "$tmp/full.out" "${aug[@]}" --checkpoint-dir "$tmp/full" --metrics "$tmp/full.jsonl"; then
  want=$(ckpt_json "$tmp/full" checksum)
  check "augmented straight run ends at step 12" same "$(ckpt_json "$tmp/full" step)" 12
else
  echo "FAIL: augmented straight run"; cat "$tmp/full.out"; fails=$((fails + 1)); want=none
fi
run 2 "$tmp/plain.out" --checkpoint-dir "$tmp/plain" || { echo "FAIL: plain run"; cat "$tmp/plain.out"; }
check "augmentation changes the trajectory" test "$(ckpt_json "$tmp/plain" checksum)" != "$want"

for stop in 4 6; do  # mid-epoch, and at the end of epoch 1 (the next draws are epoch 2's)
  d=$tmp/stop$stop
  run 2 "$d.1.out" "${aug[@]}" --checkpoint-dir "$d" --max-steps "$stop" \
    || { echo "FAIL: stop at $stop"; cat "$d.1.out"; }
  check "stopped at step $stop" same "$(ckpt_json "$d" step)" "$stop"
  run 2 "$d.2.out" "${aug[@]}" --checkpoint-dir "$d" --resume auto \
    || { echo "FAIL: resume from $stop"; cat "$d.2.out"; }
  grep -q "resuming from .*ckpt-0*$stop.h5" "$d.2.out" \
    || { echo "FAIL: did not say it resumed"; cat "$d.2.out"; fails=$((fails + 1)); }
  check "augmented: stop at $stop + resume == straight run (bitwise)" \
    same "$(ckpt_json "$d" checksum)" "$want"
done

printf 'augment = crop:2,flip\n' >"$tmp/aug.ini"
run 2 "$tmp/ini.out" --config "$tmp/aug.ini" --checkpoint-dir "$tmp/ini" \
  || { echo "FAIL: --config run"; cat "$tmp/ini.out"; }
check "config key augment == --augment (bitwise)" same "$(ckpt_json "$tmp/ini" checksum)" "$want"

# Evaluation sees the test split as stored: the trainer's last test loss is
# lpsgd eval's on the final parameters (augmented, it would differ by far more).
final=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["test_loss"])' \
  "$tmp/full.jsonl" 2>/dev/null)
ev=$("${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}" "$LPSGD" eval "$tmp/full" --data "$data" 2>&1 \
  | sed -n 's/^lpsgd: eval samples=96 loss=\([0-9.]*\) acc=.*/\1/p')
check "evaluation is not augmented: test loss $final == lpsgd eval's $ev" \
  python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * max(1, abs(a)))' \
  "${final:-nan}" "${ev:-inf}"

MPIRUN=("${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}")
expect_error 2 "--augment 'blur': unknown augmentation 'blur'" -- "${MPIRUN[@]}" "$LPSGD" train \
  "${common[@]}" --augment blur
expect_error 2 "--augment 'crop:-1': 'crop:-1' needs its padding" -- "${MPIRUN[@]}" "$LPSGD" train \
  "${common[@]}" --augment crop:-1
expect_error 2 "img.h5: /train: --augment crop:8 pads by at least the image size 8x8" -- \
  "${MPIRUN[@]}" "$LPSGD" train "${common[@]}" --augment crop:8
expect_error 2 "vec.h5: /train: --augment crop:2,flip needs images, but the samples are 1x16" -- \
  "${MPIRUN[@]}" "$LPSGD" train --data "$tmp/vec.h5" --model mlp:16-2 --batch 8 --progress off \
  --augment crop:2,flip
finish
