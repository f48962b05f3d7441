#!/usr/bin/env bash
# --precision end to end, at P = 2 on small synthetic data:
#   bf16 (an MLP, and cnn:lenet for the convolutions): the same run twice ends
#     with bitwise identical parameters, and differs from the fp32 run;
#   the checkpoint's precision attribute says bf16; resuming it with fp32 is
#     allowed and says so in one line;
#   a CPU without native bf16 (LPSGD_MAX_ISA=avx2 makes one of any CPU) is
#     refused with one line naming the ISA and --precision fp32, on every
#     rank, also when only rank 1 lacks it (where the CPU has bf16: only
#     there can rank 0 have it); fp32 still trains there.
# Without bf16 on this CPU at all only the refusal is checked (exit 77 after).
set -u
LPSGD=$1
here=$(dirname "$0")
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
MPIEXEC=${MPIEXEC:-mpiexec}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

data=$tmp/synth.h5
"$LPSGD" data synth --out "$data" --samples 1024 --test-samples 128 --shape 1,12,12 \
  --classes 10 --seed 3 >/dev/null || { echo "FAIL: data synth"; exit 1; }
# shellcheck disable=SC2034  # read through a nameref below
mlp=(--algo lp --data "$data" --model mlp:144-48-32-10 --epochs 100 --batch 16 --lr 0.05
     --momentum 0.9 --seed 7 --progress off)
# shellcheck disable=SC2034  # read through a nameref below
cnn=(--algo lp --data "$data" --model cnn:lenet --epochs 100 --batch 8 --lr 0.02
     --momentum 0.9 --seed 7 --progress off)

# The final parameters' checksum of a 2-rank run (empty when it failed).
checksum() {  # NAME options...
  local name=$1; shift
  "$MPIEXEC" -n 2 "${MPI_FLAGS[@]}" "$LPSGD" train "$@" </dev/null >"$tmp/$name.out" 2>&1 \
    || { echo "FAIL: train $name exited non-zero:" >&2; tail -5 "$tmp/$name.out" >&2; return; }
  sed -n 's/^lpsgd: final parameters: checksum \([0-9a-f]*\)$/\1/p' "$tmp/$name.out"
}

# The refusal, on both ranks and on rank 1 alone (the other rank must not
# hang). LPSGD_MAX_ISA=avx2 makes a CPU without native bf16 of any CPU of
# this kind (it caps oneDNN too); where the CPU itself has no bf16, rank 0
# lacks it as well and the second case cannot be set up.
no_bf16='LPSGD_MAX_ISA=avx2'
fp32_works='(not on this CPU|not under LPSGD_MAX_ISA=avx2) .*avx2.*--precision fp32 works'
has_bf16=0
"$LPSGD" --version | grep -q '^precision: .*bf16 compute: cpu avx512_core_\(bf16\|amx\)' && has_bf16=1
expect_error 2 "--precision bf16 does not run on rank 0, cpu: $fp32_works" -- \
  "$MPIEXEC" -n 2 "${MPI_FLAGS[@]}" env "$no_bf16" "$LPSGD" train "${mlp[@]}" --max-steps 30 --precision bf16
if ((has_bf16)); then
  expect_error 2 "--precision bf16 does not run on rank 1, cpu: $fp32_works" -- \
    "$MPIEXEC" "${MPI_FLAGS[@]}" -n 1 "$LPSGD" train "${mlp[@]}" --max-steps 30 --precision bf16 : \
    -n 1 env "$no_bf16" "$LPSGD" train "${mlp[@]}" --max-steps 30 --precision bf16
else
  echo "skipped: rank 1 alone without bf16 (this CPU has none, so rank 0 lacks it too)"
fi
expect_error 2 "--precision must be fp32 or bf16, got 'fp16'" -- \
  "$LPSGD" train "${mlp[@]}" --max-steps 30 --precision fp16
ok=$(export LPSGD_MAX_ISA=avx2; checksum fp32-no-bf16 "${mlp[@]}" --max-steps 10 --precision fp32)
[[ -n $ok ]] || { echo "FAIL: fp32 does not train where bf16 is refused"; fails=$((fails + 1)); }

if ((!has_bf16)); then
  "$LPSGD" --version | grep '^precision'
  finish
  echo "SKIP: this CPU has no native bf16 (lpsgd --version above): bf16 training not checked"
  exit 77
fi

for m in mlp cnn; do
  declare -n opts=$m
  steps=30; [[ $m == cnn ]] && steps=10
  a=$(checksum "$m-bf16" "${opts[@]}" --max-steps $steps --precision bf16)
  b=$(checksum "$m-bf16-again" "${opts[@]}" --max-steps $steps --precision bf16)
  f=$(checksum "$m-fp32" "${opts[@]}" --max-steps $steps --precision fp32)
  if [[ -z $a || $a != "$b" ]]; then
    echo "FAIL: $m bf16 twice: checksums '$a' and '$b' differ"; fails=$((fails + 1))
  elif [[ -z $f || $a == "$f" ]]; then
    echo "FAIL: $m bf16 and fp32 end alike ('$a', '$f'): bf16 not used?"; fails=$((fails + 1))
  else
    echo "ok: $m bf16 repeats bitwise ($a), fp32 differs ($f)"
  fi
  grep -q "^lpsgd: precision bf16: [1-9][0-9]* of [1-9][0-9]* Conv2d/Linear layers multiply in bf16" \
    "$tmp/$m-bf16.out" || { echo "FAIL: $m: no precision line"; fails=$((fails + 1)); }
  unset -n opts
done

# The checkpoint records bf16; a resume with fp32 goes on and says so.
ck=$(checksum ck-bf16 "${mlp[@]}" --max-steps 30 --precision bf16 --checkpoint-dir "$tmp/ck")
file=$(find "$tmp/ck" -name 'ckpt-*.h5' | sort | tail -1)
attr=$(/usr/bin/python3 -c 'import h5py, sys; print(h5py.File(sys.argv[1])["/"].attrs["precision"].decode())' \
  "$file" 2>&1)
[[ -n $ck && $attr == bf16 ]] || { echo "FAIL: checkpoint precision attribute: '$attr'"; fails=$((fails + 1)); }
re=$(checksum ck-fp32 "${mlp[@]}" --precision fp32 --max-steps 40 --checkpoint-dir "$tmp/ck")
if [[ -n $re ]] && grep -q "^lpsgd: the checkpoint was trained with --precision bf16, the run continues with fp32$" \
     "$tmp/ck-fp32.out"; then
  echo "ok: bf16 checkpoint resumed in fp32, said so"
else
  echo "FAIL: resume with another precision:"; grep -i "resum\|precision" "$tmp/ck-fp32.out"; fails=$((fails + 1))
fi
finish
