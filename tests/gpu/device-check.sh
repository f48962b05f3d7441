#!/usr/bin/env bash
# The whole GPU check in one prepared command, for a lent GPU machine (one
# H200, 16 cores, CUDA, a compiler, CMake, ninja and Python; no MPI, HDF5,
# Boost, BLAS, GoogleTest, xxHash or oneDNN: tools/gpu-kit.sh brings those).
#
#   tests/gpu/device-check.sh [--kit DIR] [--out DIR] [--budget SECONDS] [--build DIR]
#     --kit     the folder tools/gpu-kit.sh made (gpu-kit); without it the
#               machine's own libraries are used
#     --out     results: summary.md, steps.tsv, the raw files, logs/ (default
#               runs/device-check; also the unpacked kit and the data)
#     --budget  all steps together, seconds (default 450: the run ends well
#               inside 8 minutes); each step also has its own cap
#
# Steps, each logged and recorded in OUT/steps.tsv as ok, FAILED, "no GPU" or
# skipped; a failed step does not stop the ones that do not need it:
#   set-up from the kit; configure (CUDA for sm_90, cuDNN from the toolkit or
#   from pip's nvidia-cudnn); build; the gpu tests (one at a time: they share
#   the GPU); device-to-device copy and reduce_add bandwidth; LP allreduce bus
#   bandwidth for 2 and 4 ranks sharing the GPU at 64 and 256 MiB over CUDA
#   IPC and over staged MPI links, each beside a copy by every rank in the same
#   run; per-layer forward/backward on the GPU; MLP and LeNet training on
#   synthetic data, 1 and 2 ranks on the GPU, each 2-rank run's loss
#   trajectory against the same run on the CPU (1e-4, as the equivalence tests);
#   --precision bf16 on the GPU: per-layer times, MLP and LeNet training at
#   P = 1, and LeNet twice at P = 2 (the same final checksum, every layer
#   counted as bf16 by the training log);
#   CPU training of the MLP at P = 1, 2, 4, 8 (samples/s, communication share).
# Without a usable GPU the GPU steps report "no GPU" and the rest still run
# (tests/gpu/rehearse.sh checks that much here). Exit status: 0 when no step
# failed; otherwise 1, and the failed steps are named last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD

kit="" out=runs/device-check budget=450 B=build-gpu
while (($#)); do
  case $1 in
    --kit) kit=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --build) B=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "device-check.sh: error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out/logs" || exit 1
OUT=$(cd "$out" && pwd)
LOG=$OUT/logs
: >"$OUT/steps.tsv"
T0=$SECONDS
failed=()

step() { echo "== $* [$((SECONDS - T0)) s]"; }
# record NAME STATUS [DETAIL]
record() { printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >>"$OUT/steps.tsv"; [[ $2 == FAILED ]] && failed+=("$1"); return 0; }
# lim CAP: a step's time limit: CAP, or what is left of the budget (at least 5 s).
lim() { local left=$((budget - (SECONDS - T0))); ((left < 5)) && left=5; echo $((left < $1 ? left : $1)); }
show() { echo "--- last lines of $1:"; tail -n 30 "$1"; }
# run NAME CAP LOGFILE CMD...: one step; records ok or FAILED.
run() {
  local name=$1 cap=$2 log=$3 rc; shift 3
  timeout "$(lim "$cap")" "$@" >"$log" 2>&1 </dev/null
  rc=$?
  if ((rc == 0)); then
    record "$name" ok
    return 0
  fi
  show "$log"
  record "$name" FAILED "exit $rc$( ((rc == 124)) && echo ' (time limit)'), see logs/$(basename "$log")"
  return 1
}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PRTE_MCA_ras_base_oversubscribe=1
export OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun --oversubscribe --bind-to none)

