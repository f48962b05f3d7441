#!/usr/bin/env bash
# --algo auto's check on the run's own steps (lib/train/auto_check.hpp), at 3
# ranks, where the order of additions shows in the bits:
#   - a cost model that mispredicts: a calibration under which auto takes the
#     pipelined tree, on MPI messages cut to 64 bytes (LPSGD_MPI_MESSAGE_BYTES:
#     every MPI-based algorithm crawls; LP's peer links do not care), so the
#     tree measures far slower than LP, the runner-up, is predicted: the check
#     tries LP at step 6 and keeps it at step 9, and says so;
#   - the checkpoints record where the check stood and the algorithms; a run
#     resumed in the middle of the trial (step 7), and one resumed after it
#     (step 14, which checks no more), end bitwise as the uninterrupted run;
#   - --auto-check off keeps the tree, and ends elsewhere (the switch shows);
#   - --auto-check always tries the runner-up where the choice was right,
#     and goes back to it.
set -u
LPSGD=$1
here=$(dirname "$0")
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$LPSGD" data synth --out "$tmp/d.h5" --samples 384 --test-samples 48 --shape 1,28,28 \
  --classes 10 --seed 5 2>/dev/null || { echo "FAIL: data synth"; exit 1; }
# Named calibrations are never measured again: these numbers decide. Under
# cal_tree auto takes the tree for the model's one 100 KB bucket (110 us),
# LP next (118 us), then MST and the ring (126 us); under cal_lp, LP (a
# 2-core VM's numbers).
cal_tree=$tmp/cal-tree.ini cal_lp=$tmp/cal-lp.ini
printf '%s\n' 'alpha_shm = 1e-06' 'beta_shm = 0.9e-09' 'alpha_mpi = 1e-06' 'beta_mpi = 2e-10' \
  'gamma = 2e-10' 'confidence = high' >"$cal_tree"
printf '%s\n' 'alpha_shm = 6.4e-07' 'beta_shm = 8.4e-11' 'alpha_mpi = 2.2e-06' 'beta_mpi = 2.0e-10' \
  'gamma = 1.2e-10' 'confidence = high' >"$cal_lp"
# 384 / (3 x 8) = 16 steps an epoch, 7 epochs: 112 steps (the check needs 100).
common=(--data "$tmp/d.h5" --model mlp:784-32-10 --batch 8 --epochs 7 --lr 0.02 --seed 3
        --progress off --eval-every 0)
run() {  # run OUTFILE options... (under cal_tree unless --calibration is given)
  local out=$1; shift
  [[ " $* " == *" --calibration "* ]] || set -- --calibration "$cal_tree" "$@"
  LPSGD_MPI_MESSAGE_BYTES=64 "${MPIEXEC:-mpiexec}" -n 3 "${MPI_FLAGS[@]}" "$LPSGD" train "${common[@]}" "$@" \
    </dev/null >"$out" 2>&1
}
info() {  # info DIR_OR_FILE KEY
  "$LPSGD" ckpt info "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"
}
check() {
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
same() { [[ -n $2 && $1 == "$2" ]] || { echo "  got '$1', want '$2'"; return 1; }; }

run "$tmp/a.out" --checkpoint-dir "$tmp/a" --checkpoint-every 7 --keep 100 \
  || { echo "FAIL: the run with the check"; cat "$tmp/a.out"; exit 1; }
check "auto takes the tree under cal_tree" grep -q "gradient sync: .* tree block .*(auto)" "$tmp/a.out"
check "the check tries lp at step 6: the tree took longer than lp's prediction" \
  grep -q "auto check at step 6 .*bucket 0 .* by tree took .* more than lp's .*: trying lp, for 3 steps" "$tmp/a.out"
check "the check keeps lp at step 9" \
  grep -q "auto check at step 9: bucket 0 keeps lp .*the choices are final: lp" "$tmp/a.out"
check "the final checkpoint records lp and a finished check" \
  same "$(info "$tmp/a" algos)/$(info "$tmp/a" auto_check)" "lp/done"
mid=$tmp/a/ckpt-000000007.h5
check "the step-7 checkpoint is inside the trial" same "$(info "$mid" auto_check | cut -d: -f1-3)/$(info "$mid" algos)" "trial:6:tree/lp"
want=$(info "$tmp/a" checksum)

for at in 7 14; do
  mkdir -p "$tmp/r$at"
  cp "$tmp/a/ckpt-0000000$(printf '%02d' "$at").h5" "$tmp/r$at/"
  run "$tmp/r$at.out" --checkpoint-dir "$tmp/r$at" --resume auto \
    || { echo "FAIL: resume at $at"; cat "$tmp/r$at.out"; fails=$((fails + 1)); continue; }
  check "resumed at step $at == the uninterrupted run (bitwise)" same "$(info "$tmp/r$at" checksum)" "$want"
done
check "resumed inside the trial: it decides at step 9 as the run did" grep -q "auto check at step 9: bucket 0 keeps lp" "$tmp/r7.out"
check "resumed after the check: no check" bash -c "! grep -q 'auto check at step' '$tmp/r14.out'"

# 14 steps, beside the run's checkpoint of step 14.
run "$tmp/off.out" --checkpoint-dir "$tmp/off" --auto-check off --max-steps 14 \
  || { echo "FAIL: --auto-check off"; cat "$tmp/off.out"; fails=$((fails + 1)); }
check "--auto-check off: the tree throughout, no check" \
  same "$(info "$tmp/off" algos)/$(grep -c 'auto check at step' "$tmp/off.out")" "tree/0"
check "--auto-check off ends elsewhere: the trial's steps show in the bits" \
  test "$(info "$tmp/off" checksum)" != "$(info "$tmp/a/ckpt-000000014.h5" checksum)"

run "$tmp/always.out" --checkpoint-dir "$tmp/always" --auto-check always --calibration "$cal_lp" \
  || { echo "FAIL: --auto-check always"; cat "$tmp/always.out"; fails=$((fails + 1)); }
check "--auto-check always under cal_lp: lp tries its runner-up and goes back" \
  grep -q "auto check at step 9: bucket 0 goes back to lp" "$tmp/always.out"
check "--auto-check always: lp at the end" same "$(info "$tmp/always" algos)" lp

expect_error 2 "--auto-check must be on, off or always, got 'maybe'" -- \
  "$LPSGD" train --data "$tmp/d.h5" --auto-check maybe
finish
