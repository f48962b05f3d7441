#!/usr/bin/env bash
# One prepared run on a GPU machine (written for one H200 and 16 cores):
# configure and build with CUDA for sm_90, run the gpu tests, then measure and
# print one table:
#   - device-to-device copy bandwidth (the ceiling) and reduce_add bandwidth,
#     both counting bytes read + written;
#   - LP allreduce bus bandwidth with 2 and 4 ranks sharing the GPU, 64 and
#     256 MiB, blocks of 4 and 16 MiB (lpsgd bench --device cuda --check);
#   - forward+backward samples/s of an MLP and of LeNet on the GPU;
#   - lpsgd train samples/s, when the train command and its config exist.
# Every step has its own time limit and all of them share a budget of 450 s
# (DEVICE_CHECK_BUDGET_S), so the run ends well inside 8 minutes.
# Exit status: 0 when the build, the gpu tests and every check passed.
#
#   tests/gpu/device-check.sh [build-dir]      (default: build-gpu)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
B=${1:-build-gpu}
LOG=$B-logs
mkdir -p "$LOG"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun --oversubscribe --bind-to none)
T0=$SECONDS
failed=()
BUDGET=${DEVICE_CHECK_BUDGET_S:-450}  # all steps together, seconds
step() { echo "== $* [$((SECONDS - T0)) s]"; }
# lim CAP: a step's time limit, CAP or what is left of the budget (at least 5 s).
lim() { local left=$((BUDGET - (SECONDS - T0))); ((left < 5)) && left=5; echo $((left < $1 ? left : $1)); }
fail() { echo "FAIL: $*"; failed+=("$*"); }
# show LOGFILE: the end of a log after a failure
show() { echo "--- last lines of $1:"; tail -n 40 "$1"; }

step "GPU"
timeout "$(lim 20)" nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || fail "nvidia-smi"

step "configure ($B, CUDA on, sm_90)"
if ! timeout "$(lim 90)" cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DLPSGD_CUDA=ON \
     -DCMAKE_CUDA_ARCHITECTURES=90 >"$LOG/configure.log" 2>&1; then
  show "$LOG/configure.log"; echo "configure failed: nothing else can run"; exit 1
fi
grep -q '^#define LPSGD_HAVE_CUDA 1' "$B/generated/lpsgd/config.hpp" ||
  { echo "configure did not enable CUDA (nvcc not found?): nothing else can run"; exit 1; }

step "build (-j16)"
targets=(lpsgd test_gpu_device test_gpu_kernels test_gpu_model test_collectives
         bench_gpu_memory bench_nn_step)
if ! timeout "$(lim 240)" cmake --build "$B" -j16 --target "${targets[@]}" >"$LOG/build.log" 2>&1; then
  show "$LOG/build.log"; echo "build failed: nothing else can run"; exit 1
fi

step "gpu tests (ctest -L gpu)"
timeout "$(lim 200)" ctest --test-dir "$B" -L gpu -j8 --output-on-failure >"$LOG/ctest.log" 2>&1
rc=$?
grep -E "tests passed|Test +#|Skipped|Failed|Timeout" "$LOG/ctest.log" | sed 's/^/  /'
if ((rc != 0)); then show "$LOG/ctest.log"; fail "gpu tests (ctest rc $rc)"; fi
if grep -q "(Skipped)" "$LOG/ctest.log"; then fail "gpu tests skipped on a GPU machine: no usable GPU?"; fi

step "memory bandwidth"
copy_gbs=n/a add_gbs=n/a
if timeout "$(lim 60)" "$B/bin/bench_gpu_memory" cuda 256 50 >"$LOG/memory.log" 2>&1; then
  sed 's/^/  /' "$LOG/memory.log"
  copy_gbs=$(sed -n 's/^copy_gbs=\([0-9.]*\) .*/\1/p' "$LOG/memory.log")
  add_gbs=$(sed -n 's/.*reduce_add_gbs=\([0-9.]*\).*/\1/p' "$LOG/memory.log")
else
  show "$LOG/memory.log"; fail "bench_gpu_memory"
fi

