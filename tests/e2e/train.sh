#!/usr/bin/env bash
# lpsgd train end to end on a small synthetic dataset:
#   BSP equivalence: P = 1 (batch 128), P = 2 (64), P = 4 (32) give the same
#     loss curve over 50 steps (within 1e-4 relative), with allreduce and
#     reduce-bcast, and with every --algo;
#   determinism: the same run twice ends with bitwise identical parameters;
#   the same for cnn:lenet (oneDNN convolutions on the CPU): P = 1, 2, 4 on
#     one trajectory, and the same run twice bitwise;
#   the --trace timeline of a 4-rank run (trace_check.py);
#   --overlap on with a launch plan (slow links): the bits of --overlap off;
#   bad options and a dataset that does not fit the model: one error line.
set -u
LPSGD=$1
here=$(dirname "$0")
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

data=$tmp/synth.h5
"$LPSGD" data synth --out "$data" --samples 2048 --test-samples 256 --shape 1,8,8 \
  --classes 4 --seed 3 >/dev/null || { echo "FAIL: data synth"; exit 1; }

# shellcheck disable=SC2034  # read through train()'s nameref
common=(--data "$data" --model mlp:64-48-32-4 --max-steps 50 --epochs 100 --eval-every 1
        --lr 0.05 --momentum 0.9 --weight-decay 1e-4 --seed 7 --progress off --bucket-mb 0.004)
train() {  # [BASE=array] train NAME P [options...]: metrics in $tmp/NAME.jsonl
  local name=$1 np=$2; shift 2
  local -n base=${BASE:-common}
  # --algo lp unless given: the bits compared below are one algorithm's (auto,
  # the default, may choose anew on another calibration; resume.sh tests
  # auto's own promise).
  [[ " $* " == *" --algo "* ]] || set -- --algo lp "$@"
  if ! "${MPIEXEC:-mpiexec}" -n "$np" "${MPI_FLAGS[@]}" "$LPSGD" train "${base[@]}" \
       --metrics "$tmp/$name.jsonl" "$@" </dev/null >"$tmp/$name.out" 2>&1; then
    echo "FAIL: train $name (P=$np $*) exited non-zero:"; tail -5 "$tmp/$name.out"
    fails=$((fails + 1)); return 1
  fi
  grep -q '^lpsgd: done epochs=.* steps=50 test_acc=.* samples_per_s=' "$tmp/$name.out" \
    || { echo "FAIL: $name: no 'lpsgd: done' line"; fails=$((fails + 1)); }
}
compare() {
  python3 "$here/metrics_compare.py" "$@" || fails=$((fails + 1))
}

train p1 1 --batch 128
train p2 2 --batch 64 --step-trace "$tmp/trace/p2"
train p4 4 --batch 32 --trace "$tmp/p4.trace.json"
train p2-rb 2 --batch 64 --sync reduce-bcast
train p4-rb 4 --batch 32 --sync reduce-bcast --overlap off
compare "$tmp/p1.jsonl" "$tmp/p2.jsonl" "$tmp/p4.jsonl" "$tmp/p2-rb.jsonl" "$tmp/p4-rb.jsonl"

# The timeline of p4: every rank on one clock, spans nested, one collective
# per bucket per step (tests/e2e/trace_check.py).
/usr/bin/python3 "$here/trace_check.py" "$tmp/p4.trace.json" --ranks 4 --steps 50 || fails=$((fails + 1))

# The step trace of p2: a header and one line per step on each rank, waits
# within apply, one wait per bucket; steps.py reads both ranks.
for r in 0 1; do
  python3 - "$tmp/trace/p2.rank$r.tsv" <<'PY' || fails=$((fails + 1))
import sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0].split("\t")[:6] == ["step", "start_s", "data_ms", "compute_ms", "apply_ms", "wait_ms"], lines[0]
rows = [l.split("\t") for l in lines[1:]]
assert [int(r[0]) for r in rows] == list(range(1, 51)), "steps 1..50 expected"
nb = {len(r[6].split(",")) for r in rows}
assert len(nb) == 1 and nb.pop() > 1, f"one wait per bucket (several buckets) expected: {rows[0]}"
for r in rows:
    apply_ms, wait_ms = float(r[4]), float(r[5])
    assert 0 <= wait_ms <= apply_ms + 1e-3, f"wait outside apply: {r}"
    assert abs(sum(map(float, r[6].split(","))) - wait_ms) < 1e-2, f"bucket waits do not add up: {r}"