# ---- the machine -----------------------------------------------------------------
step "machine"
gpu=0
if command -v nvidia-smi >/dev/null && timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version \
     --format=csv,noheader >"$LOG/gpu.txt" 2>&1 && [[ -s $LOG/gpu.txt ]]; then
  gpu=1
  record gpu ok "$(head -n 1 "$LOG/gpu.txt")"
else
  record gpu "no GPU" "nvidia-smi: $(head -c 200 "$LOG/gpu.txt" 2>/dev/null | tr '\n' ' ')"
fi
cores=$(nproc)
echo "  $(head -n 1 "$LOG/gpu.txt" 2>/dev/null || echo 'no GPU'); $cores cores; $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown OS}")"

# ---- set-up from the kit -----------------------------------------------------------
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DLPSGD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
if [[ -n $kit ]]; then
  step "kit"
  K=$OUT/kit
  if [[ ! -f $kit/kit.tar.xz ]]; then
    record kit FAILED "no $kit/kit.tar.xz (make it with tools/gpu-kit.sh)"
    echo "nothing can be built without the kit"; exit 1
  fi
  rm -rf "$K"
  if ! { mkdir -p "$K" && tar -xJf "$kit/kit.tar.xz" -C "$K"; }; then
    record kit FAILED "unpacking $kit/kit.tar.xz"; exit 1
  fi
  record kit ok "$(du -sm "$K" | cut -f1) MiB unpacked"
  export PATH=$K/openmpi/bin:$PATH
  cmake_args+=("-DCMAKE_PREFIX_PATH=$K/prefix" "-DMPI_HOME=$K/openmpi"
               "-DMPIEXEC_EXECUTABLE=$K/openmpi/bin/mpirun" "-DHDF5_ROOT=$K/prefix"
               "-DBOOST_ROOT=$K/prefix" -DBoost_NO_BOOST_CMAKE=ON
               -DBoost_NO_SYSTEM_PATHS=ON "-DGTEST_ROOT=$K/prefix")
fi
# cuDNN: beside the CUDA toolkit, or PyTorch's (pip's nvidia-cudnn).
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cuda_root=$(dirname "$(dirname "$(readlink -f "$nvcc_bin")")")
if [[ ! -f $cuda_root/include/cudnn.h ]]; then
  cudnn_dir=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.dirname(c.__file__) if c.__file__ else list(c.__path__)[0])' 2>/dev/null)
  if [[ -n $cudnn_dir && -f $cudnn_dir/include/cudnn.h ]]; then
    lib=$(find "$cudnn_dir/lib" -name 'libcudnn.so*' | sort | head -n 1)
    cmake_args+=("-DCUDNN_INCLUDE_DIR=$cudnn_dir/include" "-DCUDNN_LIBRARY=$lib")
    export LD_LIBRARY_PATH=$cudnn_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "  cuDNN from $cudnn_dir"
  fi
fi

# ---- configure and build ---------------------------------------------------------------
step "configure ($B)"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if ! run configure 120 "$LOG/configure.log" cmake -S . -B "$B" "${gen[@]}" "${cmake_args[@]}"; then
  echo "configure failed: nothing else can run"; tests/gpu/summary.py "$OUT"; exit 1
fi
grep -q '^#define LPSGD_HAVE_CUDA 1' "$B/generated/lpsgd/config.hpp" ||
  record configure FAILED "CUDA not enabled (nvcc not found?)"
echo "  $(grep -E '#define LPSGD_HAVE_(CUDA|CUDNN|ONEDNN) ' "$B/generated/lpsgd/config.hpp" | awk '{printf "%s=%s ", $2, $3}')"

step "build (-j$cores)"
if ! run build 300 "$LOG/build.log" cmake --build "$B" -j "$cores"; then
  echo "build failed: nothing else can run"; tests/gpu/summary.py "$OUT"; exit 1
fi
L=$ROOT/$B/bin/lpsgd
"$L" --version | sed 's/^/  /'

