#!/usr/bin/env bash
# The lpsgd command line: version, help (defaults shown as written), and one-line
# errors with non-zero exits, on one rank and on three.
set -u
LPSGD=$1
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
read -r -a MPI_FLAGS <<<"${MPIEXEC_FLAGS:-}"
MPIRUN=("${MPIEXEC:-mpiexec}" -n 3 "${MPI_FLAGS[@]}")

expect_output 'backends: cpu' -- "$LPSGD" --version
expect_output 'mpi: ' -- "$LPSGD" --version
expect_output 'commands:' -- "$LPSGD" --help
for cmd in train bench data ckpt; do
  expect_output "usage: lpsgd $cmd" -- "$LPSGD" "$cmd" --help
done
# Defaults as written, in every subcommand's help: 0.05, not 0.050000000000000003.
expect_output 'lr arg \(=0\.05\)' -- "$LPSGD" train --help
expect_output 'momentum arg \(=0\.9\)' -- "$LPSGD" train --help
expect_output 'lr-gamma arg \(=0\.1\)' -- "$LPSGD" train --help
expect_output 'checkpoint-failure arg \(=warn\)' -- "$LPSGD" train --help
expect_output 'noise X \(=0\.5\)' -- "$LPSGD" data synth --help
for cmd in train bench "data import-idx" "data synth" "data info" "data bench-loader" \
           "ckpt info" "ckpt verify"; do
  read -r -a words <<<"$cmd"
  help=$("$LPSGD" "${words[@]}" --help 2>&1)
  if [[ $help != *"usage: lpsgd $cmd"* ]]; then
    echo "FAIL: lpsgd $cmd --help shows no usage: $help"; fails=$((fails + 1))
  elif long=$(grep -Eo '\(=[-+0-9.e]*[0-9]{8,}[-+0-9.e]*\)' <<<"$help"); then
    echo "FAIL: lpsgd $cmd --help shows a default with more digits than written: $long"
    fails=$((fails + 1))
  else
    echo "ok: lpsgd $cmd --help: defaults as written"
  fi
done
expect_error 2 "unknown command 'bogus'" -- "$LPSGD" bogus
expect_error 2 "epochs must be in" -- "$LPSGD" train --epochs -1
expect_error 2 "unrecognised option|unrecognized option" -- "$LPSGD" train --no-such-option
expect_error 2 "cannot open config file" -- "$LPSGD" train --config /nonexistent.ini
# Under MPI every rank fails and exactly one line is printed.
expect_error 2 "unknown command 'bogus'" -- "${MPIRUN[@]}" "$LPSGD" bogus
expect_error 2 "epochs must be in" -- "${MPIRUN[@]}" "$LPSGD" train --epochs -1
finish
