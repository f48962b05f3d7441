// lpsgd data: placeholder until its issue lands.
#include "app/commands.hpp"
#include "core/cli.hpp"

namespace lpsgd::app {

int run_data(int argc, char** argv) {
  cli::po::options_description desc("lpsgd data options");
  cli::po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm, "usage: lpsgd data [options]")) return 0;
  return not_built("lpsgd data");
}

}  // namespace lpsgd::app