# busbw of LP allreduce rows at SIZE (e.g. 64M) in a bench log; checks #wrong.
busbw() { awk -v s="$2" '$1 == s && $5 == "lp" { print $9; exit }' "$1"; }
# The cost model's block sizes are calibrated for CPU links; on the GPU each
# block costs kernel launches, so measure with large blocks.
declare -A bus
for P in 2 4; do
  for blk in 4M 16M; do
    step "LP allreduce, $P ranks on the GPU, block $blk"
    log="$LOG/bench-p$P-$blk.log"
    if timeout "$(lim 60)" "${MPIRUN[@]}" -np "$P" "$B/bin/lpsgd" bench --device cuda \
         --op allreduce --algo lp --block "$blk" -b 64M -e 256M -f 4 -n 10 -w 3 --check \
         </dev/null >"$log" 2>&1; then
      grep -E "^#|^ " "$log" | sed 's/^/  /'
    else
      show "$log"; fail "lpsgd bench --device cuda, P=$P, block $blk"
    fi
    grep -q "wrong elements in total: 0" "$log" || fail "bench P=$P block $blk: results not verified"
    bus[$P,64M,$blk]=$(busbw "$log" 64M); bus[$P,256M,$blk]=$(busbw "$log" 256M)
  done
done

step "forward+backward on the GPU"
mlp=n/a cnn=n/a
if timeout "$(lim 60)" "$B/bin/bench_nn_step" mlp:784-512-256-10 256 200 cuda >"$LOG/mlp.log" 2>&1; then
  mlp=$(sed -n 's/.* \([0-9]*\) samples\/s.*/\1/p' "$LOG/mlp.log"); sed 's/^/  /' "$LOG/mlp.log"
else show "$LOG/mlp.log"; fail "bench_nn_step mlp"; fi
if timeout "$(lim 60)" "$B/bin/bench_nn_step" cnn:lenet 128 50 cuda >"$LOG/cnn.log" 2>&1; then
  cnn=$(sed -n 's/.* \([0-9]*\) samples\/s.*/\1/p' "$LOG/cnn.log"); sed 's/^/  /' "$LOG/cnn.log"
else show "$LOG/cnn.log"; fail "bench_nn_step cnn"; fi

# ---- TRAINING (runs only once `lpsgd train` exists and has its config) ----
step "lpsgd train --device cuda"
train="skipped"
cfg=jobs/configs/fmnist-mlp.ini
if [[ ! -f $cfg ]]; then
  train="skipped: $cfg does not exist"
elif timeout "$(lim 90)" "$B/bin/lpsgd" train --device cuda --config "$cfg" --max-steps 200 \
       </dev/null >"$LOG/train.log" 2>&1; then
  tail -n 5 "$LOG/train.log" | sed 's/^/  /'
  train=$(grep -Eo '[0-9.]+ samples/s' "$LOG/train.log" | tail -n 1)
  train=${train:-"ran (see $LOG/train.log)"}
elif grep -q "not built yet" "$LOG/train.log"; then
  train="skipped: lpsgd train is not built yet"
else
  show "$LOG/train.log"; fail "lpsgd train --device cuda"; train="failed"
fi

pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.0f%%", 100 * a / b; else print "n/a" }'; }
step "summary"
printf '\n%-52s %14s  %s\n' "measure" "value" "vs copy bandwidth (target)"
printf '%-52s %14s\n' "device-to-device copy, 256 MiB (GB/s, r+w)" "$copy_gbs"
printf '%-52s %14s  %s (>= 80%%)\n' "reduce_add, 256 MiB (GB/s, r+w)" "$add_gbs" "$(pct "$add_gbs" "$copy_gbs")"
for P in 2 4; do
  for S in 64M 256M; do
    for blk in 4M 16M; do
      v=${bus[$P,$S,$blk]:-n/a}
      target=""; [[ $S == 256M ]] && target=" (>= 70%)"
      printf '%-52s %14s  %s%s\n' "LP allreduce busbw P=$P $S block $blk (GB/s)" "$v" \
        "$(pct "$v" "$copy_gbs")" "$target"
    done
  done
done
printf '%-52s %14s\n' "MLP 784-512-256-10 fwd+bwd, batch 256 (samples/s)" "$mlp"
printf '%-52s %14s\n' "LeNet fwd+bwd, batch 128 (samples/s)" "$cnn"
printf '%-52s %14s\n' "lpsgd train fmnist-mlp, 200 steps" "$train"
echo
echo "total $((SECONDS - T0)) s"
if ((${#failed[@]})); then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "device check passed"
