#!/usr/bin/env bash
# --wire bf16 / fp16 end to end on a small MLP at P = 2 (gradients travel as
# 16-bit values, fp32 weights and optimizer):
#   the same bf16 run twice ends with bitwise identical parameters (also at
#     P = 3 with LP, the tree and the ring);
#   bf16 and fp16 follow the fp32 loss curve closely (rtol 2e-2) but not
#     exactly (the gradients really were rounded), with LP, the MPI library's
#     allreduce (its user operation) and reduce-bcast;
#   the start lines state the wire type; a checkpoint records it and a resume
#     with another wire type says so in one line;
#   a bad --wire is one error line.
set -u
LPSGD=$1
here=$(dirname "$0")
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

data=$tmp/synth.h5
"$LPSGD" data synth --out "$data" --samples 1024 --test-samples 256 --shape 1,8,8 \
  --classes 4 --seed 3 >/dev/null || { echo "FAIL: data synth"; exit 1; }
common=(--data "$data" --model mlp:64-48-32-4 --epochs 100 --eval-every 1
        --lr 0.05 --momentum 0.9 --weight-decay 1e-4 --seed 7 --progress off --bucket-mb 0.004
        --batch 64)
train() {  # [STEPS=N] [NP=P] train NAME [options...]: P (2) ranks, metrics in $tmp/NAME.jsonl, log in $tmp/NAME.out
  local name=$1; shift
  # --algo lp unless given: one algorithm's bits are compared (auto may choose anew).
  [[ " $* " == *" --algo "* ]] || set -- --algo lp "$@"
  if ! "${MPIEXEC:-mpiexec}" -n "${NP:-2}" "${MPI_FLAGS[@]}" "$LPSGD" train "${common[@]}" --max-steps "${STEPS:-40}" \
       --metrics "$tmp/$name.jsonl" "$@" </dev/null >"$tmp/$name.out" 2>&1; then
    echo "FAIL: train $name ($*) exited non-zero:"; tail -5 "$tmp/$name.out"
    fails=$((fails + 1)); return 1
  fi
}
compare() {
  python3 "$here/metrics_compare.py" "$@" || fails=$((fails + 1))
}
differs() {  # differs REF OTHER: the final checksums must differ
  if python3 "$here/metrics_compare.py" --exact "$1" "$2" >/dev/null; then
    echo "FAIL: $2 ends with the same parameters as $1: nothing was rounded"; fails=$((fails + 1))
  else
    echo "ok: $2 differs from $1 bitwise"
  fi
}

train fp32
train bf16 --wire bf16
train bf16-again --wire bf16
compare --exact "$tmp/bf16.jsonl" "$tmp/bf16-again.jsonl"
train fp16 --wire fp16
train bf16-mpi --wire bf16 --algo mpi
train bf16-mpi-again --wire bf16 --algo mpi
compare --exact "$tmp/bf16-mpi.jsonl" "$tmp/bf16-mpi-again.jsonl"
train fp16-rb --wire fp16 --sync reduce-bcast
# Three ranks: sums of three, in the tree's and the ring's orders too.
for algo in lp tree ring; do
  NP=3 train "p3-$algo" --wire bf16 --algo "$algo" && NP=3 train "p3-$algo-again" --wire bf16 --algo "$algo" &&
    compare --exact "$tmp/p3-$algo.jsonl" "$tmp/p3-$algo-again.jsonl"
done
compare --rtol 2e-2 "$tmp/fp32.jsonl" "$tmp/bf16.jsonl" "$tmp/fp16.jsonl" "$tmp/bf16-mpi.jsonl" \
  "$tmp/fp16-rb.jsonl"
for r in bf16 fp16 fp16-rb; do differs "$tmp/fp32.jsonl" "$tmp/$r.jsonl"; done

# The start lines say what travels.
for r in fp32 bf16 fp16; do
  grep -q "gradient sync: .*wire $r" "$tmp/$r.out" \
    || { echo "FAIL: $r: no 'wire $r' in the start lines"; fails=$((fails + 1)); }
done
grep -q "wire fp16 (parameters: fp32)" "$tmp/fp16-rb.out" \
  || { echo "FAIL: fp16-rb: the start lines do not say the parameters travel as fp32"; fails=$((fails + 1)); }

# The checkpoint records the wire type; resuming with another says so.
STEPS=20 train ck-bf16 --wire bf16 --checkpoint-dir "$tmp/ck"
train ck-fp32 --checkpoint-dir "$tmp/ck" --resume auto
if [[ $(grep -c "the checkpoint's gradients travelled as bf16, this run's travel as fp32" "$tmp/ck-fp32.out") != 1 ]]; then
  echo "FAIL: resume with another --wire did not say so in one line:"; cat "$tmp/ck-fp32.out"; fails=$((fails + 1))
fi
STEPS=20 train ck-bf16-again --wire bf16 --checkpoint-dir "$tmp/ck2"
train ck-bf16-resume --wire bf16 --checkpoint-dir "$tmp/ck2" --resume auto
if grep -q "travelled as" "$tmp/ck-bf16-resume.out"; then
  echo "FAIL: resume with the same --wire mentions the wire:"; cat "$tmp/ck-bf16-resume.out"; fails=$((fails + 1))
fi

expect_error 2 "--wire must be fp32, bf16 or fp16" -- \
  "$LPSGD" train --data "$data" --model mlp:64-32-4 --wire fp8
finish
