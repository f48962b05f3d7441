#!/usr/bin/env bash
# Step time of --precision fp32 against bf16 at one rank, one process, on the
# Fashion-MNIST configs (MLP batch 128, cnn:lenet batch 64), beside a baseline
# lpsgd (another build, e.g. main's, for "fp32 no slower than today"). Runs
# are interleaved (drift hits all alike) and repeated; prints every run and
# the medians of samples/s and ms per step from `lpsgd train`'s done line, and
# the medians of the per-round ratios (a round's runs are seconds apart, so
# the ratios see less of the shared machine's drift than the medians do).
#
#   jobs/local/precision-bench.sh [--repeat R] [--base DIR/lpsgd] [--lpsgd DIR/lpsgd]
#                                 [--data F.h5]
set -euo pipefail
cd "$(dirname "$0")/../.."
repeat=3 base="" lpsgd=build/bin/lpsgd data=data/fashion-mnist.h5
while (($#)); do
  case $1 in
    --repeat) repeat=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --lpsgd) lpsgd=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    *) echo "precision-bench.sh: error: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ -f $data ]] || { echo "precision-bench.sh: error: no $data (datasets/fashion-mnist.sh)" >&2; exit 2; }
grep -m1 "model name" /proc/cpuinfo
"$lpsgd" --version | grep -E "^(compute|precision):"

# name|binary|options (the LR schedule and the rest from the configs)
# shellcheck disable=SC2034  # read through a nameref below
mlp=(--config jobs/configs/fmnist-mlp.ini --batch 128 --max-steps 600)
# shellcheck disable=SC2034  # read through a nameref below
cnn=(--config jobs/configs/fmnist-cnn.ini --batch 64 --max-steps 60)
cases=()
for m in mlp cnn; do
  [[ -n $base ]] && cases+=("$m base fp32|$base|$m|")
  cases+=("$m fp32|$lpsgd|$m|--precision fp32" "$m bf16|$lpsgd|$m|--precision bf16")
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((r = 0; r < repeat; r++)); do
  for c in "${cases[@]}"; do
    IFS='|' read -r name bin model opts <<<"$c"
    declare -n o=$model
    # shellcheck disable=SC2086  # opts is a word list
    line=$("$bin" train "${o[@]}" --data "$data" --eval-every 0 --progress off $opts 2>&1 |
      grep '^lpsgd: done') || { echo "run '$name' failed" >&2; exit 1; }
    unset -n o
    sps=${line##*samples_per_s=}
    echo "$name|$sps|$r" >>"$tmp/runs"
    echo "round $r: $name: $sps samples/s"
  done
done
echo "case | samples/s (median of $repeat) | step ms | runs"
for c in "${cases[@]}"; do
  IFS='|' read -r name _ model _ <<<"$c"
  batch=128; [[ $model == cnn ]] && batch=64
  grep "^$name|" "$tmp/runs" | cut -d'|' -f2 | sort -g |
    awk -v n="$name" -v b="$batch" '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2;
      s = ""; for (i = 1; i <= NR; i++) s = s (i > 1 ? ", " : "") sprintf("%.0f", v[i]);
      printf "%s | %.0f | %.2f | %s\n", n, m, 1000 * b / m, s}'
done
# Per-round ratios: bf16 over fp32, and fp32 over the baseline build.
echo "ratio | per round | median"
for m in mlp cnn; do
  for pair in "$m bf16|$m fp32" "$m fp32|$m base fp32"; do
    IFS='|' read -r num den <<<"$pair"
    grep -q "^$den|" "$tmp/runs" || continue
    awk -F'|' -v a="$num" -v b="$den" '$1 == a {x[$3] = $2} $1 == b {y[$3] = $2}
      END {n = 0; for (r in x) if (r in y) v[++n] = x[r] / y[r];
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) {t = v[i]; v[i] = v[j]; v[j] = t}
        s = ""; for (i = 1; i <= n; i++) s = s (i > 1 ? ", " : "") sprintf("%.2f", v[i]);
        m = n % 2 ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2;
        printf "%s / %s | %s | %.2fx\n", a, b, s, m}' "$tmp/runs"
  done
done
