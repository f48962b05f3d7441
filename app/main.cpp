// lpsgd: entry point. Initialises MPI, dispatches to a subcommand, and turns
// any lpsgd::Error into one `lpsgd: error: ...` line and a non-zero exit on
// every rank (usage errors: exit 2; anything else: MPI_Abort with 1).
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "device/device.hpp"
#include "lpsgd/config.hpp"

namespace {

using namespace lpsgd;

MPI_Comm g_control = MPI_COMM_NULL;  // private communicator for error agreement

constexpr const char* kUsage =
    "lpsgd: data-parallel SGD with linear-pipelined collectives\n"
    "\n"
    "usage: lpsgd <command> [options]    (run under mpirun/srun for several ranks)\n"
    "\n"
    "commands:\n"
    "  train    train a model on an HDF5 dataset (BSP-SGD)\n"
    "  bench    benchmark broadcast/reduce/allreduce algorithms\n"
    "  data     import, synthesise and inspect HDF5 datasets\n"
    "  ckpt     inspect and verify checkpoints\n"
    "\n"
    "  lpsgd --version         version, MPI library and device backends\n"
    "  lpsgd <command> --help  options of a command\n";

void print_version() {
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(lib, &len);
  std::string mpi(lib, static_cast<size_t>(len));
  if (auto nl = mpi.find('\n'); nl != std::string::npos) mpi.resize(nl);
  if (auto comma = mpi.find(','); comma != std::string::npos) mpi.resize(comma);
  std::printf("lpsgd %s (%s)\n", build::version, build::git_rev);
  std::printf("mpi: %s\n", mpi.c_str());
  std::printf("backends: %s", build::backends);
  if (build::have_cuda) std::printf(" (GPUs visible: %d)", cuda_device_count());
  std::printf("\n");
}

int dispatch(int argc, char** argv) {
  if (argc < 2) {
    if (log::rank() == 0) std::cerr << kUsage;
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    if (log::rank() == 0) print_version();
    return 0;
  }
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    if (log::rank() == 0) std::cout << kUsage;
    return 0;
  }
  int sub_argc = argc - 1;
  char** sub_argv = argv + 1;
  if (cmd == "train") return app::run_train(sub_argc, sub_argv);
  if (cmd == "bench") return app::run_bench(sub_argc, sub_argv);
  if (cmd == "data") return app::run_data(sub_argc, sub_argv);
  if (cmd == "ckpt") return app::run_ckpt(sub_argc, sub_argv);
  LPSGD_USAGE_ERROR("unknown command '" << cmd << "' (use train, bench, data or ckpt; see "
                                        << "'lpsgd --help')");
}

/// True when every rank reaches this point within timeout_s: the error was
/// seen by all ranks alike and they can finish cleanly.
bool all_ranks_agree(double timeout_s) {
  MPI_Request req;
  if (MPI_Ibarrier(g_control, &req) != MPI_SUCCESS) return false;
  const double deadline = now_s() + timeout_s;
  int done = 0;
  while (!done && now_s() < deadline) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
  return done != 0;
}

[[noreturn]] void fail(const std::string& message, int code, bool usage) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (usage && all_ranks_agree(10.0)) {
    if (log::rank() == 0) std::fprintf(stderr, "lpsgd: error: %s\n", message.c_str());
    std::fflush(stderr);
    MPI_Finalize();
    std::exit(code);
  }
  if (size > 1)
    std::fprintf(stderr, "lpsgd: error: [rank %d] %s\n", log::rank(), message.c_str());
  else
    std::fprintf(stderr, "lpsgd: error: %s\n", message.c_str());
  std::fflush(stderr);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  MPI_Finalize();
  std::exit(code);
}

}  // namespace

int main(int argc, char** argv) {
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
    code = dispatch(argc, argv);
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
