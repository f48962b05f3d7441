#!/usr/bin/env bash
# A multi-node Slurm cluster on one machine: 4 network namespaces
# (jobs/local/netns-cluster.sh, prefix lpsgds), one slurmd in each
# (jobs/local/slurm-cluster.sh --netns), slurmctld in node 0.
#   - sinfo sees 4 idle nodes; srun -N4 runs one task per namespace, each under
#     its node's host name and address;
#   - sbatch --nodes=4 jobs/slurm/train.sbatch: lpsgd's chain has 4 nodes, the
#     job COMPLETES, and its final parameters are bitwise those of the same P
#     with pretend nodes on one host (--ranks-per-node 1);
#   - stop and down leave no daemon, job process or namespace behind.
# Skips where namespaces or the Slurm cluster cannot be made (not root, no
# iproute2, Slurm or munge missing).
set -u
LPSGD=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
export LPSGD_NETNS_PREFIX=lpsgds
N=$root/jobs/local/netns-cluster.sh
S=$root/jobs/local/slurm-cluster.sh

skip() { echo "SKIP: $*"; exit 0; }
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# check WHAT CMD...: ok when CMD succeeds.
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }
# expect_check WHAT GOT WANT
expect_check() { if [[ $2 == "$3" ]]; then ok "$1"; else fail "$1: got '$2', want '$3'"; fi; }
[[ $(id -u) -eq 0 ]] || skip "namespaces and slurmd need root"
for b in ip tc nsenter unshare munged slurmctld slurmd sbatch; do
  command -v "$b" >/dev/null || skip "$b not installed (Debian: iproute2, util-linux, slurm-wlm, munge)"
done
ip netns add lpsgds-probe 2>/dev/null || skip "network namespaces cannot be made here"
ip netns del lpsgds-probe

# Nothing from an enclosing Slurm job may leak into the jobs submitted here.
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM|SBATCH|SRUN|SALLOC)_')
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d /tmp/lpsgd-e2e-nsslurm.XXXXXX)
chmod 0755 "$tmp"  # munged serves its socket only where everyone may reach it
export LPSGD_SLURM_DIR=$tmp/cluster
cleanup() {
  "$S" --netns stop >/dev/null 2>&1
  "$N" down >/dev/null 2>&1
  if ((fails)); then echo "(kept $tmp for inspection)"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
sl() { "$S" --netns exec "$@"; }

$N up --nodes 4 --rate 1gbit --topology switch >/dev/null || { echo "FAIL: netns-cluster.sh up"; exit 1; }
SECONDS=0
if ! "$S" --netns start; then echo "FAIL: slurm-cluster.sh --netns start"; exit 1; fi
echo "note: the Slurm cluster came up in $SECONDS s"

# ---- 4 nodes, one per namespace --------------------------------------------------------
nodes=$(sl sinfo -h -N -o '%N %t' | sort | tr '\n' ' ')
expect_check "sinfo: 4 idle nodes" "$nodes" \
  "lpsgds-n0 idle lpsgds-n1 idle lpsgds-n2 idle lpsgds-n3 idle "
# shellcheck disable=SC2016  # expanded by each task
tasks=$(sl srun -N4 -n4 bash -c 'echo "$SLURMD_NODENAME $(hostname) $(ip -4 -brief addr show eth0 | awk "{print \$3}")"' |
        sort | tr '\n' ' ')
expect_check "srun -N4: one task per namespace, each with its node's name and address" "$tasks" \
  "lpsgds-n0 lpsgds-n0 198.18.0.1/24 lpsgds-n1 lpsgds-n1 198.18.0.2/24 lpsgds-n2 lpsgds-n2 198.18.0.3/24 lpsgds-n3 lpsgds-n3 198.18.0.4/24 "

# ---- train.sbatch across the namespaces, against pretend nodes ------------------------
"$LPSGD" data synth --out "$tmp/d.h5" --samples 2048 --test-samples 256 --shape 1,8,8 --classes 4 \
  --seed 3 >/dev/null || { echo "FAIL: data synth"; exit 1; }
cat >"$tmp/tiny.ini" <<EOF
data = $tmp/d.h5
model = mlp:64-48-32-4
algo = lp
batch = 16
lr = 0.05
momentum = 0.9
seed = 7
epochs = 100
max-steps = 200
eval-every = 0
EOF
checksum() { sed -n 's/.*final parameters: checksum \([0-9a-f]*\).*/\1/p' "$1" | head -n 1; }
job_state() { sl scontrol show job -o "$1" 2>/dev/null | grep -o '\bJobState=[A-Z_]*' | cut -d= -f2; }
SECONDS=0
id=$(LPSGD=$LPSGD CONFIG=$tmp/tiny.ini RUN_DIR=$tmp/run sl sbatch --parsable --chdir="$tmp" \
     --nodes=4 --ntasks-per-node=1 --time=5 "$root/jobs/slurm/train.sbatch") || { echo "FAIL: sbatch"; exit 1; }
state=""
while ((SECONDS < 120)); do
  state=$(job_state "$id")
  [[ $state =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL)$ ]] && break
  sleep 0.5
done
out=$tmp/lpsgd-train-$id.out
check "train.sbatch --nodes=4 COMPLETED (got $state, $SECONDS s)" test "$state" = COMPLETED
check "its chain has 4 nodes: $(grep -m1 'chain:' "$out")" grep -q 'chain: P=4 nodes=4: \[0\] \[1\] \[2\] \[3\]' "$out"
"${MPIEXEC:-mpiexec}" -n 4 "${MPI_FLAGS[@]}" "$LPSGD" train --config "$tmp/tiny.ini" --ranks-per-node 1 \
  </dev/null >"$tmp/local.out" 2>&1
a=$(checksum "$out") b=$(checksum "$tmp/local.out")
if [[ -n $a && $a == "$b" ]]; then
  ok "Slurm over 4 namespaces == pretend nodes on one host (checksum $a); $(grep -o '[0-9.]* samples/s, comm wait [0-9.]*%' "$out" | tail -n 1)"
else
  fail "namespaces '$a', pretend nodes '$b'"; tail -n 8 "$out" "$tmp/local.out"
fi

# ---- nothing left ------------------------------------------------------------------------
check "slurm-cluster.sh --netns stop" "$S" --netns stop
"$N" down >/dev/null
left=$(pgrep -f "$LPSGD_SLURM_DIR" | wc -l)
expect_check "no daemon of the cluster left" "$left" 0
expect_check "no namespace left" "$(ip netns list | grep -c '^lpsgds-')" 0
finish
