// Process entry shared by the lpsgd executable and the SimGrid bench
// (lpsgd-bench-smpi): MPI start-up and shut-down, and one policy for errors —
// any lpsgd::Error becomes one `lpsgd: error: ...` line and a non-zero exit on
// every rank (usage errors: exit 2 once all ranks agree; anything else:
// MPI_Abort with 1).
#pragma once

namespace lpsgd::app {

/// Initialises MPI, runs body(argc, argv) and returns its exit code; never
/// returns when body throws.
int run_mpi_main(int argc, char** argv, int (*body)(int, char**));

}  // namespace lpsgd::app
