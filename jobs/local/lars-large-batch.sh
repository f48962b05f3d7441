#!/usr/bin/env bash
# Large-batch training: the MLP at a global batch of 8,192 on 2 ranks (with
# gradient accumulation), LARS (jobs/configs/fmnist-mlp-lars8k.ini) against
# momentum SGD at the learning rate of jobs/configs/fmnist-mlp.ini scaled
# linearly with the batch (0.05 x 8192 / 128 = 3.2), the same schedule
# otherwise; test accuracy after every epoch, both curves in one plot.
#
#   jobs/local/lars-large-batch.sh [--out runs/lars-large-batch]
# Writes DIR/lars.jsonl, DIR/sgd.jsonl (lpsgd --metrics) and DIR/lars-vs-sgd.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/mpi.sh
. tools/mpi.sh
build=$(lpsgd_build_dir)
out=runs/lars-large-batch
while (($#)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "lars-large-batch.sh: error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x $build/bin/lpsgd ]] || { echo "lars-large-batch.sh: error: $build/bin/lpsgd missing (tools/setup.sh)" >&2; exit 2; }
[[ -f data/fashion-mnist.h5 ]] || datasets/fashion-mnist.sh --lpsgd "$build/bin/lpsgd"
mkdir -p "$out"
rm -f "$out/lars.jsonl" "$out/sgd.jsonl"
lpsgd_mpi_launcher "$build" 2
run() {  # NAME train options...
  local name=$1; shift
  "${MPIRUN[@]}" -n 2 "$build/bin/lpsgd" train "$@" --progress off --metrics "$out/$name.jsonl" \
    </dev/null >"$out/$name.log" 2>&1 ||
    { echo "lars-large-batch.sh: error: $name failed:" >&2; tail -3 "$out/$name.log" >&2; exit 1; }
  grep '^lpsgd: done' "$out/$name.log"
}
run lars --config jobs/configs/fmnist-mlp-lars8k.ini
run sgd --config jobs/configs/fmnist-mlp.ini --global-batch 8192 --batch 512 --lr 3.2 --warmup-steps 10
/usr/bin/python3 - "$out" <<'PY'
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out = sys.argv[1]
fig, ax = plt.subplots(figsize=(6, 4))
for name, label in (("lars", "LARS, lr 1.5, eta 0.01, no warm-up"), ("sgd", "momentum SGD, lr 3.2 (0.05 x 8192/128)")):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if l.strip()]
    ax.plot([r["epoch"] for r in rows], [r["test_acc"] for r in rows], marker="o", label=label)
    print(f"{name}: test accuracy by epoch " + ", ".join(f"{r['test_acc']:.4f}" for r in rows))
ax.set_xlabel("epoch (7 steps of 8,192 samples each)")
ax.set_ylabel("test accuracy")
ax.set_ylim(0, 1)
ax.grid(alpha=0.3)
ax.axhline(0.88, color="grey", linestyle="--", linewidth=1, label="0.88 (aimed for)")
ax.set_title("MLP, Fashion-MNIST, global batch 8,192 (2 ranks x 512 x 8)", fontsize=10)
ax.legend()
fig.tight_layout()
fig.savefig(f"{out}/lars-vs-sgd.png", dpi=120)
print(f"wrote {out}/lars-vs-sgd.png")
PY