PY
done
if ! { "$here/../../jobs/plot/steps.py" "$tmp/trace/p2" --skip 5 --out "$tmp/steps.png" >"$tmp/steps.out" 2>&1 &&
        grep -q "^2 rank(s), 45 steps" "$tmp/steps.out" && grep -q "^exchange" "$tmp/steps.out" &&
        [[ -s $tmp/steps.png ]]; }; then
  echo "FAIL: jobs/plot/steps.py on the p2 trace:"; cat "$tmp/steps.out"; fails=$((fails + 1))
fi

# Every algorithm, on a chain of two pretend nodes (peer and MPI links).
algo_runs=()
for algo in mst be ring mpi auto; do
  train "p4-$algo" 4 --batch 32 --algo "$algo" --ranks-per-node 2 && algo_runs+=("$tmp/p4-$algo.jsonl")
done
compare "$tmp/p1.jsonl" "${algo_runs[@]}"

# The same configuration twice: bitwise identical final parameters.
train p4-again 4 --batch 32
compare --exact "$tmp/p4.jsonl" "$tmp/p4-again.jsonl"
train p2-rb-again 2 --batch 64 --sync reduce-bcast
compare --exact "$tmp/p2-rb.jsonl" "$tmp/p2-rb-again.jsonl"

# --overlap on (the default) over links the cost model finds slow (MPI links
# between pretend nodes of one rank, calibrated at 1 MB/s): the launch plan
# holds buckets back and the next forward completes the last step's updates.
# The same bits as --overlap backward and off, also with checkpoints between
# (each completes them first); and the timeline of such a run.
slow=$tmp/slow-links.ini
printf '%s\n' 'alpha_shm = 1e-06' 'beta_shm = 2e-10' 'alpha_mpi = 1e-04' 'beta_mpi = 1e-06' \
  'gamma = 2e-10' >"$slow"
