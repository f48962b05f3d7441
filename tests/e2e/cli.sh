#!/usr/bin/env bash
# The lpsgd command line: version, help, and one-line errors with non-zero exits,
# on one rank and on three.
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
expect_error 2 "unknown command 'bogus'" -- "$LPSGD" bogus
expect_error 2 "epochs must be in" -- "$LPSGD" train --epochs -1
expect_error 2 "unrecognised option|unrecognized option" -- "$LPSGD" train --no-such-option
expect_error 2 "cannot open config file" -- "$LPSGD" train --config /nonexistent.ini
# Under MPI every rank fails and exactly one line is printed.
expect_error 2 "unknown command 'bogus'" -- "${MPIRUN[@]}" "$LPSGD" bogus
expect_error 2 "epochs must be in" -- "${MPIRUN[@]}" "$LPSGD" train --epochs -1
finish
