// lpsgd ckpt: placeholder until its issue lands.
#include "app/commands.hpp"
#include "core/cli.hpp"

namespace lpsgd::app {

int run_ckpt(int argc, char** argv) {
  cli::po::options_description desc("lpsgd ckpt options");
  cli::po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm, "usage: lpsgd ckpt [options]")) return 0;
  return not_built("lpsgd ckpt");
}

}  // namespace lpsgd::app
