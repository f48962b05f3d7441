#!/usr/bin/env bash
# Faults during lpsgd train under mpirun, one scenario per call (faults.cmake
# registers each as its own test); Slurm's srun is covered in slurm.sh.
#   kill   one rank killed (SIGKILL) mid-step: every rank gone within 10 s,
#          non-zero exit, a line naming the lost rank;
#   stop   one rank stopped (SIGSTOP): the others end on their own within
#          --comm-timeout (plus the error grace), each with one line naming the
#          stalled neighbour, the collective and the block;
#   disk   checkpoints on a small tmpfs that fills up (skipped where mount is
#          not permitted): a periodic checkpoint that cannot be written gives
#          one warning line, leaves no temporary, keeps the earlier ones intact
#          (lpsgd ckpt verify), and training goes on and checkpoints again once
#          there is room; a read-only directory likewise; the signal's, the
#          final and (--checkpoint-failure abort) a periodic checkpoint that
#          cannot be written fail the run with one line per rank;
#   data   a chunk of the training data damaged while the run reads the file:
#          one line naming the file and the samples on every rank, exit 1.
# No MPI_Abort banner where every rank fails alike (disk, data).
set -u
LPSGD=$1 what=$2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
tmp=$(mktemp -d)
mnt=""
launcher=""
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  # A rank the test stopped and the launcher did not take with it.
  local f p
  for f in "$tmp"/*/pid.*; do
    [[ -r $f ]] || continue
    p=$(<"$f")
    if alive "$p"; then kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; fi
  done
  [[ -n $launcher ]] && kill -KILL "$launcher" 2>/dev/null
  [[ -n $mnt ]] && umount "$mnt" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
# check WHAT CMD...: ok when CMD succeeds.
check() { local w=$1; shift; if "$@"; then ok "$w"; else fail "$w"; fi; }
ms() { echo $((${EPOCHREALTIME/./} / 1000)); }
# A live process (not a zombie waiting for its parent).
alive() {
  local state
  read -r _ _ state _ 2>/dev/null <"/proc/$1/stat" || return 1
  [[ $state != Z ]]
}

"$LPSGD" data synth --out "$tmp/d.h5" --samples 4096 --test-samples 256 --shape 1,8,8 \
  --classes 4 --seed 3 >/dev/null || { echo "FAIL: data synth"; exit 1; }
# Long enough never to end on its own within a test.
run_opts=(--algo lp --batch 32 --epochs 100000 --eval-every 0 --lr 0.05 --seed 7 --progress lines
          --progress-every 0.1)
train=(--data "$tmp/d.h5" --model mlp:64-128-4 "${run_opts[@]}")

# start NAME NP options...: `lpsgd train` in the background, output in
# $tmp/NAME.out; each rank writes its pid to $tmp/NAME/pid.RANK before it starts
# (RANK from Open MPI's or MPICH's environment).
start() {
  local name=$1 np=$2; shift 2
  mkdir -p "$tmp/$name"
  # shellcheck disable=SC2016  # expanded by the rank's shell
  "${MPIEXEC:-mpiexec}" -n "$np" "${MPI_FLAGS[@]}" \
    bash -c 'echo $$ >"$0/pid.${OMPI_COMM_WORLD_RANK:-$PMI_RANK}"; exec "$@"' "$tmp/$name" \
    "$LPSGD" train "$@" </dev/null >"$tmp/$name.out" 2>&1 &
  launcher=$!
}
pid_of() { cat "$tmp/$1/pid.$2" 2>/dev/null; }
# wait_for FILE REGEX SECONDS: until a line of FILE matches (false when the
# run ended first).
wait_for() {
  local deadline=$((SECONDS + $3))
  until grep -Eq -- "$2" "$1" 2>/dev/null; do
    ((SECONDS < deadline)) && kill -0 "$launcher" 2>/dev/null || return 1
    sleep 0.05
  done
}
# wait_gone SECONDS PID...: until none of the PIDs lives; false on timeout.
wait_gone() {
  local deadline=$(($(ms) + $1 * 1000)) p any; shift
  while :; do
    any=0
    for p in "$@"; do alive "$p" && any=1; done
    ((any)) || return 0
    (($(ms) < deadline)) || return 1
    sleep 0.02
  done
}
# finish_run: waits for the launcher; sets rc.
finish_run() { wait "$launcher"; rc=$?; launcher=""; }
lines() { grep -Ec -- "$2" "$1"; }
show() { echo "---- $1"; tail -n 20 "$1"; }

case $what in
# ---- kill -9 -------------------------------------------------------------------------
kill)
  start kill 3 "${train[@]}"
  wait_for "$tmp/kill.out" 'step [0-9]+/' 60 || { fail "training did not start"; show "$tmp/kill.out"; finish; exit 1; }
  pids=("$(pid_of kill 0)" "$(pid_of kill 1)" "$(pid_of kill 2)")
  t0=$(ms)
  kill -KILL "${pids[1]}"
  wait_gone 20 "${pids[@]}"
  gone_ms=$(($(ms) - t0))
  finish_run
  check "every rank gone ${gone_ms} ms after SIGKILL to rank 1 (at most 10 s)" test "$gone_ms" -le 10000
  check "the job exited non-zero ($rc)" test "$rc" -ne 0
  # lpsgd's own line or Open MPI's. MPICH's Hydra SIGKILLs the other ranks
  # within ~50 ms, before lpsgd can say anything, and names one process of the
  # job by pid: the lost one, or (about one run in six here) a rank it killed
  # itself in its clean-up, so under Hydra any rank's pid is accepted.
  hydra_pids="${pids[1]}"
  [[ $(ldd "$LPSGD" 2>/dev/null) == *libmpich* ]] && hydra_pids="${pids[*]}"
  if named=$(grep -Ei -m1 'rank 1 .*(signal 9|killed)' "$tmp/kill.out") ||
     named=$(grep -m1 -E "PID (${hydra_pids// /|}) " "$tmp/kill.out"); then
    ok "a line names the lost rank: $named"
  else
    fail "no line names rank 1 as killed (rank pids ${pids[*]})"; show "$tmp/kill.out"
  fi
  ;;
# ---- SIGSTOP ---------------------------------------------------------------------------
stop)
  timeout_s=3 grace_s=2  # grace: app/entry.cpp's kRuntimeGraceS
  start stop 3 "${train[@]}" --comm-timeout "$timeout_s"
  wait_for "$tmp/stop.out" 'step [0-9]+/' 60 || { fail "training did not start"; show "$tmp/stop.out"; finish; exit 1; }
  pids=("$(pid_of stop 0)" "$(pid_of stop 1)" "$(pid_of stop 2)")
  t0=$(ms)
  kill -STOP "${pids[1]}"
  # Ranks 0 and 2 must end by themselves; rank 1 stays stopped until then.
  if wait_gone $((timeout_s + grace_s + 15)) "${pids[0]}" "${pids[2]}"; then
    gone_ms=$(($(ms) - t0))
    check "ranks 0 and 2 ended on their own ${gone_ms} ms after SIGSTOP to rank 1 (--comm-timeout $timeout_s s + grace $grace_s s + 3 s)" \
      test "$gone_ms" -le $(((timeout_s + grace_s + 3) * 1000))
  else
    fail "ranks 0 and 2 still run $((timeout_s + grace_s + 15)) s after rank 1 was stopped"
  fi
  # The launcher takes the stopped rank with it (SIGKILL reaches a stopped process).
  if wait_gone 10 "${pids[1]}"; then ok "the stopped rank was ended by the launcher"
  else fail "the stopped rank 1 was left behind"; kill -CONT "${pids[1]}"; kill -KILL "${pids[1]}"; fi
  finish_run
  check "the job exited non-zero ($rc)" test "$rc" -ne 0
  for r in 0 2; do
    n=$(lines "$tmp/stop.out" "^lpsgd: error: \[rank $r\]")
    line=$(grep -m1 "^lpsgd: error: \[rank $r\]" "$tmp/stop.out")
    if ((n == 1)) && [[ $line =~ made\ no\ progress\ for\ $timeout_s\ s ]] &&
       [[ $line =~ rank\ 1\ \((left|right)\ neighbour\) ]] && [[ $line =~ allreduce ]] &&
       [[ $line =~ block\ [0-9]+ ]]; then
      ok "rank $r: one line naming the stalled neighbour, the collective and the block: $line"
    else
      fail "rank $r: $n error lines, want one naming rank 1, allreduce and a block: ${line:-none}"
      show "$tmp/stop.out"
    fi
  done
  ;;
# ---- full disk, read-only directory ---------------------------------------------------------
disk)
  mnt=$tmp/mnt
  mkdir -p "$mnt"
  if ! mount -t tmpfs -o size=6m lpsgd-e2e "$mnt" 2>/dev/null; then
    mnt=""
    echo "SKIP: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
    exit 77
  fi
  ck=$mnt/ckpt
  # About 0.5 MiB per checkpoint (parameters and momentum).
  disk=(--model mlp:64-512-128-4 --checkpoint-dir "$ck" --keep 2)
  fill() { dd if=/dev/zero of="$mnt/filler" bs=64K 2>/dev/null; sync; }
  unfill() { rm -f "$mnt/filler"; }
  newest_step() { sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.h5$/\1/p' "$ck/latest" 2>/dev/null; }
  # warned_after OUT STEP ERRNO-TEXT: a warning for a checkpoint after STEP; prints its step.
  warned_after() {
    sed -n "s/^lpsgd: warning: checkpoint at step \([0-9]*\) not written: $3\$/\1/p" "$1" |
      awk -v s="$2" '$1 > s { print; exit }'
  }
  # until_cond SECONDS CMD...: polls CMD until it prints something; prints that.
  until_cond() {
    local deadline=$((SECONDS + $1)) out; shift
    while ((SECONDS < deadline)); do
      out=$("$@") && [[ -n $out ]] && { echo "$out"; return 0; }
      sleep 0.05
    done
    return 1
  }
  newest_after() { local s; s=$(newest_step); [[ -n $s ]] && ((s > $1)) && echo "$s"; }

  out=$tmp/disk.out
  start disk 2 --data "$tmp/d.h5" "${run_opts[@]}" "${disk[@]}" --checkpoint-every 100
  s0=$(until_cond 60 newest_after 0) || { fail "no first checkpoint"; show "$out"; finish; exit 1; }
  ok "checkpoint at step $s0 written"
  # Full: every checkpoint due fails with one warning, and is tried again.
  fill
  if s1=$(until_cond 30 warned_after "$out" "$s0" "No space left on device") &&
     before=$(<"$ck/latest") &&
     s2=$(until_cond 30 warned_after "$out" "$s1" "No space left on device"); then
    ok "disk full: warned at steps $s1 and (tried again) $s2: $(grep -m1 "step $s1 not written" "$out")"
    left=$(find "$ck" -name ".ckpt-$(printf '%09d' "$s1").h5.tmp.*" | wc -l)
    check "no temporary left of the checkpoint at step $s1" test "$left" -eq 0
    check "latest still names the last complete checkpoint ($before)" test "$(<"$ck/latest")" = "$before"
    check "lpsgd ckpt verify: the checkpoints written before the disk filled are intact" \
      "$LPSGD" ckpt verify "$ck"
  else
    fail "no two 'checkpoint at step S not written: No space left on device' warnings"; show "$out"
  fi
  unfill
  if s3=$(until_cond 30 newest_after "${s2:-$s0}"); then ok "room again: checkpoint at step $s3 written"
  else fail "no checkpoint after the disk had room again"; show "$out"; fi
  # A read-only directory: the same.
  mount -o remount,ro "$mnt"
  if s4=$(until_cond 30 warned_after "$out" "${s3:-0}" "Read-only file system"); then
    ok "read-only: $(grep -m1 "step $s4 not written" "$out")"
  else
    fail "no 'checkpoint at step S not written: Read-only file system' warning"; show "$out"
  fi
  mount -o remount,rw "$mnt"
  if s5=$(until_cond 30 newest_after "${s4:-0}"); then ok "writable again: checkpoint at step $s5 written"
  else fail "no checkpoint after the directory was writable again"; show "$out"; fi
  # A signal's checkpoint that cannot be written ends the run, one line per rank.
  fill
  kill -USR1 "$(pid_of disk 1)"
  finish_run
  unfill
  check "SIGUSR1 on a full disk: exit non-zero ($rc)" test "$rc" -ne 0
  for r in 0 1; do
    check "SIGUSR1 on a full disk: rank $r said 'checkpoint at step S not written: No space left on device' once" \
      test "$(lines "$out" "^lpsgd: error: \[rank $r\] checkpoint at step [0-9]+ not written: No space left on device")" -eq 1
  done
  # Nothing but lpsgd's own one-line messages: no HDF5 dump, no MPI_Abort banner.
  if stray=$(grep -v '^lpsgd' "$out" | grep -v '^epoch \|^step \|^ *$' | grep -v -- '^-\{10,\}$' |
             grep -Ev 'Primary job|non-zero exit code|job has been aborted|mpi(run|exec) detected|first process to do so|Process name|Exit code|exited with non-zero status' |
             grep -v '^ *$'); then
    fail "lines that are not lpsgd's:"; echo "$stray" | head -n 20
  else
    ok "every line is lpsgd's own (no HDF5 error stack, no MPI_Abort banner)"
  fi
  check "$(lines "$out" '^lpsgd: warning: checkpoint at step') warnings, each on one line of its own" \
    test "$(lines "$out" 'not written')" -eq "$(lines "$out" '^lpsgd: (warning|error): (\[rank [0-9]\] )?checkpoint at step [0-9]+ not written: [A-Za-z -]+( \([a-z_]+\.cpp:[0-9]+\))?$')"

  # The final checkpoint, and a periodic one with --checkpoint-failure abort.
  rm -rf "$ck"
  mkdir -p "$ck"
  fill
  short=(--data "$tmp/d.h5" --batch 32 --epochs 1 --max-steps 10 --seed 7 --progress off "${disk[@]}")
  for how in "final" "periodic, --checkpoint-failure abort"; do
    extra=()
    [[ $how == final ]] || extra=(--checkpoint-every 5 --checkpoint-failure abort)
    "${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}" "$LPSGD" train "${short[@]}" "${extra[@]}" \
      </dev/null >"$tmp/short.out" 2>&1
    rc=$?
    want=10; [[ $how == final ]] || want=5
    n0=$(lines "$tmp/short.out" "^lpsgd: error: \[rank 0\] checkpoint at step $want not written: No space left on device")
    n1=$(lines "$tmp/short.out" "^lpsgd: error: \[rank 1\] checkpoint at step $want not written: No space left on device")
    if ((rc == 1 && n0 == 1 && n1 == 1)) && ! grep -q 'MPI_ABORT\|HDF5' "$tmp/short.out"; then
      ok "$how checkpoint on a full disk: exit 1, one line per rank: $(grep -m1 '^lpsgd: error' "$tmp/short.out")"
    else
      fail "$how checkpoint on a full disk: exit $rc, $n0 + $n1 error lines"; show "$tmp/short.out"
    fi
  done
  check "no temporary left in $ck" test -z "$(find "$ck" -name '.*tmp*')"
  unfill
  # A directory that cannot be written at all is refused at the start, before
  # --algo auto measures the links for a calibration file it does not find
  # (which prints lines of its own, takes seconds, and writes the file).
  mount -o remount,ro "$mnt"
  export LPSGD_CALIBRATION=$tmp/calibration.ini  # where auto keeps what it measures
  expect_error 2 "--checkpoint-dir .* is not writable: Read-only file system" -- \
    "${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}" "$LPSGD" train "${short[@]}" --algo auto
  check "no calibration before the refusal" test ! -e "$LPSGD_CALIBRATION"
  # So is a metrics file there (the checkpoints going elsewhere).
  expect_error 2 "cannot open --metrics file '$mnt/m/metrics.jsonl': Read-only file system" -- \
    "${MPIEXEC:-mpiexec}" -n 2 "${MPI_FLAGS[@]}" "$LPSGD" train --data "$tmp/d.h5" --batch 32 \
    --epochs 1 --max-steps 10 --model mlp:64-512-128-4 --progress off --algo auto \
    --checkpoint-dir "$tmp/ck-elsewhere" --metrics "$mnt/m/metrics.jsonl"
  check "no calibration before the metrics' refusal" test ! -e "$LPSGD_CALIBRATION"
  unset LPSGD_CALIBRATION
  expect_error 2 "--checkpoint-failure must be warn or abort" -- \
    "$LPSGD" train "${short[@]}" --checkpoint-failure ignore
  ;;
# ---- damaged data ---------------------------------------------------------------------------
data)
  # Small gzip chunks (16 samples of 1 KiB): the streaming loader (--cache-mb
  # 0) reads the chunks again each epoch (8 MiB of samples, far beyond HDF5's
  # 1 MiB chunk cache), and a damaged one cannot be decompressed.
  "$LPSGD" data synth --out "$tmp/big.h5" --samples 8192 --test-samples 64 --shape 1,32,32 \
    --classes 4 --seed 3 >/dev/null || { echo "FAIL: data synth"; exit 1; }
  /usr/bin/python3 - "$tmp/big.h5" "$tmp/z.h5" <<'PY' || { echo "FAIL: h5py rewrite"; exit 1; }
import sys, h5py
src, dst = sys.argv[1:]
with h5py.File(src, "r") as a, h5py.File(dst, "w") as b:
    for k, v in a.attrs.items():
        b.attrs[k] = v
    for split in a:
        g = b.create_group(split)
        for name, ds in a[split].items():
            chunks = (16,) + ds.shape[1:]
            g.create_dataset(name, data=ds[()], chunks=chunks, compression="gzip")
PY
  out=$tmp/data.out
  start data 2 --data "$tmp/z.h5" "${run_opts[@]}" --model mlp:1024-64-4 --cache-mb 0
  wait_for "$out" 'step [0-9]+/' 60 || { fail "training did not start"; show "$out"; finish; exit 1; }
  # Chunk 100 holds samples 1600-1615: its compressed bytes, inverted.
  /usr/bin/python3 - "$tmp/z.h5" 100 <<'PY' || fail "damaging the chunk"
import sys, h5py
path, n = sys.argv[1], int(sys.argv[2])
with h5py.File(path, "r") as f:
    info = f["train/x"].id.get_chunk_info(n)
with open(path, "r+b") as f:
    f.seek(info.byte_offset)
    b = f.read(info.size)
    f.seek(info.byte_offset)
    f.write(bytes(x ^ 0xFF for x in b))
print(f"damaged chunk {n} of /train/x: {info.size} bytes at {info.byte_offset}")
PY
  t0=$(ms)
  if wait_gone 30 "$(pid_of data 0)" "$(pid_of data 1)"; then ok "the run ended $(($(ms) - t0)) ms after the damage"
  else fail "the run did not end within 30 s of the damage"; show "$out"; fi
  finish_run
  check "exit 1 (got $rc)" test "$rc" -eq 1
  for r in 0 1; do
    n=$(lines "$out" "^lpsgd: error: \[rank $r\]")
    line=$(grep -m1 "^lpsgd: error: \[rank $r\]" "$out")
    if ((n == 1)) && [[ $line == *"$tmp/z.h5: samples 1600-1615 of /train cannot be read"* ]]; then
      ok "rank $r: $line"
    else
      fail "rank $r: $n error lines, want one naming $tmp/z.h5 and samples 1600-1615: ${line:-none}"
      show "$out"
    fi
  done
  check "no MPI_Abort banner" test "$(lines "$out" 'MPI_ABORT')" -eq 0
  ;;
*) echo "usage: $0 LPSGD kill|stop|disk|data" >&2; exit 2 ;;
esac
finish
