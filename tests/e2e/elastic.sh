#!/usr/bin/env bash
# A job that loses a node and finishes on the nodes left: a Slurm cluster of 4
# network namespaces (jobs/local/netns-cluster.sh, prefix lpsgde; one slurmd
# each, jobs/local/slurm-cluster.sh --netns), jobs/slurm/train.sbatch with
# --nodes=3-4 and a config with --global-batch and periodic checkpoints.
#   - at a random step one node (1, 2 or 3, chosen at random) is lost: every
#     process in its namespace killed (slurmd, its rank) and its link down;
#   - every surviving rank ends within --comm-timeout, nothing hangs, Slurm
#     marks the node down, the job is requeued and resumes from the newest
#     checkpoint on 3 nodes with the same global batch, and COMPLETES;
#   - the logs tell the story: attempt 0 on 8 tasks (4 nodes), how far it got,
#     attempt 1 on 6 (3 nodes), resuming from which step, the global batch kept;
#   - no checkpoint is damaged (lpsgd ckpt verify), and the final parameters
#     equal, bit for bit, those of a run stopped at that same checkpoint and
#     resumed on 6 ranks (pretend nodes of 2) on one host.
# Skips where namespaces or the Slurm cluster cannot be made (not root, no
# iproute2, Slurm or munge missing).
#
# The same scenario on real data, for the record (docs/recipes.md):
#   ELASTIC_DATA=data/fashion-mnist.h5 ELASTIC_MODEL=mlp:784-512-256-10 \
#   ELASTIC_GLOBAL_BATCH=384 ELASTIC_STEPS=1000 ELASTIC_RATE=1gbit \
#   ELASTIC_EXTRA="schedule = cosine" tests/e2e/elastic.sh build/bin/lpsgd
# also trains the run uninterrupted on 8 ranks and prints both test accuracies.
set -u
LPSGD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
export LPSGD_NETNS_PREFIX=lpsgde
N=$root/jobs/local/netns-cluster.sh
S=$root/jobs/local/slurm-cluster.sh

skip() { echo "SKIP: $*"; exit 0; }
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }
[[ $(id -u) -eq 0 ]] || skip "namespaces and slurmd need root"
for b in ip tc nsenter unshare munged slurmctld slurmd sbatch; do
  command -v "$b" >/dev/null || skip "$b not installed (Debian: iproute2, util-linux, slurm-wlm, munge)"
done
ip netns add lpsgde-probe 2>/dev/null || skip "network namespaces cannot be made here"
ip netns del lpsgde-probe

