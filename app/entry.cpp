#include "app/entry.hpp"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stop_signals.hpp"
#include "core/timer.hpp"

namespace lpsgd::app {
namespace {

MPI_Comm g_control = MPI_COMM_NULL;  // private communicator for error agreement

/// True when every rank reaches this point within timeout_s: the error was
/// seen by all ranks alike and they can finish cleanly.
bool all_ranks_agree(double timeout_s) {
  MPI_Request req;
  if (MPI_Ibarrier(g_control, &req) != MPI_SUCCESS) return false;
#ifdef SMPI_SHARED_MALLOC
  // Simulated time stands still while a rank polls: block instead. Should a
  // rank never arrive, SimGrid reports the deadlock and ends the run.
  (void)timeout_s;
  return MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS;
#endif
  const double deadline = now_s() + timeout_s;
  int done = 0;
  while (!done && now_s() < deadline) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
  return done != 0;
}

// How long a rank with a runtime error waits for the others to fail too
// before it aborts the job. Errors every rank meets at one point (a checkpoint
// that cannot be written, damaged data agreed on at a step) arrive together
// and end without MPI_Abort's banner; a rank failing alone (a stalled
// neighbour) must not keep the job up for long.
constexpr double kRuntimeGraceS = 2.0;

// MPI_Abort should end the job at once, but with MPICH under srun --mpi=pmi2
// it only reports the abort and waits for the launcher to kill this rank,
// which Slurm does KillWait (often 30 s) after its SIGTERM, a SIGTERM lpsgd
// takes as a request to checkpoint. A rank that gets here is finished either
// way: if MPI_Abort has not ended it within kAbortWaitS, it exits by itself,
// non-zero, which every launcher takes as the job's failure.
constexpr double kAbortWaitS = 2.0;
[[noreturn]] void abort_job(int code) {
#ifndef SMPI_SHARED_MALLOC
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::duration<double>(kAbortWaitS));
    std::fflush(nullptr);
    std::_Exit(code);
  }).detach();
#endif
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return
}

// exit() unqualified: under SimGrid it is SMPI's macro, which ends this rank
// rather than the whole simulation.
[[noreturn]] void fail(const std::string& message, int code, bool usage) {
  // On its way out: a launcher's SIGTERM to the ranks still running (Open MPI
  // sends one once a rank has exited non-zero) is no request any more.
  stop_signals::set_policy(stop_signals::Policy::Ignore);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (usage && all_ranks_agree(10.0)) {
    if (log::rank() == 0) std::fprintf(stderr, "lpsgd: error: %s\n", message.c_str());
    std::fflush(stderr);
    MPI_Finalize();
    exit(code);
  }
  // One line per failing rank, before anything can kill it.
  if (size > 1)
    std::fprintf(stderr, "lpsgd: error: [rank %d] %s\n", log::rank(), message.c_str());
  else
    std::fprintf(stderr, "lpsgd: error: %s\n", message.c_str());
  std::fflush(stderr);
  if (size > 1 && !(!usage && all_ranks_agree(kRuntimeGraceS))) abort_job(code);
  MPI_Finalize();
  exit(code);
}

}  // namespace

int run_mpi_main(int argc, char** argv, int (*body)(int, char**)) {
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "lpsgd: error: MPI_Init_thread failed\n");
    return 1;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_control);
  log::init(rank, size);

  int code = 0;
  try {
    code = body(argc, argv);
  } catch (const Error& e) {
    const bool usage = e.kind() == ErrorKind::Usage;
    fail(usage ? e.message() : e.where(), usage ? 2 : 1, usage);
  } catch (const std::exception& e) {
    fail(e.what(), 1, false);
  }
  MPI_Comm_free(&g_control);
  MPI_Finalize();
  return code;
}

}  // namespace lpsgd::app
