#!/usr/bin/env bash
# Residual networks with batch norm end to end (cnn:resnet20 on small
# synthetic images):
#   --sync-bn: P = 2 (batch 12) and P = 3 (batch 8) normalize with the
#     statistics of the whole global batch: after 3 steps their parameters,
#     momentum and running statistics are one rank's with batch 24, within
#     rounding; without --sync-bn P = 2's are not (each rank's own
#     statistics), which shows the check can fail;
#   resume in the middle of an epoch: a run stopped at a checkpoint and
#     resumed ends with the checkpoint (parameters, momentum, running
#     statistics) of the uninterrupted run, bit for bit;
#   the same run twice: the same bits;
#   batch norm's state in `lpsgd ckpt info` and `lpsgd eval` of the
#     checkpoint: the test accuracy the run reported.
set -u
LPSGD=$1
here=$(dirname "$0")
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

data=$tmp/synth.h5
"$LPSGD" data synth --out "$data" --samples 384 --test-samples 96 --shape 1,8,8 \
  --classes 4 --seed 13 >/dev/null || { echo "FAIL: data synth"; exit 1; }
common=(--data "$data" --model cnn:resnet20 --epochs 100 --lr 0.05 --momentum 0.9
        --weight-decay 1e-4 --seed 5 --progress off --algo lp --eval-batch 48)
run() {  # run NAME P options...: metrics in $tmp/NAME.jsonl, output in $tmp/NAME.out
  local name=$1 np=$2; shift 2
  if ! "${MPIEXEC:-mpiexec}" -n "$np" "${MPI_FLAGS[@]}" "$LPSGD" train "${common[@]}" \
       --metrics "$tmp/$name.jsonl" "$@" </dev/null >"$tmp/$name.out" 2>&1; then
    echo "FAIL: train $name (P=$np $*) exited non-zero:"; tail -5 "$tmp/$name.out"
    fails=$((fails + 1)); return 1
  fi
}
checksum() { sed -n 's/^lpsgd: final parameters: checksum \([0-9a-f]*\)$/\1/p' "$tmp/$1.out"; }
ckpt_sum() {
  "$LPSGD" ckpt info "$1" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["checksum"] if d["valid"] else "invalid")'
}

# --sync-bn: after 3 steps at a global batch of 24, P = 2 and 3 hold the
# parameters, momentum and running statistics of one rank with batch 24,
# within rounding (1e-5 of each tensor's largest value). Not over many
# steps: a ReLU input within rounding of 0 eventually flips one way on one
# run and the other way on another, and trajectories part (measured here:
# within 4e-6 for 6 steps, then one flip moved a gradient by 0.6%).
ckpt_diff() {  # ckpt_diff DIR_A DIR_B: the largest relative difference of any tensor
  /usr/bin/python3 - "$1" "$2" <<'PY'
import glob, sys
import h5py, numpy as np
def load(d):
    f = h5py.File(sorted(glob.glob(d + "/ckpt-*.h5"))[-1], "r")
    out = {}
    for g in ("params", "optimizer", "state"):
        for k in f[g]:
            n = f[g][k].attrs["name"]
            out[g + ":" + (n.decode() if isinstance(n, bytes) else n)] = f[g][k][()]
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys() and any(k.startswith("state:") for k in a), "tensors differ"
worst = max((float(np.abs(a[k] - b[k]).max() / (np.abs(a[k]).max() + 1e-30)), k) for k in a)
print("%.3g %s" % worst)
PY
}
for p in 1 2 3; do
  extra=(); ((p > 1)) && extra=(--sync-bn)
  run "sync$p" "$p" --batch $((24 / p)) --max-steps 3 --checkpoint-dir "$tmp/ck-sync$p" "${extra[@]}"
done
run local2 2 --batch 12 --max-steps 3 --checkpoint-dir "$tmp/ck-local2"
for p in 2 3; do
  d=$(ckpt_diff "$tmp/ck-sync1" "$tmp/ck-sync$p")
  if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-5 else 1)' "${d%% *}"; then
    echo "ok: --sync-bn at P = $p: the tensors of one rank with the whole batch (largest difference $d)"
  else
    echo "FAIL: --sync-bn at P = $p differs from one rank with the whole batch: $d"; fails=$((fails + 1))
  fi
done
d=$(ckpt_diff "$tmp/ck-sync1" "$tmp/ck-local2")
if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 1e-3 else 1)' "${d%% *}"; then
  echo "ok: without --sync-bn P = 2 differs from one rank ($d: each rank's own statistics)"
else
  echo "FAIL: without --sync-bn P = 2 equals one rank ($d): the check above could not fail"; fails=$((fails + 1))
fi

# Resume mid-epoch (16 steps an epoch at 2 x 12): stop at step 10, a
# checkpoint step of the straight run, and go on to 20.
run straight 2 --batch 12 --max-steps 20 --checkpoint-dir "$tmp/ck-straight" --checkpoint-every 5
run part1 2 --batch 12 --max-steps 10 --checkpoint-dir "$tmp/ck-resumed" --checkpoint-every 5
run part2 2 --batch 12 --max-steps 20 --checkpoint-dir "$tmp/ck-resumed" --checkpoint-every 5
want=$(ckpt_sum "$tmp/ck-straight") got=$(ckpt_sum "$tmp/ck-resumed")
if [[ -n $want && $want == "$got" ]] && grep -q "resuming from .*ckpt-000000010.h5" "$tmp/part2.out"; then
  echo "ok: stopped at step 10 and resumed: the straight run's checkpoint ($want), running statistics included"
else
  echo "FAIL: resumed checkpoint $got, straight $want"; grep resuming "$tmp/part2.out"; fails=$((fails + 1))
fi
run again 2 --batch 12 --max-steps 20
if [[ -n $(checksum again) && $(checksum again) == "$(checksum straight)" ]]; then
  echo "ok: the same run twice: the same parameters"
else
  echo "FAIL: the same run twice: $(checksum straight) then $(checksum again)"; fails=$((fails + 1))
fi

# The checkpoint holds the running statistics; eval of it gives the run's accuracy.
"$LPSGD" ckpt info "$tmp/ck-straight" --json >"$tmp/info.json"
python3 - "$tmp/info.json" <<'PY' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
assert d["valid"] and d["model"] == "cnn:resnet20", d
print("ok: ckpt info: valid cnn:resnet20 checkpoint of", d["tensors"], "tensors")
PY
acc=$(python3 -c 'import json,sys; print("%.6f" % [json.loads(l) for l in open(sys.argv[1])][-1]["test_acc"])' "$tmp/straight.jsonl")
expect_output "acc=$acc" -- "${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}" "$LPSGD" eval "$tmp/ck-straight" --data "$data"

expect_error 2 "cnn:resnet21.*6n\\+2" -- "$LPSGD" train --data "$data" --model cnn:resnet21 --batch 8
finish
