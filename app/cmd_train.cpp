// lpsgd train: options are parsed and validated; the trainer itself lands with
// its issue.
#include "app/commands.hpp"
#include "core/cli.hpp"

namespace lpsgd::app {

int run_train(int argc, char** argv) {
  namespace po = cli::po;
  po::options_description desc("lpsgd train options");
  int epochs = 0;
  desc.add_options()("epochs", po::value<int>(&epochs)->default_value(10), "epochs to train");
  po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm, "usage: lpsgd train --data F.h5 --model SPEC [options]"))
    return 0;
  cli::require_range("epochs", epochs, 1, 1000000);
  return not_built("lpsgd train");
}

}  // namespace lpsgd::app