# ---- gpu tests ---------------------------------------------------------------------------
step "gpu tests (ctest -L gpu, one at a time)"
timeout "$(lim 200)" ctest --test-dir "$B" -L gpu --output-on-failure >"$LOG/ctest-gpu.log" 2>&1
rc=$? skipped=$(grep -c "(Skipped)" "$LOG/ctest-gpu.log")
if ((rc != 0)); then
  show "$LOG/ctest-gpu.log"; record gpu-tests FAILED "ctest exit $rc, see logs/ctest-gpu.log"
elif ((skipped && gpu)); then
  record gpu-tests FAILED "$skipped tests skipped on a machine with a GPU"
elif ((skipped)); then
  record gpu-tests "no GPU" "$skipped tests skipped"
else
  record gpu-tests ok "$(grep -o '[0-9]* tests passed.*' "$LOG/ctest-gpu.log")"
fi
grep -E "tests passed|Skipped|Failed|\*\*\*" "$LOG/ctest-gpu.log" | sed 's/^/  /'

# ---- GPU measurements ----------------------------------------------------------------
gpu_step() {  # gpu_step NAME CAP LOGFILE CMD...: run() where there is a GPU, else "no GPU"
  if ((gpu)); then run "$@"; else record "$1" "no GPU"; return 1; fi
}
step "memory bandwidth"
gpu_step memory 60 "$LOG/memory.log" "$B/bin/bench_gpu_memory" cuda 256 50 &&
  cp "$LOG/memory.log" "$OUT/memory.txt"

for links in ipc mpi; do
  for P in 2 4; do
    step "LP allreduce, $P ranks sharing the GPU, $links links"
    extra=()
    [[ $links == mpi ]] && extra=(--links mpi)
    # GPU blocks cost kernel launches: large blocks, not the CPU-calibrated model's.
    gpu_step "bench-p$P-$links" 90 "$LOG/bench-p$P-$links.log" "${MPIRUN[@]}" -np "$P" "$L" bench \
      --device cuda --op allreduce --algo lp --block 8M -b 64M -e 256M -f 4 -n 10 -w 3 --floor \
      --check "${extra[@]}" --json "$OUT/bench-p$P-$links.json" &&
      grep -E "^ " "$LOG/bench-p$P-$links.log" | sed 's/^/  /'
  done
done

step "per-layer forward and backward on the GPU"
gpu_step layers-gpu 90 "$LOG/layers-gpu.log" "$B/bin/bench_nn_step" --device cuda --batch 64,256 --steps 30
step "per-layer forward and backward on the GPU, bf16"
gpu_step layers-gpu-bf16 60 "$LOG/layers-gpu-bf16.log" "$B/bin/bench_nn_step" --device cuda \
  --batch 64,256 --steps 30 --precision bf16

# ---- training ------------------------------------------------------------------------
step "synthetic data"
data=$OUT/synth.h5
run data 60 "$LOG/data.log" "$L" data synth --out "$data" --samples 16384 --test-samples 1024 \
  --shape 1,28,28 --classes 10 --seed 1
