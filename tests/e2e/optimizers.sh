#!/usr/bin/env bash
# --optimizer adamw and lars end to end (issue 46), 2 ranks:
#   stop mid-epoch at a checkpoint + resume == a straight run, bitwise (the
#     checkpoint holds the moments and AdamW's step count); LARS with
#     --sync reduce-bcast (rank 0 alone holds the state) and --wire bf16;
#   a checkpoint written at P=2 resumes at P=1 and finishes, its optimizer
#     and step count recorded (ckpt info);
#   a checkpoint written with sgd, resumed with adamw: one error line;
#   bad values of the new options: one error line each, exit 2.
set -u
LPSGD=$1
here=$(dirname "$0")
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

data=$tmp/synth.h5
"$LPSGD" data synth --out "$data" --samples 384 --test-samples 96 --shape 1,28,28 \
  --classes 10 --seed 5 2>/dev/null || { echo "FAIL: data synth"; exit 1; }
# 384 samples / (2 ranks x 32) = 6 steps per epoch; 2 epochs = 12 steps.
common=(--data "$data" --model mlp:784-64-10 --batch 32 --epochs 2 --schedule cosine
        --warmup-steps 2 --seed 11 --eval-batch 48 --algo lp --progress off)
lp() {  # lp NP OUTFILE train options...
  local np=$1 out=$2; shift 2
  "${MPIEXEC:-mpiexec}" -n "$np" "${MPI_FLAGS[@]}" "$LPSGD" train "${common[@]}" "$@" </dev/null >"$out" 2>&1
}
info() {  # info DIR FIELD: a field of ckpt info --json of DIR's newest checkpoint
  "$LPSGD" ckpt info "$1" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d[sys.argv[1]] if d["valid"] else "invalid")' "$2"
}
check() {
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
same() { [[ -n $2 && $1 == "$2" ]] || { echo "  got '$1', want '$2'"; return 1; }; }

declare -A opts=(
  [adamw]="--optimizer adamw --lr 0.002 --adam-betas 0.9,0.99 --weight-decay 0.01"
  [lars]="--optimizer lars --lr 0.5 --lars-eta 0.01 --momentum 0.9 --weight-decay 1e-4 --sync reduce-bcast --wire bf16"
)
for o in adamw lars; do
  read -r -a extra <<<"${opts[$o]}"
  lp 2 "$tmp/$o-full.out" "${extra[@]}" --checkpoint-dir "$tmp/$o-full" \
    || { echo "FAIL: $o straight run"; cat "$tmp/$o-full.out"; fails=$((fails + 1)); continue; }
  grep -q "optimizer $o (" "$tmp/$o-full.out" || { echo "FAIL: $o: no optimizer line"; cat "$tmp/$o-full.out"; fails=$((fails + 1)); }
  check "$o: straight run records optimizer $o after 12 steps" \
    same "$(info "$tmp/$o-full" optimizer) $(info "$tmp/$o-full" optimizer_steps)" "$o 12"
  d=$tmp/$o-stop
  lp 2 "$d.1.out" "${extra[@]}" --checkpoint-dir "$d" --max-steps 4 || { echo "FAIL: $o stop"; cat "$d.1.out"; }
  cp -r "$d" "$d-p1"
  lp 2 "$d.2.out" "${extra[@]}" --checkpoint-dir "$d" || { echo "FAIL: $o resume"; cat "$d.2.out"; }
  grep -q "resuming from .*ckpt-0*4.h5" "$d.2.out" || { echo "FAIL: $o did not resume"; cat "$d.2.out"; fails=$((fails + 1)); }
  check "$o: stop at 4 + resume == straight run (bitwise)" same "$(info "$d" checksum)" "$(info "$tmp/$o-full" checksum)"
done

# Written at P=2, resumed at P=1: finishes, and the step count follows.
d=$tmp/adamw-stop-p1
read -r -a extra <<<"${opts[adamw]}"
lp 1 "$d.out" "${extra[@]}" --checkpoint-dir "$d" || { echo "FAIL: adamw resume at P=1"; cat "$d.out"; fails=$((fails + 1)); }
grep -q "the run continues with 1 rank x batch 32 = 32 per step" "$d.out" || { echo "FAIL: no note of the new P"; cat "$d.out"; fails=$((fails + 1)); }
# 4 steps x 64 samples, then (384 - 256) / 32 + 384 / 32 = 16 steps of 32.
check "adamw: written at P=2, resumed at P=1: 20 optimizer steps" same "$(info "$d" optimizer_steps)" 20
"$LPSGD" ckpt info "$d" | grep -q "^optimizer: adamw (20 steps)$" \
  || { echo "FAIL: ckpt info shows no 'optimizer: adamw (20 steps)'"; "$LPSGD" ckpt info "$d"; fails=$((fails + 1)); }

# sgd's checkpoint resumed with adamw: one line, every rank stops.
d=$tmp/sgd
lp 2 "$d.out" --checkpoint-dir "$d" --max-steps 2 || { echo "FAIL: sgd run"; cat "$d.out"; fails=$((fails + 1)); }
expect_error 2 "checkpoint was written with --optimizer sgd, this run uses adamw; resume with --optimizer sgd, or use --resume none" -- \
  "${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}" "$LPSGD" train "${common[@]}" --checkpoint-dir "$d" --optimizer adamw

# Bad values: one line each, before anything is opened (every rank alike).
bad() { expect_error 2 "$1" -- "${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}" "$LPSGD" train --data "$data" "${@:2}"; }
bad "--optimizer must be sgd, adamw or lars, got 'adam'" --optimizer adam
bad "--adam-betas must be two numbers in \[0, 1\), got 0.9,1" --optimizer adamw --adam-betas 0.9,1
expect_error 2 "--adam-betas must be B1,B2 \(two numbers in \[0, 1\)\), got '0.9'" -- "$LPSGD" train --data "$data" --adam-betas 0.9
expect_error 2 "--adam-betas must be B1,B2" -- "$LPSGD" train --data "$data" --adam-betas 0.9,0.99,0.5
expect_error 2 "--adam-betas must be two numbers in \[0, 1\), got -0.1,0.999" -- "$LPSGD" train --data "$data" --adam-betas=-0.1,0.999
expect_error 2 "--adam-eps must be a positive number, got 0" -- "$LPSGD" train --data "$data" --optimizer adamw --adam-eps 0
expect_error 2 "--adam-eps must be a positive number, got -1" -- "$LPSGD" train --data "$data" --adam-eps=-1
expect_error 2 "--lars-eta must be a positive number, got 0" -- "$LPSGD" train --data "$data" --optimizer lars --lars-eta 0
expect_error 2 "--momentum must be in \[0, 1\), got 1" -- "$LPSGD" train --data "$data" --optimizer lars --momentum 1
expect_error 2 "--weight-decay must be >= 0, got -0.5" -- "$LPSGD" train --data "$data" --optimizer adamw --weight-decay=-0.5
expect_error 2 "--nesterov is for --optimizer sgd, not lars" -- "$LPSGD" train --data "$data" --optimizer lars --nesterov
finish
