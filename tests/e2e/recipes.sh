#!/usr/bin/env bash
# Training recipes end to end (small MLP, synthetic data):
#   --accumulate 4 at P = 2 against P = 8 over the same samples: the final
#     parameters (and momentum) within 1e-5 relative after 100 steps; one
#     exchange per bucket per step (counted in the --trace timeline);
#   --global-batch 768: a run stopped at P = 4 and resumed at P = 3 and at
#     P = 2 (micro-batches of 64: 4 x 64 x 3, 3 x 64 x 4, 2 x 64 x 6) ends
#     within float rounding of the uninterrupted P = 4 run, the log saying
#     the global batch was kept; --global-batch 500 at P = 3 is one line;
#   --clip-grad-norm: P = 1 and P = 2 clip the same global norm (losses
#     within 1e-4), and clipping changes the run (it engaged);
#   bad values: one line each.
set -u
LPSGD=$1
here=$(dirname "$0")
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

data=$tmp/synth.h5
"$LPSGD" data synth --out "$data" --samples 4096 --test-samples 256 --shape 1,8,8 \
  --classes 4 --seed 3 >/dev/null || { echo "FAIL: data synth"; exit 1; }
common=(--data "$data" --model mlp:64-48-32-4 --epochs 100 --lr 0.05 --momentum 0.9
        --weight-decay 1e-4 --seed 7 --progress off --algo lp --bucket-mb 0.004)
run() {  # run NAME P options...: output in $tmp/NAME.out, metrics in $tmp/NAME.jsonl
  local name=$1 np=$2; shift 2
  if ! "${MPIEXEC:-mpiexec}" -n "$np" "${MPI_FLAGS[@]}" "$LPSGD" train "${common[@]}" \
       --metrics "$tmp/$name.jsonl" "$@" </dev/null >"$tmp/$name.out" 2>&1; then
    echo "FAIL: train $name (P=$np $*) exited non-zero:"; tail -5 "$tmp/$name.out"
    fails=$((fails + 1)); return 1
  fi
}
# The largest relative difference of any tensor of two checkpoint directories' newest checkpoints.
ckpt_diff() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import glob, sys
import h5py, numpy as np
def load(d):
    f = h5py.File(sorted(glob.glob(d + "/ckpt-*.h5"))[-1], "r")
    out = {}
    for g in ("params", "optimizer"):
        for k in f[g]:
            n = f[g][k].attrs["name"]
            out[g + ":" + (n.decode() if isinstance(n, bytes) else n)] = f[g][k][()]
    return out, int(f.attrs["step"])
(a, sa), (b, sb) = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), "tensors differ"
assert sa == sb, f"steps differ: {sa} and {sb}"
worst = max((float(np.abs(a[k] - b[k]).max() / (np.abs(a[k]).max() + 1e-30)), k) for k in a)
print("%.3g %s" % worst)
PY
}
within() {  # within WHAT DIFF-LINE TOLERANCE
  if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' "${2%% *}" "$3"; then
    echo "ok: $1 (largest difference $2)"
  else
    echo "FAIL: $1: largest difference $2 above $3"; fails=$((fails + 1))
  fi
}

# --accumulate: P = 2 x 4 micro-batches of 4 = P = 8 x 4, the same 32 samples a step.
run acc2 2 --batch 4 --accumulate 4 --max-steps 100 --checkpoint-dir "$tmp/ck-acc2" \
  --trace "$tmp/acc2.trace.json"
run acc8 8 --batch 4 --max-steps 100 --checkpoint-dir "$tmp/ck-acc8"
within "--accumulate 4 at P = 2 against P = 8 after 100 steps" "$(ckpt_diff "$tmp/ck-acc2" "$tmp/ck-acc8")" 1e-5
grep -q "2 ranks x batch 4 x 4 micro-batches = 32 per step" "$tmp/acc2.out" ||
  { echo "FAIL: the log does not say the split"; fails=$((fails + 1)); }
/usr/bin/python3 - "$tmp/acc2.trace.json" "$tmp/acc2.out" <<'PY' || fails=$((fails + 1))
import json, re, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
buckets = int(re.search(r"allreduce, (\d+) buckets?", open(sys.argv[2]).read()).group(1))
colls = [e for e in ev if e.get("ph") == "X" and e.get("pid") == 0 and e.get("cat") == "collective"]
steps = [e for e in ev if e.get("ph") == "X" and e.get("pid") == 0 and str(e.get("name", "")).startswith("step ")]
assert buckets > 1 and len(steps) == 100, (buckets, len(steps))
assert len(colls) == 100 * buckets, f"{len(colls)} collectives for 100 steps of {buckets} buckets: not one exchange a step"
print(f"ok: one exchange per step: {len(colls)} collectives for 100 steps of {buckets} buckets")
PY

# --global-batch 768 (4096 samples: 5 steps an epoch): straight at P = 4;
# stopped at step 8 at P = 4 and resumed at P = 3, and at P = 2.
gb=(--global-batch 768 --batch 64 --max-steps 20 --checkpoint-every 4)
run gb4 4 "${gb[@]}" --checkpoint-dir "$tmp/ck-gb4"
for p in 3 2; do
  run "gb-stop$p" 4 --global-batch 768 --batch 64 --max-steps 8 --checkpoint-dir "$tmp/ck-gb$p"
  run "gb-resume$p" "$p" "${gb[@]}" --checkpoint-dir "$tmp/ck-gb$p"
  within "--global-batch 768 stopped at P = 4, resumed at P = $p" "$(ckpt_diff "$tmp/ck-gb4" "$tmp/ck-gb$p")" 1e-5
  grep -q "the same global batch, samples in each step and schedule" "$tmp/gb-resume$p.out" ||
    { echo "FAIL: the resumed log at P = $p does not say the global batch was kept"; grep -i "continues" "$tmp/gb-resume$p.out"; fails=$((fails + 1)); }
done
grep -q "3 ranks x batch 64 x 4 micro-batches = 768 per step" "$tmp/gb-resume3.out" ||
  { echo "FAIL: P = 3's split"; fails=$((fails + 1)); }
expect_error 2 "--global-batch 500 cannot be split over 3 ranks" -- \
  "${MPIEXEC:-mpiexec}" -n 3 "${MPI_FLAGS[@]}" "$LPSGD" train "${common[@]}" --global-batch 500 --max-steps 2

# --clip-grad-norm: one global norm on P = 1 and P = 2; and it engaged.
run clip1 1 --batch 64 --max-steps 30 --eval-every 10 --clip-grad-norm 0.05
run clip2 2 --batch 32 --max-steps 30 --eval-every 10 --clip-grad-norm 0.05
run noclip2 2 --batch 32 --max-steps 30 --eval-every 10
python3 "$here/metrics_compare.py" "$tmp/clip1.jsonl" "$tmp/clip2.jsonl" || fails=$((fails + 1))
if python3 "$here/metrics_compare.py" "$tmp/clip2.jsonl" "$tmp/noclip2.jsonl" >/dev/null; then
  echo "FAIL: --clip-grad-norm 0.05 changed nothing (it never engaged)"; fails=$((fails + 1))
else
  echo "ok: --clip-grad-norm 0.05 changes the run"
fi

for bad in "--accumulate 0" "--global-batch -5" "--clip-grad-norm -1" "--global-batch 64 --accumulate 2"; do
  read -r -a b <<<"$bad"
  expect_error 2 "(accumulate|global-batch|clip-grad-norm)" -- "$LPSGD" train "${common[@]}" "${b[@]}" --max-steps 2
done
finish