# [BATCH=B] train NAME DEVICE MODEL P STEPS [options]: metrics in OUT/train-NAME.jsonl
train() {
  local name=$1 device=$2 model=$3 np=$4 steps=$5; shift 5
  local spec=mlp:784-512-256-10 batch=${BATCH:-128} lr=0.05
  [[ $model == cnn ]] && spec=cnn:lenet batch=${BATCH:-64} lr=0.02
  local runner=(gpu_step)
  [[ $device == cpu ]] && runner=(run)
  "${runner[@]}" "train-$name" 120 "$LOG/train-$name.log" "${MPIRUN[@]}" -np "$np" "$L" train \
    --data "$data" --model "$spec" --device "$device" --batch "$batch" --lr "$lr" --momentum 0.9 \
    --weight-decay 1e-4 --max-steps "$steps" --epochs 100 --seed 7 --progress off \
    --metrics "$OUT/train-$name.jsonl" "$@"
}
if [[ -f $data ]]; then
  step "training on the GPU"
  train gpu-mlp-p1 cuda mlp 1 400 --eval-every 0
  train gpu-mlp-p2 cuda mlp 2 400 --eval-every 0
  train gpu-cnn-p1 cuda cnn 1 200 --eval-every 0
  train gpu-cnn-p2 cuda cnn 2 200 --eval-every 0
  step "GPU against CPU: 2 ranks, 50 steps, losses every 10"
  for model in mlp cnn; do
    train "eq-gpu-$model" cuda "$model" 2 50 --eval-every 10 &&
      train "eq-cpu-$model" cpu "$model" 2 50 --eval-every 10 &&
      if python3 tests/e2e/metrics_compare.py --rtol 1e-4 "$OUT/train-eq-cpu-$model.jsonl" \
           "$OUT/train-eq-gpu-$model.jsonl" >"$LOG/compare-$model.log" 2>&1; then
        record "compare-$model GPU vs CPU, P=2" ok "$(tail -n 1 "$LOG/compare-$model.log")"
      else
        show "$LOG/compare-$model.log"
        record "compare-$model GPU vs CPU, P=2" FAILED "$(tail -n 1 "$LOG/compare-$model.log")"
      fi
    ((gpu)) || record "compare-$model GPU vs CPU, P=2" "no GPU"
  done
  step "bf16 on the GPU: P = 1, and LeNet twice at P = 2"
  train gpu-mlp-bf16-p1 cuda mlp 1 400 --eval-every 0 --precision bf16
  train gpu-cnn-bf16-p1 cuda cnn 1 200 --eval-every 0 --precision bf16
  # The same bf16 run twice ends with the same parameters, bit for bit, and
  # the log counts every Conv2d/Linear layer of LeNet (4) as bf16.
  if train bf16-cnn-a cuda cnn 2 50 --eval-every 0 --precision bf16 &&
     train bf16-cnn-b cuda cnn 2 50 --eval-every 0 --precision bf16; then
    sums=$(sed -n 's/.*final parameters: checksum \([0-9a-f]*\).*/\1/p' \
      "$LOG/train-bf16-cnn-a.log" "$LOG/train-bf16-cnn-b.log" | sort -u)
    layers=$(grep -c "precision bf16: 4 of 4 Conv2d/Linear layers multiply in bf16" \
      "$LOG/train-bf16-cnn-a.log")
    if [[ $(wc -w <<<"$sums") == 1 && $layers -ge 1 ]]; then
      record "compare-bf16 LeNet twice on the GPU, P=2" ok "checksum $sums both times; 4 of 4 layers bf16"
    else
      record "compare-bf16 LeNet twice on the GPU, P=2" FAILED \
        "checksums: $(tr '\n' ' ' <<<"$sums"); precision lines: $layers"
      grep -h "precision\|checksum" "$LOG/train-bf16-cnn-a.log" "$LOG/train-bf16-cnn-b.log" | sed 's/^/  /'
    fi
  fi
  ((gpu)) || record "compare-bf16 LeNet twice on the GPU, P=2" "no GPU"
  rm -f "$OUT"/train-bf16-cnn-*.jsonl
  step "MLP on the CPU, P = 1, 2, 4, 8"
  for P in 1 2 4 8; do
    BATCH=64 train "cpu-mlp-p$P" cpu mlp "$P" 400 --eval-every 0
  done
  rm -f "$OUT"/train-eq-*.jsonl  # compared above; OUT keeps few files
fi

step "summary"
echo
tests/gpu/summary.py "$OUT"
echo "total $((SECONDS - T0)) s; results in $OUT"
if ((${#failed[@]})); then
  printf 'device-check.sh: FAILED: %s\n' "${failed[*]}"
  exit 1
fi
((gpu)) || echo "device-check.sh: no GPU here: the GPU steps did not run; every other step passed"
((gpu)) && echo "device-check.sh: every step passed"
exit 0
