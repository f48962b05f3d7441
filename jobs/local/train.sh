#!/usr/bin/env bash
# The main job, on this machine: set up, make the Fashion-MNIST dataset, and
# train the MLP config on 2 local ranks, printing progress, then where the
# metrics, the plot and the checkpoints went.
#
#   jobs/local/train.sh [CONFIG] [more lpsgd train options...]
#
# Environment: NP (ranks, default 2), RUN_DIR (default runs/<config>-<time>;
# point it at an earlier run's directory to resume that run), SKIP_SETUP=1 to
# skip tools/setup.sh when build/ is current, LPSGD_MPI=mpich to build and run
# with MPICH (build-mpich/) instead of Open MPI (build/).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/mpi.sh
. tools/mpi.sh
build=$(lpsgd_build_dir)

config=${1:-jobs/configs/fmnist-mlp.ini}
shift $(($# > 0 ? 1 : 0))
[[ -f $config ]] || { echo "train.sh: error: no config file '$config'" >&2; exit 2; }
np=${NP:-2}
run_dir=${RUN_DIR:-runs/$(basename "$config" .ini)-$(date +%Y%m%d-%H%M%S)}

[[ ${SKIP_SETUP:-0} == 1 ]] || tools/setup.sh
[[ -f data/fashion-mnist.h5 ]] || datasets/fashion-mnist.sh --lpsgd "$build/bin/lpsgd"

mkdir -p "$run_dir"
# More ranks than cores is allowed (slower, but it runs; unbound then); as root too.
lpsgd_mpi_launcher "$build" "$np"  # bound to cores where the ranks fit
launcher=("${MPIRUN[@]}" -n "$np")

echo "train.sh: $np ranks, config $config, outputs in $run_dir"
"${launcher[@]}" "$build/bin/lpsgd" train --config "$config" \
  --metrics "$run_dir/metrics.jsonl" --checkpoint-dir "$run_dir/checkpoints" --resume auto "$@"

jobs/plot/metrics.py "$run_dir/metrics.jsonl" --out "$run_dir/metrics.png" >/dev/null
echo "train.sh: metrics    $run_dir/metrics.jsonl"
echo "train.sh: plot       $run_dir/metrics.png"
echo "train.sh: checkpoint $("$build/bin/lpsgd" ckpt info "$run_dir/checkpoints" --json 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["path"])' 2>/dev/null || echo "(none)")"
