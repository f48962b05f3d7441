// lpsgd: entry point. Dispatches to a subcommand; MPI start-up and the error
// policy are in entry.cpp.
#include <mpi.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "app/commands.hpp"
#include "app/entry.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stop_signals.hpp"
#include "device/device.hpp"
#include "lpsgd/config.hpp"

namespace {

using namespace lpsgd;

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
    "  eval     loss, accuracy and per-class table of a checkpoint or ONNX model\n"
    "  export   write a checkpoint's model as an ONNX inference graph\n"
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
  std::printf("\ncompute: %s\n", compute_libraries().c_str());
  std::printf("precision: %s\n", precision_support().c_str());
  std::printf("models: spec strings%s\n", build::have_onnx ? ", ONNX (opsets 11-17 read, 13 written)"
                                                            : " (built without ONNX)");
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
  if (cmd == "eval") return app::run_eval(sub_argc, sub_argv);
  if (cmd == "export") return app::run_export(sub_argc, sub_argv);
  LPSGD_USAGE_ERROR("unknown command '" << cmd << "' (use train, bench, data, ckpt, eval or "
                                        << "export; see 'lpsgd --help')");
}

// ELF preinit runs before every shared library's constructor: the threads
// those start (OpenBLAS's pool) inherit the blocked stop signals too.
extern "C" void lpsgd_block_stop_signals(int, char**, char**) { stop_signals::block(); }
__attribute__((section(".preinit_array"), used)) void (*const lpsgd_preinit)(int, char**, char**) =
    lpsgd_block_stop_signals;

}  // namespace

int main(int argc, char** argv) {
  // Before any thread exists (MPI_Init makes some): the stop signals go to
  // one thread of their own. Training takes them as requests to checkpoint
  // and stop from its very start, so one sent while it starts up is not lost;
  // every other command ends on them as it would by default.
  const bool training = argc > 1 && std::string(argv[1]) == "train";
  stop_signals::take(training ? stop_signals::Policy::Request : stop_signals::Policy::Terminate);
  return app::run_mpi_main(argc, argv, dispatch);
}
