// lpsgd bench: placeholder until its issue lands.
#include "app/commands.hpp"
#include "core/cli.hpp"

namespace lpsgd::app {

int run_bench(int argc, char** argv) {
  cli::po::options_description desc("lpsgd bench options");
  cli::po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm, "usage: lpsgd bench [options]")) return 0;
  return not_built("lpsgd bench");
}

}  // namespace lpsgd::app