# Evaluated once an epoch (every 16 steps), not after every step.
deferred_base=()
for ((i = 0; i < ${#common[@]}; i++)); do
  if [[ ${common[i]} == --eval-every ]]; then ((i++)); continue; fi
  deferred_base+=("${common[i]}")
done
deferred=(--batch 32 --ranks-per-node 1 --calibration "$slow")
if BASE=deferred_base train p4-defer 4 "${deferred[@]}" --trace "$tmp/p4-defer.trace.json"; then
  if grep -q "launch order: bucket" "$tmp/p4-defer.out"; then
    echo "ok: $(grep -o 'launch order: [^(]*' "$tmp/p4-defer.out")"
  else
    echo "FAIL: p4-defer: no launch plan that holds buckets back:"; grep "lpsgd:" "$tmp/p4-defer.out" | head -5
    fails=$((fails + 1))
  fi
  /usr/bin/python3 "$here/trace_check.py" "$tmp/p4-defer.trace.json" --ranks 4 --steps 50 --deferred ||
    fails=$((fails + 1))
fi
BASE=deferred_base train p4-backward 4 "${deferred[@]}" --overlap backward
BASE=deferred_base train p4-off 4 "${deferred[@]}" --overlap off
BASE=deferred_base train p4-defer-ckpt 4 "${deferred[@]}" --checkpoint-dir "$tmp/ckpt-defer" \
  --checkpoint-every 7
# Stopped at step 23 (mid-epoch, its tail completed for the checkpoint) and
# resumed: the straight run's bits; both halves plan and defer.
half=()
for ((i = 0; i < ${#deferred_base[@]}; i++)); do
  half+=("${deferred_base[i]}")
  [[ ${deferred_base[i]} == --max-steps ]] && { half+=(23); ((i++)); }
done
if "${MPIEXEC:-mpiexec}" -n 4 "${MPI_FLAGS[@]}" "$LPSGD" train "${half[@]}" --algo lp "${deferred[@]}" \
     --checkpoint-dir "$tmp/ckpt-resume" </dev/null >"$tmp/p4-defer-1st.out" 2>&1; then
  BASE=deferred_base train p4-defer-resumed 4 "${deferred[@]}" --checkpoint-dir "$tmp/ckpt-resume"
else
  echo "FAIL: the first half of p4-defer-resumed:"; tail -5 "$tmp/p4-defer-1st.out"; fails=$((fails + 1))
fi
final_sum() { sed -n 's/.*final parameters: checksum \([0-9a-f]*\).*/\1/p' "$tmp/$1.out"; }
for run in p4-defer-ckpt p4-defer-1st p4-defer-resumed; do
  [[ -f $tmp/$run.out ]] && ! grep -q "launch order: bucket" "$tmp/$run.out" &&
    { echo "FAIL: $run: no launch plan"; fails=$((fails + 1)); }
done
if grep -q "resuming from .*ckpt-0*23.h5" "$tmp/p4-defer-resumed.out" &&
   [[ -n $(final_sum p4-defer) && $(final_sum p4-defer-resumed) == "$(final_sum p4-defer)" ]]; then
  echo "ok: --overlap on, stopped at step 23 and resumed: checksum $(final_sum p4-defer) as straight"
else
  echo "FAIL: p4-defer stopped at 23 and resumed: checksum '$(final_sum p4-defer-resumed)', straight" \
    "'$(final_sum p4-defer)'"; fails=$((fails + 1))
fi
compare --exact "$tmp/p4-defer.jsonl" "$tmp/p4-backward.jsonl" "$tmp/p4-off.jsonl" "$tmp/p4-defer-ckpt.jsonl"

# cnn:lenet on small images (its convolutions and pooling run as oneDNN and
# hand-written plans; batch 8 per rank at P = 2 and 4 per rank at P = 4 give
# other plans than batch 16 at P = 1): one trajectory, and bitwise repeatable.
cnn_data=$tmp/synth-img.h5
"$LPSGD" data synth --out "$cnn_data" --samples 512 --test-samples 64 --shape 1,12,12 \
  --classes 10 --seed 5 >/dev/null || { echo "FAIL: data synth (images)"; exit 1; }
# shellcheck disable=SC2034  # read through train()'s nameref
cnn=(--data "$cnn_data" --model cnn:lenet --max-steps 50 --epochs 100 --eval-every 1 --lr 0.02
     --momentum 0.9 --weight-decay 1e-4 --seed 7 --progress off --bucket-mb 0.5)
BASE=cnn train cnn-p1 1 --batch 16 && BASE=cnn train cnn-p2 2 --batch 8 &&
  BASE=cnn train cnn-p4 4 --batch 4 &&
  compare "$tmp/cnn-p1.jsonl" "$tmp/cnn-p2.jsonl" "$tmp/cnn-p4.jsonl"
BASE=cnn train cnn-p2-again 2 --batch 8 && compare --exact "$tmp/cnn-p2.jsonl" "$tmp/cnn-p2-again.jsonl"

# One clear error on every rank for bad input.
mpi=("${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}")
expect_error 2 "model 'mlp:64-32-10' has 10 outputs but .* has 4 classes" -- \
  "${mpi[@]}" "$LPSGD" train --data "$data" --model mlp:64-32-10
expect_error 2 "does not fit|input" -- \
  "${mpi[@]}" "$LPSGD" train --data "$data" --model mlp:784-32-4
expect_error 2 "--sync must be allreduce or reduce-bcast" -- \
  "${mpi[@]}" "$LPSGD" train --data "$data" --model mlp:64-32-4 --sync tree
expect_error 2 "cannot open --step-trace file" -- \
  "$LPSGD" train --data "$data" --model mlp:64-32-4 --max-steps 1 --step-trace /proc/none/trace
expect_error 2 "--trace .*: cannot write in" -- \
  "$LPSGD" train --data "$data" --model mlp:64-32-4 --max-steps 1 --trace /proc/none/t.json
expect_error 2 "--data is required" -- "$LPSGD" train --model mlp:64-32-4
expect_error 2 "fewer than one global batch" -- \
  "$LPSGD" train --data "$data" --model mlp:64-32-4 --batch 4096
expect_error 2 "no such file|cannot open|does not exist" -- \
  "$LPSGD" train --data "$tmp/missing.h5"
finish
