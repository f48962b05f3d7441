#!/usr/bin/env bash
# Every shell script of the project (jobs/, datasets/, tools/, tests/, the Slurm
# batch scripts included) parses (bash -n) and passes shellcheck.
set -u
cd "$(dirname "$0")/../.." || exit 1
mapfile -t files < <(find jobs datasets tools tests -type f \( -name '*.sh' -o -name '*.sbatch' \) | sort)
fails=0
# The scripts this test exists for must be among them, or the search is broken.
for want in jobs/local/slurm-cluster.sh jobs/local/resnet-accuracy.sh jobs/slurm/train.sbatch jobs/slurm/bench.sbatch \
    tools/setup.sh; do
  printf '%s\n' "${files[@]}" | grep -qxF "$want" || { echo "FAIL: $want not found"; fails=$((fails + 1)); }
done
for f in "${files[@]}"; do
  if bash -n "$f"; then echo "ok: bash -n $f"; else echo "FAIL: bash -n $f"; fails=$((fails + 1)); fi
done
if ! command -v shellcheck >/dev/null; then
  ((fails)) && exit 1
  echo "SKIP: shellcheck is not installed (Debian: apt-get install shellcheck)"
  exit 77
fi
# -x follows `source`; the scripts name what they source relative to themselves.
if shellcheck -x -P SCRIPTDIR "${files[@]}"; then
  echo "ok: shellcheck on ${#files[@]} scripts"
else
  echo "FAIL: shellcheck"; fails=$((fails + 1))
fi
if ((fails)); then echo "$fails check(s) failed"; exit 1; fi
echo "all checks passed"