while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM|SBATCH|SRUN|SALLOC)_')
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d /tmp/lpsgd-e2e-elastic.XXXXXX)
chmod 0755 "$tmp"  # munged serves its socket only where everyone may reach it
export LPSGD_SLURM_DIR=$tmp/cluster
cleanup() {
  "$S" --netns stop >/dev/null 2>&1
  "$N" down >/dev/null 2>&1
  if ((fails)); then echo "(kept $tmp for inspection)"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
sl() { "$S" --netns exec "$@"; }
SECONDS=0
$N up --nodes 4 --rate "${ELASTIC_RATE:-100mbit}" --topology switch >/dev/null || { echo "FAIL: netns-cluster.sh up"; exit 1; }
"$S" --netns start >/dev/null || { echo "FAIL: slurm-cluster.sh --netns start"; exit 1; }
# Every node idle first, so the job gets all four (--nodes=3-4 takes what is up).
while ((SECONDS < 30)) && [[ $(sl sinfo -h -N -o %t | grep -c '^idle$') -lt 4 ]]; do sleep 0.5; done
echo "note: the cluster came up in $SECONDS s: $(sl sinfo -h -N -o '%N %t' | tr '\n' ' ')"

data=${ELASTIC_DATA:-$tmp/d.h5}
[[ $data = /* ]] || data=$root/$data
if [[ -z ${ELASTIC_DATA:-} ]]; then
  "$LPSGD" data synth --out "$data" --samples 4096 --test-samples 256 --shape 1,8,8 --classes 4 \
    --seed 3 >/dev/null || { echo "FAIL: data synth"; exit 1; }
fi
steps=${ELASTIC_STEPS:-240}
# Two ranks a node (with --ntasks-per-node=1 Slurm 22.05 gives a node range
# its minimum): 48 samples a step on 8 ranks (6 each) or 6 (8 each); a step
# exchanges 330 KB over 100 Mbit/s links, so the loss lands mid-run.
cat >"$tmp/elastic.ini" <<EOF
data = $data
model = ${ELASTIC_MODEL:-mlp:64-256-256-4}
algo = lp
global-batch = ${ELASTIC_GLOBAL_BATCH:-48}
batch = 16
lr = 0.05
momentum = 0.9
seed = 7
epochs = 1000
max-steps = $steps
eval-every = 0
checkpoint-every = $((steps / 12))
keep = 100
comm-timeout = 5
progress-every = 0.2
${ELASTIC_EXTRA:-}
EOF
job_state() { sl scontrol show job -o "$1" 2>/dev/null | grep -o '\bJobState=[A-Z_]*' | cut -d= -f2; }
id=$(LPSGD=$LPSGD CONFIG=$tmp/elastic.ini RUN_DIR=$tmp/run sl sbatch --parsable --chdir="$tmp" \
     --nodes=3-4 --ntasks-per-node=2 --time=5 --signal=B:USR1@20 "$root/jobs/slurm/train.sbatch") || { echo "FAIL: sbatch"; exit 1; }
out=$tmp/lpsgd-train-$id.out
victim=$((1 + RANDOM % 3)) at=$((steps / 6 + RANDOM % (steps / 3)))
t0=$SECONDS
reached=0
while ((SECONDS - t0 < 60 * steps / 240)); do
  reached=$(grep -o 'step [0-9]*/' "$out" 2>/dev/null | tail -n 1 | tr -dc 0-9)
  ((${reached:-0} >= at)) && break
  [[ $(job_state "$id") =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT)$ ]] && break
  sleep 0.1
done
if ((${reached:-0} < at)); then
  fail "the job did not reach step $at within $((60 * steps / 240)) s (state $(job_state "$id"))"; tail -n 5 "$out"; finish
fi
# The node is lost: everything in its namespace killed, its link gone.
lost_at=$SECONDS
ip netns pids "lpsgde-n$victim" | xargs -r kill -9
$N link "$victim" down >/dev/null
ok "node lpsgde-n$victim lost at step $reached"
state=""
while ((SECONDS - lost_at < 110 * steps / 240)); do
  state=$(job_state "$id")
  [[ $state =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT)$ ]] && break
  sleep 0.5
done
echo "note: $((SECONDS - lost_at)) s from the loss to the job's end ($state)"
check "the job COMPLETED after losing a node (got $state)" test "$state" = COMPLETED
if [[ $state != COMPLETED ]]; then
  sl scontrol show job "$id" | grep -E 'JobState|Reason|NumNodes|NumTasks|BeginTime|Restarts'
  sl sinfo -N
fi
check "attempt 1 ran on 6 tasks (3 nodes): $(grep -m1 'attempt 0 ran on' "$out")" \
  grep -q 'attempt 0 ran on 8 tasks and reached step [0-9]*.*this attempt runs on 6' "$out"
resumed=$(sed -n 's/.*resuming from \([^:]*\): step \([0-9]*\),.*/\1 \2/p' "$out" | tail -n 1)
read -r ckpt step <<<"$resumed"
# The steps attempt 0 took past the checkpoint it left are the work redone.
last=$(sed -n 's/.*attempt 0 ran on 8 tasks and reached step \([0-9]*\).*/\1/p' "$out" | head -n 1)
redone=$((${last:-0} - ${step:-0}))
check "work redone: $redone steps (attempt 0 reached step ${last:-?}), within the checkpoint interval of $((steps / 12))" \
  test "$redone" -ge 0 -a "$redone" -lt $((steps / 12))
check "attempt 1 resumed from step $step, written by 8 ranks" grep -q "resuming from .*written by 8 ranks" "$out"
check "the global batch kept: $(grep -m1 'the run continues with' "$out" | sed 's/^.*the run continues/continues/')" \
  grep -q "the run continues with 6 ranks x batch [0-9]*\( x [0-9]* micro-batches\)\? = ${ELASTIC_GLOBAL_BATCH:-48} per step: the same global batch" "$out"
check "every checkpoint intact (lpsgd ckpt verify)" "$LPSGD" ckpt verify "$tmp/run/checkpoints"
final=$(sed -n 's/.*final parameters: checksum \([0-9a-f]*\).*/\1/p' "$out" | tail -n 1)
# The same checkpoint resumed on 6 ranks of one host, in pretend nodes of 2.
mkdir -p "$tmp/again"
cp "$ckpt" "$tmp/again/"
OMPI_MCA_rmaps_base_oversubscribe=1 "${MPIEXEC:-mpiexec}" -n 6 "${MPI_FLAGS[@]}" "$LPSGD" train \
  --config "$tmp/elastic.ini" --ranks-per-node 2 \
  --checkpoint-dir "$tmp/again" --resume auto </dev/null >"$tmp/again.out" 2>&1
again=$(sed -n 's/.*final parameters: checksum \([0-9a-f]*\).*/\1/p' "$tmp/again.out")
if [[ -n $final && $final == "$again" ]]; then
  ok "the final parameters equal a resume of step $step on 6 ranks of one host ($final)"
else
  fail "final parameters '$final', resumed on one host '$again'"; tail -n 5 "$out" "$tmp/again.out"
fi
if [[ -n ${ELASTIC_DATA:-} ]]; then
  # The run uninterrupted, on 8 ranks (pretend nodes of 2) of one host: the
  # links do not change the numbers (e2e.netns_slurm), the loss of a node does.
  mkdir -p "$tmp/straight"
  OMPI_MCA_rmaps_base_oversubscribe=1 "${MPIEXEC:-mpiexec}" -n 8 "${MPI_FLAGS[@]}" "$LPSGD" train \
    --config "$tmp/elastic.ini" --ranks-per-node 2 --checkpoint-dir "$tmp/straight" \
    </dev/null >"$tmp/straight.out" 2>&1
  acc() { sed -n 's/.*done .*test_acc=\([0-9.]*\).*/\1/p' "$1" | tail -n 1; }
  echo "note: test accuracy: lost a node at step $reached and finished on 3: $(acc "$out");" \
       "uninterrupted on 4: $(acc "$tmp/straight.out")"
fi
check "slurm-cluster.sh --netns stop" "$S" --netns stop
$N down >/dev/null
echo "note: $SECONDS s in all"
finish
