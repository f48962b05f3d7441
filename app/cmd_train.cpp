// lpsgd train: options (command line or --config INI, see train_options.cpp) →
// train::TrainConfig → train::train(), then the one-line summary scripts look for.
#include <mpi.h>

#include <cstdio>

#include "app/commands.hpp"
#include "app/train_options.hpp"
#include "core/error.hpp"
#include "core/stop_signals.hpp"
#include "device/device.hpp"
#include "train/trainer.hpp"

namespace lpsgd::app {
namespace {

int local_rank() {
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int r = 0;
  MPI_CHECK(MPI_Comm_rank(node, &r));
  MPI_CHECK(MPI_Comm_free(&node));
  return r;
}

}  // namespace

int run_train(int argc, char** argv) {
  TrainOptions o;
  if (!parse_train_options(argc, argv, o)) return 0;
  const train::TrainConfig& c = o.config;
  const int threads = o.threads;
  const std::string& device = o.device;
  set_host_threads(threads);
  auto dev = make_device(device == "cuda" ? DeviceKind::Cuda : DeviceKind::Cpu, local_rank());
  const train::TrainResult r = train::train(*dev, c);
  // The run is over (and saved): a stop signal now asks for nothing.
  stop_signals::set_policy(stop_signals::Policy::Ignore);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    if (r.interrupted) return 0;
    char acc[32] = "none";  // no test split
    if (r.tested) std::snprintf(acc, sizeof acc, "%.4f", r.test_acc);
    std::printf("lpsgd: done epochs=%.4g steps=%lld test_acc=%s samples_per_s=%.1f\n", r.epochs,
                static_cast<long long>(r.steps), acc, r.samples_per_s);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace lpsgd::app
